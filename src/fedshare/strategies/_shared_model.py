"""The base of the methods where every client trains its personal model beside a copy of one
small shared model (FML's meme model, FedKD's mentee): the shared model is the run's `model`,
broadcast and averaged as in FedAvg (sample-weighted), and it is what the run evaluates
(`global_model`); each client's personal model lives in its state (`_personal`)."""

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedshare.engine.aggregation import RunningMean
from fedshare.engine.client import Client
from fedshare.engine.messages import Message, Update
from fedshare.strategies._personal import PersonalStrategy
from fedshare.strategies.base import ClientSetup, SetupContext


class Pair(nn.Module):
    """The personal and the shared model trained together (one optimizer over both)."""

    def __init__(self, personal: nn.Module, shared: nn.Module) -> None:
        super().__init__()
        self.personal = personal
        self.shared = shared


@dataclass
class SharedModelStrategy(PersonalStrategy):
    """Personal models in client state; one shared model averaged by the server."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self._mean = RunningMean()

    def client_setup(self, ctx: ClientSetup) -> None:
        """A worker of the shared model's architecture beside the client's own worker."""
        super().client_setup(ctx)
        self.shared_worker = copy.deepcopy(ctx.model)

    def broadcast(self, round_idx: int) -> Message:
        return Message(weights=self.flat.flatten(self.model))

    def pair(self, client: Client, shared_weights: torch.Tensor) -> Pair:
        """The client's personal model and the received shared model."""
        shared = self.load_weights(self.shared_worker, shared_weights.to(client.device))
        return Pair(self.personal(client), shared)

    def absorb(self, update: Update) -> None:
        if update.weights is not None:
            self._mean.add(update.weights, update.aggregation_weight)
            update.weights = None

    def finish(self, round_idx: int) -> None:
        if not self._mean.empty:
            self.load_weights(self.model, self._mean.value())
        self._mean = RunningMean()

    def global_model(self) -> nn.Module:
        return self.model

    def summary_metrics(self) -> dict[str, Any]:
        return {}  # the evaluated model is the shared one, not a shown client's
