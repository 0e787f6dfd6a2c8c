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

from fedshare.results.rundir import RunDirectory, write_json

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
        folders = sorted(p for p in sweep_dir.iterdir() if p.is_dir()) if sweep_dir.is_dir() else []
        SweepOutcome.members = len(folders)
        SweepOutcome.failed = [
            f"{folder.name} ({problem})"
            for folder in folders
            if (problem := member_problem(folder)) is not None
        ]
