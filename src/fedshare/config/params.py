"""Binding user parameters (from Hydra or Python) to a factory's keyword arguments, with checks."""

import collections.abc
import dataclasses
import inspect
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fedshare.errors import FedshareError, did_you_mean, named_elsewhere

_SCALARS = (bool, int, float, str)
_SEQUENCES = (list, tuple, typing.Sequence, collections.abc.Sequence)


def accepted_params(target: Callable[..., Any], skip: int = 0) -> dict[str, inspect.Parameter]:
    """Keyword parameters a factory accepts, after its first `skip` positional ones."""
    if dataclasses.is_dataclass(target):
        fields = [f for f in dataclasses.fields(target) if f.init]
        hints = typing.get_type_hints(target)
        return {
            f.name: inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(f.name, Any)
            )
            for f in fields
        }
    params = list(inspect.signature(target).parameters.values())[skip:]
    hints = typing.get_type_hints(target)
    return {
        p.name: p.replace(annotation=hints.get(p.name, Any))
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def type_ok(value: Any, annotation: Any) -> bool:
    """Whether `value` has the type `annotation` declares (ints pass for floats, bools never
    for numbers, text never for a sequence; a sequence's items are checked against its item
    type, a mapping's values are not looked at)."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in _SCALARS:
        return isinstance(value, annotation)
    if origin in _SEQUENCES or annotation in _SEQUENCES:
        if not isinstance(value, list | tuple):
            return False
        items = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        if origin is tuple and len(items) > 1:
            return len(value) == len(items) and all(map(type_ok, value, items))
        return not items or all(type_ok(v, items[0]) for v in value)
    if origin is dict or annotation is dict:
        return isinstance(value, Mapping)
    return True


def type_text(annotation: Any) -> str:
    """An annotation as written in the source: `int`, `Sequence[int]`, `str | None`."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("collections.abc.", "")


def non_finite(value: Any) -> bool:
    """Whether `value` is, or a list of it holds, a NaN or infinite number."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list | tuple):
        return any(non_finite(v) for v in value)
    return False


def unknown_param_message(
    kind: str, name: str, key: str, accepted: Iterable[str], elsewhere: Iterable[str] = ()
) -> str:
    """The sentence for a parameter that factory `name` (a strategy, a model, ...) lacks;
    `elsewhere`: keys of the same name in another place, suggested first."""
    valid = sorted(accepted)
    hint = named_elsewhere(elsewhere) or did_you_mean(key, valid)
    return (
        f"{kind} {name!r} has no parameter {key!r}{hint}; its parameters are: "
        f"{', '.join(valid) or 'none'}"
    )


def check_params(
    target: Callable[..., Any], params: Mapping[str, Any], kind: str, name: str, skip: int = 0
) -> dict[str, Any]:
    """Return `params` as a plain dict after checking every key and its type against `target`.

    Raises `FedshareError` naming the bad key or value and the valid choices.
    """
    accepted = accepted_params(target, skip)
    out: dict[str, Any] = {}
    for key, value in params.items():
        if key not in accepted:
            raise FedshareError(unknown_param_message(kind, name, key, accepted))
        annotation = accepted[key].annotation
        if not type_ok(value, annotation):
            raise FedshareError(
                f"{kind} {name!r} parameter {key!r} must be of type {type_text(annotation)}, "
                f"got {value!r}"
            )
        if non_finite(value):
            raise FedshareError(
                f"{kind} {name!r} parameter {key}={value!r} is not valid: it must be finite "
                f"(no NaN or infinity)"
            )
        if annotation is float and isinstance(value, int):
            value = float(value)
        out[key] = value
    return out


def params_of(obj: Any) -> dict[str, Any]:
    """The parameters a dataclass instance (a strategy) was built with, by name."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
