"""Exposure accounting for strategies that share data-derived artefacts (FLea's
Section 4.4).

Two quantities, both cumulative over the run:

* **pair exposure** ε(t) = Σ_ij ξ_ij / |K|², with ξ_ij = 1 once an artefact of client i has
  been delivered to client j (directed, the diagonal included: FLea's "≤ 40 % at round 50" is
  the directed count, ε(t) ≈ 1 − (1 − q²)^(t−1) for sampling rate q);
* **data exposure**: for each client, the fraction of its local samples that have entered at
  least one shared artefact (raw sample, average, activation).
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch


class ExposureTracker:
    """The directed exchange matrix ξ and a per-client mask of exposed samples."""

    def __init__(self, client_sizes: Sequence[int]) -> None:
        self.sizes = [int(s) for s in client_sizes]
        k = len(self.sizes)
        self.pairs = torch.zeros(k, k, dtype=torch.bool)
        self.exposed = [torch.zeros(s, dtype=torch.bool) for s in self.sizes]

    @property
    def num_clients(self) -> int:
        return len(self.sizes)

    def record_shared(self, client: int, positions: torch.Tensor) -> None:
        """Samples at `positions` (into the client's own index list) entered an artefact."""
        if positions.numel():
            self.exposed[client][positions.detach().to("cpu", torch.long)] = True

    def record_delivery(self, owners: Iterable[int], receivers: Iterable[int]) -> None:
        """Artefacts of every client in `owners` reached every client in `receivers`."""
        own = torch.as_tensor(sorted(set(int(o) for o in owners)), dtype=torch.long)
        rec = torch.as_tensor(sorted(set(int(r) for r in receivers)), dtype=torch.long)
        if own.numel() and rec.numel():
            self.pairs[own.unsqueeze(1), rec.unsqueeze(0)] = True

    def pair_exposure(self) -> float:
        """ε = Σ ξ_ij / |K|²."""
        return float(self.pairs.sum()) / max(self.num_clients**2, 1)

    def data_fractions(self) -> list[float]:
        """Per client: exposed samples / local samples (0 for empty clients)."""
        return [float(m.sum()) / max(s, 1) for m, s in zip(self.exposed, self.sizes, strict=True)]

    def metrics(self) -> dict[str, float]:
        """The values logged per round and written to summary.json."""
        fractions = torch.tensor(self.data_fractions() or [0.0], dtype=torch.float64)
        total = sum(self.sizes)
        exposed = sum(int(m.sum()) for m in self.exposed)
        return {
            "exposure_pairs": self.pair_exposure(),
            "exposure_data_mean": float(fractions.mean()),
            "exposure_data_max": float(fractions.max()),
            "exposure_data_total": exposed / max(total, 1),
            "exposure_clients": float((fractions > 0).double().mean()),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs.clone(), "exposed": [m.clone() for m in self.exposed]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.pairs = state["pairs"].clone().bool().cpu()
        self.exposed = [m.clone().bool().cpu() for m in state["exposed"]]


def expected_pair_exposure(rounds: int, rate: float) -> float:
    """Closed form ε(t) ≈ 1 − (1 − q²)^(t−1) for buffers passed from round t−1 to round t."""
    return 1.0 - (1.0 - rate**2) ** max(rounds - 1, 0)
