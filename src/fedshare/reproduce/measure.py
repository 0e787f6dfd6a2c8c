"""A table's cells as measured: each cell's completed seeds beside the paper's number.

A cell's value is its table's metric from each seed's `summary.json` (`target_label_accuracy`,
which the summary lacks, is the mean of the final round's per-class accuracy over the
partition's target labels); mean ± sample std over the seeds, compared with the paper by
`fedshare.paper.compare.compare` (within max(3·paper std, 3) points). Beside it, per cell, the
curve statistics papers differ in: best, last-10 mean and the settled mean (from round 30 on,
or over the second half of a run shorter than 60 rounds), each averaged over the seeds.
A scale's `lists` (summary keys whose value is a list per run, e.g. the chain's per-client
accuracies) are kept per seed beside the value.

The cells may also come from a stored file instead of run folders (`store` writes one from a
run folder; docs/measured/ holds those the docs' tables are generated from): JSON with the
table, scale, command and date, and per cell its seeds and per-seed values (or, for numbers
kept only as mean ± std, those two) and optionally per-seed curve statistics.
"""

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

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
    curves: list[dict[str, float]] = field(default_factory=list)
    """Per seed: its curve statistics (`curve_stats`), where known."""
    lists: dict[str, list[list[float]]] = field(default_factory=dict)
    """Summary key → per seed its list (a scale's `lists`; [] where a run has none)."""
    comparison: Comparison | None = None
    paper: tuple[float, float] | None = None
    stored: tuple[float, float | None] | None = None
    """Mean and std over `seeds` where a stored file keeps only those (no per-seed values);
    they stand for all the seeds they were taken over, even where fewer were asked for."""

    @property
    def n(self) -> int:
        return len(self.values) or (len(self.seeds) if self.stored else 0)

    @property
    def mean_std(self) -> tuple[float | None, float | None]:
        if not self.values and self.stored is not None:
            return self.stored
        return mean_std(self.values)

    def element_stats(self, name: str) -> list[tuple[float | None, float | None, int]]:
        """Mean, sample std and number of seeds of each element of list `name`."""
        runs = self.lists.get(name, [])
        width = max((len(r) for r in runs), default=0)
        found = [[r[k] for r in runs if k < len(r)] for k in range(width)]
        return [(*mean_std(values), len(values)) for values in found]

    def curve_stat(self, name: str) -> float | None:
        found = [s[name] for s in self.curves if name in s]
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


def _run_list(run: dict[str, Any], name: str) -> list[float]:
    value = run["summary"].get(name)
    return [float(v) for v in value] if isinstance(value, list) else []


def measure(
    cells: Sequence[Cell], numbers: Sequence[str], out: Path, lists: Sequence[str] = ()
) -> list[Measured]:
    """Every (paper table, column, method) of `cells`, with the completed seeds under `out`
    (a folder of run folders, or a stored file: `load_stored`), and the summary lists named
    in `lists`."""
    stored = load_stored(out)["cells"] if out.is_file() else None
    found: dict[tuple[str, str, str], Measured] = {}
    for table in numbers:
        metric = str(load_table(table).get("metric", "final_accuracy"))
        for cell in cells:
            key = (table, cell.column, cell.method)
            item = found.setdefault(key, Measured(table, cell.column, cell.method, metric))
            if stored is not None:
                _add_stored(item, cell.seed, stored)
                continue
            folder = out / cell.folder
            if state_of(folder) != DONE:
                continue
            run = load_run(folder)
            value = cell_value(run, metric)
            if value is None:
                continue
            item.values.append(value)
            item.seeds.append(cell.seed)
            accuracy = [finite(r.get("accuracy")) for r in run["history"]]
            item.curves.append(curve_stats([a for a in accuracy if a is not None]))
            for name in lists:
                item.lists.setdefault(name, []).append(_run_list(run, name))
    for item in found.values():
        try:
            entry_cmp = compare(item.numbers, item.column, item.method, item.mean_std[0] or 0.0)
        except FedshareError:
            continue
        item.paper = (entry_cmp.entry.mean, entry_cmp.entry.std)
        if item.n:
            item.comparison = entry_cmp
    return list(found.values())


def load_stored(path: Path) -> dict[str, Any]:
    """A stored file of measured cells (`store`; docs/reproduce.md, "Stored results")."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise FedshareError(f"cannot read {path}: {err}") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list) or not all(
        isinstance(c, dict)
        and {"numbers", "column", "method", "seeds"} <= c.keys()
        and ("values" in c or "mean" in c)
        and all(len(c.get(k, c["seeds"])) == len(c["seeds"]) for k in ("values", "curves"))
        and all(len(v) == len(c["seeds"]) for v in c.get("lists", {}).values())
        for c in cells
    ):
        raise FedshareError(
            f"{path} is not a stored file of measured cells (a 'cells' list, each with "
            f"numbers, column, method, seeds and values (one a seed) or mean)"
        )
    return cast(dict[str, Any], data)


def write_stored(path: Path, data: dict[str, Any]) -> None:
    """Write a stored file: its header keys, then one line a cell (small diffs in git)."""
    head = json.dumps({k: v for k, v in data.items() if k != "cells"}, indent=1, ensure_ascii=False)
    cells = ",\n  ".join(json.dumps(c, ensure_ascii=False) for c in data["cells"])
    path.write_text(f'{head.rstrip("}").rstrip()},\n "cells": [\n  {cells}\n ]\n}}\n')


def _add_stored(item: Measured, seed: int, stored: Sequence[dict[str, Any]]) -> None:
    """Add `seed`'s stored result of `item`'s cell (per-seed values, or mean ± std)."""
    for entry in stored:
        if (entry["numbers"], entry["column"], entry["method"]) != (
            item.numbers,
            item.column,
            item.method,
        ) or seed not in entry["seeds"]:
            continue
        at = entry["seeds"].index(seed)
        if "values" not in entry:  # a mean over all its seeds, whichever were asked for
            item.stored = (float(entry["mean"]), entry.get("std"))
            item.seeds = list(entry["seeds"])
            continue
        item.seeds.append(seed)
        item.values.append(float(entry["values"][at]))
        if entry.get("curves"):
            item.curves.append(dict(entry["curves"][at]))
        for name, runs in entry.get("lists", {}).items():
            item.lists.setdefault(name, []).append([float(v) for v in runs[at]])


def stored_cells(items: Sequence[Measured]) -> list[dict[str, Any]]:
    """`measure`'s cells as a stored file's `cells` (the measured ones only)."""
    return [
        {
            "numbers": i.numbers,
            "column": i.column,
            "method": i.method,
            "seeds": i.seeds,
            "values": [round(v, 4) for v in i.values],
            **(
                {"curves": [{k: round(v, 4) for k, v in c.items()} for c in i.curves]}
                if any(i.curves)
                else {}
            ),
            **(
                {
                    "lists": {
                        k: [[round(v, 4) for v in r] for r in runs] for k, runs in i.lists.items()
                    }
                }
                if i.lists
                else {}
            ),
        }
        for i in items
        if i.values
    ]
