"""Binding user parameters (from Hydra or Python) to a factory's keyword arguments, with checks."""

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fedshare.errors import FedshareError, did_you_mean

_SCALARS = (bool, int, float, str)


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
    for numbers; a list's items are not looked at)."""
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
    if origin in (list, tuple, typing.Sequence) or annotation in (list, tuple):
        return isinstance(value, list | tuple)
    if origin is dict or annotation is dict:
        return isinstance(value, Mapping)
    return True


def unknown_param_message(kind: str, name: str, key: str, accepted: Iterable[str]) -> str:
    """The sentence for a parameter that factory `name` (a strategy, a model, ...) lacks."""
    valid = sorted(accepted)
    return (
        f"{kind} {name!r} has no parameter {key!r}{did_you_mean(key, valid)}; its parameters "
        f"are: {', '.join(valid) or 'none'}"
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
            shown = getattr(annotation, "__name__", str(annotation))
            raise FedshareError(
                f"{kind} {name!r} parameter {key!r} must be of type {shown}, got {value!r}"
            )
        if annotation is float and isinstance(value, int):
            value = float(value)
        out[key] = value
    return out


def params_of(obj: Any) -> dict[str, Any]:
    """The parameters a dataclass instance (a strategy) was built with, by name."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
