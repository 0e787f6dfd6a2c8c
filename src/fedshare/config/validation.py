"""One check of a whole run's values, before anything runs or is written.

Every typed key is checked against its type and its `Rule` (declared beside the field in
`fedshare.config`); the config groups check their own keys: the strategy is built (its
dataclass checks itself), and the dataset's, partition's and model's keys are bound to their
factories' parameters. The command line runs this for every member of a sweep before the first
one starts (`fedshare.config.compose`); the engine runs the typed part for every simulation.
"""

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fedshare.config.params import type_ok
from fedshare.config.rules import RULE, Rule
from fedshare.config.schema import DataOptions, RunConfig, SimulationConfig, TrainConfig
from fedshare.errors import FedshareError, did_you_mean

if TYPE_CHECKING:
    from fedshare.strategies.base import Strategy

SLOW_SCHEDULES = ("exp", "step")
"""Schedules that multiply the learning rate by `lr_decay`: a factor of 0 would stop training."""


def rule_of(field: dataclasses.Field) -> Rule:
    """The `Rule` declared for `field`; a field without one is a programming error."""
    rule = field.metadata.get(RULE)
    if rule is None:
        raise TypeError(
            f"config field {field.name!r} declares no Rule (fedshare.config.rules.ruled)"
        )
    return rule


def typed_fields(cls: type, prefix: str = "") -> dict[str, tuple[Any, Rule]]:
    """{dotted key: (type, rule)} of every leaf field of dataclass `cls`, nested ones included."""
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[Any, Rule]] = {}
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            out.update(typed_fields(hint, f"{prefix}{field.name}."))  # type: ignore[arg-type]
        else:
            out[f"{prefix}{field.name}"] = (hint, rule_of(field))
    return out


def type_name(hint: Any) -> str:
    if hint is bool:
        return "bool (true or false)"
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))


def value_problem(key: str, value: Any, hint: Any, rule: Rule) -> str | None:
    """The sentence for a bad `key=value`, or None if the value is valid."""
    if value is None and (rule.optional or type_ok(None, hint)):
        return None
    if not type_ok(value, hint):
        return f"{key}={value!r} is not valid: it must be of type {type_name(hint)}"
    if not rule.accepts(value):
        return (
            f"{key}={value!r} is not valid{close_choice(value, rule)}: it must be {rule.describe()}"
        )
    return None


def close_choice(value: Any, rule: Rule) -> str:
    """ " (did you mean 'x'?)" for a misspelt choice (or a list's first), else "" ."""
    names = [
        v for v in (value if isinstance(value, list | tuple) else [value]) if isinstance(v, str)
    ]
    unknown = [v for v in names if v not in (rule.choices or ())]
    return did_you_mean(unknown[0], rule.choices) if unknown and rule.choices else ""


@functools.cache
def command_line_fields() -> dict[str, tuple[Any, Rule]]:
    """The typed keys of a command line, each with the type and rule of the value a run uses:
    `train.*` as `TrainConfig` types them (None there means "not set", which a command line
    says by leaving the key out)."""
    return {**typed_fields(RunConfig), **typed_fields(TrainConfig, "train.")}


def command_line_problem(key: str, value: Any) -> str | None:
    """What composing would hide of a typed `key=value` as the command line gives it: a switch
    given a number (Hydra turns `train.amp=3` into true) or null where the run needs a value
    (null `train.*` keys would fall back to their defaults). None if neither; the composed
    value is checked against its rule afterwards (`check_run`)."""
    typed = command_line_fields().get(key)
    if typed is None:
        return None
    hint, rule = typed
    if value is None and not (rule.optional or type_ok(None, hint)):
        return (
            f"{key}=null is not valid: it must be {rule.describe()}; leave {key} out for its "
            f"default"
        )
    if hint is bool and not isinstance(value, bool) and value is not None:
        return f"{key}={value!r} is not valid: it must be of type {type_name(bool)}"
    return None


def check_key(cls: type, key: str, value: Any) -> None:
    """`key=value` against the typed field `key` of `cls` (a no-op for an untyped key)."""
    typed = typed_fields(cls).get(key)
    if typed is not None:
        problem = value_problem(key, value, *typed)
        if problem:
            raise FedshareError(problem)


def flat_values(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping) and f"{prefix}{key}" not in ("features_options",):
            out.update(flat_values(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@functools.cache
def declared_fields(cls: type) -> dict[str, tuple[Any, Rule]]:
    """{name: (type, rule)} of the init fields of dataclass `cls` that declare a rule."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: (hints[f.name], f.metadata[RULE])
        for f in dataclasses.fields(cls)
        if f.init and RULE in f.metadata
    }


def check_fields(obj: Any, prefix: str) -> None:
    """Every field of dataclass instance `obj` that declares a rule (a strategy's parameters),
    against its type and rule; the error names the key as `<prefix>.<field>`."""
    for name, (hint, rule) in declared_fields(obj.__class__).items():
        problem = value_problem(f"{prefix}.{name}", getattr(obj, name), hint, rule)
        if problem:
            raise FedshareError(problem)


def check_typed(cls: type, values: Mapping[str, Any], prefix: str = "") -> None:
    """Every key of `values` that `cls` types, against its type and rule."""
    typed = typed_fields(cls)
    for key, value in flat_values(values).items():
        if key in typed:
            problem = value_problem(f"{prefix}{key}", value, *typed[key])
            if problem:
                raise FedshareError(problem)


def check_combinations(values: Mapping[str, Any]) -> None:
    """Values each valid alone but not together."""
    train = values.get("train") or {}
    if train.get("lr_schedule") in SLOW_SCHEDULES and train.get("lr_decay") == 0:
        raise FedshareError(
            f"train.lr_decay=0 with train.lr_schedule={train['lr_schedule']} would make every "
            f"learning rate after the first 0; give a factor above 0"
        )


def check_simulation_config(config: SimulationConfig) -> None:
    """The typed settings of one simulation (the engine's own check)."""
    values = dataclasses.asdict(config)
    check_typed(SimulationConfig, values)
    check_combinations(values)


def check_groups(values: Mapping[str, Any]) -> "Strategy":
    """The four config groups' keys against their factories, without loading anything; the
    strategy, which checks itself when built, is returned for the run to use."""
    from fedshare.config.params import check_params
    from fedshare.data.datasets import COMMON_KEYS, DATASETS
    from fedshare.data.partitioners import PARTITIONERS
    from fedshare.models.base import MODELS
    from fedshare.strategies import make_strategy

    for group in ("strategy", "data", "partition", "model"):
        node = values.get(group)
        if not isinstance(node, Mapping) or not node.get("name"):
            raise FedshareError(
                f"{group}={node!r} is not valid: choose a {group} by name ({group}=<name>)"
            )
    params = dict(values["strategy"])
    strategy = make_strategy(str(params.pop("name")), params)
    data = dict(values["data"])
    check_typed(DataOptions, {k: v for k, v in data.items() if k in COMMON_KEYS}, "data.")
    name = str(data["name"])
    own = {k: v for k, v in data.items() if k not in COMMON_KEYS}
    check_params(DATASETS.get(name), own, "dataset", name, skip=1)
    if data.get("features"):
        from fedshare.data.features import backbone_options

        backbone_options(str(data["features"]), data.get("features_options"))
    partition = {k: v for k, v in values["partition"].items() if k not in ("name", "seed")}
    name = str(values["partition"]["name"])
    check_params(PARTITIONERS.get(name), partition, "partition", name, skip=3)
    model = dict(values["model"])
    name = str(model.pop("name"))
    if name != "auto":
        check_params(MODELS.get(name), model, "model", name, skip=2)
    return strategy


def check_run(values: Mapping[str, Any]) -> "Strategy":
    """A whole command-line run's resolved values (`RunConfig` with its groups); the `train`
    keys a preset or the command line set, as `TrainConfig` types them (null = unset). Returns
    the run's strategy, built by the check."""
    check_typed(RunConfig, {k: v for k, v in values.items() if k not in (*GROUP_KEYS, "train")})
    train = {k: v for k, v in (values.get("train") or {}).items() if v is not None}
    check_typed(TrainConfig, train, "train.")
    check_combinations(values)
    return check_groups(values)


GROUP_KEYS = ("strategy", "data", "partition", "model", "hydra")
