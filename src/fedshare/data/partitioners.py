"""Partitioners: pure functions (labels, num_clients, rng, **params) -> per-client index arrays.

Each is registered by name (`partition=<name>` selects a config whose `name:` is one of these).
A partitioner returns a list of index arrays, a `(list, groups)` tuple, or a `Split` when it has
more to say (client groups and their names, per-domain input transforms, extra facts such as
XorMixFL's server pseudo-client). `make_partition` turns any of these into a `Partition` with
statistics and a fingerprint.

The partitioners live in `label_skew.py` (Dirichlet, FLea's block-wise Dirichlet, quantity),
`pathological.py` (ReBaFL: pathological, clustered, shards), `label_deficit.py` (XorMixFL) and
`shift.py` (FedPFT's task and covariate shift); they are imported at the bottom of this module
so the registry is always complete.
"""

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedshare.config.params import check_params
from fedshare.engine.rng import numpy_rng
from fedshare.errors import FedshareError
from fedshare.registry import Registry

Partitioner = Callable[..., Any]
PARTITIONERS: Registry[Partitioner] = Registry("partition")


def register_partition(name: str) -> Callable[[Partitioner], Partitioner]:
    return PARTITIONERS.register(name)


@dataclass
class Split:
    """What a partitioner returns when index arrays alone are not enough.

    `groups[k]` is client k's group id (ReBaFL clusters, FedPFT tasks/domains, XorMixFL's
    server vs devices); `clients.availability` may give one value per group. `transforms`
    holds one input-transform spec per group (covariate shift, see `shift.py`). `info` is
    free-form, JSON-safe facts that later stages may read (e.g. `info["server"]`).
    """

    indices: list[np.ndarray]
    groups: np.ndarray | None = None
    group_names: list[str] | None = None
    transforms: list[dict[str, Any]] | None = None
    info: dict[str, Any] = field(default_factory=dict)


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
    group_names: list[str] | None = None
    transforms: list[dict[str, Any]] | None = None  # one per group: covariate shift
    info: dict[str, Any] = field(default_factory=dict)
    num_samples: int = 0  # size of the training set that was partitioned

    @property
    def sizes(self) -> list[int]:
        return [len(ix) for ix in self.client_indices]

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    def coverage(self) -> dict[str, int]:
        """How the training set was used: distinct indices assigned, never used, reused."""
        total = int(sum(self.sizes))
        flat = np.concatenate(self.client_indices) if total else np.zeros(0, dtype=np.int64)
        distinct = int(np.unique(flat).size)
        return {
            "train_size": self.num_samples,
            "assigned": total,
            "distinct": distinct,
            "unused": self.num_samples - distinct,
            "reused": total - distinct,
        }

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
                "median": float(np.median(sizes)),
                "std": float(sizes.std()),
                "total": int(sizes.sum()),
            },
            "coverage": self.coverage(),
            "classes_per_client": classes_per_client.tolist(),
            "classes_per_client_stats": {
                "min": int(classes_per_client.min()),
                "max": int(classes_per_client.max()),
                "mean": float(classes_per_client.mean()),
            },
            "class_totals": self.class_counts.sum(axis=0).tolist(),
            "clients_per_class": (self.class_counts > 0).sum(axis=0).tolist(),
            "class_counts": self.class_counts.tolist(),
            "groups": None if self.groups is None else self.groups.tolist(),
            "group_names": self.group_names,
            "transforms": self.transforms,
            "info": self.info,
        }

    def describe(self, max_rows: int = 40) -> str:
        """Human-readable statistics (what `python -m fedshare.partition` prints)."""
        s = self.summary()
        st, cov, cpc = s["size_stats"], s["coverage"], s["classes_per_client_stats"]
        params = ", ".join(f"{k}={v}" for k, v in self.params.items()) or "defaults"
        lines = [
            f"partition {self.name} ({params})  fingerprint {self.fingerprint}",
            f"clients {s['num_clients']}  classes {self.num_classes}  "
            f"sizes min {st['min']} / median {st['median']:g} / mean {st['mean']:.1f} / "
            f"max {st['max']}  (std {st['std']:.1f})",
            f"classes per client min {cpc['min']} / mean {cpc['mean']:.2f} / max {cpc['max']}",
            f"training set {cov['train_size']}: assigned {cov['assigned']}, distinct "
            f"{cov['distinct']}, unused {cov['unused']}, reused {cov['reused']}",
            f"samples per class {s['class_totals']}",
            f"clients per class {s['clients_per_class']}",
        ]
        if self.groups is not None:
            names = self.group_names or [str(g) for g in range(int(self.groups.max()) + 1)]
            counts = np.bincount(self.groups, minlength=len(names))
            lines.append(
                "groups "
                + ", ".join(f"{n}: {c} clients" for n, c in zip(names, counts, strict=False))
            )
        if self.transforms is not None:
            lines.append(f"input transforms per group {self.transforms}")
        if self.info:
            lines.append(f"info {self.info}")
        width = max(4, len(str(int(self.class_counts.max(initial=0)))))
        header = "client  group   size | " + " ".join(
            f"{c:>{width}}" for c in range(self.num_classes)
        )
        lines.append(header)
        if self.num_classes > 20:
            lines[-1] = "per-client class counts: see partition.json / partition.png"
            return "\n".join(lines)
        shown = range(min(self.num_clients, max_rows))
        for k in shown:
            group = "-" if self.groups is None else str(int(self.groups[k]))
            row = " ".join(f"{int(v):>{width}}" for v in self.class_counts[k])
            lines.append(f"{k:>6} {group:>6} {self.sizes[k]:>6} | {row}")
        if self.num_clients > max_rows:
            lines.append(f"... ({self.num_clients - max_rows} more clients in partition.json)")
        return "\n".join(lines)


def fingerprint(client_indices: list[np.ndarray], extra: Any = None) -> str:
    """A hash of the assignment: which sorted indices each client holds, in client order.

    `extra` (JSON-serialisable, e.g. covariate-shift transforms) is hashed too when given, so
    two partitions with the same indices but different per-client inputs differ.
    """
    digest = hashlib.sha256()
    for ix in client_indices:
        digest.update(np.sort(np.asarray(ix, dtype=np.int64)).tobytes())
        digest.update(b"|")
    if extra is not None:
        digest.update(json.dumps(extra, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _as_split(result: Any) -> Split:
    if isinstance(result, Split):
        return result
    if isinstance(result, tuple):
        indices, groups = result
        return Split(list(indices), groups)
    return Split(list(result))


def make_partition(
    labels: np.ndarray,
    num_clients: int,
    cfg: Mapping[str, Any],
    rng: np.random.Generator,
    num_classes: int | None = None,
) -> Partition:
    """Run the partitioner `cfg['name']` with the rest of `cfg` as its parameters.

    A non-null `cfg['seed']` replaces `rng` by a stream of its own, so the partition stays
    fixed while the run seed varies (FLea and ReBaFL keep one partition across their seeds).
    """
    cfg = dict(cfg)
    name = str(cfg.pop("name", None))
    seed = cfg.pop("seed", None)
    if seed is not None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise FedshareError(f"partition.seed={seed!r} must be an integer or null")
        rng = numpy_rng(seed, "partition")
    fn = PARTITIONERS.get(name)
    params = check_params(fn, cfg, "partition", name, skip=3)
    if num_clients < 1:
        raise FedshareError(f"the number of clients must be at least 1, got {num_clients}")
    labels = np.asarray(labels)
    split = _as_split(fn(labels, num_clients, rng, **params))
    indices = [np.asarray(ix, dtype=np.int64) for ix in split.indices]
    if len(indices) != num_clients:
        raise RuntimeError(
            f"partitioner {name!r} returned {len(indices)} clients, not {num_clients}"
        )
    c = int(num_classes or labels.max() + 1)
    counts = np.stack([np.bincount(labels[ix], minlength=c) for ix in indices])
    groups = None if split.groups is None else np.asarray(split.groups, dtype=np.int64)
    extra = None
    if split.transforms is not None:
        extra = {"transforms": split.transforms, "info": split.info}
    info = dict(split.info)
    if seed is not None:
        info["partition_seed"] = seed
    return Partition(
        name,
        params,
        indices,
        c,
        counts,
        groups,
        fingerprint(indices, extra),
        split.group_names,
        split.transforms,
        info,
        len(labels),
    )


@register_partition("iid")
def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniformly random split into (nearly) equal shares; every index used exactly once."""
    return np.array_split(rng.permutation(len(labels)), num_clients)


# Register the other partitioners (they import `register_partition` from this module).
from fedshare.data import label_deficit, label_skew, pathological, shift  # noqa: E402, F401
