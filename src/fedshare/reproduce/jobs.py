"""A paper table's jobs: the runs that fill its cells, read from data beside the tables.

`fedshare/paper/jobs/<paper>/<table>.yaml` names the paper tables it fills (`numbers`, files of
`fedshare/paper/tables/`), and for each scale (`paper`, `cpu` where one is defined, `preset`:
the commands of the CPU recipe `experiment=<paper>/cpu`, and named small checks such as FLea's
`digits`) the seeds, the overrides every cell gets, optionally the
columns and methods that scale runs, methods of its own that are no row of the table
(`extra_methods`, a check's), per-column overrides (a stand-in drops the preset with
`experiment=null` and brings its own setting) and per-method ones, the files each column needs
under the data root, the estimated time of a cell on the project's 2-core CPU, the per-cell
statistics `report` prints beside the metric (`stats`, top level or per scale; a named check may
read another `metric` than its tables') and, for `report`, optionally a `layout` (the same cells
as rows × a parameter's values, e.g. ε), `lists` (summary keys holding a list per run, e.g.
per-client accuracies) and `column_means` (each row's mean over the columns), and the
training recipe its methods share (`recipe`, top level or per scale; `recipe_exceptions`: the
methods whose paper fixes another, and why), printed in the report's caption. A job without
`numbers` is a set of checks of no paper table (`baselines/checks`): each scale names its own
columns and methods (`extra_methods`) and its cells have no paper number. A column is
a table's `preset` (`xormixfl/table2 partition.target_labels=[0]`), a method one of the
table's `methods` with its overrides (`fedshare.paper.compare.overrides_in`), so a cell runs as

    python -m fedshare.run experiment=<preset> <column overrides> <scale overrides>
        <column's scale overrides> <method overrides> <method's scale overrides> seed=<seed>

with later overrides of the same key replacing earlier ones (docs/reproduce.md).
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fedshare.errors import FedshareError
from fedshare.paper.compare import entries, load_table, overrides_in
from fedshare.results.grouping import listed

NO_PRESET = "experiment=null"
"""A stand-in's column override that drops the paper's preset (the cell runs without one)."""
DEFAULT_METRIC = "final_accuracy"
"""A table's metric where its JSON names none, and a check's of no paper table."""


@dataclass(frozen=True)
class Cell:
    """One run of a table: a column × method × seed at one scale."""

    table: str
    column: str
    method: str
    seed: int
    overrides: tuple[str, ...]
    """Everything `python -m fedshare.run` gets for it, `seed=` included."""

    @property
    def folder(self) -> str:
        """Its run folder, relative to the table's output folder."""
        return f"{slug(self.column)}/{self.method}/seed{self.seed}"


@dataclass(frozen=True)
class Layout:
    """A scale's cells laid out by a parameter: `rows` name → one method per value of
    `columns` (None: no cell), e.g. DP rows × ε."""

    name: str
    columns: tuple[str, ...]
    rows: Mapping[str, tuple[str | None, ...]]


@dataclass(frozen=True)
class Scale:
    name: str
    seeds: tuple[int, ...]
    overrides: tuple[str, ...]
    columns: Mapping[str, tuple[str, ...]] | None
    """Column → its extra overrides at this scale; None: every column of the table, none extra."""
    methods: tuple[str, ...] | None
    method_overrides: Mapping[str, tuple[str, ...]]
    """Method → overrides it gets at this scale on top of the table's (e.g. a shorter warm-up)."""
    extra_methods: Mapping[str, tuple[str, ...]]
    """Methods that are no row of the paper's table (a named check's own, e.g. ReBaFL Fig. 1's
    FedAvg-FT) → their overrides; their cells have no paper number."""
    data: Mapping[str, tuple[str, ...]]
    cost_s: Mapping[str, float]
    note: str
    metric: str | None
    """The cell value a named check reads instead of its tables' metric (any name
    `fedshare.reproduce.measure.cell_value` reads, e.g. `last5`); None: the tables'."""
    stats: tuple[str, ...] | None
    """The per-cell statistics `report` prints beside the metric (`fedshare.reproduce.measure`:
    summary keys, curve statistics, ...); None: the default curve statistics."""
    layout: Layout | None = None
    lists: tuple[str, ...] = ()
    """Summary keys whose value is a list per run (`report` prints it element by element)."""
    column_means: bool = False
    """`report` adds each row's mean over the columns beside the paper's (`render.column_means`)."""
    recipe: str = ""
    """The training recipe every method of a column runs under (optimizer, lr, momentum, local
    epochs, batch size), in words: the job's `recipe` unless the scale states its own."""
    recipe_exceptions: Mapping[str, str] = field(default_factory=dict)
    """Method → why it trains under another recipe than the column's other methods (where its
    paper fixes one); every other method resolves the same recipe (a test checks it)."""


@dataclass(frozen=True)
class Job:
    name: str
    numbers: tuple[str, ...]
    """Paper tables (`fedshare/paper/tables/<name>.json`) the cells are compared with; the
    first one's columns and methods make the job's cells. Empty: checks of no paper table,
    whose scales name their columns and methods."""
    description: str
    scales: Mapping[str, Scale]

    @property
    def columns(self) -> tuple[str, ...]:
        if not self.numbers:
            return ()
        return tuple(dict.fromkeys(e.preset for e in entries(self.numbers[0])))

    @property
    def methods(self) -> dict[str, tuple[str, ...] | None]:
        """Method → its overrides (None: the library does not run it), in table order."""
        if not self.numbers:
            return {}
        table = load_table(self.numbers[0])
        names = dict.fromkeys(e.method for e in entries(self.numbers[0]))
        return {m: overrides_in(table, m) for m in names}

    @property
    def metric(self) -> str:
        if not self.numbers:
            return DEFAULT_METRIC
        return str(load_table(self.numbers[0]).get("metric", DEFAULT_METRIC))

    def scale(self, name: str) -> Scale:
        if name not in self.scales:
            raise FedshareError(
                f"{self.name} has no scale {name!r}; its scales: {', '.join(self.scales)}"
            )
        return self.scales[name]


def slug(text: str) -> str:
    """A folder name of a column: `table2-partition.target_labels-0-2`."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", text.split("/", 1)[-1]).strip("-") or "column"


def _key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def merged(*groups: Iterable[str]) -> tuple[str, ...]:
    """Overrides in order, a later one of the same key replacing an earlier one."""
    found: dict[str, str] = {}
    for group in groups:
        for item in group:
            found.pop(_key(item), None)
            found[_key(item)] = item
    return tuple(found.values())


def column_overrides(column: str) -> list[str]:
    """`experiment=<preset>` and the column's own overrides."""
    preset, *rest = column.split()
    return [f"experiment={preset}", *rest]


def _folder() -> Any:
    return resources.files("fedshare.paper") / "jobs"


def available_jobs() -> list[str]:
    found = []
    for paper in sorted(_folder().iterdir(), key=lambda p: p.name):
        if paper.is_dir():
            found += [
                f"{paper.name}/{f.name.removesuffix('.yaml')}"
                for f in sorted(paper.iterdir(), key=lambda p: p.name)
                if f.name.endswith(".yaml")
            ]
    return found


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if value else ()


def _layout(where: str, raw: Mapping[str, Any] | None) -> Layout | None:
    if raw is None:
        return None
    columns = tuple(str(c) for c in raw.get("columns") or ())
    rows = {str(r): tuple(m) for r, m in (raw.get("rows") or {}).items()}
    if not columns or not rows or any(len(m) != len(columns) for m in rows.values()):
        raise FedshareError(
            f"{where}: a layout needs 'columns' (the parameter's values) and 'rows', each a "
            f"list of one method (or null) per column"
        )
    return Layout(str(raw.get("name", "")), columns, rows)


def _scale(name: str, raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> Scale:
    columns = raw.get("columns")
    if isinstance(columns, list):
        columns = {c: () for c in columns}
    return Scale(
        name=name,
        seeds=tuple(int(s) for s in raw.get("seeds", defaults.get("seeds", [0]))),
        overrides=_tuple(raw.get("overrides")),
        columns=None if columns is None else {c: _tuple(o) for c, o in columns.items()},
        methods=_tuple(raw.get("methods")) or None,
        method_overrides={m: _tuple(o) for m, o in (raw.get("method_overrides") or {}).items()},
        extra_methods={m: _tuple(o) for m, o in (raw.get("extra_methods") or {}).items()},
        data={k: _tuple([v] if isinstance(v, str) else v) for k, v in raw.get("data", {}).items()}
        or {
            k: _tuple([v] if isinstance(v, str) else v) for k, v in defaults.get("data", {}).items()
        },
        cost_s={str(k): float(v) for k, v in raw.get("cost_s", {}).items()},
        note=str(raw.get("note", "")),
        metric=raw.get("metric"),
        stats=_tuple(raw.get("stats", defaults.get("stats"))) or None,
        layout=_layout(f"scale {name}", raw.get("layout")),
        lists=_tuple(raw.get("lists")),
        column_means=bool(raw.get("column_means", False)),
        recipe=str(raw.get("recipe", defaults.get("recipe", ""))),
        recipe_exceptions={str(m): str(w) for m, w in (raw.get("recipe_exceptions") or {}).items()},
    )


@cache
def load_job(name: str) -> Job:
    """The job of table `name` (`xormixfl/table2`), or of a job file (`path/to/job.yaml`,
    whose `numbers` may be JSON tables beside it)."""
    path = _folder() / f"{name}.yaml"
    here = None
    if name.endswith(".yaml") and Path(name).is_file():
        path = here = Path(name)
    elif "/" not in name or not path.is_file():
        raise FedshareError(
            f"no reproducible table {name!r}; tables: {listed(available_jobs(), 40)}"
        )
    raw = yaml.safe_load(path.read_text())
    scales = raw.get("scales") or {}
    numbers = [
        str(here.parent / n) if here is not None and n.endswith(".json") else n
        for n in raw.get("numbers") or ()
    ]
    own = [s for s, spec in scales.items() if not numbers and not (spec or {}).get("columns")]
    if own:
        raise FedshareError(
            f"{name}: a job without paper tables ('numbers') needs each scale's own 'columns'; "
            f"scales without: {', '.join(own)}"
        )
    return Job(
        name=name,
        numbers=tuple(numbers),
        description=str(raw.get("description", "")),
        scales={s: _scale(s, spec or {}, raw) for s, spec in scales.items()},
    )


def _match(patterns: Mapping[str, Any], column: str, default: Any) -> Any:
    """The value of the longest key of `patterns` that occurs in `column` (`*`: any)."""
    keys = [k for k in patterns if k != "*" and k in column]
    if keys:
        return patterns[max(keys, key=len)]
    return patterns.get("*", default)


def needed_data(job: Job, scale: str, column: str) -> tuple[str, ...]:
    """The paths (under the data root) that a column's runs read."""
    return _match(job.scale(scale).data, column, ())


def missing_data(job: Job, scale: str, column: str, root: Path | None) -> list[str]:
    if root is None:
        return list(needed_data(job, scale, column))
    return [p for p in needed_data(job, scale, column) if not (root / p).exists()]


def cost_s(job: Job, scale: str, column: str) -> float | None:
    return _match(job.scale(scale).cost_s, column, None)


def _pick(kind: str, wanted: Sequence[str] | None, known: Sequence[str]) -> list[str]:
    if not wanted:
        return list(known)
    picked = []
    for want in wanted:
        hits = [k for k in known if k == want] or [k for k in known if want in k]
        if not hits:
            raise FedshareError(f"no {kind} {want!r}; {kind}s: {listed(list(known), 30)}")
        picked += [h for h in hits if h not in picked]
    return picked


def scale_columns(job: Job, scale: str) -> list[str]:
    columns = job.scale(scale).columns
    return list(job.columns if columns is None else columns)


def scale_methods(job: Job, scale: str) -> dict[str, tuple[str, ...] | None]:
    """Method → overrides at `scale`: the table's methods and the scale's extra ones."""
    return {**job.methods, **job.scale(scale).extra_methods}


def runnable_methods(job: Job, scale: str) -> list[str]:
    """The methods a scale runs: its list, or every method of the table the library runs and
    the scale's extra ones."""
    methods = scale_methods(job, scale)
    chosen = job.scale(scale).methods or [m for m, o in methods.items() if o is not None]
    unknown = [m for m in chosen if m not in methods or methods[m] is None]
    if unknown:
        raise FedshareError(f"{job.name}: methods {unknown} are not runnable rows of the table")
    return list(chosen)


def cells(
    name: str,
    scale: str = "paper",
    columns: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[Cell]:
    """The cells of table `name` at `scale`; `columns`/`methods` pick (a unique part of a
    name is enough), `seeds` replace the scale's. Seed by seed, so a stopped run has every
    cell at the first seeds."""
    job = load_job(name)
    spec = job.scale(scale)
    picked_columns = _pick("column", columns, scale_columns(job, scale))
    picked_methods = _pick("method", methods, runnable_methods(job, scale))
    in_table = {(e.preset, e.method) for e in entries(job.numbers[0])} if job.numbers else set()
    in_table |= {(c, m) for c in picked_columns for m in spec.extra_methods}
    method_overrides = scale_methods(job, scale)
    found = []
    for seed in seeds if seeds is not None else spec.seeds:
        for column in picked_columns:
            extra = spec.columns.get(column, ()) if spec.columns is not None else ()
            for method in picked_methods:
                if (column, method) not in in_table:
                    continue
                overrides = merged(
                    column_overrides(column),
                    spec.overrides,
                    extra,
                    method_overrides[method] or (),
                    spec.method_overrides.get(method, ()),
                    [f"seed={seed}"],
                )
                overrides = tuple(o for o in overrides if o != NO_PRESET)
                found.append(Cell(name, column, method, int(seed), overrides))
    if not found:
        raise FedshareError(
            f"{name} at scale {scale} has no cell of methods {picked_methods} in columns "
            f"{listed(picked_columns, 5)}"
        )
    return found
