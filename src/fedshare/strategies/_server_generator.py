"""FedAvg with a generator the server trains and broadcasts (FedGen and FLea's input-space
FedGen row): the generator on both sides, its optimizer, and its place in the checkpoint and
the summary. A subclass says which generator (`_generator`) and how it is trained and used."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from fedshare.config.rules import POSITIVE, ruled
from fedshare.engine.flat import FlatState
from fedshare.strategies.base import ClientSetup, SetupContext
from fedshare.strategies.fedavg import FedAvg

G = TypeVar("G", bound=nn.Module)


@dataclass
class ServerGenerator(FedAvg, Generic[G]):
    """FedAvg plus a server-trained generator (`generator`, flattened by `gen_flat`)."""

    generator_lr: float = ruled(
        3e-4,
        POSITIVE,
        source="code: FedGen's code (zhuangdizhu/FedGen, utils/model_config.py L51: MNIST "
        "ensemble_lr 3e-4)",
    )

    def _generator(
        self, model: nn.Module, num_classes: int, input_shape: tuple[int, ...], seed: int
    ) -> G:
        """A new generator, initialised from `seed` (the same on the server and the clients)."""
        raise NotImplementedError

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        dataset = ctx.data.dataset
        shape = tuple(dataset.input_shape)
        self.generator = self._generator(ctx.model, dataset.num_classes, shape, ctx.config.seed)
        self.generator.to(ctx.device)
        self.gen_flat = FlatState(self.generator)
        self.gen_optimizer = torch.optim.Adam(self.generator.parameters(), lr=self.generator_lr)
        self.generator_loss: float | None = None

    def client_setup(self, ctx: ClientSetup) -> None:
        """A scratch generator; its weights arrive in the broadcast."""
        super().client_setup(ctx)
        shape = tuple(ctx.input_shape)
        self.generator = self._generator(ctx.model, ctx.num_classes, shape, ctx.seed)
        self.generator.to(ctx.device).requires_grad_(False)
        self.gen_flat = FlatState(self.generator)

    def summary_metrics(self) -> dict[str, Any]:
        return {
            "generator_params": sum(p.numel() for p in self.generator.parameters()),
            "generator_loss": self.generator_loss,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "generator": self.generator.state_dict(),
            "generator_optimizer": self.gen_optimizer.state_dict(),
            "generator_loss": self.generator_loss,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.generator.load_state_dict(state["generator"])
        self.gen_optimizer.load_state_dict(state["generator_optimizer"])
        self.generator_loss = state["generator_loss"]
