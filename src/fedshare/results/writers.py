"""The report as text: the Markdown tables and report.md, and report.csv."""

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedshare.results.atomic import atomic_write
from fedshare.results.grouping import ABSENT, MISSING, show
from fedshare.results.stats import stat_header
from fedshare.results.table import Report, short_labels

_FORMATS = {
    "rounds_completed": (1.0, 0),
    "bytes_up_down": (1e6, 2),
    "bytes_shared": (1e6, 2),
    "wall_time_s": (1.0, 1),
}
"""(divisor, digits) of the statistics not shown as 2-digit percentages."""
_PAPER_CSV = (
    "paper_table",
    "paper_column",
    "paper_method",
    "paper_metric",
    "paper_mean",
    "paper_std",
    "measured_mean",
    "delta",
)


# ---------------------------------------------------------------------------- Markdown
def _fmt(mean: float | None, std: float | None, scale: float = 1.0, digits: int = 2) -> str:
    """`mean ± std`; a std of 0 at 0 digits (every run the same count) is left out."""
    if mean is None:
        return MISSING
    text = f"{mean / scale:.{digits}f}"
    if std is None or (digits == 0 and std == 0):
        return text
    return f"{text} ± {std / scale:.{digits}f}"


def table_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """(headers, cells) of the Markdown table."""
    evaluated = [len(run["history"]) for row in report.rows for run in row.group.runs]
    stat_headers = (stat_header(stat, h, evaluated) for stat, h in report.stats)
    headers = ["method", *report.setting_keys, "seeds", *stat_headers]
    if report.paper is not None:
        headers += [f"paper {report.paper.metric}", "Δ"]
    cells = []
    for row in report.rows:
        g = row.group
        line = [g.method, *(show(g.setting.get(k, ABSENT)) for k in report.setting_keys)]
        line.append(str(len(g.runs)))
        for stat, _ in report.stats:
            scale, digits = _FORMATS.get(stat, (1.0, 2))
            line.append(_fmt(*row.stats[stat], scale=scale, digits=digits))
        if report.paper is not None:
            cell = row.paper
            line.append(MISSING if cell is None else _fmt(cell.entry.mean, cell.entry.std))
            delta = None if cell is None else cell.delta
            line.append(MISSING if delta is None else f"{delta:+.2f}")
        cells.append(line)
    return headers, cells


def markdown_table(headers: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    """A Markdown table with padded, aligned columns (readable as plain text too)."""
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(c) for c in cells)])


def pivot_table(report: Report, stat: str = "final_accuracy") -> tuple[list[str], list[list[str]]]:
    """(headers, cells) of method (rows) × setting (columns), cells = `stat`'s mean ± std."""
    labels = short_labels(report)
    settings = list(dict.fromkeys(labels))
    methods = list(dict.fromkeys(row.group.method for row in report.rows))
    found = {(r.group.method, s): r.stats[stat] for r, s in zip(report.rows, labels, strict=True)}
    cells = [[m, *(_fmt(*found.get((m, s), (None, None))) for s in settings)] for m in methods]
    return ["method", *settings], cells


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def to_markdown(report: Report) -> str:
    """The report as Markdown: the table, the method × setting view of final accuracy when
    there are several settings, the notes and the curves."""
    runs = sum(len(row.group.runs) for row in report.rows)
    parts = [
        "# Results",
        "",
        f"{_count(runs, 'run')} in {_count(len(report.rows), 'row')}; mean ± sample std over "
        "each row's runs (seeds); accuracies in %, MB = 10^6 bytes.",
        "",
        markdown_table(*table_rows(report)),
    ]
    if len(set(short_labels(report))) > 1:
        parts += [
            "",
            "## Final accuracy (%), method × setting",
            "",
            markdown_table(*pivot_table(report)),
        ]
    if report.notes:
        parts += ["", "## Notes", "", *(f"- {note}" for note in report.notes)]
    parts += ["", "![accuracy per round, mean ± std over seeds](curves.png)", ""]
    return "\n".join(parts)


def write_markdown(report: Report, path: Path) -> None:
    text = to_markdown(report)
    atomic_write(Path(path), lambda tmp: tmp.write_text(text))


# ---------------------------------------------------------------------------- CSV
def _csv_cell(value: Any) -> Any:
    """Numbers and text as they are, a missing value empty, anything else as JSON."""
    if value is None or value is ABSENT:
        return ""
    if isinstance(value, str | int | float):
        return value
    return json.dumps(value, default=str)


def write_csv(report: Report, path: Path) -> None:
    """One line per row: the setting, n, seeds, `<stat>_mean`/`<stat>_std` in raw units
    (bytes, seconds, %), and with a paper table its cell, the measured metric and Δ."""
    headers = ["method", *report.setting_keys, "n", "seeds"]
    headers += [f"{stat}_{part}" for stat, _ in report.stats for part in ("mean", "std")]
    if report.paper is not None:
        headers += _PAPER_CSV
    atomic_write(Path(path), lambda tmp: _write_csv_rows(report, tmp, headers))


def _write_csv_rows(report: Report, path: Path, headers: list[str]) -> None:
    with Path(path).open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(headers)
        for row in report.rows:
            g = row.group
            line = [g.method, *(_csv_cell(g.setting.get(k, ABSENT)) for k in report.setting_keys)]
            line += [len(g.runs), ";".join(str(s) for s in g.seeds)]
            line += [_csv_cell(v) for stat, _ in report.stats for v in row.stats[stat]]
            if report.paper is not None:
                cell = row.paper
                line += (
                    [""] * len(_PAPER_CSV)
                    if cell is None
                    else [
                        report.paper.name,
                        cell.entry.preset,
                        cell.entry.method,
                        cell.metric,
                        cell.entry.mean,
                        cell.entry.std,
                        _csv_cell(cell.measured),
                        _csv_cell(cell.delta),
                    ]
                )
            writer.writerow(line)
