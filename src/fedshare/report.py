"""`python -m fedshare.report <run dirs or sweep folders ...>`: one table over many runs.

Prints the method × setting table (mean ± std over seeds) and writes `report.csv`,
`report.md` and `curves.png` (mean accuracy per round of every row, ±std band) into `--out`.
See docs/results.md.
"""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from fedshare.errors import FedshareError, exit_user_error
from fedshare.results.plots import plot_comparison
from fedshare.results.tables import (
    accuracy_curves,
    build_report,
    find_runs,
    load_paper,
    load_run,
    markdown_table,
    table_rows,
    write_csv,
    write_markdown,
)

OUTPUTS = ("report.csv", "report.md", "curves.png")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A bad argument: one line on stderr, exit code 2."""
        fail(f"{message} (see --help)")


def fail(message: str) -> NoReturn:
    exit_user_error(message, "fedshare.report")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m fedshare.report",
        description="Tabulate runs: one row per method × setting, mean ± std over seeds of "
        "rounds, final, best and last-10 (last-k of shorter runs) accuracy, traffic, wall time.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="run directories (holding summary.json) or folders searched recursively for them, "
        "e.g. runs/ or a sweep's multirun/<date>/",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="folder for report.csv, report.md and curves.png (default: the common parent "
        "folder of the PATHs; the parent of a run directory, never the run directory itself)",
    )
    p.add_argument(
        "--by",
        help="comma-separated keys that make a row besides the method, e.g. data,partition or "
        "train.lr (default: data, partition, model and every config key that differs between "
        "runs of one method and setting, apart from seed and execution keys)",
    )
    p.add_argument(
        "--paper",
        metavar="TABLE",
        help="a paper table to put beside the rows: a name in fedshare/paper/tables "
        "(e.g. flea, rebafl_table1) or a JSON file in that format",
    )
    p.add_argument(
        "--paper-column",
        metavar="COLUMN",
        help="the table's column (experiment preset) the runs belong to, e.g. "
        "flea/cifar10_qua3_n100 (a unique part of it is enough); needed when the table has "
        "several presets.",
    )
    return p


def default_out(paths: Sequence[str | Path]) -> Path:
    """The common parent folder of `paths`, stepping out of a run directory."""
    folders = [Path(p).resolve() for p in paths]
    folders = [p.parent if p.is_file() else p for p in folders]
    common = Path(os.path.commonpath(folders))
    while (common / "summary.json").exists():
        common = common.parent
    return common


def report(argv: Sequence[str] | None = None) -> Path:
    """Run the command; returns the output folder. Raises FedshareError for bad input."""
    args = parser().parse_args(argv)
    if args.paper_column and not args.paper:
        raise FedshareError("--paper-column needs --paper TABLE")
    by = [k.strip() for k in args.by.split(",") if k.strip()] if args.by else None
    paper = load_paper(args.paper, args.paper_column) if args.paper else None
    runs = [load_run(path) for path in find_runs(args.paths)]
    result = build_report(runs, by=by, paper=paper)
    out = args.out if args.out is not None else default_out(args.paths)
    if (out / "summary.json").exists():
        raise FedshareError(
            f"--out {str(out)!r} is a run directory; its own curves.png would be replaced"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(result, out / "report.csv")
        write_markdown(result, out / "report.md")
        plot_comparison(
            accuracy_curves(result), out / "curves.png", title="mean ± std over each row's seeds"
        )
    except OSError as err:
        raise FedshareError(f"cannot write the report to {str(out)!r}: {err.strerror}") from None
    print(markdown_table(*table_rows(result)))
    for note in result.notes:
        print(f"note: {note}")
    print(f"wrote {', '.join(OUTPUTS)} to {out}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    try:
        report(argv)
    except FedshareError as err:
        fail(str(err))
    except BrokenPipeError:  # `... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
