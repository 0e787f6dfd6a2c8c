"""FedData (Zhao et al., 2018) as FLea's reference upper bound (flea.md §5, §8 item 23).

Round 0: every client uploads ⌊α·|D_k|⌋ of its raw samples (with labels); the server sends the
whole pool (≈ α·N) to every client once. Each client then appends the pool to its own data and
trains with plain cross-entropy on the union in every round (one local epoch covers
|D_k| + |pool| samples); aggregation is FedAvg weighted by |D_k|.

Deviation: the shared subset is drawn without replacement by default (the code draws with
replacement; `share_with_replacement=true` restores it), the same choice as FLea's (§8 item 9).
"""

from collections.abc import Iterable
from dataclasses import dataclass, replace

import torch

from fedshare.engine.client import Client
from fedshare.strategies._local import train_local
from fedshare.strategies._sharing import OneShotSharing, check_fraction, fixed_subset
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy


@register_strategy("feddata")
@dataclass
class FedData(OneShotSharing):
    """Raw-data sharing: the α-subsets of all clients are added to every client's data."""

    share_fraction: float = 0.1
    share_with_replacement: bool = False
    share_min_samples: int = 0

    def setup(self, ctx: SetupContext) -> None:
        check_fraction("share_fraction", self.share_fraction)
        super().setup(ctx)
        self.pool_indices = torch.zeros(0, dtype=torch.long, device=self.device)

    def shared_positions(self, client_id: int) -> torch.Tensor:
        n = self.data.client_sizes[client_id]
        return fixed_subset(
            self.config.seed,
            "feddata/share",
            client_id,
            n,
            self.share_fraction,
            self.share_with_replacement,
            self.share_min_samples,
        )

    def _global_indices(self, client_id: int) -> torch.Tensor:
        positions = self.shared_positions(client_id).to(self.device)
        return self.data.client_indices[client_id][positions]

    def share_step(self, client: Client, message: Message) -> Update:
        idx = client.indices[self.shared_positions(client.id).to(client.device)]
        if idx.numel() == 0:
            return Update(client.id, client.num_samples)
        raw = client.dataset.x_train[idx]  # the stored samples themselves (uint8 images stay)
        return Update(
            client.id,
            client.num_samples,
            payload={"samples": raw, "labels": client.dataset.y_train[idx]},
        )

    def metric_pairs(self, client_id: int, payload: dict[str, torch.Tensor]) -> tuple:
        x, _ = self.data.dataset.train_batch(self._global_indices(client_id))
        return x, x

    def collect(self, updates: Iterable[Update], round_idx: int) -> None:
        received = list(updates)
        if not received:
            return
        super().collect(received, round_idx)
        # The simulation keeps the pool as indices into the training set: the same samples
        # the clients uploaded (the payload above), gathered with the usual batch pipeline.
        self.pool_indices = torch.cat(
            [self._global_indices(c) for c in self.pool_owners]
            or [torch.zeros(0, dtype=torch.long, device=self.device)]
        )

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        union = replace(client, indices=torch.cat([client.indices, self.pool_indices]))
        loss = train_local(union, model)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )

    def state_dict(self) -> dict:  # type: ignore[type-arg]
        return {**super().state_dict(), "pool_indices": self.pool_indices}

    def load_state_dict(self, state: dict) -> None:  # type: ignore[type-arg]
        super().load_state_dict(state)
        self.pool_indices = state["pool_indices"].to(self.device)
