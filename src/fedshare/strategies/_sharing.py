"""Pieces shared by the strategies that share data-derived artefacts (FLea, FedMix, FedBR,
FedData).

* `fixed_subset` / `fixed_groups`: which of a client's samples it shares, drawn once per client
  from (seed, purpose, client), so the same samples are exposed every time (FLea's fixed S_k,
  Section 3.2);
* `OneShotSharing`: round 0 gathers artefacts from *every* client and sends the pool to every
  client once, which keeps it (FedMix and FedData as FLea's code runs them, App. C.3); the
  engine counts the bytes of both exchanges; exposure and the dCor of the shared items are
  tracked;
* `MeanSharing`: the one-shot upload of means of `mean_size` samples (FedMix with their mean
  labels, FedBR without labels).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fedshare.config.rules import SIZE, ruled
from fedshare.engine.client import Client
from fedshare.engine.rng import torch_generator
from fedshare.functional.mixup import as_soft_labels
from fedshare.privacy.dcor import mean_distance_correlation
from fedshare.privacy.exposure import ExposureTracker
from fedshare.strategies.base import Message, Phase, SetupContext, Strategy, Update


def share_count(n: int, fraction: float, min_samples: int) -> int:
    """⌊fraction·n⌋, or 0 for clients with fewer than `min_samples` samples."""
    return 0 if n < min_samples else int(fraction * n + 1e-9)


def fixed_subset(
    seed: int,
    purpose: str,
    client_id: int,
    n: int,
    fraction: float,
    with_replacement: bool = False,
    min_samples: int = 0,
) -> torch.Tensor:
    """Positions (into the client's index list) of the ⌊fraction·n⌋ samples it shares; the
    same for every round. `with_replacement` reproduces FLea's code (duplicates possible)."""
    k = share_count(n, fraction, min_samples)
    gen = torch_generator(seed, purpose, client_id)
    if k == 0:
        return torch.zeros(0, dtype=torch.long)
    if with_replacement:
        return torch.randint(n, (k,), generator=gen)
    return torch.randperm(n, generator=gen)[:k]


def fixed_groups(seed: int, purpose: str, client_id: int, n: int, size: int) -> torch.Tensor:
    """(⌊n/size⌋, size) positions: consecutive groups of one shuffled pass (FedMix's means)."""
    gen = torch_generator(seed, purpose, client_id)
    groups = n // size
    return torch.randperm(n, generator=gen)[: groups * size].view(groups, size)


@dataclass
class OneShotSharing(Strategy):
    """Round 0: every client uploads its artefacts ("share"), the server sends the whole pool
    to every client ("distribute"); every round then trains with the pool each client holds.

    Subclasses implement `share_step` (a client's upload), `metric_pairs` (the shared items
    and the inputs they came from, for the dCor metric), `shared_positions` (what is exposed)
    and `client_update` (training with the pool the client kept, `received_pool(client)`).
    """

    metric_chunk: int = ruled(
        32,
        SIZE,
        source="rule: engineering only (the chunk of the privacy metric's batches); no effect on "
        "training",
    )

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.exposure = ExposureTracker(ctx.data.client_sizes)
        self.pool: dict[str, torch.Tensor] = {}
        self.pool_owners: list[int] = []
        self.shared_dcor: float | None = None

    # ------------------------------------------------------------------ subclass hooks
    def share_step(self, client: Client, message: Message) -> Update:
        raise NotImplementedError

    def shared_positions(self, client_id: int) -> torch.Tensor:
        raise NotImplementedError

    def metric_pairs(self, client_id: int, payload: dict[str, torch.Tensor]) -> tuple:
        raise NotImplementedError

    # ------------------------------------------------------------------ phases
    def _everyone_first(self, round_idx: int, cohort: list[int]) -> list[int]:
        return list(range(self.data.num_clients)) if round_idx == 0 else []

    def phases(self) -> list[Phase]:
        every = self._everyone_first
        return [
            Phase("share", lambda r: Message(), self.share_step, self.collect, every, trains=False),
            Phase(
                "distribute",
                self.broadcast_pool,
                self.receive_pool,
                self.delivered,
                every,
                keep=True,
                trains=False,
            ),
            self.train_phase(),
        ]

    def collect(self, updates: Iterable[Update], round_idx: int) -> None:
        received = list(updates)
        if not received:  # rounds after the one-shot exchange: the pool stays as it is
            return
        parts: dict[str, list[torch.Tensor]] = {}
        sources, items, owners = [], [], []
        for update in received:
            if not update.payload:
                continue
            owners.append(update.client_id)
            for key, value in update.payload.items():
                parts.setdefault(key, []).append(value)
            self.exposure.record_shared(update.client_id, self.shared_positions(update.client_id))
            src, item = self.metric_pairs(update.client_id, update.payload)
            sources.append(src)
            items.append(item)
        self.pool = {k: torch.cat(v) for k, v in parts.items()}
        self.pool_owners = owners
        if sources:
            self.shared_dcor = mean_distance_correlation(
                torch.cat(sources), torch.cat(items), self.metric_chunk
            )

    def broadcast_pool(self, round_idx: int) -> Message:
        return Message(payload=dict(self.pool)) if round_idx == 0 else Message()

    def receive_pool(self, client: Client, message: Message) -> Update:
        return Update(client.id, client.num_samples)  # the engine keeps the message for it

    @staticmethod
    def received_pool(client: Client) -> dict[str, torch.Tensor]:
        """The pool this client received in the one-shot exchange (empty if none)."""
        kept = client.kept.get("distribute")
        return {} if kept is None else kept.payload

    def delivered(self, updates: Iterable[Update], round_idx: int) -> None:
        receivers = [u.client_id for u in updates]
        self.exposure.record_delivery(self.pool_owners, receivers)

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        super().aggregate(updates, round_idx)
        self.round_metrics = {"pool_size": self.pool_size, **self.exposure.metrics()}
        if self.shared_dcor is not None:
            self.round_metrics["shared_dcor"] = self.shared_dcor

    @property
    def pool_size(self) -> int:
        first = next(iter(self.pool.values()), None)
        return 0 if first is None else int(first.shape[0])

    # ------------------------------------------------------------------ results, checkpoint
    def summary_metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pool_size": self.pool_size, **self.exposure.metrics()}
        out["shared_dcor"] = self.shared_dcor
        out["exposure_data_per_client"] = [round(v, 4) for v in self.exposure.data_fractions()]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "pool": dict(self.pool),
            "pool_owners": list(self.pool_owners),
            "exposure": self.exposure.state_dict(),
            "shared_dcor": self.shared_dcor,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.pool = {k: v.to(self.device) for k, v in state["pool"].items()}
        self.pool_owners = list(state["pool_owners"])
        self.exposure.load_state_dict(state["exposure"])
        self.shared_dcor = state["shared_dcor"]


@dataclass
class MeanSharing(OneShotSharing):
    """Round 0: each client uploads ⌊|D_k|/M⌋ means of M consecutive samples of one shuffled
    pass of its prepared inputs (M = `mean_size`), with the means of their one-hot labels when
    the method shares labels (`shares_labels`)."""

    shares_labels: ClassVar[bool] = True
    mean_size: int = ruled(
        10,
        SIZE,
        source="code: FLea's code (XTxiatong/FLea, FedMix_pre and FedBR: means of 10 samples); "
        "FLea App. C.3",
    )

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)

    def groups(self, seed: int, client_id: int, n: int) -> torch.Tensor:
        """The client's fixed groups of `mean_size` positions (the same on both sides)."""
        return fixed_groups(seed, f"{self.name}/groups", client_id, n, self.mean_size)

    def server_groups(self, client_id: int) -> torch.Tensor:
        return self.groups(self.config.seed, client_id, self.data.client_sizes[client_id])

    def shared_positions(self, client_id: int) -> torch.Tensor:
        return self.server_groups(client_id).flatten()

    def share_step(self, client: Client, message: Message) -> Update:
        groups = self.groups(client.seed, client.id, client.num_samples).to(client.device)
        if groups.numel() == 0:
            return Update(client.id, client.num_samples)
        x, y = client.data(groups.flatten())
        payload = {"means": x.view(*groups.shape, *x.shape[1:]).mean(dim=1)}
        if self.shares_labels:
            labels = as_soft_labels(y, client.num_classes).view(*groups.shape, -1)
            payload["label_means"] = labels.mean(dim=1)
        return Update(client.id, client.num_samples, payload=payload)

    def context_view(self) -> dict[str, Any]:
        return {"view": "average", "group": self.mean_size}

    def metric_pairs(self, client_id: int, payload: dict[str, torch.Tensor]) -> tuple:
        groups = self.server_groups(client_id).to(self.device)
        x, _ = self.data.dataset.train_batch(self.data.client_indices[client_id][groups.flatten()])
        sources = x.reshape(groups.shape[0], -1)  # the M source inputs of each mean, side by side
        return sources, payload["means"]
