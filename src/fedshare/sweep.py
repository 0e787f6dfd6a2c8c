"""Sweeps (`python -m fedshare.run -m ...`) that survive a bad member.

A member that fails (a user error found only when its data is loaded, a crash) is recorded in
its own folder (`summary.json` with `status: failed` and the error's sentence) and the sweep
goes on; at the end the command line says which members failed and exits with
`SOME_MEMBERS_FAILED`. A signal still stops the whole sweep.
"""

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from fedshare.results.rundir import MARKER, RunDirectory, write_json

SOME_MEMBERS_FAILED = 1
"""The exit code of a sweep in which at least one member did not complete."""
FINISHED = ("completed", "stopped")
"""Statuses of a member that ran to its end (a callback may stop a run early on purpose)."""


def record_failure(folder: Path, meta: dict[str, Any], error: str) -> None:
    """Say in `folder` why its member failed, unless a run's summary there says it already."""
    run = RunDirectory(folder)
    if run.run_files():
        return
    folder.mkdir(parents=True, exist_ok=True)
    run.mark()  # fedshare wrote it: a rerun with overwrite=true may replace it
    write_json(
        folder / "summary.json",
        {**meta, "status": "failed", "error": error, "rounds_completed": 0},
    )


def member_problem(folder: Path) -> str | None:
    """Why a sweep member's folder holds no finished run (None: it finished)."""
    path = folder / "summary.json"
    if not path.is_file():
        return "it left no summary.json"
    try:
        summary = json.loads(path.read_text())
    except ValueError:
        return "its summary.json cannot be read"
    status = summary.get("status")
    if status in FINISHED:
        return None
    return f"{status}: {summary.get('error') or 'no error recorded'}"


class SweepOutcome(Callback):
    """A Hydra callback (configs/config.yaml) that, in the process running the sweep, collects
    which members failed once every member has run."""

    failed: list[str] = []  # noqa: RUF012 (read by fedshare.run after the sweep)
    members: int = 0

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        folders = member_folders(sweep_dir) if sweep_dir.is_dir() else []
        SweepOutcome.members = len(folders)
        SweepOutcome.failed = [
            f"{folder.relative_to(sweep_dir)} ({problem})"
            for folder in folders
            if (problem := member_problem(folder)) is not None
        ]


def member_folders(sweep_dir: Path) -> list[Path]:
    """The members' folders of a sweep: those holding a run's files at any depth (a sweep
    of `fedshare.reproduce` nests them as <column>/<method>/seed<k>), and each top-level
    folder holding none (a member that left nothing; hidden ones, such as submitit's
    `.submitit`, are the launcher's)."""
    runs = {p.parent for name in (MARKER, "summary.json") for p in sweep_dir.rglob(name)}
    empty = {
        d
        for d in sweep_dir.iterdir()
        if d.is_dir()
        and not d.name.startswith(".")
        and not any(d == r or d in r.parents for r in runs)
    }
    return sorted(runs | empty)
