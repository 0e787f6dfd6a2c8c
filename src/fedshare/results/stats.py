"""The statistics of a report row: which summary values, and their mean ± sample std."""

import math
import statistics
from collections.abc import Iterable
from typing import Any

STATS = (
    ("rounds_completed", "rounds"),
    ("final_accuracy", "final %"),
    ("best_accuracy", "best %"),
    ("last10_mean_accuracy", "last-10 %"),
    ("bytes_up_down", "MB up+down"),
    ("bytes_shared", "MB shared"),
    ("wall_time_s", "time s"),
)
"""(summary statistic, Markdown header) of every row, in table order."""
AT_BEST_VALIDATION = ("test_at_best_val_accuracy", "test@best-val %")
"""The test accuracy at the best-validation round (runs with `data.val_fraction`), shown
beside the best test accuracy when any run has it."""


def report_stats(runs: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """`STATS`, with `AT_BEST_VALIDATION` after the best test accuracy when a run has it."""
    stats = list(STATS)
    if any(finite(run["summary"].get(AT_BEST_VALIDATION[0])) is not None for run in runs):
        stats.insert(stats.index(("best_accuracy", "best %")) + 1, AT_BEST_VALIDATION)
    return stats


LAST_WINDOW = 10
"""`last10_mean_accuracy` averages the last 10 evaluated rounds, or all of a shorter run's."""


def stat_header(stat: str, header: str, evaluated: Iterable[int]) -> str:
    """The Markdown header of `stat` for runs with `evaluated` rounds in their history: the
    last-10 mean of runs that all have fewer than 10 is a last-k mean (k: their largest
    count), and its header says so."""
    counts = list(evaluated)
    if stat == "last10_mean_accuracy" and counts and max(counts) < LAST_WINDOW:
        return f"last-{max(counts)} %"
    return header


def finite(value: Any) -> float | None:
    """`value` as a float if it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def mean_std(values: Iterable[Any]) -> tuple[float | None, float | None]:
    """(mean, sample std) of the finite numbers in `values`; std is None for fewer than two,
    both are None for none."""
    numbers = [v for v in (finite(x) for x in values) if v is not None]
    if not numbers:
        return None, None
    return statistics.fmean(numbers), statistics.stdev(numbers) if len(numbers) > 1 else None


def summary_value(run: dict[str, Any], stat: str) -> Any:
    """A statistic of a run's summary; `bytes_up_down` is bytes_up + bytes_down."""
    summary = run["summary"]
    if stat == "bytes_up_down":
        up, down = finite(summary.get("bytes_up")), finite(summary.get("bytes_down"))
        return None if up is None and down is None else (up or 0.0) + (down or 0.0)
    return summary.get(stat)
