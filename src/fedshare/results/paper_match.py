"""A paper's table beside a report: loading it for a report, and finding each row's cell.

The tables are `fedshare/paper/tables/*.json` (see `fedshare.paper.compare`) or JSON files in
the same format; how a row finds its cell is described in `load_paper`.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedshare.errors import FedshareError
from fedshare.paper.compare import (
    PaperEntry,
    available_tables,
    entries,
    load_table,
    overrides_in,
)
from fedshare.results.grouping import ABSENT, Group, listed, run_value
from fedshare.results.runs import read_json
from fedshare.results.stats import finite


@dataclass(frozen=True)
class PaperTable:
    """A paper table restricted to the columns (presets) a report may match."""

    name: str
    metric: str
    columns: tuple[str, ...]
    entries: tuple[PaperEntry, ...]
    methods: Mapping[str, tuple[str, ...]]
    """method → its overrides (`strategy=...`, `strategy.<key>=<value>`)."""


@dataclass(frozen=True)
class PaperCell:
    """A row's cell of a paper table, with the row's measured mean of the table's metric."""

    entry: PaperEntry
    metric: str
    measured: float | None

    @property
    def delta(self) -> float | None:
        return None if self.measured is None else self.measured - self.entry.mean


def _table_source(table: str) -> tuple[str, dict[str, Any], list[PaperEntry]]:
    """(name, raw table, entries) of a JSON file or of a table of `fedshare/paper/tables/`."""
    path = Path(table)
    if path.suffix == ".json" and path.is_file():
        raw = read_json(path)
        name = path.stem
        try:
            rows = [PaperEntry(name, **e) for e in raw["entries"]]
        except (KeyError, TypeError) as err:
            raise FedshareError(f"{table} is not a paper table ({err})") from None
        return name, raw, rows
    name = path.name.removesuffix(".json")
    if name not in available_tables():
        raise FedshareError(
            f"no paper table {table!r}; give a JSON file or one of: {', '.join(available_tables())}"
        )
    return name, load_table(name), entries(name)


def load_paper(table: str, column: str | None = None) -> PaperTable:
    """A paper table for a report: `table` is a name in `fedshare/paper/tables/` (`flea`,
    `rebafl_table1.json`) or a path to a JSON file in the same format.

    A cell is (column, method); a column is an experiment preset, possibly followed by
    overrides (`xormixfl/table2 partition.target_labels=[0]`). `column` picks the columns: the
    one equal to it, else those containing it; all when None. The picked columns must share one
    preset (the run folders do not record which preset they came from, so that part is the
    user's word); their overrides are checked against each row's config.yaml."""
    name, raw, rows = _table_source(table)
    columns = list(dict.fromkeys(e.preset for e in rows))
    if column is not None:
        picked = [c for c in columns if c == column] or [c for c in columns if column in c]
        if not picked:
            raise FedshareError(
                f"paper table {name!r} has no column {column!r}; columns: {listed(columns, 20)}"
            )
        columns = picked
    presets = sorted({c.split()[0] for c in columns})
    if len(presets) > 1:
        raise FedshareError(
            f"paper table {name!r} has several columns; name one with --paper-column: "
            f"{listed(presets, 20)}"
        )
    methods: dict[str, tuple[str, ...]] = {}
    for method in dict.fromkeys(e.method for e in rows):
        found = overrides_in(raw, method)
        if found is not None:
            methods[method] = found
    chosen = tuple(e for e in rows if e.preset in columns)
    return PaperTable(name, str(raw.get("metric", "")), tuple(columns), chosen, methods)


def _parse(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if finite(a) is not None and finite(b) is not None:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _agrees(group: Group, overrides: Iterable[str]) -> bool:
    """Whether every run of `group` has every `key=value` of `overrides`."""
    for item in overrides:
        key, _, text = item.partition("=")
        want = _parse(text)
        for run in group.runs:
            have = run_value(run, key) if key != "strategy" else group.strategy
            if have is ABSENT or not _same(have, want):
                return False
    return True


def paper_cell(group: Group, paper: PaperTable) -> PaperEntry | None:
    """The entry of `paper` for `group`: the one column whose overrides the group's config
    has, and there the method whose overrides it has (the most specific one wins). None if no
    cell or several cells fit."""
    columns = [c for c in paper.columns if _agrees(group, c.split()[1:])]
    if len(columns) != 1:
        return None
    fits = [
        (len(paper.methods[e.method]), e)
        for e in paper.entries
        if e.preset == columns[0]
        and e.method in paper.methods
        and _agrees(group, paper.methods[e.method])
    ]
    if not fits:
        return None
    best = max(n for n, _ in fits)
    top = [e for n, e in fits if n == best]
    return top[0] if len(top) == 1 else None
