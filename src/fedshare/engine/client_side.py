"""The wall between a strategy's server side and its client side.

A strategy class describes both sides of the protocol, but a client step never runs on the
server's object. Before round 0 the engine builds the strategy's *client side*: a fresh
instance from the strategy's parameters alone, given only what every client knows before the
run (`ClientSetup`: the model architecture, the training settings, the seed, the device, the
number of classes and of clients) through `Strategy.client_setup`. Every client step is a
method of the strategy, and the engine calls it on that instance. So a client step can reach
its `Client` (its own data, random streams, persistent state and kept messages), the `Message`
it was sent and the parameters — and nothing the server holds: reading server state
(`self.model`, `self.data`, a pool the server gathered) raises `ClientWallError`, and writing
to `self` after setup does too (what a client keeps between participations belongs in
`client.state`).
"""

import dataclasses
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fedshare.config import TrainConfig

if TYPE_CHECKING:
    from fedshare.strategies.base import Strategy


@dataclass(frozen=True)
class ClientSetup:
    """What every client knows before round 0; weights and everything else arrive in messages."""

    model: nn.Module
    """The worker model. At `client_setup` it holds the initial model's weights (the run's
    seed; every client knows them, FedBN starts its local BN there); afterwards, whatever the
    last client left."""
    train: TrainConfig
    seed: int
    device: torch.device
    num_classes: int
    input_shape: tuple[int, ...]
    num_clients: int
    """Public like the seed: a chain's topology, a source/destination split depend on it."""


class ClientWallError(AttributeError):
    """A client step read or wrote something only the server has (a bug in the strategy)."""


_SEALED: dict[type, type] = {}


def _sealed_class(cls: type) -> type:
    """`cls` with attribute reads of missing names and writes after setup refused."""
    if cls in _SEALED:
        return _SEALED[cls]
    name = getattr(cls, "name", cls.__name__)

    def __getattr__(self: Any, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise ClientWallError(
            f"{name}: client-side code read self.{attr}, which only the server holds; a client "
            f"step sees its Client (data, state, kept messages) and the Message it was sent — "
            f"send {attr} in a message, or derive it in client_setup"
        )

    def __setattr__(self: Any, attr: str, value: Any) -> None:
        if self.__dict__.get("_sealed", False):
            raise ClientWallError(
                f"{name}: a client step wrote self.{attr}; the client side is shared by every "
                f"client, so what one client keeps between participations goes in client.state"
            )
        object.__setattr__(self, attr, value)

    sealed = type(
        cls.__name__,
        (cls,),
        {
            "__getattr__": __getattr__,
            "__setattr__": __setattr__,
            "__qualname__": f"{cls.__qualname__}.client_side",
            "__module__": cls.__module__,
        },
    )
    _SEALED[cls] = sealed
    return sealed


def client_side(strategy: "Strategy", setup: ClientSetup) -> "Strategy":
    """A new instance of the strategy from its parameters and `setup` alone, sealed."""
    replica = dataclasses.replace(strategy)
    replica.__class__ = _sealed_class(type(strategy))
    cuda = [setup.device] if setup.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):  # module inits here leave the run's streams be
        replica.client_setup(setup)
    object.__setattr__(replica, "_sealed", True)
    return replica


def on_client_side(step: Callable[..., Any], strategy: object, replica: object) -> Callable:
    """`step` (a method of `strategy`) bound to the client side `replica` instead."""
    if not inspect.ismethod(step) or step.__self__ is not strategy:
        raise TypeError(
            f"a phase's client_step must be a method of the strategy (got {step!r}), so that "
            f"the engine can run it on the strategy's client side"
        )
    return types.MethodType(step.__func__, replica)
