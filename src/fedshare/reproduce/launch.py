"""Running a table's missing cells: each cell an ordinary `python -m fedshare.run` job.

A cell's run folder tells what it needs: `summary.json` with status `completed` → nothing;
status `failed` or `diverged` → nothing unless asked to retry failed cells (a cell that failed
once fails again with the same overrides; the others still run); a `checkpoint.pt` →
`resume=true` (an interrupted run continues from its last round); other
run files without a checkpoint → `overwrite=true` (it stopped before its first checkpoint);
nothing → a new run. The cells to run go to one multirun of `fedshare.run` through the
`fedshare_cells` sweeper (`hydra_plugins/fedshare_cells`), so Hydra's launchers run them: the
basic launcher one after the other, `joblib` several at once on this machine, `submitit_slurm`
on a cluster; the engine checks every cell as it checks any run. That multirun ends with the
process that started it (`run_child`).
"""

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
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
        run_child(command(todo, out, jobs, launcher, extra), env)
    return plan(cells, out)


PR_SET_PDEATHSIG = 1
"""prctl(2): the signal the kernel sends a process when its parent dies (Linux)."""
GRACE_S = 30.0
"""How long a signalled multirun may take to stop (its runs write "interrupted") before it and
its process group are killed."""


def die_with(parent: int) -> Callable[[], None]:
    """A `preexec_fn` making the child get SIGKILL when `parent` dies, SIGKILL included
    (`PR_SET_PDEATHSIG`; where prctl is missing, nothing), and exit if it already has."""

    def arm() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:
            os._exit(1)

    return arm


def run_child(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run `command` (a multirun) so that it ends with this process: SIGINT and SIGTERM sent
    here go to its process group (it leads one, so the launcher's workers get them too), it
    gets `GRACE_S` to stop before the group is killed, and then KeyboardInterrupt is raised
    here; if this process is killed outright, the kernel kills the child (`die_with`).
    Returns the child's exit status."""
    child = subprocess.Popen(command, env=env, process_group=0, preexec_fn=die_with(os.getpid()))
    received: dict[int, float] = {}

    def forward(signum: int, frame: object) -> None:
        received.setdefault(signum, time.monotonic())
        signal_group(child.pid, signum)

    handlers = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, forward) for s in handlers}
    try:
        while child.poll() is None:
            if received and time.monotonic() - min(received.values()) > GRACE_S:
                signal_group(child.pid, signal.SIGKILL)
            time.sleep(0.05)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if child.poll() is None:
            signal_group(child.pid, signal.SIGKILL)
            child.wait()
    if received:
        raise KeyboardInterrupt(signal.Signals(next(iter(received))).name)
    return child.returncode


def signal_group(leader: int, signum: int) -> None:
    """Send `signum` to the process group `leader` leads (nothing if it is gone)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signum)
