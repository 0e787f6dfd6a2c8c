"""Partitioners: pure functions (labels, num_clients, rng, **params) -> per-client index arrays.

Each is registered by name (`partition=<name>` selects a config that names one of these).
"""

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedshare.errors import FedshareError
from fedshare.params import check_params
from fedshare.registry import Registry

Partitioner = Callable[..., list[np.ndarray]]
PARTITIONERS: Registry[Partitioner] = Registry("partition")


def register_partition(name: str) -> Callable[[Partitioner], Partitioner]:
    return PARTITIONERS.register(name)


@dataclass
class Partition:
    """Per-client index arrays with their statistics and fingerprint."""

    name: str
    params: dict[str, Any]
    client_indices: list[np.ndarray]
    num_classes: int
    class_counts: np.ndarray  # clients × classes
    groups: np.ndarray | None = None  # client group ids (e.g. ReBaFL's clustered setting)
    fingerprint: str = field(default="")

    @property
    def sizes(self) -> list[int]:
        return [len(ix) for ix in self.client_indices]

    def summary(self) -> dict[str, Any]:
        """The statistics written to `partition.json`."""
        classes_per_client = (self.class_counts > 0).sum(axis=1)
        sizes = np.asarray(self.sizes)
        return {
            "name": self.name,
            "params": self.params,
            "fingerprint": self.fingerprint,
            "num_clients": len(self.client_indices),
            "num_classes": self.num_classes,
            "sizes": sizes.tolist(),
            "size_stats": {
                "min": int(sizes.min()),
                "max": int(sizes.max()),
                "mean": float(sizes.mean()),
                "total": int(sizes.sum()),
            },
            "classes_per_client": classes_per_client.tolist(),
            "class_counts": self.class_counts.tolist(),
            "groups": None if self.groups is None else self.groups.tolist(),
        }


def fingerprint(client_indices: list[np.ndarray]) -> str:
    """A hash of the assignment: which sorted indices each client holds, in client order."""
    digest = hashlib.sha256()
    for ix in client_indices:
        digest.update(np.sort(np.asarray(ix, dtype=np.int64)).tobytes())
        digest.update(b"|")
    return digest.hexdigest()[:16]


def make_partition(
    labels: np.ndarray,
    num_clients: int,
    cfg: Mapping[str, Any],
    rng: np.random.Generator,
    num_classes: int | None = None,
) -> Partition:
    """Run the partitioner `cfg['name']` with the rest of `cfg` as its parameters."""
    cfg = dict(cfg)
    name = str(cfg.pop("name", None))
    fn = PARTITIONERS.get(name)
    params = check_params(fn, cfg, "partition", name, skip=3)
    if num_clients < 1:
        raise FedshareError(f"the number of clients must be at least 1, got {num_clients}")
    result = fn(labels, num_clients, rng, **params)
    groups = None
    if isinstance(result, tuple):
        result, groups = result
    indices = [np.asarray(ix, dtype=np.int64) for ix in result]
    c = int(num_classes or labels.max() + 1)
    counts = np.stack([np.bincount(labels[ix], minlength=c) for ix in indices])
    return Partition(name, params, indices, c, counts, groups, fingerprint(indices))


@register_partition("iid")
def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniformly random split into (nearly) equal shares; every index used exactly once."""
    return np.array_split(rng.permutation(len(labels)), num_clients)


@register_partition("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_size: int = 10,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """NIID-Bench's Dir(α) label skew (Li et al., 2022), as FLea and ReBaFL use it.

    For each class, proportions p ~ Dir(α·1) over clients; a client that already holds at least
    N/num_clients samples gets proportion 0 (the balancing cap); the class is split by the
    renormalised proportions. The whole draw is repeated until every client has `min_size`
    samples, at most `max_tries` times.
    """
    if alpha <= 0:
        raise FedshareError(f"partition.alpha={alpha} must be positive")
    n = len(labels)
    if min_size * num_clients > n:
        raise FedshareError(
            f"partition.min_size={min_size} is infeasible: {num_clients} clients × {min_size} "
            f"exceeds the {n} training samples; lower min_size or the number of clients"
        )
    cap = n / num_clients
    classes = np.unique(labels)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, dtype=np.int64)
        for c in classes:
            pool = rng.permutation(np.flatnonzero(labels == c))
            props = rng.dirichlet(np.full(num_clients, alpha))
            props = props * (sizes < cap)
            props = props / props.sum()
            cuts = (np.cumsum(props) * len(pool)).astype(np.int64)[:-1]
            for k, chunk in enumerate(np.split(pool, cuts)):
                parts[k].append(chunk)
                sizes[k] += len(chunk)
        if sizes.min() >= min_size:
            return [np.concatenate(p) for p in parts]
    raise FedshareError(
        f"partition dirichlet(alpha={alpha}) gave some client fewer than min_size={min_size} "
        f"samples in {max_tries} draws; raise alpha, lower min_size or use fewer clients"
    )
