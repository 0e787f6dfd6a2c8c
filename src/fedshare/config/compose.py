"""The command line's checks: one run's config, composed by Hydra, checked before anything is
written (`check_config`, which builds the run's strategy); a sweep's members each composed and
checked before Hydra starts the first (`check_command_line`), so that a bad value is one
sentence with exit code 2 before any folder exists or any member runs (docs/configuration.md,
"What is composed and built, and how often")."""

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedshare.config.schema import RunConfig
from fedshare.config.validation import GROUP_KEYS, check_run
from fedshare.errors import FedshareError, exit_user_error, unknown_key_message
from fedshare.registry import Registry
from fedshare.results.rundir import check_run_folder

if TYPE_CHECKING:
    from fedshare.strategies.base import Strategy

FLAGS_WITH_VALUE = ("--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd")
RUN_DIR_KEYS = ("run_dir", "hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")


def override_args(argv: Sequence[str]) -> list[str]:
    """The `key=value` arguments of a command line (flags and their values left out)."""
    args, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in FLAGS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            args.append(arg)
    return args


def members(args: Sequence[str]) -> list[list[str]]:
    """The overrides of each run the command line starts (one, or each sweep member), without
    Hydra's own keys."""
    overrides = OverridesParser.create().parse_overrides(list(args))
    for override in overrides:
        if override.key_or_group in RUN_DIR_KEYS and not override.is_sweep_override():
            value = override.value()
            if value is None or not str(value).strip():
                raise FedshareError(
                    f"{override.key_or_group}={value or ''} is empty; give a folder for the run "
                    f"(or leave it out for the default under runs/)"
                )
    ours = [o for o in overrides if not o.key_or_group.startswith("hydra")]
    return BasicSweeper.split_arguments(ours, None)[0]


def composes(override: str) -> bool:
    """Whether an override changes the composition (a group, a group's key, an added or
    deleted key), rather than setting a typed key of `RunConfig`."""
    key = override.lstrip("+~").split("=", 1)[0]
    return override[0] in "+~" or key.split(".", 1)[0] in (*GROUP_KEYS, "experiment")


@functools.cache
def composed(config_root: str, overrides: tuple[str, ...]) -> DictConfig:
    """The config composed from `overrides` (cached: a sweep composes each choice of groups
    once)."""
    try:
        with initialize_config_dir(config_dir=config_root, version_base="1.3"):
            return compose("config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as err:
        raise composition_error(err, config_root, list(overrides)) from None


def compose_member(overrides: list[str], config_root: str) -> DictConfig:
    """The composed config of one run, the command line's typed keys set last (they win over
    a preset's); a composition error as one sentence."""
    cfg = composed(config_root, tuple(o for o in overrides if composes(o))).copy()
    values = [o for o in overrides if not composes(o)]
    for item in OverridesParser.create().parse_overrides(values):
        try:
            OmegaConf.update(cfg, item.key_or_group, item.value(), merge=True)
        except OmegaConfBaseException as err:
            raise composition_error(err, config_root, overrides) from None
    return cfg


def composition_error(err: Exception, config_root: str, overrides: list[str]) -> FedshareError:
    """Hydra's error for an unknown key inside a config group (`strategy.scal=0.2`), or any
    other composition error, as one sentence (never Hydra's `+key` advice)."""
    cause = err.__cause__ or err
    key = getattr(cause, "full_key", None) or ""
    group = key.split(".", 1)[0]
    if group in ("strategy", "data", "partition", "model") and "." in key:
        kept = [o for o in overrides if not sets_key(o, key)]
        if len(kept) < len(overrides):  # without the failing override the config composes
            return group_key_error(group, compose_member(kept, config_root)[group], key)
    if key:
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        node = OmegaConf.select(OmegaConf.structured(RunConfig), parent) if parent else None
        if parent == "" or OmegaConf.is_dict(node):
            keys = list(node.keys()) if node is not None else fields_of_run()
            return FedshareError(unknown_key_message(key, keys, f" of {parent}" if parent else ""))
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return FedshareError(f"cannot compose the config: {first}")


def sets_key(override: str, key: str) -> bool:
    """Whether `override` sets `key` itself or a node inside a group that holds it
    (`data.features_options={bogus: 1}` sets `data.features_options.bogus`); a group choice
    (`data=mnist`) does not."""
    target = override.lstrip("+~").split("=", 1)[0]
    if "." not in target:
        return False
    return key == target or key.startswith(f"{target}.") or target.startswith(f"{key}.")


def fields_of_run() -> list[str]:
    return [field.name for field in dataclasses.fields(RunConfig)]


GROUP_KINDS = {
    "strategy": "strategy",
    "data": "dataset",
    "partition": "partition",
    "model": "model",
}
"""Each config group and what its choice is called in a sentence."""


def group_parameters(group: str, name: str) -> list[str]:
    """The keys config group `group` takes with choice `name` (its factory's parameters and the
    keys every choice of the group takes); none for an unknown name."""
    from fedshare.config.params import accepted_params
    from fedshare.data.datasets import COMMON_KEYS, DATASETS
    from fedshare.data.partitioners import PARTITIONERS
    from fedshare.models.base import MODELS
    from fedshare.strategies.base import STRATEGIES

    registries: dict[str, tuple[Registry[Any], int, tuple[str, ...]]] = {
        "strategy": (STRATEGIES, 0, ()),
        "data": (DATASETS, 1, COMMON_KEYS),
        "partition": (PARTITIONERS, 3, ("seed",)),
        "model": (MODELS, 2, ()),
    }
    factory, skip, common = registries[group]
    valid: list[str] = list(common)
    if name in factory:
        valid += list(accepted_params(factory.get(name), skip))
    return valid


def run_keys_named(name: str) -> list[str]:
    """The typed run keys whose last part is `name` (`lr` -> `train.lr`)."""
    from fedshare.config.validation import command_line_fields

    return [key for key in command_line_fields() if key.rsplit(".", 1)[-1] == name]


def keys_elsewhere(key: str, overrides: Sequence[str], config_root: str) -> list[str]:
    """Where a key of `key`'s name is valid besides where it was set: a typed run key, or a
    parameter of the strategy, dataset, partition or model the command line chooses."""
    name = key.lstrip("+~").rsplit(".", 1)[-1]
    found = run_keys_named(name)
    try:
        cfg = composed(config_root, tuple(o for o in overrides if composes(o)))
    except (FedshareError, HydraException, ValueError):
        return found  # the choices do not compose (a sweep over them): run keys only
    for group in GROUP_KINDS:
        choice = OmegaConf.select(cfg, f"{group}.name", default=None)
        if choice and name in group_parameters(group, str(choice)):
            found.append(f"{group}.{name}")
    return [k for k in found if k != key]


def group_key_error(group: str, node: Any, key: str) -> FedshareError:
    """`strategy.scal`: an unknown parameter of the chosen strategy (dataset, partition, model)."""
    from fedshare.config.params import unknown_param_message

    name = str(node.get("name")) if node is not None else "?"
    valid = group_parameters(group, name)
    kind = GROUP_KINDS[group]
    param = key.split(".", 1)[1]
    head = param.split(".", 1)[0]
    if head != param and head in valid:
        return FedshareError(
            f"{key} is inside {group}.{head}, which the config leaves empty; set it with "
            f"+{key}=<value>"
        )
    if param in valid:
        return FedshareError(
            f"{key} is a parameter of {kind} {name!r} that its config file does not list; "
            f"set it with +{key}=<value>"
        )
    elsewhere = run_keys_named(param)
    return FedshareError(unknown_param_message(kind, name, param, set(valid) - {"name"}, elsewhere))


def plain_dict(node: DictConfig, resolve: bool = True) -> dict[str, Any]:
    """A mapping config node as plain values (a config's keys are strings)."""
    values = OmegaConf.to_container(node, resolve=resolve)
    assert isinstance(values, dict)
    return cast(dict[str, Any], values)


def run_values(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain values; `run_dir` (it may name Hydra's runtime values)
    only where the command line or a preset set it."""
    run_dir = None if OmegaConf.is_interpolation(cfg, "run_dir") else cfg.get("run_dir")
    raw = plain_dict(cfg, resolve=False)
    raw.pop("run_dir", None)
    values = plain_dict(OmegaConf.create(raw))
    values["run_dir"] = run_dir
    return values


def check_run_dir(values: dict[str, Any]) -> None:
    """A run folder named on the command line must be creatable, and `overwrite` replaces a
    run only (`fedshare.results.rundir.check_run_folder`)."""
    if values.get("run_dir") is not None:
        overwrite = bool(values.get("overwrite")) and not values.get("resume")
        check_run_folder(str(values["run_dir"]), overwrite)


def check_config(cfg: DictConfig) -> "Strategy":
    """One run's composed config checked (every value, the run folder it names); the run's
    strategy, built by the check."""
    values = run_values(cfg)
    unknown = set(values) - set(fields_of_run()) - set(GROUP_KEYS)
    if unknown:
        raise FedshareError(unknown_key_message(sorted(unknown)[0], fields_of_run()))
    strategy = check_run(values)
    check_run_dir(values)
    return strategy


def command_line_runs(argv: Sequence[str]) -> list[list[str]]:
    """The overrides of each run of the command line (`members`), read without composing."""
    try:
        return members(override_args(argv))
    except HydraException as err:
        raise FedshareError(f"cannot read the command line: {str(err).splitlines()[0]}") from None


def check_named_folder(argv: Sequence[str]) -> None:
    """Before Hydra makes the folder of one run: the folder the command line names
    (`run_dir=`, `hydra.run.dir=`) can be made; whether `overwrite` may replace it is
    checked with the rest of the config (`check_config`)."""
    command_line_runs(argv)  # an empty run_dir= is refused
    keys = tuple(f"{key}=" for key in RUN_DIR_KEYS[:2])
    named = [arg.split("=", 1)[1] for arg in override_args(argv) if arg.startswith(keys)]
    if named:
        check_run_folder(named[-1], overwrite=False)


class RunFolderCheck(Callback):
    """A Hydra callback (configs/config.yaml): the folder of one run, wherever it was set (a
    preset's `run_dir`, not only the command line's), can be made, checked before Hydra makes
    it, so that a bad one is one sentence and exit code 2, not Hydra's traceback."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)  # as `run_job` does next: `${hydra:...}`
        try:
            check_run_folder(str(config.hydra.run.dir), overwrite=False)
        except FedshareError as err:  # Hydra turns a callback's Exception into a warning
            exit_user_error(str(err))


def check_command_line(argv: Sequence[str], config_root: Path) -> int:
    """Compose and check every run of the command line; return how many there are."""
    runs = command_line_runs(argv)
    for number, overrides in enumerate(runs):
        try:
            check_config(compose_member(overrides, str(config_root)))
        except FedshareError as err:
            if len(runs) == 1:
                raise
            raise FedshareError(
                f"sweep member {number} ({' '.join(overrides)}): {err}; no member was started"
            ) from None
    return len(runs)
