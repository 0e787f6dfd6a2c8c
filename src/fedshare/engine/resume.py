"""What a resumed run may change: the whole resolved config must match the checkpoint's."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedshare.errors import FedshareError

CHANGEABLE_ON_RESUME = (
    "rounds",
    "progress",
    "logger",
    "resume",
    "overwrite",
    "run_dir",
    "device",
    "workers",
    "checkpoint.every",
    "train.compile",
    "eval.batch_size",
    "data.root",
    "data.download",
    "data.cache",
)
"""Keys a resumed run may set differently: run length, where files and data are, how the run
is shown, the device or compilation (results then follow that arithmetic), and how many
processes share the clients. Everything else
is part of what the run computes."""

ADDED_LATER = {"train.amp": False, "logger": None}
"""Keys newer than some checkpoints, with the value every run before them had: a checkpoint
that lacks one matches a config that has that value."""


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train.lr": 0.01, ...}: nested mappings as dotted keys."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def changed_keys(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ (or exist on one side only), apart from the
    `CHANGEABLE_ON_RESUME` ones."""
    new = flatten(current)
    old = {**{k: v for k, v in ADDED_LATER.items() if k in new}, **flatten(saved)}
    return sorted(
        key
        for key in set(old) | set(new)
        if old.get(key, ...) != new.get(key, ...)
        and not any(key == k or key.startswith(f"{k}.") for k in CHANGEABLE_ON_RESUME)
    )


def check_same_run(saved: Mapping[str, Any] | None, current: Mapping[str, Any], path: Path) -> None:
    """Refuse to resume the checkpoint at `path` with a config that computes something else."""
    if saved is None:
        raise FedshareError(
            f"the checkpoint {path} records no config (an older fedshare wrote it), so a resume "
            f"cannot be checked; start a new run"
        )
    keys = changed_keys(saved, current)
    if keys:
        old, new = flatten(saved), flatten(current)
        shown = ", ".join(f"{k} ({old.get(k)!r} -> {new.get(k)!r})" for k in keys[:6])
        more = f" and {len(keys) - 6} more" if len(keys) > 6 else ""
        raise FedshareError(
            f"cannot resume {path.parent}: the config differs from the checkpoint's in "
            f"{shown}{more}; resume with the run's own settings (only "
            f"{', '.join(CHANGEABLE_ON_RESUME)} may change) or start a new run"
        )


def check_saved_rounds(state: Mapping[str, Any], rounds: int, every: int, path: Path) -> None:
    """Refuse a checkpoint whose completed rounds disagree with its own history (an edited or
    foreign file) or exceed the `rounds` the resumed run asks for."""
    done = state.get("rounds_completed")
    evaluated = [r.get("round") if isinstance(r, Mapping) else None for r in state["history"]]
    numbered = [r for r in evaluated if isinstance(r, int) and not isinstance(r, bool)]
    ordered = (
        len(numbered) == len(evaluated)
        and numbered == sorted(set(numbered))
        and all(r >= 1 for r in numbered)
    )
    last = numbered[-1] if numbered and ordered else 0
    if not (
        isinstance(done, int)
        and not isinstance(done, bool)
        and done >= 1
        and ordered
        and last <= done
        and done - last < every
    ):
        raise FedshareError(
            f"the checkpoint {path} says {done!r} rounds completed but its history has the "
            f"evaluated rounds {evaluated[-5:]} (eval.every={every}); it was edited or damaged, "
            f"so it is not resumed: start the run again without resume=true"
        )
    if done > rounds:
        raise FedshareError(
            f"the checkpoint {path} has {done} rounds completed but rounds={rounds}; resume "
            f"with rounds={done} or more"
        )
