"""One-shot ensemble of local heads (FedPFT's "Ensemble" baseline).

FedPFT's Section 5.2 (Beitollahi et al., 2024): each client sends its head once.

One round: each client trains a linear head on its own features (`feature_heads.local_head`,
common initialisation, the run's `train` settings for `head_budget` passes: I ×
`train.local_epochs` by default, `_feature_heads.HeadBudget`) and uploads it once (C·d + C
numbers in `head_dtype`, counted as `bytes_up`; with `to_last_client=true` the sources send
theirs to the last client instead, Table 2's one transfer, `_head_exchange`). The server (or
the last client) keeps every head; the global model predicts with the softmax of every head
combined by `rule`: "max" (the paper: the class with the highest probability across all
models) or "mean" (the mean of the probabilities, steadier than max under Dir(0.1)). The evaluated
output is the log of the combined probabilities renormalised to sum to 1 (so the logged loss is a
cross-entropy).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import Rule, ruled
from fedshare.engine.client import Client
from fedshare.errors import FedshareError
from fedshare.functional.gmm import WIRE_DTYPES
from fedshare.models.base import as_block_model
from fedshare.strategies._feature_heads import (
    HEAD_TRAINING,
    HeadBudget,
    head_dtype_param,
    head_vector,
    l2_normalize_param,
    linear_head,
    local_head,
    split_head_vector,
)
from fedshare.strategies._head_exchange import HeadExchange
from fedshare.strategies.base import Message, SetupContext, Strategy, Update, register_strategy

RULES = ("max", "mean")


class EnsembleClassifier(nn.Module):
    """log of the `rule`-combined softmax of M linear heads on the shared features."""

    weights: torch.Tensor
    biases: torch.Tensor

    def __init__(
        self,
        model: nn.Module,
        weights: torch.Tensor,
        biases: torch.Tensor,
        rule: str,
        l2_normalize: bool = False,
    ) -> None:
        super().__init__()
        self.model = as_block_model(model)
        self.register_buffer("weights", weights)  # (M, C, d)
        self.register_buffer("biases", biases)  # (M, C)
        self.rule = rule
        self.l2_normalize = l2_normalize

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.model.features(x).flatten(1)
        if self.l2_normalize:
            f = F.normalize(f, dim=1)
        probs = torch.softmax(
            torch.einsum("nd,mcd->mnc", f, self.weights) + self.biases[:, None], -1
        )
        combined = probs.max(0).values if self.rule == "max" else probs.mean(0)
        return (combined / combined.sum(-1, keepdim=True)).clamp_min(1e-30).log()


@register_strategy("ensemble")
@dataclass
# HeadExchange's `clients_in_order` is a property of its `to_last_client` parameter, where
# Strategy declares a class constant
class Ensemble(HeadBudget, HeadExchange, Strategy):  # type: ignore[override]
    """Prediction by the ensemble of the clients' local heads (max or mean rule)."""

    one_shot: ClassVar[bool] = True
    train_defaults: ClassVar[Mapping[str, Any]] = HEAD_TRAINING

    rule: str = ruled(
        "max",
        Rule(choices=RULES),
        source="paper: FedPFT §5.1, the Ensemble baseline takes the highest probability across "
        "models",
    )
    head_dtype: str = head_dtype_param()
    """Precision of the uploaded heads (the paper counts 16-bit heads in Table 5)."""
    l2_normalize: bool = l2_normalize_param()

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.check_topology(ctx)
        self.head = linear_head(ctx.model)
        self.ensemble: EnsembleClassifier | None = None

    def broadcast(self, round_idx: int) -> Message:
        return Message()

    def client_update(self, client: Client, message: Message) -> Update:
        epochs = self.head_epochs(client.train)
        head = local_head(client, self.num_classes, client.seed, self.l2_normalize, epochs)
        return self.head_update(client, head_vector(head, WIRE_DTYPES[self.head_dtype]))

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        dim, classes = self.head.in_features, self.head.out_features
        weights, biases = [], []
        for vector, _ in self.heads_of(updates):
            w, b = split_head_vector(vector, dim, classes)
            weights.append(w)
            biases.append(b)
        if not weights:
            raise FedshareError("no client sent a head; the ensemble is empty")
        self.ensemble = EnsembleClassifier(
            self.model, torch.stack(weights), torch.stack(biases), self.rule, self.l2_normalize
        )
        self.round_metrics["ensemble_size"] = len(weights)

    def global_model(self) -> nn.Module:
        return self.model if self.ensemble is None else self.ensemble

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"model": self.model.state_dict()}
        if self.ensemble is not None:
            state["weights"] = self.ensemble.weights
            state["biases"] = self.ensemble.biases
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if "weights" in state:
            self.ensemble = EnsembleClassifier(
                self.model, state["weights"], state["biases"], self.rule, self.l2_normalize
            )
