"""A name -> factory registry shared by strategies, datasets, partitioners and models."""

from collections.abc import Callable
from typing import Generic, TypeVar

from fedshare.errors import FedshareError, choices_message

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects; unknown names raise a `FedshareError` listing the valid ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise FedshareError(choices_message(self.kind, name, list(self._items))) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items
