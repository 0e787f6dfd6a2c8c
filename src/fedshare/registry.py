"""A name -> factory registry shared by strategies, datasets, partitioners and models."""

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

from fedshare.errors import FedshareError, choices_message

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects; unknown names raise a `FedshareError` listing the valid ones."""

    def __init__(self, kind: str, builtins: str | None = None) -> None:
        """`builtins`: the module whose import registers the built-in entries; it is imported
        at the first look-up, so importing fedshare costs nothing a run does not use."""
        self.kind = kind
        self._builtins = builtins
        self._items: dict[str, T] = {}

    def _load_builtins(self) -> None:
        if self._builtins is not None:
            module, self._builtins = self._builtins, None
            importlib.import_module(module)

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: str) -> T:
        self._load_builtins()
        try:
            return self._items[name]
        except KeyError:
            raise FedshareError(choices_message(self.kind, name, list(self._items))) from None

    def names(self) -> list[str]:
        self._load_builtins()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        return name in self._items
