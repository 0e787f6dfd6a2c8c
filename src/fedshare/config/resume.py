"""`resume=true` from the command line: the run's own settings come from its folder.

An interrupted run says "continue with run_dir=X resume=true"; typed as printed, that resumes
X with the settings its `config.yaml` recorded. The command line may still set what a resumed
run may change (`CHANGEABLE_ON_RESUME`: rounds, device, workers, progress, ...); any other key
it sets must agree with the record, else one sentence names the conflict.
"""

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedshare.config.compose import plain_dict
from fedshare.config.schema import RunConfig
from fedshare.engine.resume import CHANGEABLE_ON_RESUME, flatten
from fedshare.errors import FedshareError

SELF = ("resume", "run_dir")
"""The keys that ask for the resume."""


def changeable(key: str) -> bool:
    return any(key == k or key.startswith(f"{k}.") for k in (*CHANGEABLE_ON_RESUME, *SELF))


def resumed_config(
    cfg: DictConfig, overrides: Iterable[str], folder: Path
) -> tuple[DictConfig, str | None]:
    """The config that resumes the run in `folder`: its recorded settings, with the keys a
    resume may change taken from `cfg` (the command line's) where the command line sets
    them. Returns it and the partition's label the run was started with (None when the
    folder does not say). A folder without a `config.yaml` (a run stopped before writing
    one) resumes with `cfg` as it is."""
    recorded_path = folder / "config.yaml"
    if not recorded_path.is_file():
        return cfg, None
    try:
        recorded = OmegaConf.load(recorded_path)
    except (OSError, yaml.YAMLError, OmegaConfBaseException) as err:
        raise FedshareError(
            f"cannot resume {folder}: its config.yaml cannot be read ({err})"
        ) from None
    if not isinstance(recorded, DictConfig):
        raise FedshareError(
            f"cannot resume {folder}: its config.yaml is a list, not the run's settings; "
            f"start a new run"
        )
    given = plain_dict(cfg)
    prefixes = touched(overrides)
    check_agreement(given, OmegaConf.to_container(recorded), prefixes, folder)
    for key, value in flatten(given).items():
        typed = any(key == p or key.startswith(f"{p}.") for p in prefixes if p)
        if changeable(key) and (typed or key in SELF) and not unset(key, value):
            OmegaConf.update(recorded, key, value, merge=False)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), recorded)
    except OmegaConfBaseException as err:
        raise FedshareError(
            f"cannot resume {folder}: its config.yaml does not fit this fedshare's settings "
            f"({str(err).splitlines()[0]}); start a new run"
        ) from None
    assert isinstance(merged, DictConfig)
    return merged, recorded_label(folder)


def check_agreement(
    given: Mapping[str, Any], recorded: Any, prefixes: list[str], folder: Path
) -> None:
    """Refuse a key the command line sets (under `prefixes`) that a resume may not change and
    that differs from the recorded run."""
    new, old = flatten(given), flatten(recorded)
    conflicts: list[str] = []
    for prefix in prefixes:
        for key in sorted(new):
            if not (key == prefix or key.startswith(f"{prefix}.") or prefix == ""):
                continue
            if changeable(key) or unset(key, new[key]) or key in conflicts:
                continue
            if old.get(key, ...) != new[key]:
                conflicts.append(key)
    if conflicts:
        shown = ", ".join(f"{k}={new[k]!r} (the run has {old.get(k)!r})" for k in conflicts[:4])
        more = f" and {len(conflicts) - 4} more" if len(conflicts) > 4 else ""
        raise FedshareError(
            f"cannot resume {folder} with {shown}{more}: a resumed run keeps its own settings, "
            f"read from its config.yaml; leave those out (only "
            f"{', '.join(CHANGEABLE_ON_RESUME)} may change) or start a new run"
        )


def touched(overrides: Iterable[str]) -> list[str]:
    """The dotted prefixes the command line's overrides set ("" for a preset, which may set
    anything)."""
    prefixes = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if key.startswith("hydra") or override.is_delete():
            continue
        prefixes.append("" if key == "experiment" else key)
    return prefixes


def unset(key: str, value: Any) -> bool:
    """A value the run resolves rather than sets: a layered key left null, `model=auto`."""
    if value is None and (key == "rounds" or key.startswith("train.")):
        return True
    return key == "model.name" and value == "auto"


def recorded_label(folder: Path) -> str | None:
    """The partition's label the run was started with (`dir0.3`), from its summary."""
    try:
        label = json.loads((folder / "summary.json").read_text()).get("partition")
    except (OSError, ValueError, AttributeError):
        return None
    return label if isinstance(label, str) else None
