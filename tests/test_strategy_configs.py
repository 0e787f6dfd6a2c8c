"""One source of strategy defaults: every `configs/strategy/*.yaml` equals its dataclass."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fedshare.config.params import params_of
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
