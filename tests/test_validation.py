"""Every bad value is one sentence before anything runs: the bad-value cases are drawn from the
rules declared beside the typed config fields, so a new key cannot be left unchecked."""

import math
import typing
from dataclasses import fields
from typing import Any

import pytest
from omegaconf import OmegaConf

from fedshare.config import DataOptions, RunConfig, SimulationConfig
from fedshare.config.assemble import assemble
from fedshare.config.compose import check_command_line
from fedshare.config.rules import Rule
from fedshare.config.validation import typed_fields
from fedshare.data import federate, load_dataset
from fedshare.errors import FedshareError
from fedshare.run import config_dir, simulation_settings
from fedshare.strategies import make_strategy

RUN_KEYS = typed_fields(RunConfig)
DATA_KEYS = {f"data.{k}": v for k, v in typed_fields(DataOptions).items()}


def override(key: str, value: Any) -> str:
    """`key=value` in Hydra's override syntax."""

    def show(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ",".join(show(x) for x in v) + "]"
        if isinstance(v, str):
            return f"'{v}'"
        if v is None:
            return "null"
        return str(v).lower() if isinstance(v, bool) else str(v)

    return f"{key}={show(value)}"


def is_list(hint: Any) -> bool:
    return any(typing.get_origin(a) is list for a in (hint, *typing.get_args(hint)))


def bad_values(hint: Any, rule: Rule) -> list[Any]:
    """Values the rule (or the type) refuses: just outside each bound, non-finite numbers,
    unknown choices, wrong lengths, empty text, a value of another type."""
    if rule.any_value:
        return [] if hint is Any or str in typing.get_args(hint) or hint is str else ["maybe"]
    numbers: list[Any] = []
    if rule.low is not None:
        numbers.append(rule.low if rule.low_open else rule.low - 1)
    if rule.high is not None:
        numbers.append(rule.high if rule.high_open else rule.high + 1)
    if numbers or rule.numbers or rule.scalar_or_list or rule.length:
        numbers += [math.nan, math.inf]
    bad: list[Any] = []
    if rule.choices is not None:
        bad += ["nosuch", 3]
    if rule.length is not None:
        bad += [[0.5] * (rule.length + 1), [], *([n] * rule.length for n in numbers)]
    elif is_list(hint) or rule.scalar_or_list:
        bad += [[n] for n in numbers] + (["abc"] if rule.scalar_or_list else [["a"]])
        if rule.nonempty or rule.scalar_or_list:
            bad.append([])
    if not is_list(hint):
        bad += numbers
    if rule.nonempty and not rule.numbers:
        bad.append("")
    if numbers and not rule.scalar_or_list:
        bad.append("abc")
    return bad


CASES = [
    (key, value)
    for key, (hint, rule) in {**RUN_KEYS, **DATA_KEYS}.items()
    for value in bad_values(hint, rule)
]


def test_every_typed_key_declares_a_rule_and_has_bad_values_drawn_from_it():
    assert set(RUN_KEYS) >= {"seed", "train.lr", "eval.batch_size", "memory_format"}
    ruled = {key for key, value in CASES}
    unruled = {k for k, (h, r) in {**RUN_KEYS, **DATA_KEYS}.items() if not r.any_value}
    assert unruled <= ruled


def test_a_bad_value_of_any_key_is_one_sentence_naming_it():
    """Each generated case through the command line's check (`++` adds a dataset key its
    config file does not list)."""
    accepted, unclear = [], []
    for key, value in CASES:
        prefix = "++" if key.startswith("data.") else ""
        try:
            check_command_line([prefix + override(key, value)], config_dir())
        except FedshareError as err:
            if key not in str(err) or "\n" in str(err):
                unclear.append(f"{key}: {err}")
        else:
            accepted.append(override(key, value))
    assert not accepted, f"accepted bad values: {accepted}"
    assert not unclear, unclear


def test_a_dataset_key_its_file_does_not_list_gets_the_plus_advice():
    with pytest.raises(FedshareError, match=r"set it with \+data.cache=<value>"):
        check_command_line(["data.cache=false"], config_dir())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["strategy.scal=0.2"], "strategy 'fedavg' has no parameter 'scal'"),
        (["strategy=fedprox", "strategy.muu=1"], "has no parameter 'muu' (did you mean 'mu'?)"),
        (["partition=dir0.1", "partition.alpah=1"], "did you mean 'alpha'?"),
        (["model=mlp", "model.hiden=[5]"], "did you mean 'hidden'?"),
        (["data=synthetic", "data.dimm=3"], "did you mean 'dim'?"),
        (["+foo=1"], "unknown key 'foo'; valid keys: "),
        (["seed=18446744073709551616"], "seed=18446744073709551616 is not valid"),
        (["train.lr_schedule=exp", "train.lr_decay=0"], "train.lr_decay=0"),
        (["run_dir="], "run_dir= is empty"),
        (["hydra.run.dir="], "hydra.run.dir= is empty"),
        (["run_dir=/dev/null"], "is a file, not a folder"),
        (["-m", "train.lr=0.05,-1,0.02"], "sweep member 1 (train.lr=-1): train.lr=-1"),
    ],
)
def test_group_keys_and_sweeps_are_checked_before_anything_runs(args, message):
    with pytest.raises(FedshareError, match=None) as caught:
        check_command_line(args, config_dir())
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("strategy", "fedprx"),
        ("data", "cifar1O"),
        ("partition", "dir01"),
        ("model", "cnn_smal"),
    ],
)
def test_every_unknown_name_gets_did_you_mean(kind, name):
    from fedshare.config.overrides import check_overrides

    with pytest.raises(FedshareError, match="did you mean"):
        check_overrides([f"{kind}={name}"], config_dir())


def test_good_command_lines_pass_the_check():
    assert check_command_line(["strategy=fedprox", "strategy.mu=0.1"], config_dir()) == 1
    assert check_command_line(["-m", "seed=0,1", "strategy=fedavg,flea"], config_dir()) == 4
    assert check_command_line(["experiment=digits_quickstart"], config_dir()) == 1


def test_every_run_config_key_reaches_the_simulation_config():
    """A recorded setting is the one used: every `SimulationConfig` key set on the command
    line arrives in the engine's config (memory_format did not)."""
    assert {f.name for f in fields(SimulationConfig)} <= {f.name for f in fields(RunConfig)}
    changed = {
        "rounds": 3,
        "seed": 7,
        "device": "cpu",
        "memory_format": "contiguous",
        "progress": False,
        "clients": {"num": 3, "fraction": 0.5},
        "eval": {"every": 2, "batch_size": 5},
        "checkpoint": {"every": 0},
    }
    run = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), changed))
    data = federate(load_dataset({"name": "digits"}), {"name": "iid"}, 3, seed=7)
    sim = assemble(
        make_strategy("fedavg", {}),
        data,
        "auto",
        rounds=3,
        train={"lr": 0.3},
        **simulation_settings(run),
    )
    config = sim.config
    for key in fields(SimulationConfig):
        expected = getattr(run, key.name)
        if key.name == "train":
            assert config.train.lr == 0.3
        else:
            assert getattr(config, key.name) == expected, key.name
    assert config.memory_format == "contiguous" and config.eval.batch_size == 5
