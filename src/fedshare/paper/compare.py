"""The papers' tables as data and the comparison of a measured run against them.

A table lives in `fedshare/paper/tables/<paper>.json`: a header (paper, table, metric, ...)
and `entries`, each `{"preset": "<experiment preset>", "method": "<strategy>", "mean", "std"}`
(accuracies in percent, like `summary.json`; optionally `ci95`, a printed interval's
half-width), and optionally `methods`: method → `{"overrides": [...], "note": ...}`, the
command-line overrides that run it (`null` for a method the library does not run; a method not
listed runs as `strategy=<method>`). `compare` applies the project's tolerance for paper-scale
regression tests: max(k·std, floor) points.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from fedshare.errors import FedshareError


@dataclass(frozen=True)
class PaperEntry:
    paper: str
    preset: str
    method: str
    mean: float
    std: float
    ci95: float | None = None
    """The printed 95 % interval's half-width, for tables that report one (FedAA)."""


@dataclass(frozen=True)
class Comparison:
    entry: PaperEntry
    measured: float
    tolerance: float

    @property
    def delta(self) -> float:
        return self.measured - self.entry.mean

    @property
    def ok(self) -> bool:
        return abs(self.delta) <= self.tolerance

    def __str__(self) -> str:
        e = self.entry
        return (
            f"{e.method} on {e.preset}: measured {self.measured:.2f} vs paper "
            f"{e.mean:.2f}±{e.std:.2f} (Δ {self.delta:+.2f}, tolerance {self.tolerance:.2f})"
        )


def available_tables() -> list[str]:
    folder = resources.files("fedshare.paper") / "tables"
    return sorted(
        p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")
    )


@cache
def load_table(paper: str) -> dict[str, Any]:
    """The raw table dict of `paper` (the file name without .json, or a JSON file's path)."""
    path = resources.files("fedshare.paper") / "tables" / f"{paper}.json"
    if paper.endswith(".json") and Path(paper).is_file():
        path = Path(paper)
    if not path.is_file():
        raise FedshareError(
            f"no paper table {paper!r}; available: {', '.join(available_tables()) or 'none'}"
        )
    return json.loads(path.read_text())


def entries(paper: str) -> list[PaperEntry]:
    return [PaperEntry(paper, **e) for e in load_table(paper)["entries"]]


def overrides_in(table: Mapping[str, Any], method: str) -> tuple[str, ...] | None:
    """The overrides that run `method` of the raw `table`; None for a method the library does not
    run."""
    specs = table.get("methods")
    spec = specs.get(method) if isinstance(specs, Mapping) else None
    if isinstance(spec, Mapping) and "overrides" in spec:
        return tuple(spec["overrides"]) if spec["overrides"] else None
    return (f"strategy={method}",)


def method_overrides(paper: str, method: str) -> list[str]:
    """The command-line overrides that run `method` as `paper`'s table ran it."""
    found = overrides_in(load_table(paper), method)
    if found is None:
        raise FedshareError(f"paper {paper!r} lists method {method!r}, which fedshare does not run")
    return list(found)


def lookup(paper: str, preset: str, method: str) -> PaperEntry:
    """The table entry for `method` under experiment `preset`."""
    for entry in entries(paper):
        if entry.preset == preset and entry.method == method:
            return entry
    known = sorted({e.preset for e in entries(paper)})
    raise FedshareError(
        f"paper {paper!r} has no entry for method {method!r} under preset {preset!r}; "
        f"presets: {', '.join(known)}"
    )


def compare(
    paper: str, preset: str, method: str, measured: float, k: float = 3.0, floor: float = 3.0
) -> Comparison:
    """Measured vs. the table, with tolerance max(k·std, floor) points."""
    entry = lookup(paper, preset, method)
    return Comparison(entry, measured, max(k * entry.std, floor))
