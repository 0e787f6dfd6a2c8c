"""The report's table: one row per method × setting with its statistics and paper cell."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fedshare.results.grouping import ABSENT, Group, canon, group_runs, listed, notes_on
from fedshare.results.paper_match import PaperCell, PaperTable, paper_cell
from fedshare.results.stats import STATS, finite, mean_std, report_stats, summary_value


@dataclass
class Row:
    group: Group
    stats: dict[str, tuple[float | None, float | None]]
    paper: PaperCell | None = None


@dataclass
class Report:
    rows: list[Row]
    setting_keys: list[str]
    notes: list[str] = field(default_factory=list)
    paper: PaperTable | None = None
    stats: list[tuple[str, str]] = field(default_factory=lambda: list(STATS))
    """(summary statistic, header) of the columns (`fedshare.results.stats.report_stats`)."""


def build_report(
    runs: Sequence[dict[str, Any]],
    by: Sequence[str] | None = None,
    paper: PaperTable | None = None,
) -> Report:
    """The report's rows: mean ± std over each group's runs of every statistic in
    `report_stats` (`STATS`, and the test accuracy at the best-validation round where a run
    has it), and with `paper` the paper's number for the rows that have a cell."""
    groups = group_runs(runs, by)
    setting_keys = list(dict.fromkeys(k for g in groups for k in g.setting))
    columns = report_stats(runs)
    rows = []
    for group in groups:
        stats = {s: mean_std(summary_value(r, s) for r in group.runs) for s, _ in columns}
        row = Row(group, stats)
        if paper is not None:
            entry = paper_cell(group, paper)
            if entry is not None:
                measured, _ = mean_std(summary_value(r, paper.metric) for r in group.runs)
                row.paper = PaperCell(entry, paper.metric, measured)
        rows.append(row)
    notes = notes_on(groups)
    if paper is not None:
        matched = sum(row.paper is not None for row in rows)
        notes.append(
            f"paper table {paper.name} ({paper.metric}): {matched} of {len(rows)} rows have a "
            f"cell in {listed(list(paper.columns), 3)}"
        )
    return Report(rows, setting_keys, notes, paper, columns)


def short_labels(report: Report) -> list[str]:
    """Per row, its setting told by the keys that differ between rows ("" if none do)."""
    varying = [
        k
        for k in report.setting_keys
        if len({canon(row.group.setting.get(k, ABSENT)) for row in report.rows}) > 1
    ]
    return [row.group.label(varying) if varying else "" for row in report.rows]


def accuracy_curves(report: Report) -> dict[str, list[tuple[int, float]]]:
    """Per row, the (round, accuracy) points of all its runs (for `plot_comparison`)."""
    curves = {}
    for row, setting in zip(report.rows, short_labels(report), strict=True):
        label = row.group.method + (f" · {setting}" if setting else "")
        curves[label] = [
            (int(rec["round"]), rec["accuracy"])
            for run in row.group.runs
            for rec in run["history"]
            if finite(rec.get("round")) is not None and finite(rec.get("accuracy")) is not None
        ]
    return curves
