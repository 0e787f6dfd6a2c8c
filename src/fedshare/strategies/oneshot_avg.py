"""One-shot averaging of local heads (FedPFT's "Average"/AVG baseline: one-shot FedAvg).

FedPFT's Section 5.2 and Table 5 (Beitollahi et al., 2024).

One round: each client trains a linear head on its own features from a common initialisation
(`feature_heads.local_head`, the run's `train` settings for `head_budget` passes: I ×
`train.local_epochs` by default, `_feature_heads.HeadBudget`) and uploads it once (C·d + C numbers
in `head_dtype`, counted as `bytes_up`; with `to_last_client=true` the sources send theirs to
the last client instead, Table 2's one transfer, `_head_exchange`); the global head is the mean
of the clients' W and b, weighted by `weighting`: "samples" (n_i, the default: FedAvg's
convention; the paper does not say which weighting) or "uniform" (1/I each). Under unbalanced
task shifts sample weights make the minority client's classes vanish (digits proxy, two
clients: 46.9 vs 62.4 uniform).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

from fedshare.config.rules import Rule, ruled
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.client import Client
from fedshare.functional.gmm import WIRE_DTYPES
from fedshare.strategies._feature_heads import (
    HEAD_TRAINING,
    FeatureClassifier,
    HeadBudget,
    head_dtype_param,
    head_vector,
    l2_normalize_param,
    linear_head,
    load_head,
    local_head,
    split_head_vector,
)
from fedshare.strategies._head_exchange import HeadExchange
from fedshare.strategies.base import Message, SetupContext, Strategy, Update, register_strategy

WEIGHTINGS = ("samples", "uniform")


@register_strategy("oneshot_avg")
@dataclass
# HeadExchange's `clients_in_order` is a property of its `to_last_client` parameter, where
# Strategy declares a class constant
class OneShotAverage(HeadBudget, HeadExchange, Strategy):  # type: ignore[override]
    """The (sample- or uniformly) weighted mean of locally trained heads, after one upload."""

    one_shot: ClassVar[bool] = True
    train_defaults: ClassVar[Mapping[str, Any]] = HEAD_TRAINING

    head_dtype: str = head_dtype_param()
    l2_normalize: bool = l2_normalize_param()
    weighting: str = ruled(
        "samples",
        Rule(choices=WEIGHTINGS),
        source="rule: n_i-weighted, FedAvg's mean",
    )
    """samples (n_i-weighted, the default) | uniform (every client 1/I)."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.check_topology(ctx)
        self.head = linear_head(ctx.model)

    def broadcast(self, round_idx: int) -> Message:
        return Message()

    def client_update(self, client: Client, message: Message) -> Update:
        epochs = self.head_epochs(client.train)
        head = local_head(client, self.num_classes, client.seed, self.l2_normalize, epochs)
        return self.head_update(client, head_vector(head, WIRE_DTYPES[self.head_dtype]))

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        mean = RunningMean()
        for vector, samples in self.heads_of(updates):
            if samples > 0:  # a client without data trained nothing
                mean.add(vector.float(), 1.0 if self.weighting == "uniform" else samples)
        w, b = split_head_vector(mean.value(), self.head.in_features, self.head.out_features)
        load_head(self.head, w, b)

    def global_model(self) -> nn.Module:
        if self.l2_normalize:
            return FeatureClassifier(self.model, self.head, l2_normalize=True)
        return self.model
