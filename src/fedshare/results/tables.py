"""Tables over many run directories: find and load runs, group them, mean ± std over seeds.

A row of the table is one *method × setting*. The method is the run's strategy; the setting is
its data, partition and model plus every config key that differs between runs which share
those four (a sweep over `train.lr` or `strategy.mu` gives a row per value; `strategy.*` keys
go with the method). Keys that only record how a run was executed (`seed`, `run_dir`, `device`,
`progress`, ...) never split rows; the seeds of a row are its repetitions. Standard deviations
are sample standard deviations (n − 1); a row of one run has none.

A paper table (`fedshare/paper/tables/*.json`, see `fedshare.paper.compare`) can be put beside
the rows; how a row finds its cell is described in `load_paper`.

This module is the one import for all of it; the work is done in

- `runs`: finding run directories and loading them,
- `grouping`: runs → method × setting groups, and the notes on the grouping,
- `stats`: the statistics of a row and their mean ± std,
- `paper_match`: loading a paper table and finding each row's cell,
- `table`: the report's rows (`build_report`) and their accuracy curves,
- `writers`: the Markdown and CSV output.
"""

from fedshare.results.grouping import Group, group_runs
from fedshare.results.paper_match import PaperCell, PaperTable, load_paper
from fedshare.results.runs import find_runs, load_run
from fedshare.results.stats import STATS, mean_std
from fedshare.results.table import Report, Row, accuracy_curves, build_report
from fedshare.results.writers import (
    markdown_table,
    table_rows,
    to_markdown,
    write_csv,
    write_markdown,
)

__all__ = [
    "STATS",
    "Group",
    "PaperCell",
    "PaperTable",
    "Report",
    "Row",
    "accuracy_curves",
    "build_report",
    "find_runs",
    "group_runs",
    "load_paper",
    "load_run",
    "markdown_table",
    "mean_std",
    "table_rows",
    "to_markdown",
    "write_csv",
    "write_markdown",
]
