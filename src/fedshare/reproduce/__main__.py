"""`python -m fedshare.reproduce list | run | report | store | docs` (docs/reproduce.md)."""

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from fedshare.errors import FedshareError, exit_user_error
from fedshare.reproduce import docs as docs_markers
from fedshare.reproduce.jobs import (
    Job,
    Scale,
    available_jobs,
    cells,
    cost_s,
    load_job,
    missing_data,
    needed_data,
    scale_columns,
)
from fedshare.reproduce.launch import DONE, FAILED, NEW, RESTART, RESUME, plan, run_cells
from fedshare.reproduce.measure import (
    DEFAULT_STATS,
    Measured,
    load_stored,
    measure,
    stored_cells,
    write_stored,
)
from fedshare.reproduce.render import (
    column_means,
    layout_markdown,
    lists_markdown,
    plot,
    tables_markdown,
    write_csv,
)

INTERRUPTED = 130
MARK = "reproduce.json"
"""The file in a table's output folder naming its table and scale."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see --help)")


def fail(message: str) -> NoReturn:
    exit_user_error(message, "fedshare.reproduce")


def data_root() -> Path | None:
    root = os.environ.get("FEDSHARE_DATA")
    return Path(root) if root else None


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


# ---------------------------------------------------------------------------- list
def describe(job: Job, root: Path | None) -> list[str]:
    numbers = ", ".join(job.numbers) or "none, checks of no paper table"
    lines = [f"{job.name}  (numbers: {numbers}; metric {job.metric})"]
    skipped = [m for m, o in job.methods.items() if o is None]
    for scale, spec in job.scales.items():
        all_cells = cells(job.name, scale)
        methods = list(dict.fromkeys(c.method for c in all_cells))
        columns = scale_columns(job, scale)
        known = [cost_s(job, scale, c.column) for c in all_cells]
        total = sum(k for k in known if k is not None)
        cost = (
            f", about {_hours(total)} in all on this CPU"
            if all(k is not None for k in known)
            else ""
        )
        metric = f", metric {spec.metric}" if spec.metric else ""
        lines.append(
            f"  {scale}: {len(columns)} columns, {len(methods)} methods{metric}, seeds "
            f"{list(spec.seeds)}: {len(all_cells)} cells{cost}"
            + (f" ({spec.note})" if spec.note else "")
        )
        lines.append(f"    methods: {', '.join(methods)}")
        for column in columns:
            need = needed_data(job, scale, column)
            missing = missing_data(job, scale, column, root)
            data = (
                "data: none checked"
                if not need
                else f"data {', '.join(need)}: "
                + ("present" if not missing else f"MISSING {', '.join(missing)}")
            )
            per = cost_s(job, scale, column)
            per_text = "cost unknown" if per is None else f"~{per:.0f} s a cell"
            lines.append(f"    {column}  [{data}; {per_text}]")
    if skipped:
        lines.append(f"  not run by fedshare: {', '.join(skipped)}")
    return lines


def cmd_list(args: argparse.Namespace) -> None:
    root = data_root()
    print(f"data root: {root or '(FEDSHARE_DATA not set)'}")
    names = [args.table] if args.table else available_jobs()
    for name in names:
        print()
        print("\n".join(describe(load_job(name), root)))


# ---------------------------------------------------------------------------- run / report
def default_out(table: str, scale: str) -> Path:
    return Path("runs") / "reproduce" / table / scale


def claim(out: Path, table: str, scale: str) -> None:
    """Mark `out` as `table` at `scale`; refuse a folder of another table or scale."""
    mark = out / MARK
    if mark.is_file():
        held = json.loads(mark.read_text())
        if held != {"table": table, "scale": scale}:
            raise FedshareError(
                f"{out} holds {held['table']} at scale {held['scale']}, not {table} at {scale}; "
                f"choose another --out"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    mark.write_text(json.dumps({"table": table, "scale": scale}) + "\n")


def scale_of(out: Path, table: str, given: str | None) -> str:
    """The scale of `out`: a table's output folder (its `reproduce.json`) or a stored file."""
    if out.is_file():
        held: dict[str, str] | None = load_stored(out)
    elif out.is_dir():
        mark = out / MARK
        held = json.loads(mark.read_text()) if mark.is_file() else None
    else:
        raise FedshareError(f"no such folder or stored file: {str(out)!r}")
    if held is None:
        return given or "paper"
    if held["table"] != table:
        raise FedshareError(f"{out} holds {held['table']}, not {table}")
    if given and given != held["scale"]:
        raise FedshareError(f"{out} holds scale {held['scale']}, not {given}")
    return str(held["scale"])


def cmd_run(args: argparse.Namespace) -> int:
    chosen = cells(args.table, args.scale, args.columns, args.methods, args.seeds)
    out = args.out or default_out(args.table, args.scale)
    claim(out, args.table, args.scale)
    before = plan(chosen, out)
    counts = {s: sum(p.state == s for p in before) for s in (DONE, FAILED, RESUME, RESTART, NEW)}
    retry = "to retry" if args.retry_failed else "failed (kept; --retry-failed reruns them)"
    print(
        f"{args.table} at scale {args.scale}: {len(chosen)} cells in {out} — "
        f"{counts[DONE]} done, {counts[FAILED]} {retry}, {counts[RESUME]} to resume, "
        f"{counts[RESTART]} to restart, {counts[NEW]} new",
        flush=True,
    )
    extra = [*args.set, *([f"workers={args.workers}"] if args.workers else [])]
    after = run_cells(chosen, out, args.jobs, args.launcher, extra, args.retry_failed)
    left = [p for p in after if p.state != DONE]
    for p in left:
        why = p.state
        if p.state == FAILED:
            summary = json.loads((out / p.cell.folder / "summary.json").read_text())
            why = f"{summary.get('status')}: {summary.get('error') or 'no error recorded'}"
        print(f"not finished: {p.cell.folder} ({why})", file=sys.stderr)
    print(
        f"{len(after) - len(left)} of {len(after)} cells done; "
        f"report: python -m fedshare.reproduce report {args.table} {out}"
    )
    return 1 if left else 0


def chosen_stats(table: str, scale: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The statistics a report prints: `--stats`, else the job's for the scale, else the
    default curve statistics."""
    return tuple(args.stats or load_job(table).scale(scale).stats or DEFAULT_STATS)


def provenance(entry: dict[str, str]) -> str:
    return "; ".join(str(entry[k]) for k in ("command", "date", "source") if entry.get(k))


def recipe_caption(spec: Scale) -> str:
    """The training recipe the scale's methods share, and the methods that train otherwise."""
    if not spec.recipe:
        return ""
    others = "; ".join(f"{m}: {why}" for m, why in spec.recipe_exceptions.items())
    return f"Training recipe: {spec.recipe}" + (f" (except {others})" if others else "") + ".\n\n"


def render(
    table: str, out: Path, scale: str, args: argparse.Namespace
) -> tuple[list[Measured], str]:
    job = load_job(table)
    spec = job.scale(scale)
    chosen = cells(table, scale, args.columns, args.methods, args.seeds)
    stats = chosen_stats(table, scale, args)
    items = measure(chosen, job.numbers, out, stats, spec.metric, spec.lists)
    head = f"Scale `{scale}`: {spec.note}.\n\n" if spec.note else ""
    head += recipe_caption(spec)
    if out.is_file():
        stored = load_stored(out)
        source = provenance(stored)
        head += f"Stored results ({out.name}): {source}.\n\n" if source else ""
        shown = {(i.column, i.method) for i in items if i.n}
        added: dict[str, list[str]] = {}
        for cell in stored["cells"]:
            if "provenance" in cell and (cell["column"], cell["method"]) in shown:
                names = added.setdefault(provenance(cell["provenance"]), [])
                names += [] if cell["method"] in names else [cell["method"]]
        for text, methods in added.items():
            head += f"Stored later (`store --add`), {', '.join(methods)}: {text}.\n\n"
    extra = [layout_markdown(items, spec.layout)] if spec.layout else []
    extra += [lists_markdown(items, spec.lists)] if spec.lists else []
    extra += [column_means(items)] if spec.column_means else []
    text = "\n".join([tables_markdown(items, stats), *extra]).rstrip() + "\n"
    return items, head + text


def cmd_report(args: argparse.Namespace) -> None:
    scale = scale_of(args.out_dir, args.table, args.scale)
    items, text = render(args.table, args.out_dir, scale, args)
    target = args.to or args.out_dir
    target.mkdir(parents=True, exist_ok=True)
    note = f"{args.table} at scale {scale}, cells from {args.out_dir}"
    (target / "report.md").write_text(f"# {args.table} ({scale} scale)\n\n{text}")
    write_csv(items, target / "report.csv", chosen_stats(args.table, scale, args))
    plot(items, target / "report.png", note)
    print(text)
    print(f"wrote report.md, report.csv, report.png to {target}")


def cmd_store(args: argparse.Namespace) -> None:
    scale = scale_of(args.out_dir, args.table, args.scale)
    if not args.out_dir.is_dir():
        raise FedshareError(f"store reads a folder of runs; {args.out_dir} is not one")
    chosen = cells(args.table, scale, args.columns, args.methods, args.seeds)
    stats = chosen_stats(args.table, scale, args)
    job = load_job(args.table)
    spec = job.scale(scale)
    measured = measure(chosen, job.numbers, args.out_dir, stats, spec.metric, spec.lists)
    found = stored_cells(measured)
    if not found:
        raise FedshareError(f"{args.out_dir} holds no completed cell of {args.table} at {scale}")
    summaries = [args.out_dir / c.folder / "summary.json" for c in chosen]
    latest = max(p.stat().st_mtime for p in summaries if p.is_file())
    selection = [
        *(["--columns", *map(shlex.quote, args.columns)] if args.columns else []),
        *(["--methods", *args.methods] if args.methods else []),
        *(["--seeds", *map(str, args.seeds)] if args.seeds else []),
    ]
    made = {
        "command": " ".join(
            ["python -m fedshare.reproduce run", args.table, "--scale", scale, *selection]
        ),
        "date": datetime.fromtimestamp(latest, UTC).strftime("%Y-%m-%d"),
        **({"source": args.source} if args.source else {}),
    }
    if args.add:
        data = load_stored(args.to)
        if (data.get("table"), data.get("scale")) != (args.table, scale):
            raise FedshareError(f"{args.to} holds {data.get('table')} at {data.get('scale')}")
        new = {(c["numbers"], c["column"], c["method"]) for c in found}
        kept = [c for c in data["cells"] if (c["numbers"], c["column"], c["method"]) not in new]
        data["cells"] = kept + [{**c, "provenance": made} for c in found]
    else:
        data = {"table": args.table, "scale": scale, **made, "cells": found}
    args.to.parent.mkdir(parents=True, exist_ok=True)
    write_stored(args.to, data)
    print(f"wrote {len(found)} cells to {args.to}")


def cmd_docs(args: argparse.Namespace) -> int:
    changed = docs_markers.regenerate(args.files, check=args.check)
    return 1 if args.check and changed else 0


# ---------------------------------------------------------------------------- parser
def _selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--columns", nargs="+", help="columns to take (a unique part is enough)")
    p.add_argument("--methods", nargs="+", help="methods (rows) to take")
    p.add_argument("--seeds", nargs="+", type=int, help="seeds (default: the scale's)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m fedshare.reproduce", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ls = sub.add_parser("list", help="every table: columns, methods, cells, data, cost")
    ls.add_argument("table", nargs="?", help="one table, e.g. xormixfl/table2")
    run = sub.add_parser("run", help="run a table's missing cells")
    run.add_argument("table", help="e.g. xormixfl/table2 (see list)")
    _selection(run)
    run.add_argument("--scale", default="paper", help="paper (default), cpu, ... (see list)")
    run.add_argument("--out", type=Path, help="default: runs/reproduce/<table>/<scale>")
    run.add_argument("--jobs", type=int, default=1, help="cells at once (joblib launcher)")
    run.add_argument(
        "--launcher", help="a Hydra launcher, e.g. joblib, submitit_local, submitit_slurm"
    )
    run.add_argument(
        "--retry-failed", action="store_true", help="rerun cells whose run failed or diverged"
    )
    run.add_argument("--workers", type=int, help="processes per run (passed as workers=K)")
    run.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="overrides for every cell, e.g. device=cuda data.features_weights=/w/r50.pth",
    )
    report = sub.add_parser("report", help="a table's measured cells beside the paper")
    report.add_argument("table")
    report.add_argument("out_dir", type=Path, metavar="DIR", help="the folder `run` wrote")
    _selection(report)
    report.add_argument("--scale", help="default: the one DIR was run at")
    report.add_argument("--to", type=Path, help="where report.md/.csv/.png go (default: DIR)")
    report.add_argument(
        "--stats", nargs="+", help="per-cell statistics to print (default: the job's for the scale)"
    )
    store = sub.add_parser("store", help="keep a table's measured cells as a small JSON file")
    store.add_argument("table")
    store.add_argument("out_dir", type=Path, metavar="DIR", help="the folder `run` wrote")
    _selection(store)
    store.add_argument("--scale", help="default: the one DIR was run at")
    store.add_argument("--to", type=Path, required=True, help="the file, e.g. docs/measured/...")
    store.add_argument("--source", help="where and how it was measured (machine, settings)")
    store.add_argument(
        "--stats", nargs="+", help="per-cell statistics to keep (default: the job's for the scale)"
    )
    store.add_argument(
        "--add",
        action="store_true",
        help="add the cells to the stored file --to (replacing its cells of the same column and "
        "method), each with its own command, date and source",
    )
    docs = sub.add_parser("docs", help="regenerate the docs' reproduce:... blocks")
    docs.add_argument("files", nargs="*", type=Path, help="default: docs/*.md and README.md")
    docs.add_argument("--check", action="store_true", help="exit 1 if a block is out of date")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    commands = {
        "list": cmd_list,
        "run": cmd_run,
        "report": cmd_report,
        "store": cmd_store,
        "docs": cmd_docs,
    }
    try:
        code = commands[args.command](args)
    except FedshareError as err:
        fail(str(err))
    except KeyboardInterrupt:
        print(
            "fedshare.reproduce: interrupted; the same command continues where it stopped",
            file=sys.stderr,
        )
        sys.exit(INTERRUPTED)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
