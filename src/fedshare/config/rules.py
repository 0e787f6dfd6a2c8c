"""Value rules declared beside the typed config fields (`fedshare.config.schema`): the one
place that says which values a key accepts. `fedshare.config.validation` checks a whole config
against them, and the tests draw bad values from them, so a new key cannot be left unchecked."""

import math
from dataclasses import dataclass, field
from typing import Any

SEED_LIMIT = 2**64
"""Seeds feed 64 bits to the random streams (`fedshare.engine.rng`): larger ones would alias."""
FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32: training computes in float32, so a learning rate, decay or factor of
this size or more overflows in the optimizer."""


@dataclass(frozen=True)
class Rule:
    """The values one key accepts: a number range (finite), a choice, a list's length and its
    items' range, or None where `optional`. `any_value` marks a key every value of its type
    suits (a name, a path, a switch)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    length: int | None = None
    nonempty: bool = False
    optional: bool = False
    scalar_or_list: bool = False
    numbers: bool = False
    """A list of numbers (each in the range)."""
    any_value: bool = False

    def describe(self) -> str:
        """What a valid value is, in a few words."""
        if self.any_value:
            return "any value of its type"
        if self.choices is not None:
            text = f"one of {', '.join(self.choices)}"
            if self.scalar_or_list:
                text += ", or a non-empty list of them"
        else:
            number = self._range() if self.low is not None or self.high is not None else None
            one = number or "a finite number"
            if self.length is not None:
                text = f"a list of {self.length} numbers, each {one}"
            elif self.scalar_or_list:
                text = f"{one}, or a non-empty list of such numbers"
            elif self.numbers:
                kind = "a non-empty list" if self.nonempty else "a list"
                text = f"{kind} of numbers, each {one}"
            elif self.nonempty:
                text = "a non-empty text"
            else:
                text = one
        return text + (" (or null)" if self.optional else "")

    def _range(self) -> str:
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"a finite number in {left}{_show(self.low)}, {_show(self.high)}{right}"
        if self.low is not None:
            return f"a finite number {'>' if self.low_open else '>='} {_show(self.low)}"
        assert self.high is not None  # `describe` asks for a range only when a bound is set
        return f"a finite number {'<' if self.high_open else '<='} {_show(self.high)}"

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if self.any_value:
            return True
        if self.choices is not None:
            if self.scalar_or_list and isinstance(value, list | tuple):
                return bool(value) and all(self._chosen(v) for v in value)
            return self._chosen(value)
        if isinstance(value, list | tuple):
            if self.length is None and not (self.scalar_or_list or self.numbers):
                return False
            if self.length is not None and len(value) != self.length:
                return False
            if (self.nonempty or self.scalar_or_list) and not value:
                return False
            return all(self._in_range(v) for v in value)
        if self.length is not None:
            return False
        if isinstance(value, str):
            numeric = self.low is not None or self.high is not None
            if numeric or self.scalar_or_list or self.numbers:
                return False
            return not self.nonempty or bool(value.strip())
        return self._in_range(value)

    def _chosen(self, value: Any) -> bool:
        return isinstance(value, str) and value in (self.choices or ())

    def _in_range(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


def _show(bound: float) -> str:
    if bound == SEED_LIMIT:
        return "2^64"
    if bound == FLOAT32_MAX:
        return "3.4e38"
    return str(int(bound)) if float(bound).is_integer() else str(bound)


RULE = "rule"
"""The key of a field's `metadata` that holds its `Rule`."""
SOURCE = "source"
"""The key of a field's `metadata` that holds where its default comes from."""
SOURCE_KINDS = ("paper", "code", "rule")
"""How a default's source starts: `paper:` (a section, equation or table of the method's
paper), `code:` (its authors' code, repository and file) or `rule:` (a documented rule, e.g.
"off: the plain method", "FedAvg's value, so the comparison isolates the method")."""


def ruled(default: Any = None, rule: Rule | None = None, source: str = "", **factory: Any) -> Any:
    """A dataclass field with a default (or `default_factory=...`), its value rule and the
    source of its default (`SOURCE_KINDS`; every strategy parameter names one)."""
    metadata = {RULE: rule, SOURCE: source}
    if "default_factory" in factory:
        return field(default_factory=factory["default_factory"], metadata=metadata)
    return field(default=default, metadata=metadata)


ANY = Rule(any_value=True)
COUNT = Rule(low=1)
"""A whole number of at least 1 (a size, a count, a period)."""
NON_NEGATIVE = Rule(low=0)
POSITIVE = Rule(low=0, low_open=True)
TRAINING_FACTOR = Rule(low=0, high=FLOAT32_MAX, high_open=True)
"""A non-negative factor of training (weight decay, a schedule's factor or floor) that float32
arithmetic can hold."""
LEARNING_RATE = Rule(low=0, low_open=True, high=FLOAT32_MAX, high_open=True)
PROBABILITY = Rule(low=0, high=1, low_open=True)
FRACTION = Rule(low=0, high=1)
"""A share or a mixing weight in [0, 1]."""
EPOCHS = Rule(low=0, high=10_000)
"""An epoch-like count: at most 10,000 passes (more would run for days, not finish)."""
STEPS = Rule(low=0, high=1_000_000)
"""An optimizer's step or iteration count: at most a million."""
WIDTH = Rule(low=1, high=65_536)
"""A layer's width or an embedding's dimension: at most 65,536 (a wider one would not fit)."""
SIZE = Rule(low=1, high=2**20)
"""A batch, chunk or sample count: at most 2^20."""
COMPONENTS = Rule(low=1, high=1_000)
"""Mixture components per class: at most 1,000."""
