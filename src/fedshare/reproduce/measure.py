"""A table's cells as measured: each cell's completed seeds beside the paper's number.

A cell's value is its table's metric, read from each seed's run folder by `cell_value`; mean ±
sample std over the seeds, compared with the paper by `fedshare.paper.compare.compare` (within
max(3·paper std, 3) points). Beside it, per cell, the job's statistics (`stats` of its YAML,
per scale; default the curve statistics best, last-10 mean and settled mean), each a name that
`cell_value` reads from a run folder: a key of `summary.json` (`mds_std`, `wall_time_s`), a
statistic of the accuracy curve (`curve_value`: `best`, `settled`, `last5`, `min_last10`,
`absdelta_last50`, `absdelta_from10`, ...), `best_round` (the round of the best accuracy),
`target_label_accuracy`, `seconds_per_round`, `bytes_sent` (the run's bytes up + down + peer),
or else the last round's record of the key (`test_davies_bouldin`); `NAME%` is the value × 100,
`NAME/K` the value divided by the number K (`bytes_sent/1e6`: MB), `STAT@KEY` a curve statistic
of another key's per-round values (`best@personal_accuracy`: the best round of the clients' mean
personal accuracy, as the heterogeneous papers report it).
A scale's `lists` (summary keys whose value is a list per run, e.g. the chain's per-client
accuracies) are kept per seed beside the value.

The cells may also come from a stored file instead of run folders (`store` writes one from a
run folder; docs/measured/ holds those the docs' tables are generated from): JSON with the
table, scale, command and date, and per cell its seeds and per-seed values and statistics
(`stats`, one dict a seed), or, for numbers kept only as a summary over the seeds, `mean`
(optionally `std`) and `stat_means` (a statistic's mean, `{"mean", "std"}` or a `{"min",
"max"}` range); a summary may come with the per-seed values it was taken over.
"""

import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

from fedshare.errors import FedshareError
from fedshare.paper.compare import Comparison, compare, load_table
from fedshare.reproduce.jobs import DEFAULT_METRIC, Cell
from fedshare.reproduce.launch import DONE, state_of
from fedshare.results.runs import load_run
from fedshare.results.stats import finite, mean_std

SETTLED_FROM = 30
DEFAULT_STATS = ("best", "last10", "settled")
"""The statistics a cell reports unless its job names others (the curve statistics papers
differ in)."""
CURVE = re.compile(r"(?:(?P<agg>min|max|absdelta)_)?(?P<window>last|from)(?P<k>[1-9][0-9]*)")
"""A curve statistic: the mean (or min, max, mean |change between consecutive rounds|) of the
last k evaluated rounds or of those from the k-th (1-based) on."""
SCALED = re.compile(r"(?P<name>.+)/(?P<by>[0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)")
"""`NAME/K`: value NAME divided by the number K (`bytes_sent/1e6`: MB)."""
BYTES_SENT = ("bytes_up", "bytes_down", "bytes_peer")
"""The byte counts whose sum is what a run sent (`bytes_sent`): client → server, server →
client and client → client (the engine's cumulative counts)."""
CURVE_OF = re.compile(r"(?P<stat>[a-z0-9_]+)@(?P<key>.+)")
"""`STAT@KEY`: curve statistic STAT (`best`, `last5`, ...) of KEY's values over the evaluated
rounds instead of the accuracy's."""
PER_SEED = "seeds"
"""`seeds` (the metric) or `seeds:NAME`: each seed's value, listed."""

StatSummary = float | dict[str, float]
"""A stored statistic kept only over the seeds: its mean, `{"mean", "std"}`, or a range
`{"min", "max"}`."""


@dataclass
class Measured:
    """One cell (column × method) of one paper table."""

    numbers: str | None
    """The paper table; None for a check of no paper table (a job without `numbers`)."""
    column: str
    method: str
    metric: str
    values: list[float] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    stats: list[dict[str, float]] = field(default_factory=list)
    """Per seed: its statistics (the job's `stats`), where known."""
    lists: dict[str, list[list[float]]] = field(default_factory=dict)
    """Summary key → per seed its list (a scale's `lists`; [] where a run has none)."""
    comparison: Comparison | None = None
    paper: tuple[float, float] | None = None
    stored: tuple[float, float | None] | None = None
    """Mean and std over `seeds` where a stored file keeps them as a summary; they stand for
    all the seeds they were taken over, even where fewer were asked for."""
    stored_stats: dict[str, StatSummary] = field(default_factory=dict)
    """Statistics a stored file keeps only as a summary over `seeds`."""

    @property
    def n(self) -> int:
        return len(self.seeds) if self.stored is not None else len(self.values)

    @property
    def mean_std(self) -> tuple[float | None, float | None]:
        if self.stored is not None:
            return self.stored
        return mean_std(self.values)

    def stat(self, name: str) -> StatSummary | None:
        """Statistic `name` over the seeds: the stored summary, or the per-seed values' mean
        (with their sample std where there are two or more)."""
        if name in self.stored_stats:
            return self.stored_stats[name]
        mean, std = mean_std(s[name] for s in self.stats if name in s)
        if mean is None:
            return None
        return mean if std is None else {"mean": mean, "std": std}

    def per_seed(self, name: str | None = None) -> list[float | None]:
        """Each seed's metric (`name` None) or statistic `name`."""
        if name is None:
            return list(self.values)
        return [s.get(name) for s in self.stats]

    def element_stats(self, name: str) -> list[tuple[float | None, float | None, int]]:
        """Mean, sample std and number of seeds of each element of list `name`."""
        runs = self.lists.get(name, [])
        width = max((len(r) for r in runs), default=0)
        found = [[r[k] for r in runs if k < len(r)] for k in range(width)]
        return [(*mean_std(values), len(values)) for values in found]


def curve_value(accuracy: Sequence[float], name: str) -> float | None:
    """Statistic `name` of one accuracy curve (one value per evaluated round): `best`,
    `settled` (the mean from round 30 on, or over the second half of a run shorter than 60
    rounds) or a `CURVE` name; None for an empty window or a name that is none of these."""
    if not accuracy:
        return None
    if name == "best":
        return max(accuracy)
    if name == "settled":
        start = SETTLED_FROM - 1 if len(accuracy) >= 2 * SETTLED_FROM else len(accuracy) // 2
        return statistics.fmean(accuracy[start:])
    match = CURVE.fullmatch(name)
    if match is None:
        return None
    k = int(match["k"])
    window = list(accuracy[-k:] if match["window"] == "last" else accuracy[k - 1 :])
    if match["agg"] == "absdelta":
        window = [abs(b - a) for a, b in pairwise(window)]
    if not window:
        return None
    return {"min": min, "max": max}.get(match["agg"] or "", statistics.fmean)(window)


def is_curve(name: str) -> bool:
    return name in ("best", "settled") or CURVE.fullmatch(name) is not None


def cell_value(run: dict[str, Any], name: str) -> float | None:
    """Value `name` of one run (a metric or a statistic; the module's docstring)."""
    if name.endswith("%"):
        value = cell_value(run, name[:-1])
        return None if value is None else 100 * value
    scaled = SCALED.fullmatch(name)
    if scaled is not None:
        value = cell_value(run, scaled["name"])
        return None if value is None else value / float(scaled["by"])
    if name == "bytes_sent":
        return bytes_sent(run["summary"])
    history = run["history"]
    if name == "target_label_accuracy":
        per_class = next(
            (r["per_class_accuracy"] for r in reversed(history) if r.get("per_class_accuracy")),
            None,
        )
        targets = run["config"].get("partition", {}).get("target_labels")
        if not per_class or not targets:
            return None
        return statistics.fmean(per_class[int(t)] for t in targets)
    if name == "best_round":
        scored = [
            (a, int(r["round"])) for r in history if (a := finite(r.get("accuracy"))) is not None
        ]
        return None if not scored else float(max(scored, key=lambda p: (p[0], -p[1]))[1])
    if name == "seconds_per_round":
        last = next((r for r in reversed(history) if r.get("wall_time_s") is not None), None)
        return None if last is None else float(last["wall_time_s"]) / int(last["round"])
    if name in run["summary"]:
        return finite(run["summary"][name])
    of = CURVE_OF.fullmatch(name)
    if of is not None and is_curve(of["stat"]):
        values = [finite(r.get(of["key"])) for r in history]
        return curve_value([v for v in values if v is not None], of["stat"])
    if is_curve(name):
        accuracy = [finite(r.get("accuracy")) for r in history]
        return curve_value([a for a in accuracy if a is not None], name)
    return finite(next((r[name] for r in reversed(history) if name in r), None))


def bytes_sent(record: dict[str, Any]) -> float | None:
    """The bytes a run had sent by `record` (its summary, or a round's record): up + down +
    peer; None without a byte count."""
    if "bytes_up" not in record:
        return None
    return float(sum(record.get(k) or 0 for k in BYTES_SENT))


def _run_list(run: dict[str, Any], name: str) -> list[float]:
    value = run["summary"].get(name)
    return [float(v) for v in value] if isinstance(value, list) else []


def measure(
    cells: Sequence[Cell],
    numbers: Sequence[str],
    out: Path,
    stats: Sequence[str] = DEFAULT_STATS,
    metric: str | None = None,
    lists: Sequence[str] = (),
) -> list[Measured]:
    """Every (paper table, column, method) of `cells`, with the completed seeds under `out`
    (a folder of run folders, or a stored file: `load_stored`) and, from run folders, their
    `stats` (a stored file holds its own) and the summary lists named in `lists`; `metric`
    replaces the tables' own (the cells are then a check's, with no paper number: the paper's
    is of its own metric). No `numbers`: a check of no paper table (default metric
    `final_accuracy`)."""
    stored = load_stored(out)["cells"] if out.is_file() else None
    found: dict[tuple[str | None, str, str], Measured] = {}
    tables: list[str | None] = [*numbers] if numbers else [None]
    for table in tables:
        name = metric or str(
            load_table(table).get("metric", DEFAULT_METRIC) if table else DEFAULT_METRIC
        )
        for cell in cells:
            key = (table, cell.column, cell.method)
            item = found.setdefault(key, Measured(table, cell.column, cell.method, name))
            if stored is not None:
                _add_stored(item, cell.seed, stored)
                continue
            folder = out / cell.folder
            if state_of(folder) != DONE:
                continue
            run = load_run(folder)
            value = cell_value(run, name)
            if value is None:
                continue
            item.values.append(value)
            item.seeds.append(cell.seed)
            found_stats = {n: cell_value(run, n) for n in map(_read_name, stats) if n}
            item.stats.append({n: v for n, v in found_stats.items() if v is not None})
            for list_name in lists:
                item.lists.setdefault(list_name, []).append(_run_list(run, list_name))
    for item in found.values():
        if item.numbers is None or item.metric != load_table(item.numbers).get(
            "metric", DEFAULT_METRIC
        ):
            continue
        try:
            entry_cmp = compare(item.numbers, item.column, item.method, item.mean_std[0] or 0.0)
        except FedshareError:
            continue
        item.paper = (entry_cmp.entry.mean, entry_cmp.entry.std)
        if item.n:
            item.comparison = entry_cmp
    return list(found.values())


def _read_name(stat: str) -> str:
    """The value a statistic reads per seed: NAME of `seeds:NAME`, none for `seeds`."""
    return stat.partition(":")[2] if stat.startswith(PER_SEED) else stat


def _per_seed(cell: dict[str, Any]) -> list[dict[str, float]]:
    """A stored cell's per-seed statistics."""
    return list(cell.get("stats", []))


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
        and len(c["values"] if "values" in c else c["seeds"]) == len(c["seeds"])
        and len(_per_seed(c)) in (0, len(c["seeds"]))
        and isinstance(c.get("stat_means", {}), dict)
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
    """Add `seed`'s stored result of `item`'s cell (per-seed values, or a summary over all
    the cell's seeds, whichever were asked for)."""
    for entry in stored:
        if (entry["numbers"], entry["column"], entry["method"]) != (
            item.numbers,
            item.column,
            item.method,
        ) or seed not in entry["seeds"]:
            continue
        item.stored_stats = dict(entry.get("stat_means", {}))
        if "mean" in entry:
            item.stored = (float(entry["mean"]), entry.get("std"))
            item.seeds = list(entry["seeds"])
            item.values = [float(v) for v in entry.get("values", [])]
            item.stats = _per_seed(entry)
            continue
        at = entry["seeds"].index(seed)
        item.seeds.append(seed)
        item.values.append(float(entry["values"][at]))
        if _per_seed(entry):
            item.stats.append(dict(_per_seed(entry)[at]))
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
                {"stats": [{k: round(v, 4) for k, v in c.items()} for c in i.stats]}
                if any(i.stats)
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
        if i.values and i.stored is None
    ]
