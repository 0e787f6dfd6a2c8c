"""The papers' authors' own training logs as data, for comparing a run's curve and partition.

A log lives in `fedshare/paper/logs/<name>.json` (written by `scripts/flea_official_log.py`):
where it comes from (`source`, `commit`, `run`), the experiment preset and method it matches,
the global test accuracy after every round (percent; index 0 is the first evaluated round) and
the partition it trained on as per-client class counts.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from fedshare.errors import FedshareError


@dataclass(frozen=True)
class OfficialLog:
    name: str
    source: str
    commit: str
    run: str
    preset: str
    method: str
    accuracy: tuple[float, ...]
    class_counts: np.ndarray  # clients × classes
    test_size: int


def available_logs() -> list[str]:
    folder = resources.files("fedshare.paper") / "logs"
    return sorted(
        p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")
    )


@cache
def load_log(name: str) -> OfficialLog:
    """The authors' log `name` (the file name without .json)."""
    path = resources.files("fedshare.paper") / "logs" / f"{name}.json"
    if not path.is_file():
        raise FedshareError(f"no official log {name!r}; available: {', '.join(available_logs())}")
    raw = json.loads(path.read_text())
    return OfficialLog(
        name=name,
        source=raw["source"],
        commit=raw["commit"],
        run=raw["run"],
        preset=raw["preset"],
        method=raw["method"],
        accuracy=tuple(raw["accuracy"]),
        class_counts=np.asarray(raw["class_counts"], dtype=np.int64),
        test_size=raw["test_size"],
    )


def curve_stats(accuracy: Sequence[float], settled_from: int = 30) -> dict[str, float]:
    """Best, last-10 mean, and min / mean / max from round `settled_from` (1-based) on."""
    settled = list(accuracy[settled_from - 1 :])
    if not settled:
        raise FedshareError(f"a curve of {len(accuracy)} rounds has no round {settled_from}")
    return {
        "best": max(accuracy),
        "last10_mean": float(np.mean(accuracy[-10:])),
        "settled_min": min(settled),
        "settled_mean": float(np.mean(settled)),
        "settled_max": max(settled),
    }


def skew_stats(class_counts: np.ndarray) -> dict[str, float]:
    """How label-skewed a partition is: classes per client, single-class share, dominant share."""
    sizes = class_counts.sum(axis=1)
    present = (class_counts > 0).sum(axis=1)
    return {
        "clients": len(sizes),
        "total": int(sizes.sum()),
        "classes_per_client": float(present.mean()),
        "single_class_share": float((present == 1).mean()),
        "dominant_share": float((class_counts.max(axis=1) / sizes).mean()),
        "median_size": float(np.median(sizes)),
    }
