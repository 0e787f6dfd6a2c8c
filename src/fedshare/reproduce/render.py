"""A measured table as the paper prints it: Markdown, CSV and a measured-vs-paper figure."""

import csv
import statistics
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fedshare.paper.compare import load_table
from fedshare.reproduce.jobs import Layout
from fedshare.reproduce.measure import (
    CURVE,
    CURVE_OF,
    DEFAULT_STATS,
    PER_SEED,
    SCALED,
    Measured,
    StatSummary,
)
from fedshare.results.grouping import MISSING
from fedshare.results.stats import mean_std
from fedshare.results.writers import markdown_table

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LABELS = {
    "last10": "last-10",
    "seconds_per_round": "s / round",
    "wall_time_s": "s / run",
    "best_round": "best round",
    "cpu_time_s": "CPU s / run",
    "bytes_sent": "bytes sent",
    "bytes_sent/1e6": "MB sent",
    PER_SEED: "per seed",
}
WHOLE = {"best_round"}
"""Statistics listed per seed as whole numbers (a round)."""
CSV_HEADERS = (
    "paper_table",
    "column",
    "method",
    "metric",
    "n",
    "seeds",
    "measured_mean",
    "measured_std",
    "paper_mean",
    "paper_std",
    "delta",
    "tolerance",
    "within",
)


def method_name(numbers: str | None, method: str) -> str:
    """The row's name as the paper prints it, where the table records one."""
    if numbers is None:
        return method
    spec = (load_table(numbers).get("methods") or {}).get(method)
    return spec if isinstance(spec, str) else method


def column_names(columns: Sequence[str]) -> dict[str, str]:
    """Columns without what they share: the preset if all share one, else the paper prefix."""
    presets = {c.split()[0] for c in columns}
    if len(presets) == 1 and all(len(c.split()) > 1 for c in columns):
        return {c: " ".join(c.split()[1:]) for c in columns}
    return {c: c.split("/", 1)[-1] for c in columns}


def _num(value: float | None, digits: int = 2, sign: bool = False) -> str:
    if value is None:
        return MISSING
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def measured_text(item: Measured) -> str:
    """`mean ± std (n)`, or `mean (1)` for one seed."""
    return _spread(*item.mean_std, item.n)


def stat_label(name: str) -> str:
    """A statistic's column header: `min_last10` → `min last-10`, `absdelta_from10` → `mean
    |Δ| from round 10`, `seeds:NAME` → `NAME per seed`, `NAME%` → `NAME %`, `NAME/K` → `NAME /
    K` (`bytes_sent/1e6` → `MB sent`)."""
    if name in LABELS:
        return LABELS[name]
    if name.endswith("%"):
        return f"{stat_label(name[:-1])} %"
    if name.startswith(f"{PER_SEED}:"):
        return f"{stat_label(name.partition(':')[2])} per seed"
    scaled = SCALED.fullmatch(name)
    if scaled is not None:
        return f"{stat_label(scaled['name'])} / {scaled['by']}"
    of = CURVE_OF.fullmatch(name)
    if of is not None:
        return f"{stat_label(of['stat'])} {of['key']}"
    match = CURVE.fullmatch(name)
    if match is None:
        return name
    window = f"last-{match['k']}" if match["window"] == "last" else f"from round {match['k']}"
    agg = {"absdelta": "mean \\|Δ\\|", None: "mean" if match["window"] == "from" else ""}
    return f"{agg.get(match['agg'], match['agg'])} {window}".strip()


def summary_text(value: StatSummary | None) -> str:
    """A statistic over seeds: `mean`, `mean ± std` or a range `min–max`."""
    if value is None:
        return MISSING
    if not isinstance(value, dict):
        return _num(value)
    if "min" in value:
        return f"{_num(value['min'])}–{_num(value['max'])}"
    std = value.get("std")
    return _num(value["mean"]) + ("" if std is None else f" ± {std:.2f}")


def stat_text(item: Measured, name: str) -> str:
    """A cell's statistic `name` as `summary_text`, or each seed's value (`seeds[:NAME]`;
    those of `WHOLE` as whole numbers)."""
    if name == PER_SEED or name.startswith(f"{PER_SEED}:"):
        read = name.partition(":")[2]
        values = item.per_seed(read or None)
        digits = 0 if read in WHOLE else 2
        return " / ".join(_num(v, digits) for v in values) if values else MISSING
    return summary_text(item.stat(name))


def within_text(item: Measured) -> str:
    if item.comparison is None:
        return MISSING
    return "yes" if item.comparison.ok else "no"


def pivot(items: Sequence[Measured], check: bool = False) -> tuple[list[str], list[list[str]]]:
    """Methods × columns as the paper prints them; a cell: `measured (paper) ✓/✗`, or, for a
    check's cells (`check`: none has a paper number), `mean ± std (n)`."""
    columns = list(dict.fromkeys(i.column for i in items))
    names = column_names(columns)
    methods = list(dict.fromkeys(i.method for i in items))
    found = {(i.method, i.column): i for i in items}
    rows = []
    for method in methods:
        line = [method_name(items[0].numbers, method)]
        for column in columns:
            item = found.get((method, column))
            if item is None:
                line.append("")
                continue
            if check:
                line.append(measured_text(item))
                continue
            mean, _ = item.mean_std
            paper = MISSING if item.paper is None else f"{item.paper[0]:.2f}"
            mark = {"yes": " ✓", "no": " ✗"}.get(within_text(item), "")
            line.append(f"{_num(mean)} ({paper}){mark}")
        rows.append(line)
    return ["method", *(names[c] for c in columns)], rows


def long_rows(
    items: Sequence[Measured], stats: Sequence[str] = DEFAULT_STATS, check: bool = False
) -> tuple[list[str], list[list[str]]]:
    """One line per cell: measured mean ± std (n) | paper | Δ | within | the statistics (for
    a check's cells, `check`: measured | the statistics)."""
    names = column_names(list(dict.fromkeys(i.column for i in items)))
    headers = ["column", "method", "measured"]
    headers += [] if check else ["paper", "Δ", "within max(3·std, 3)"]
    headers += [stat_label(k) for k in stats]
    rows = []
    for item in items:
        cmp = item.comparison
        paper = MISSING if item.paper is None else f"{item.paper[0]:.2f} ± {item.paper[1]:.2f}"
        compared = [paper, MISSING if cmp is None else _num(cmp.delta, sign=True)]
        rows.append(
            [
                names[item.column],
                method_name(item.numbers, item.method),
                measured_text(item),
                *([] if check else [*compared, within_text(item)]),
                *(stat_text(item, k) for k in stats),
            ]
        )
    return headers, rows


def tables_markdown(items: Sequence[Measured], stats: Sequence[str] = DEFAULT_STATS) -> str:
    """Per paper table: the pivot and the cell lines with `stats` (no heading; docs embed
    this); a check's cells get their lines only where the job names its statistics."""
    parts = []
    for numbers in dict.fromkeys(i.numbers for i in items):
        mine = [i for i in items if i.numbers == numbers]
        table = load_table(numbers) if numbers else {}
        if all(i.paper is None for i in mine):  # a named check's own cells
            beside = (
                f"beside {table.get('table', numbers)} ({numbers})"
                if numbers
                else "of no paper table"
            )
            parts += [
                f"A check {beside}, its own columns and rows (no paper number), metric "
                f"`{mine[0].metric}`: measured mean ± sample std (seeds)",
                "",
                markdown_table(*pivot(mine, check=True)),
                "",
            ]
            if tuple(stats) != DEFAULT_STATS:
                parts += [markdown_table(*long_rows(mine, stats, check=True)), ""]
            continue
        parts += [
            f"{table.get('table', numbers)} ({numbers}), metric `{mine[0].metric}`: measured "
            "mean over seeds (paper), ✓ within max(3·paper std, 3) points",
            "",
            markdown_table(*pivot(mine)),
            "",
            markdown_table(*long_rows(mine, stats)),
            "",
        ]
    return "\n".join(parts).rstrip() + "\n"


def _groups(items: Sequence[Measured]) -> list[tuple[str, list[Measured]]]:
    """`items` by paper table and column, each with a caption naming them where they vary."""
    keys = list(dict.fromkeys((i.numbers, i.column) for i in items))
    names = column_names(list(dict.fromkeys(c for _, c in keys)))
    several_tables, several_columns = len({n for n, _ in keys}) > 1, len(names) > 1
    groups = []
    for numbers, column in keys:
        where = [str(numbers)] * several_tables + [f"column `{names[column]}`"] * several_columns
        caption = f" ({', '.join(where)})" if where else ""
        mine = [i for i in items if (i.numbers, i.column) == (numbers, column)]
        groups.append((caption, mine))
    return groups


def layout_markdown(items: Sequence[Measured], layout: Layout) -> str:
    """The cells as `layout`'s rows × its parameter's values, `mean ± std (n)` each."""
    parts = []
    for caption, mine in _groups(items):
        found = {i.method: i for i in mine}
        rows = [
            [row, *("" if m not in found else measured_text(found[m]) for m in methods)]
            for row, methods in layout.rows.items()
        ]
        parts += [
            f"The same cells, rows × {layout.name or 'parameter'}{caption}: measured mean ± "
            "sample std (seeds)",
            "",
            markdown_table(["", *layout.columns], rows),
            "",
        ]
    return "\n".join(parts)


def lists_markdown(items: Sequence[Measured], names: Sequence[str]) -> str:
    """Each cell's summary lists `names` element by element (mean ± std over seeds) and the
    mean of a run's elements."""
    parts = []
    for caption, mine in _groups(items):
        shown = [(i, n) for i in mine for n in names if any(i.lists.get(n, []))]
        if not shown:
            continue
        width = max(len(i.element_stats(n)) for i, n in shown)
        rows = []
        for item, name in shown:
            runs = [r for r in item.lists[name] if r]
            per_run = mean_std([statistics.fmean(r) for r in runs])
            cells = [_spread(*stats) for stats in item.element_stats(name)]
            rows.append(
                [
                    method_name(item.numbers, item.method),
                    f"`{name}`",
                    *cells,
                    *[""] * (width - len(cells)),
                    _spread(*per_run, len(runs)),
                ]
            )
        headers = ["method", "list", *(str(k + 1) for k in range(width)), "mean"]
        parts += [
            f"Lists of each run{caption}, element by element: measured mean ± sample std "
            "(seeds); `mean`: of a run's elements",
            "",
            markdown_table(headers, rows),
            "",
        ]
    return "\n".join(parts)


def column_means(items: Sequence[Measured]) -> str:
    """Per paper table, each row's mean over the columns it was measured in, the paper's mean
    over those of them with a paper number and the largest |measured − paper| among those."""
    parts = []
    for numbers in dict.fromkeys(i.numbers for i in items):
        rows = []
        mine = [i for i in items if i.numbers == numbers and i.mean_std[0] is not None]
        for method in dict.fromkeys(i.method for i in mine):
            pairs = [
                (i.mean_std[0] or 0.0, None if i.paper is None else i.paper[0])
                for i in mine
                if i.method == method
            ]
            paper = [(m, p) for m, p in pairs if p is not None]
            rows.append(
                [
                    method_name(numbers, method),
                    str(len(pairs)),
                    _num(statistics.fmean(m for m, _ in pairs)),
                    _num(statistics.fmean(p for _, p in paper) if paper else None),
                    _num(max((abs(m - p) for m, p in paper), default=None)),
                ]
            )
        where = f" ({numbers})" if numbers else ""
        parts += [
            f"Each row over its measured columns{where}: the mean of the measured means, the "
            "paper's mean over the same columns and the largest \\|measured − paper\\|",
            "",
            markdown_table(
                ["method", "columns", "mean, measured", "mean, paper", "largest \\|Δ\\|"], rows
            ),
            "",
        ]
    return "\n".join(parts)


def _spread(mean: float | None, std: float | None, n: int) -> str:
    if mean is None:
        return MISSING
    return f"{mean:.2f}{'' if std is None else f' ± {std:.2f}'} ({n})"


def write_csv(items: Sequence[Measured], path: Path, stats: Sequence[str] = DEFAULT_STATS) -> None:
    """One line a cell: the comparison's raw numbers, then each statistic's summary (per-seed
    listings are left to the Markdown)."""
    shown = [k for k in stats if not k.startswith(PER_SEED)]
    with Path(path).open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*CSV_HEADERS, *(f"{k}_{part}" for k in shown for part in ("mean", "std"))])
        for item in items:
            mean, std = item.mean_std
            cmp = item.comparison
            writer.writerow(
                [
                    item.numbers,
                    item.column,
                    item.method,
                    item.metric,
                    item.n,
                    ";".join(map(str, item.seeds)),
                    "" if mean is None else mean,
                    "" if std is None else std,
                    "" if item.paper is None else item.paper[0],
                    "" if item.paper is None else item.paper[1],
                    "" if cmp is None else cmp.delta,
                    "" if cmp is None else cmp.tolerance,
                    "" if cmp is None else cmp.ok,
                    *(v for k in shown for v in _csv_summary(item.stat(k))),
                ]
            )


def _csv_summary(value: StatSummary | None) -> tuple[float | str, float | str]:
    """(mean, std) of a statistic for the CSV; a range as its midpoint and half-width."""
    if value is None:
        return "", ""
    if not isinstance(value, dict):
        return value, ""
    if "min" in value:
        return (value["min"] + value["max"]) / 2, (value["max"] - value["min"]) / 2
    return value["mean"], "" if value.get("std") is None else value["std"]


def plot(items: Sequence[Measured], path: Path, title: str) -> None:
    """The report's figure (`figure`) written to `path`."""
    figure(items, title).savefig(path, dpi=110)


def figure(items: Sequence[Measured], title: str) -> "Figure":
    """Measured against the paper's number where cells have one (mean ± std over seeds, the
    diagonal and its ±3-point band), else each measured cell's mean ± std; every point carries
    its method's name, and the title wraps to fit."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    measured = [i for i in items if i.n]
    paired = [i for i in measured if i.paper is not None]
    height = 5.0 if paired or not measured else max(3.0, 1.6 + 0.28 * len(measured))
    fig = Figure(figsize=(6.5, height), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if paired:
        _against_paper(ax, paired)
    elif measured:
        _measured_cells(ax, measured)
    else:
        ax.text(0.5, 0.5, "no measured cell", ha="center", transform=ax.transAxes)
    ax.set_title(textwrap.fill(title, TITLE_WIDTH), fontsize=9)
    return fig


TITLE_WIDTH = 70
"""Characters a title line holds before it wraps (the figure is 6.5 inches wide)."""


def _against_paper(ax: "Axes", shown: Sequence[Measured]) -> None:
    points = [
        (i, i.paper[0], i.mean_std[0], i.mean_std[1] or 0.0)
        for i in shown
        if i.paper is not None and i.mean_std[0] is not None
    ]
    labels = _cell_labels([p[0] for p in points])
    for numbers in dict.fromkeys(p[0].numbers for p in points):
        mine = [
            (p, label) for p, label in zip(points, labels, strict=True) if p[0].numbers == numbers
        ]
        xs, ys = [p[1] for p, _ in mine], [p[2] for p, _ in mine]
        ax.errorbar(xs, ys, yerr=[p[3] for p, _ in mine], fmt="o", capsize=3, label=numbers)
        for x, y, label in zip(xs, ys, [label for _, label in mine], strict=True):
            ax.annotate(label, (x, y), xytext=(4, 4), textcoords="offset points", fontsize=7)
    values = [v for p in points for v in (p[1], p[2])]
    low, high = min(values) - 5, max(values) + 5
    ax.plot([low, high], [low, high], color="grey", lw=1)
    ax.fill_between([low, high], [low - 3, high - 3], [low + 3, high + 3], alpha=0.15)
    ax.legend(fontsize=8)
    ax.set_xlabel("paper")
    ax.set_ylabel("measured (mean ± std over seeds)")


def _measured_cells(ax: "Axes", shown: Sequence[Measured]) -> None:
    """One row per cell (no paper number to stand against): its mean ± std over seeds."""
    labels = _cell_labels(shown)
    rows = list(range(len(shown)))[::-1]  # the first cell on top
    means = [i.mean_std[0] if i.mean_std[0] is not None else float("nan") for i in shown]
    ax.errorbar(means, rows, xerr=[i.mean_std[1] or 0.0 for i in shown], fmt="o", capsize=3)
    ax.set_yticks(rows, labels, fontsize=8)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    metrics = ", ".join(dict.fromkeys(i.metric for i in shown))
    ax.set_xlabel(f"measured {metrics} (mean ± std over seeds; no paper number)")
    ax.grid(axis="x", alpha=0.3)


def _cell_labels(items: Sequence[Measured]) -> list[str]:
    """Each cell's name on the figure: its method as the paper prints it, and where the cells
    span several columns its column (the value alone for a `key=value` column)."""
    columns = dict.fromkeys(i.column for i in items)
    names = {c: name.rsplit("=", 1)[-1] for c, name in column_names(list(columns)).items()}
    return [
        method_name(i.numbers, i.method) + ("" if len(columns) == 1 else f" · {names[i.column]}")
        for i in items
    ]
