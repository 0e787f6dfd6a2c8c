"""Strategies, one file per method, registered by name."""

from fedshare.strategies.base import (
    STRATEGIES,
    Message,
    Phase,
    SetupContext,
    Strategy,
    Update,
    make_strategy,
    register_strategy,
)
from fedshare.strategies.fedavg import FedAvg
from fedshare.strategies.fedprox import FedProx

__all__ = [
    "STRATEGIES",
    "FedAvg",
    "FedProx",
    "Message",
    "Phase",
    "SetupContext",
    "Strategy",
    "Update",
    "make_strategy",
    "register_strategy",
]
