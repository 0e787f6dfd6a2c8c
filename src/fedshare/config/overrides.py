"""Command-line overrides checked before Hydra runs, so that every mistake in them gets the
same one-sentence error and exit code as any other user error (and no run folder is made)."""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedshare.config.compose import keys_elsewhere
from fedshare.config.schema import RunConfig
from fedshare.config.validation import command_line_problem
from fedshare.errors import FedshareError, choices_message, unknown_key_message

GROUPS = ("strategy", "data", "partition", "model", "experiment")


def group_options(root: Path, group: str) -> list[str]:
    """The options of a config group: its YAML files, by path under the group folder."""
    return sorted(
        str(p.relative_to(root / group).with_suffix("")) for p in (root / group).rglob("*.yaml")
    )


def values_of(override: Any) -> list[Any]:
    """The values an override sets: one, or each of a sweep's."""
    if override.is_sweep_override():
        return list(override.sweep_iterator())
    return [override.value()]


def check_overrides(argv: Iterable[str], config_root: Path) -> None:
    """Reject an unknown group option, an unknown typed key or a value of the wrong type, for
    plain overrides and for each value of a sweep (`-m ... a=1,2`)."""
    args = [a for a in argv if not a.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(args)
    except HydraException as err:
        raise FedshareError(f"cannot read the command line: {str(err).splitlines()[0]}") from None
    schema = OmegaConf.structured(RunConfig)
    for override in overrides:
        key = override.key_or_group
        if override.is_delete() or override.is_add() or key.startswith("hydra"):
            continue
        for value in values_of(override):
            if key in GROUPS:
                if value is None and key != "experiment":
                    raise FedshareError(
                        f"{key}=null is not valid: choose a {key} by name; valid choices: "
                        f"{', '.join(group_options(config_root, key))}"
                    )
                if value is None or (config_root / key / f"{value}.yaml").exists():
                    continue
                raise FedshareError(choices_message(key, value, group_options(config_root, key)))
            problem = command_line_problem(key, value)
            if problem:
                raise FedshareError(problem)
            check_typed_key(schema, key, value, args, config_root)


def check_typed_key(schema: Any, key: str, value: Any, args: list[str], config_root: Path) -> None:
    """`key=value` against `RunConfig`'s typed keys (the group nodes take any key here; the
    strategy, dataset, partition and model check their own parameters when built). An unknown
    key names where a key of its name is valid (`lr` -> `train.lr`)."""
    top = key.split(".", 1)[0]
    if top in GROUPS:
        return
    try:
        OmegaConf.update(schema, key, value, merge=True)
    except OmegaConfBaseException as err:
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        node = OmegaConf.select(schema, parent) if parent else schema
        keys = list(node.keys()) if OmegaConf.is_dict(node) else []
        if key.rsplit(".", 1)[-1] not in keys:
            where = f" of {parent}" if parent else ""
            elsewhere = keys_elsewhere(key, args, str(config_root))
            raise FedshareError(unknown_key_message(key, keys, where, elsewhere)) from None
        reason = str(err).splitlines()[0]
        raise FedshareError(f"{key}={value!r} is not valid: {reason}") from None
