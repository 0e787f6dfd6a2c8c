"""A table's cells as measured: each cell's completed seeds beside the paper's number.

A cell's value is its table's metric from each seed's `summary.json` (`target_label_accuracy`,
which the summary lacks, is the mean of the final round's per-class accuracy over the
partition's target labels); mean ± sample std over the seeds, compared with the paper by
`fedshare.paper.compare.compare` (within max(3·paper std, 3) points). Beside it, per cell, the
curve statistics papers differ in: best, last-10 mean and the settled mean (from round 30 on,
or over the second half of a run shorter than 60 rounds), each averaged over the seeds.
"""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedshare.errors import FedshareError
from fedshare.paper.compare import Comparison, compare, load_table
from fedshare.reproduce.jobs import Cell
from fedshare.reproduce.launch import DONE, state_of
from fedshare.results.runs import load_run
from fedshare.results.stats import finite, mean_std

SETTLED_FROM = 30


@dataclass
class Measured:
    """One cell (column × method) of one paper table."""

    numbers: str
    column: str
    method: str
    metric: str
    values: list[float] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    curves: list[list[float]] = field(default_factory=list)
    comparison: Comparison | None = None
    paper: tuple[float, float] | None = None

    @property
    def mean_std(self) -> tuple[float | None, float | None]:
        return mean_std(self.values)

    def curve_stat(self, name: str) -> float | None:
        found = [s[name] for s in map(curve_stats, self.curves) if s]
        return statistics.fmean(found) if found else None


def curve_stats(accuracy: Sequence[float]) -> dict[str, float]:
    """Best, last-10 mean and settled mean of one accuracy curve ({} for an empty one)."""
    if not accuracy:
        return {}
    start = SETTLED_FROM - 1 if len(accuracy) >= 2 * SETTLED_FROM else len(accuracy) // 2
    return {
        "best": max(accuracy),
        "last10": statistics.fmean(accuracy[-10:]),
        "settled": statistics.fmean(accuracy[start:]),
    }


def cell_value(run: dict[str, Any], metric: str) -> float | None:
    if metric == "target_label_accuracy":
        per_class = next(
            (
                r["per_class_accuracy"]
                for r in reversed(run["history"])
                if r.get("per_class_accuracy")
            ),
            None,
        )
        targets = run["config"].get("partition", {}).get("target_labels")
        if not per_class or not targets:
            return None
        return statistics.fmean(per_class[int(t)] for t in targets)
    return finite(run["summary"].get(metric))


def measure(cells: Sequence[Cell], numbers: Sequence[str], out: Path) -> list[Measured]:
    """Every (paper table, column, method) of `cells`, with the completed seeds under `out`."""
    found: dict[tuple[str, str, str], Measured] = {}
    for table in numbers:
        metric = str(load_table(table).get("metric", "final_accuracy"))
        for cell in cells:
            key = (table, cell.column, cell.method)
            item = found.setdefault(key, Measured(table, cell.column, cell.method, metric))
            folder = out / cell.folder
            if state_of(folder) != DONE:
                continue
            run = load_run(folder)
            value = cell_value(run, metric)
            if value is None:
                continue
            item.values.append(value)
            item.seeds.append(cell.seed)
            item.curves.append(
                [a for a in (finite(r.get("accuracy")) for r in run["history"]) if a is not None]
            )
    for item in found.values():
        try:
            entry_cmp = compare(item.numbers, item.column, item.method, item.mean_std[0] or 0.0)
        except FedshareError:
            continue
        item.paper = (entry_cmp.entry.mean, entry_cmp.entry.std)
        if item.values:
            item.comparison = entry_cmp
    return list(found.values())
