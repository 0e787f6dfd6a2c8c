"""The run directory contract: config.yaml, metrics.jsonl, summary.json, partition.json."""

import contextlib
import json
import math
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedshare.errors import FedshareError
from fedshare.results.atomic import atomic_write

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; runs are still refused into used folders
    fcntl = None  # type: ignore[assignment]

RUN_FILES = (
    "config.yaml",
    "metrics.jsonl",
    "summary.json",
    "partition.json",
    "partition.png",
    "curves.png",
    "checkpoint.pt",
    "model.pt",
)
"""Every file a run writes (the run-directory contract), and what `overwrite` deletes (with the
engine's `client_states/` segments, `fedshare.engine.state_log`)."""
LOCK_FILE = ".lock"
MARKER = ".fedshare-run"
"""Written into a folder before a run's first file: `overwrite` deletes run files only where
it is, so a user's own `config.yaml` or `summary.json` is never taken for a run's."""

SUMMARY_KEYS = (
    "strategy",
    "data",
    "partition",
    "model",
    "seed",
    "rounds_completed",
    "final_accuracy",
    "best_accuracy",
    "last10_mean_accuracy",
    "wall_time_s",
    "bytes_up",
    "bytes_down",
    "bytes_shared",
    "partition_fingerprint",
)
METRIC_KEYS = ("round", "accuracy", "loss", "wall_time_s", "bytes_up", "bytes_down", "bytes_shared")


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, obj: Any) -> None:
    """Write atomically (temp file + rename) so a crash never leaves half a file."""
    text = json.dumps(_clean(obj), indent=2) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text))


class RunDirectory:
    """Writes one run's files; everything already written stays if the run stops early."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def run_files(self) -> list[str]:
        """The run files already in the folder (empty for a new or unused folder)."""
        return [name for name in RUN_FILES if (self.path / name).exists()]

    def clear(self) -> None:
        """Delete a previous run's files (`overwrite=true`); nothing else in the folder, and
        nothing at all unless a fedshare run wrote them (its marker is there)."""
        found = self.run_files()
        if found:
            check_overwrite(self.path)
        for name in found:
            (self.path / name).unlink()

    def mark(self) -> None:
        """Say that a fedshare run writes here (before its first file)."""
        (self.path / MARKER).touch()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock on the folder while a run writes to it, so that a second
        process refuses to start instead of mixing its records into this run's files."""
        lock = self.path / LOCK_FILE
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fh = lock.open("a")
        except OSError as err:
            raise FedshareError(
                f"cannot write in run_dir {self.path} ({err.strerror or type(err).__name__}); "
                f"choose a folder you can write to"
            ) from None
        with fh:
            if fcntl is not None:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise FedshareError(
                        f"another fedshare process is writing to {self.path}; wait for it to "
                        f"finish or choose another run_dir"
                    ) from None
            yield  # the lock goes with the file handle; the empty .lock file stays (no race)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoint.pt"

    def write_config(self, resolved: Mapping[str, Any]) -> None:
        from omegaconf import OmegaConf

        config = OmegaConf.create(dict(resolved))
        atomic_write(self.path / "config.yaml", lambda tmp: OmegaConf.save(config, tmp))

    def write_partition(self, stats: Mapping[str, Any]) -> None:
        write_json(self.path / "partition.json", stats)

    def partition_written(self, fingerprint: str) -> bool:
        """Whether partition.json is complete and describes the partition `fingerprint`."""
        try:
            saved = json.loads((self.path / "partition.json").read_text())
        except (OSError, ValueError):
            return False
        return isinstance(saved, dict) and saved.get("fingerprint") == fingerprint

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        write_json(self.path / "summary.json", summary)

    def rewrite_metrics(self, history: Sequence[Mapping[str, Any]]) -> None:
        """Replace metrics.jsonl with `history` (used when a run resumes from a checkpoint)."""
        text = "".join(json.dumps(_clean(r)) + "\n" for r in history)
        atomic_write(self.metrics_path, lambda tmp: tmp.write_text(text))

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps(_clean(record)) + "\n")


def foreign_entries(folder: Path) -> list[str]:
    """What a folder without a run's marker holds besides the lock (empty if it has the marker
    or does not exist)."""
    if not folder.is_dir() or (folder / MARKER).exists():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name != LOCK_FILE)


def check_overwrite(folder: Path) -> None:
    """`overwrite=true` replaces a fedshare run only: a folder without the run marker that holds
    anything (a user's files, the working folder) is refused, nothing in it touched."""
    entries = foreign_entries(folder)
    if not entries:
        return
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    raise FedshareError(
        f"overwrite=true but run_dir {folder} holds files not written by a fedshare run "
        f"({shown}; no {MARKER} marker), so nothing is replaced; choose another run_dir (a run "
        f"of a fedshare older than the marker: create an empty {MARKER} file there to allow "
        f"overwrite)"
    )


def check_can_create(folder: Path) -> None:
    """A run folder must be creatable: its nearest existing ancestor is a folder this process
    can make a folder in (not a file, not a read-only or virtual file system). Tried by making
    and removing an empty folder there; nothing stays."""
    ancestor = folder
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise FedshareError(
            f"run_dir={folder} is under {ancestor}, which is a file, not a folder; choose a folder"
        )
    try:
        Path(tempfile.mkdtemp(dir=ancestor, prefix=".fedshare-")).rmdir()
    except OSError as err:
        what = "cannot be written" if ancestor == folder else "cannot be created"
        raise FedshareError(
            f"run_dir={folder} {what}: {ancestor} refuses a new folder "
            f"({err.strerror or type(err).__name__}); choose a folder you can write to"
        ) from None


def check_run_folder(folder: str | Path, overwrite: bool) -> None:
    """Before anything is made: the run folder can be created (or is a folder), and
    `overwrite` would replace only a run."""
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise FedshareError(f"run_dir={folder} is a file, not a folder; choose a folder")
    check_can_create(path)
    if overwrite:
        check_overwrite(path)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    lines = Path(path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def summarize(history: Sequence[Mapping[str, Any]], **fields: Any) -> dict[str, Any]:
    """The summary.json dict: accuracy statistics over the evaluated rounds plus `fields`.

    `last10_mean_accuracy` / `last5_mean_accuracy` are means over the last 10 / 5 *evaluated*
    rounds, beside the best that FLea's Table 1 reports (a best alone flatters a noisy run).
    A run with a validation split adds `validation_summary`'s keys.
    """
    accs = [r["accuracy"] for r in history if r.get("accuracy") is not None]
    last = history[-1] if history else {}
    summary = dict(fields)
    summary.update(
        final_accuracy=accs[-1] if accs else None,
        best_accuracy=max(accs) if accs else None,
        last10_mean_accuracy=sum(accs[-10:]) / len(accs[-10:]) if accs else None,
        last5_mean_accuracy=sum(accs[-5:]) / len(accs[-5:]) if accs else None,
        final_loss=last.get("loss"),
    )
    summary.update(validation_summary(history))
    return summary


def validation_summary(history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The round chosen on validation and its test accuracy: `best_val_accuracy`, the first
    evaluated round that reaches it (`best_val_round`), `test_at_best_val_accuracy` (the
    test accuracy of that round: a choice that never looked at the test set, unlike
    `best_accuracy`) and `final_val_accuracy`; empty for a run without validation."""
    scored = [r for r in history if r.get("val_accuracy") is not None]
    if not scored:
        return {}
    best = max(scored, key=lambda r: r["val_accuracy"])  # the first of equal maxima
    return {
        "best_val_accuracy": best["val_accuracy"],
        "best_val_round": best["round"],
        "test_at_best_val_accuracy": best.get("accuracy"),
        "final_val_accuracy": scored[-1]["val_accuracy"],
    }
