"""LG-FedAvg (Liang et al. 2020, "Think Locally, Act Globally: Federated Learning with Local
and Global Representations"), §3 and Algorithm 1: every client learns its own local
representation (the layers before the head) and all clients share one global model on top of
it, averaged as in FedAvg.

The global part here is the classifier head (Linear feature_dim → classes), as in the
heterogeneous-FL code of HtFLlib's `LG`: it is the only part every architecture shares. Each
round the server broadcasts the global head; a client puts it on its personal model, trains the
whole model on its data, keeps the model and uploads the trained head; the next global head is
the sample-weighted mean of the uploaded heads (the paper's n_k/n weights). A client's model is
evaluated with the latest global head on its own representation (`dress`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedshare.engine.aggregation import RunningMean
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.messages import Message, Update
from fedshare.models.base import as_block_model
from fedshare.strategies._local import LossFn, cross_entropy_loss
from fedshare.strategies._personal import PersonalStrategy
from fedshare.strategies.base import SetupContext, register_strategy, sent_weights


def load_head(model: nn.Module, flat: torch.Tensor) -> nn.Module:
    """`model` with its head's weights replaced by `flat` (in place)."""
    head = as_block_model(model).head
    FlatState(head).load_(head, flat.to(next(model.parameters()).device))
    return model


def head_weights(model: nn.Module) -> torch.Tensor:
    head = as_block_model(model).head
    return FlatState(head).flatten(head)


@register_strategy("lg_fedavg")
@dataclass
class LGFedAvg(PersonalStrategy):
    """Local representations, one sample-weighted global head."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.global_head = head_weights(ctx.model).clone()  # the run's initial head
        self._mean = RunningMean()

    def broadcast(self, round_idx: int) -> Message:
        return Message(weights=self.global_head)

    def local_step(self, client: Client, message: Message) -> tuple[nn.Module, LossFn]:
        return load_head(self.personal(client), sent_weights(message)), cross_entropy_loss

    def uploaded(
        self, client: Client, model: nn.Module, train_loss: torch.Tensor, message: Message
    ) -> Update:
        update = Update(
            client.id,
            client.num_samples,
            weights=head_weights(model),
            metrics={"train_loss": train_loss},
        )
        return self.keep(client, model, update)

    def absorb(self, update: Update) -> None:
        if update.weights is not None:
            self._mean.add(update.weights, update.aggregation_weight)
            update.weights = None

    def finish(self, round_idx: int) -> None:
        if not self._mean.empty:
            self.global_head = self._mean.value()
        self._mean = RunningMean()

    def dress(self, model: nn.Module) -> nn.Module:
        return load_head(model, self.global_head)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "global_head": self.global_head}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.global_head = state["global_head"].to(self.device)
