"""Checkpoints: everything needed to continue a run and get the uninterrupted run's numbers."""

import os
from pathlib import Path
from typing import Any

import torch

from fedshare.errors import FedshareError


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise FedshareError(
            f"resume=true but there is no checkpoint at {path}; run with checkpoint.every>0 first"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
