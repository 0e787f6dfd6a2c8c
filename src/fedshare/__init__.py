"""fedshare: a research benchmark library for feature-sharing federated learning."""

from fedshare import models, strategies  # noqa: F401  (registers built-in models/strategies)
from fedshare.api import simulate
from fedshare.config import (
    CheckpointConfig,
    ClientsConfig,
    EvalConfig,
    SimulationConfig,
    TrainConfig,
)
from fedshare.data import FederatedData, federate, load_dataset
from fedshare.engine.simulation import RunResult, Simulation
from fedshare.errors import FedshareError

__version__ = "0.1.0"

__all__ = [
    "CheckpointConfig",
    "ClientsConfig",
    "EvalConfig",
    "FederatedData",
    "FedshareError",
    "RunResult",
    "Simulation",
    "SimulationConfig",
    "TrainConfig",
    "federate",
    "load_dataset",
    "simulate",
]
