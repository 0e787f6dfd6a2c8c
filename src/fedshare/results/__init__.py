"""Run results: the run directory, plots of runs, and reports over many runs."""

from fedshare.results.plots import plot_comparison, plot_learning_curve
from fedshare.results.tables import build_report, find_runs, group_runs, load_run

__all__ = [
    "build_report",
    "find_runs",
    "group_runs",
    "load_run",
    "plot_comparison",
    "plot_learning_curve",
]
