"""Who takes part in a round: cohort sampling, then availability (client dropout)."""

from collections.abc import Sequence

import numpy as np

from fedshare.engine.rng import numpy_rng
from fedshare.errors import FedshareError


def cohort_size(num_clients: int, fraction: float, per_round: int | None) -> int:
    """Clients sampled per round: `per_round` if given, else floor(fraction · N), at least 1."""
    if per_round is not None:
        if not 1 <= per_round <= num_clients:
            raise FedshareError(
                f"clients.per_round={per_round} must be between 1 and the {num_clients} clients"
            )
        return per_round
    if not 0.0 < fraction <= 1.0:
        raise FedshareError(f"clients.fraction={fraction} must be in (0, 1]")
    return max(1, int(fraction * num_clients + 1e-9))


def availability_per_client(
    availability: float | Sequence[float], groups: np.ndarray | None, num_clients: int
) -> np.ndarray:
    """Per-client success probability from a scalar or from one value per client group."""
    if isinstance(availability, int | float):
        probs = np.full(num_clients, float(availability))
    else:
        values = np.asarray(list(availability), dtype=float)
        if groups is None:
            if len(values) != num_clients:
                raise FedshareError(
                    f"clients.availability has {len(values)} values but the partition has no "
                    f"client groups; give a scalar or one value per client ({num_clients})"
                )
            probs = values
        else:
            if len(values) != int(groups.max()) + 1:
                raise FedshareError(
                    f"clients.availability has {len(values)} values for "
                    f"{int(groups.max()) + 1} client groups"
                )
            probs = values[groups]
    if np.any(probs <= 0) or np.any(probs > 1):
        raise FedshareError(f"clients.availability values must be in (0, 1], got {availability}")
    return probs


class CohortSampler:
    """Draws the round's cohort, then keeps each member with its availability probability.

    Availability is drawn for all clients from a stream of its own (every strategy sees the same
    sequence of active sets), held for `period` rounds, and redrawn while no sampled client is
    left.
    """

    def __init__(
        self, num_clients: int, per_round: int, probs: np.ndarray, seed: int, period: int = 1
    ) -> None:
        if period < 1:
            raise FedshareError(f"clients.availability_period={period} must be at least 1")
        self.num_clients = num_clients
        self.per_round = per_round
        self.probs = probs
        self.seed = seed
        self.period = period

    def sampled(self, round_idx: int) -> np.ndarray:
        if self.per_round == self.num_clients:
            return np.arange(self.num_clients)
        rng = numpy_rng(self.seed, "cohort", round_idx)
        return np.sort(rng.choice(self.num_clients, size=self.per_round, replace=False))

    def available(self, round_idx: int, attempt: int) -> np.ndarray:
        held_round = round_idx - round_idx % self.period
        rng = numpy_rng(self.seed, "availability", held_round, attempt)
        return rng.random(self.num_clients) < self.probs

    def cohort(self, round_idx: int) -> list[int]:
        sampled = self.sampled(round_idx)
        if np.all(self.probs >= 1.0):
            return sampled.tolist()
        for attempt in range(10_000):
            keep = sampled[self.available(round_idx, attempt)[sampled]]
            if keep.size:
                return keep.tolist()
        raise RuntimeError("availability redraws kept no client 10,000 times")
