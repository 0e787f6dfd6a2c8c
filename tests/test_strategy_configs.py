"""One source of strategy defaults: every `configs/strategy/*.yaml` equals its dataclass."""

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from fedshare.config.params import params_of
from fedshare.config.rules import RULE, Rule
from fedshare.errors import FedshareError
from fedshare.strategies import STRATEGIES

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "strategy"
NOT_IN_YAML = {
    "fedpft_chain": {
        "dp",
        "dp_epsilon",
        "dp_delta",
        "dp_log_term",
        "dp_calibration",
        "dp_check",
        "dp_reduction",
    },
}
"""Inherited parameters a strategy refuses to change (the chain offers no DP), so its YAML
does not show them."""


def test_every_strategy_has_a_config_and_every_config_a_strategy():
    names = {p.stem for p in CONFIGS.glob("*.yaml")}
    assert names == set(STRATEGIES.names())


@pytest.mark.parametrize("name", sorted(STRATEGIES.names()))
def test_config_repeats_the_dataclass_defaults_exactly(name):
    """A key missing from the YAML, an extra one, or a default that drifted fails here."""
    values = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml"), resolve=True)
    assert values.pop("name") == name
    defaults = params_of(STRATEGIES.get(name)())
    for key in NOT_IN_YAML.get(name, set()):
        defaults.pop(key)
    assert set(values) == set(defaults), sorted(set(values) ^ set(defaults))
    for key, default in defaults.items():
        value = values[key]
        if isinstance(default, tuple):
            default = list(default)
        assert value == default, f"{name}.{key}: yaml {value!r} != dataclass {default!r}"


# ------------------------------------------------------------------ parameter rules
def parameters(name: str) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(STRATEGIES.get(name)) if f.init]


def refused_values(field: dataclasses.Field) -> list[Any]:
    """Values the field's declared rule refuses: NaN and inf for a number, the values just
    past its bounds, an unknown choice, a list of the wrong shape."""
    rule: Rule = field.metadata[RULE]
    whole = "int" in str(field.type) and "float" not in str(field.type)
    if rule.any_value:
        return []
    if rule.choices is not None:
        return ["bogus"]
    if rule.length is not None or rule.numbers:
        return [[float("nan")], "abc"]
    bad: list[Any] = [] if whole else [float("nan"), float("inf"), -float("inf")]
    if rule.low is not None:
        bad.append(rule.low if rule.low_open else rule.low - 1)
    if rule.high is not None:
        bad.append(int(rule.high) + 1 if whole else rule.high * 2 + 1)
    return [int(v) if whole and isinstance(v, float) else v for v in bad]


@pytest.mark.parametrize("name", sorted(STRATEGIES.names()))
def test_every_parameter_declares_its_rule(name):
    undeclared = [f.name for f in parameters(name) if RULE not in f.metadata]
    assert not undeclared, f"{name}: {undeclared} declare no rule (fedshare.config.rules.ruled)"


@pytest.mark.parametrize("name", sorted(STRATEGIES.names()))
def test_a_value_outside_its_rule_is_refused_when_the_strategy_is_built(name):
    """Python and the command line alike: the strategy refuses it in one sentence naming the
    key, before anything runs."""
    for field in parameters(name):
        for value in refused_values(field):
            with pytest.raises(FedshareError) as err:
                STRATEGIES.get(name)(**{field.name: value})
            message = str(err.value)
            assert message.startswith(f"strategy.{field.name}={value!r} is not valid"), message
            assert "\n" not in message


def sweep_of_one_bad_value(name: str) -> tuple[str, int]:
    """`strategy.<p>=<default>,<refused>` for the strategy's first parameter whose rule
    refuses a value (member 1 is bad); for a strategy with no such parameter, an unknown one
    in a sweep over seeds (member 0 is bad)."""
    for field in parameters(name):
        refused = [v for v in refused_values(field) if not isinstance(v, list)]
        if refused:
            default = getattr(STRATEGIES.get(name)(), field.name)
            values = f"{override_value(default)},{override_value(refused[0])}"
            return f"strategy.{field.name}={values}", 1
    return "seed=0,1 strategy.no_such_parameter=1", 0


def override_value(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


@pytest.mark.parametrize("name", sorted(STRATEGIES.names()))
def test_a_sweep_with_one_bad_strategy_value_exits_2_before_any_member_starts(
    name, tmp_path, monkeypatch, capsys
):
    from fedshare import run

    sweep = tmp_path / "sweep"
    values, bad_member = sweep_of_one_bad_value(name)
    argv = ["fedshare.run", "-m", f"hydra.sweep.dir={sweep}", f"strategy={name}", *values.split()]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        run.main()
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"fedshare: error: sweep member {bad_member} (strategy={name} ")
    assert "\n" not in error, error
    assert "no member was started" in error
    assert not sweep.exists() and list(tmp_path.iterdir()) == []
