"""Checkpoints: everything needed to continue a run and get the uninterrupted run's numbers."""

import errno
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch

from fedshare.errors import FedshareError
from fedshare.results.atomic import atomic_write

FULL_BELOW = 1 << 20
"""Free bytes under which a failed `torch.save` is taken for a full disk."""


def save_checkpoint(path: Path, state: Any) -> None:
    """Replace the checkpoint (or any torch file of the run) in one step: a kill or a full
    disk keeps the previous one and leaves no temporary."""

    def write(tmp: Path) -> None:
        try:
            torch.save(state, tmp)
        except RuntimeError as err:  # torch reports a failed write (a full disk) this way
            if shutil.disk_usage(tmp.parent).free < FULL_BELOW:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp)) from None
            raise OSError(f"torch.save could not write {tmp.name}: {err}") from None

    atomic_write(path, write)


CHECKPOINT_KEYS = (
    "rounds_completed",
    "strategy",
    "history",
    "traffic",
    "wall_time_s",
    "rng",
    "fingerprint",
)
"""What every checkpoint holds (`config` too, except in those of older versions)."""


def unreadable_checkpoint(path: Path, problem: str) -> FedshareError:
    return FedshareError(
        f"{path} cannot be read as a fedshare checkpoint ({problem}); start the run again "
        f"without resume=true (overwrite=true reuses its folder)"
    )


def torch_load_problem(err: Exception) -> str:
    """Why `torch.load` failed, in a few words (torch's own messages give unsafe advice)."""
    if isinstance(err, EOFError):
        return "the file is empty or truncated"
    if isinstance(err, pickle.UnpicklingError):
        return "it is damaged or holds objects other than tensors and plain values"
    if isinstance(err, OSError):
        return err.strerror or type(err).__name__
    return "the file is truncated, damaged or not written by torch.save"


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The state saved by `save_checkpoint` (tensors and plain values only: weights_only)."""
    if not path.exists():
        raise FedshareError(
            f"resume=true but there is no checkpoint at {path}; run with checkpoint.every>0 first"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for damaged or foreign files
        raise unreadable_checkpoint(path, torch_load_problem(err)) from None
    if not isinstance(state, dict):
        raise unreadable_checkpoint(path, f"it holds a {type(state).__name__}, not a dict")
    missing = [key for key in CHECKPOINT_KEYS if key not in state]
    if missing:
        raise unreadable_checkpoint(path, f"it has no {', '.join(missing)}")
    return state


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
