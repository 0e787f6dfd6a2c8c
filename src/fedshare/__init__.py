"""fedshare: a research benchmark library for feature-sharing federated learning.

The names below are imported on first use (PEP 562), so `python -m fedshare.run --help` and a
run import only what they use; the registries import the built-in strategies and models at
their first look-up.
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "CheckpointConfig": "fedshare.config",
    "ClientsConfig": "fedshare.config",
    "EvalConfig": "fedshare.config",
    "SimulationConfig": "fedshare.config",
    "TrainConfig": "fedshare.config",
    "FederatedData": "fedshare.data",
    "federate": "fedshare.data",
    "load_dataset": "fedshare.data",
    "RunResult": "fedshare.engine.simulation",
    "FedshareError": "fedshare.errors",
    "load_model": "fedshare.results.model_file",
    "simulate": "fedshare.config.api",
}

__all__ = [
    "CheckpointConfig",
    "ClientsConfig",
    "EvalConfig",
    "FederatedData",
    "FedshareError",
    "RunResult",
    "SimulationConfig",
    "TrainConfig",
    "federate",
    "load_dataset",
    "load_model",
    "simulate",
]

if TYPE_CHECKING:
    from fedshare.config import (
        CheckpointConfig,
        ClientsConfig,
        EvalConfig,
        SimulationConfig,
        TrainConfig,
    )
    from fedshare.config.api import simulate
    from fedshare.data import FederatedData, federate, load_dataset
    from fedshare.engine.simulation import RunResult
    from fedshare.errors import FedshareError
    from fedshare.results.model_file import load_model


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"fedshare.{name}") is not None:
        return importlib.import_module(f"fedshare.{name}")  # a subpackage, e.g. fedshare.models
    raise AttributeError(f"module 'fedshare' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
