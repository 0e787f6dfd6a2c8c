"""A strategy's search space: `configs/tune/<strategy>.yaml`, on top of `configs/tune/default.yaml`.

Each key of a space file is a run key (`strategy.mu`, `train.lr`) with its range:

    strategy.mu: {low: 0.001, high: 1.0, log: true}     # a float, log-uniform
    strategy.mean_size: {low: 5, high: 50, int: true}   # an integer
    strategy.norm: {choices: [squared, plain]}          # a choice
    train.lr: {low: 0.1, high: 10.0, log: true, times_default: true}

`times_default` samples a factor of the run's own default (for `train.lr`: the value the
layered defaults give, strategy > dataset > global), so one rule fits every dataset's recipe.
A strategy's file names its ranges' source (paper, authors' code or a stated rule) in a
comment; its keys replace the default file's, which holds the rule for `train.lr`.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedshare.errors import FedshareError

DEFAULT_SPACE = "default"
"""The space every strategy's adds to (its own keys win): `configs/tune/default.yaml`."""


@dataclass(frozen=True)
class Range:
    """One key's range: floats/ints in [low, high] (log-uniform with `log`), or `choices`."""

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple[Any, ...] | None = None
    times_default: bool = False

    def suggest(self, trial: Any) -> Any:
        """The trial's value (a factor of the default where `times_default`)."""
        if self.choices is not None:
            return trial.suggest_categorical(self.key, list(self.choices))
        assert self.low is not None and self.high is not None
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, log=self.log)

    def value(self, sampled: Any, default: Any) -> Any:
        """The run's value of the key for a `sampled` value."""
        return sampled * default if self.times_default else sampled

    def sampled_default(self, default: Any) -> Any:
        """What `suggest` would return for the run's default, None where it is out of range."""
        value = 1.0 if self.times_default else default
        if self.choices is not None:
            return value if value in self.choices else None
        assert self.low is not None and self.high is not None
        inside = isinstance(value, int | float) and self.low <= value <= self.high
        return value if inside else None

    def as_dict(self) -> dict[str, Any]:
        if self.choices is not None:
            return {"choices": list(self.choices)}
        out: dict[str, Any] = {"low": self.low, "high": self.high, "log": self.log}
        if self.integer:
            out["int"] = True
        if self.times_default:
            out["times_default"] = True
        return out


def parse_range(key: str, spec: Any, where: str) -> Range:
    """One entry of a space file, checked."""
    if not isinstance(spec, Mapping):
        raise FedshareError(f"{where}: {key} must map to a range, e.g. {{low: 0.01, high: 1}}")
    unknown = set(spec) - {"low", "high", "log", "int", "choices", "times_default"}
    if unknown:
        raise FedshareError(
            f"{where}: {key} has unknown field(s) {sorted(unknown)}; valid: low, high, log, int, "
            f"choices, times_default"
        )
    if "choices" in spec:
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise FedshareError(f"{where}: {key}.choices must be a non-empty list")
        return Range(key, choices=tuple(choices))
    low, high = spec.get("low"), spec.get("high")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high))
    log = bool(spec.get("log", False))
    if not numbers or not low < high or (log and low <= 0):  # type: ignore[operator]
        raise FedshareError(
            f"{where}: {key} needs numbers low < high (low > 0 with log: true), got "
            f"low={low!r}, high={high!r}"
        )
    integer, times = bool(spec.get("int", False)), bool(spec.get("times_default", False))
    return Range(key, float(low), float(high), log, integer, None, times)  # type: ignore[arg-type]


def load_space(directory: Path, strategy: str, file: Path | None = None) -> list[Range]:
    """The search space of `strategy`: the default file's ranges with the strategy's file's
    (or `file`'s) on top, in key order."""
    ranges: dict[str, Range] = {}
    own = file if file is not None else directory / f"{strategy}.yaml"
    if file is not None and not file.is_file():
        raise FedshareError(f"space={file}: no such file; give a search-space YAML file")
    for path in (directory / f"{DEFAULT_SPACE}.yaml", own):
        if not path.is_file():
            continue
        content = yaml.safe_load(path.read_text()) or {}
        if not isinstance(content, Mapping):
            raise FedshareError(f"{path}: a search space maps run keys to ranges")
        for key, spec in content.items():
            ranges[str(key)] = parse_range(str(key), spec, str(path))
    if not ranges:
        raise FedshareError(f"no search space for strategy {strategy!r} in {directory}")
    return list(ranges.values())
