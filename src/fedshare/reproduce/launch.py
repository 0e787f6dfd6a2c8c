"""Running a table's missing cells: each cell an ordinary `python -m fedshare.run` job.

A cell's run folder tells what it needs: `summary.json` with status `completed` → nothing;
status `failed` or `diverged` → nothing unless asked to retry failed cells (a cell that failed
once fails again with the same overrides; the others still run); a `checkpoint.pt` →
`resume=true` (an interrupted run continues from its last round); other
run files without a checkpoint → `overwrite=true` (it stopped before its first checkpoint);
nothing → a new run. The cells to run go to one multirun of `fedshare.run` through the
`fedshare_cells` sweeper (`hydra_plugins/fedshare_cells`), so Hydra's launchers run them: the
basic launcher one after the other, `joblib` several at once on this machine, `submitit_slurm`
on a cluster; the engine checks every cell as it checks any run.
"""

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedshare.reproduce.jobs import Cell, merged
from fedshare.results.rundir import RUN_FILES

DONE, FAILED, RESUME, RESTART, NEW = "done", "failed", "resume", "restart", "new"
FAILED_STATUSES = ("failed", "diverged")
"""A run's `summary.json` statuses that make its cell FAILED."""


@dataclass(frozen=True)
class Plan:
    cell: Cell
    state: str


def state_of(folder: Path) -> str:
    """What a cell's run folder needs: DONE, FAILED, RESUME, RESTART or NEW."""
    summary = folder / "summary.json"
    if summary.is_file():
        try:
            status = json.loads(summary.read_text()).get("status")
        except ValueError:
            status = None
        if status == "completed":
            return DONE
        if status in FAILED_STATUSES:
            return FAILED
    if (folder / "checkpoint.pt").is_file():
        return RESUME
    if any((folder / name).exists() for name in RUN_FILES):
        return RESTART
    return NEW


def plan(cells: Sequence[Cell], out: Path) -> list[Plan]:
    return [Plan(cell, state_of(out / cell.folder)) for cell in cells]


def job_overrides(item: Plan, out: Path, extra: Sequence[str] = ()) -> list[str]:
    """The overrides of one cell's job: its own, then `extra` (replacing its own of the same
    key), its folder, and resume/overwrite."""
    folder = (out / item.cell.folder).resolve()
    by_state = {RESUME: ["resume=true"], RESTART: ["overwrite=true"], FAILED: ["overwrite=true"]}
    state = by_state.get(item.state, [])
    return [
        *merged(item.cell.overrides, extra),
        f"run_dir={folder}",
        f"hydra.sweep.subdir={item.cell.folder}",
        *state,
    ]


def launcher_overrides(jobs: int, launcher: str | None) -> list[str]:
    """Hydra's launcher: `launcher` if named, else joblib for jobs > 1, else the basic one."""
    if launcher:
        chosen = [f"hydra/launcher={launcher}"]
        return chosen + ([f"hydra.launcher.n_jobs={jobs}"] if launcher == "joblib" else [])
    return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"] if jobs > 1 else []


def command(
    todo: Sequence[Plan],
    out: Path,
    jobs: int = 1,
    launcher: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The `python -m fedshare.run -m` command that runs `todo` (writes its cells file)."""
    out.mkdir(parents=True, exist_ok=True)
    cells_file = out / "cells.json"
    jobs_list = [job_overrides(p, out, extra) for p in todo]
    cells_file.write_text(json.dumps(jobs_list, indent=1) + "\n")
    return [
        sys.executable,
        "-m",
        "fedshare.run",
        "-m",
        "hydra/sweeper=fedshare_cells",
        f"hydra.sweeper.cells_file={cells_file.resolve()}",
        f"hydra.sweep.dir={out.resolve()}",
        *launcher_overrides(jobs, launcher),
        "progress=false",
    ]


def run_cells(
    cells: Sequence[Cell],
    out: Path,
    jobs: int = 1,
    launcher: str | None = None,
    extra: Sequence[str] = (),
    retry_failed: bool = False,
) -> list[Plan]:
    """Run the cells of `cells` that are not done (nor failed, unless `retry_failed`) into
    `out`; returns the plan after the run (every cell's state then). `extra`: overrides for
    every job (`device=cuda`, `workers=4`, `data.features_weights=...`)."""
    skip = (DONE,) if retry_failed else (DONE, FAILED)
    todo = [p for p in plan(cells, out) if p.state not in skip]
    if todo:
        env = {**os.environ, "HYDRA_FULL_ERROR": os.environ.get("HYDRA_FULL_ERROR", "0")}
        subprocess.run(command(todo, out, jobs, launcher, extra), check=False, env=env)
    return plan(cells, out)
