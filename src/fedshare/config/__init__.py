"""The configuration layer: from a user's choices to a checked, assembled run.

- `rules`: the value rule each setting declares (`ruled` fields);
- `schema`: the typed settings (`RunConfig`, `SimulationConfig`, `TrainConfig`, ...);
- `params`: binding a group's keys (strategy, dataset, partition, model) to its factory;
- `defaults`: the layered defaults (command line > preset > strategy > dataset > global);
- `overrides`, `compose`, `validation`: the command line read, composed once and checked
  before anything is written (a sweep's members each before the first starts);
- `assemble`: the one path from choices to a `Simulation` (the command line and
  `fedshare.simulate`, in `api`, both take it).

The schema's dataclasses are importable from here; the rest from their modules.
"""

from fedshare.config.schema import (
    MEMORY_FORMATS,
    OPTIMIZERS,
    SCHEDULES,
    CheckpointConfig,
    ClientsConfig,
    DataOptions,
    EvalConfig,
    RunConfig,
    ServerDataConfig,
    SimulationConfig,
    TrainConfig,
    TrainSettings,
)

__all__ = [
    "MEMORY_FORMATS",
    "OPTIMIZERS",
    "SCHEDULES",
    "CheckpointConfig",
    "ClientsConfig",
    "DataOptions",
    "EvalConfig",
    "RunConfig",
    "ServerDataConfig",
    "SimulationConfig",
    "TrainConfig",
    "TrainSettings",
]
