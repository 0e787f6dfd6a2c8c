"""FedData (Zhao et al., 2018) as FLea's reference upper bound (FLea's App. C.3).

Round 0: every client uploads ⌊α·|D_k|⌋ of its raw samples (with labels); the server sends the
whole pool (≈ α·N) to every client once, which keeps it. Each client then appends the pool to
its own data and trains with plain cross-entropy on the union in every round (one local epoch
covers |D_k| + |pool| samples); aggregation is FedAvg weighted by |D_k|.

Deviation: the shared subset is drawn without replacement by default (the code draws with
replacement; `share_with_replacement=true` restores it), the same choice as FLea's fixed S_k
(Section 3.2).
"""

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from fedshare.config.rules import ANY, FRACTION, SIZE, ruled
from fedshare.engine.batched import Batch
from fedshare.engine.client import Client, Samples
from fedshare.strategies._local import train_local, train_stacked
from fedshare.strategies._sharing import OneShotSharing, fixed_subset
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy


@register_strategy("feddata")
@dataclass
class FedData(OneShotSharing):
    """Raw-data sharing: the α-subsets of all clients are added to every client's data."""

    share_fraction: float = ruled(
        0.1,
        FRACTION,
        source="paper: FLea App. C.3, FedData shares the same α = 10 % as FLea",
    )
    share_with_replacement: bool = ruled(
        False,
        ANY,
        source="rule: without replacement, the paper's subset (FLea's code draws with replacement: "
        "true)",
    )
    share_min_samples: int = ruled(
        0,
        replace(SIZE, low=0),
        source="rule: every client shares (no minimum); FLea's own 10-sample floor is FLea's",
    )

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)

    def positions(self, seed: int, client_id: int, n: int) -> torch.Tensor:
        """Positions of the samples the client shares (the same on both sides)."""
        return fixed_subset(
            seed,
            "feddata/share",
            client_id,
            n,
            self.share_fraction,
            self.share_with_replacement,
            self.share_min_samples,
        )

    def context_view(self) -> dict[str, Any]:
        return {"view": "raw"}

    def shared_positions(self, client_id: int) -> torch.Tensor:
        return self.positions(self.config.seed, client_id, self.data.client_sizes[client_id])

    def share_step(self, client: Client, message: Message) -> Update:
        positions = self.positions(client.seed, client.id, client.num_samples)
        if positions.numel() == 0:
            return Update(client.id, client.num_samples)
        raw, labels = client.raw(positions.to(client.device))  # uint8 images stay uint8
        return Update(client.id, client.num_samples, payload={"samples": raw, "labels": labels})

    def metric_pairs(self, client_id: int, payload: dict[str, torch.Tensor]) -> tuple:
        positions = self.shared_positions(client_id).to(self.device)
        x, _ = self.data.dataset.train_batch(self.data.client_indices[client_id][positions])
        return x, x

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        loss = train_local(client, model, extra=self._extra(client))
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients (`train.batched`): each steps through its own
        data joined with the pool it holds."""
        model = self.load_weights(clients[0].model, message.weights)
        streams: list[Iterator[Batch]] = [
            client.batches(extra=self._extra(client)) for client in clients
        ]
        return train_stacked(self.flat, clients, model, streams=streams)

    def _extra(self, client: Client) -> Samples | None:
        pool = self.received_pool(client)
        return (pool["samples"], pool["labels"]) if "samples" in pool else None
