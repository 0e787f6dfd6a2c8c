"""What a strategy may touch for one client: its data, its random streams, the worker model."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fedshare.config import TrainConfig
from fedshare.data.dataset import Dataset
from fedshare.engine.optim import learning_rate, make_optimizer
from fedshare.engine.rng import torch_generator


@dataclass
class Client:
    """One client in one round (or phase of a round).

    `model` is the single worker model the engine reuses for every client: load weights into
    it in place (`strategy.load_global`), never deepcopy it. `state` is the client's own
    persistent state (kept by the engine between participations, checkpointed; write tensors
    into it); `personal` is the message addressed to this client alone, if its phase sends one.
    """

    id: int
    round: int
    indices: torch.Tensor
    dataset: Dataset
    model: nn.Module
    train: TrainConfig
    seed: int
    phase: str = "train"
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    personal: Any = None

    @property
    def num_samples(self) -> int:
        return int(self.indices.numel())

    @property
    def device(self) -> torch.device:
        return self.indices.device

    @property
    def lr(self) -> float:
        return learning_rate(self.train, self.round)

    def rng(self, purpose: str) -> torch.Generator:
        """A generator on the run device for (seed, purpose, round, client)."""
        return torch_generator(
            self.seed, f"{self.phase}/{purpose}", self.round, self.id, device=self.device
        )

    def make_optimizer(self, params: object = None) -> torch.optim.Optimizer:
        """The configured optimizer at this round's learning rate (default: all model params)."""
        return make_optimizer(
            self.model.parameters() if params is None else params, self.train, self.lr
        )

    def batches(
        self,
        epochs: int | None = None,
        batch_size: int | None = None,
        augment: bool = True,
        drop_last: bool = False,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Shuffled mini-batches of this client's data for `epochs` passes, gathered on device."""
        epochs = self.train.local_epochs if epochs is None else epochs
        size = self.train.batch_size if batch_size is None else batch_size
        gen = self.rng("batches")
        n = self.num_samples
        for _ in range(epochs):
            order = self.indices[torch.randperm(n, generator=gen, device=self.device)]
            stop = n - n % size if drop_last else n
            for start in range(0, stop, size):
                yield self.dataset.train_batch(order[start : start + size], augment, gen)

    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All of this client's samples, prepared without augmentation."""
        return self.dataset.train_batch(self.indices)
