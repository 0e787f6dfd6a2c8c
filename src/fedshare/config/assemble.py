"""The one path from a run's choices to a `Simulation`, taken by the command line
(`fedshare.run`) and the Python API (`fedshare.simulate`).

Both hand over the strategy, the federated data, the model (a registry name or a module) and
the settings the user set; every setting left unset (None) is resolved here, the same way for
both: rounds and training settings by the layered defaults (`fedshare.config.defaults`:
strategy > dataset > global), the other settings by `SimulationConfig`'s field defaults, and
the model `auto` by the dataset's default model, initialised from the run's seed.
"""

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from fedshare.config.defaults import resolve_rounds, resolve_train
from fedshare.config.schema import (
    CheckpointConfig,
    ClientsConfig,
    EvalConfig,
    SimulationConfig,
)
from fedshare.data.federated import FederatedData
from fedshare.engine.rng import seed_global_torch
from fedshare.models.base import build_model
from fedshare.strategies.base import Strategy

if TYPE_CHECKING:
    from fedshare.engine.distributed import RankGroup
    from fedshare.engine.simulation import RoundCallback, Simulation


def model_name(model: str, data: FederatedData) -> str:
    """A registered model's name, `auto` being the dataset's default model."""
    return data.dataset.default_model if model == "auto" else model


def init_model(
    name: str, data: FederatedData, seed: int, params: Mapping[str, Any] | None = None
) -> nn.Module:
    """Build a registered model (or `auto`) for `data` with initial weights drawn from the
    run's seed."""
    seed_global_torch(seed, "model_init")
    dataset = data.dataset
    return build_model(model_name(name, data), dataset.input_shape, dataset.num_classes, params)


def resolve_config(
    strategy: Strategy,
    dataset: str,
    *,
    rounds: int | None = None,
    train: Mapping[str, Any] | None = None,
    **settings: Any,
) -> SimulationConfig:
    """The run's `SimulationConfig`: `rounds` and `train` through the layered defaults, every
    other setting as given, or `SimulationConfig`'s default where None."""
    return SimulationConfig(
        rounds=resolve_rounds(rounds, strategy),
        train=resolve_train(train or {}, strategy, dataset),
        **{key: value for key, value in settings.items() if value is not None},
    )


def assemble(
    strategy: Strategy,
    data: FederatedData,
    model: nn.Module | str,
    *,
    rounds: int | None = None,
    seed: int | None = None,
    train: Mapping[str, Any] | None = None,
    clients: ClientsConfig | None = None,
    eval: EvalConfig | None = None,
    checkpoint: CheckpointConfig | None = None,
    device: str | None = None,
    memory_format: str | None = None,
    progress: bool | None = None,
    model_params: Mapping[str, Any] | None = None,
    partition: str | None = None,
    run_dir: str | Path | None = None,
    record: dict[str, Any] | None = None,
    callbacks: "list[RoundCallback] | None" = None,
    overwrite: bool = False,
    group: "RankGroup | None" = None,
) -> "Simulation":
    """The run's `Simulation`, nothing written yet. A setting left None takes its default
    (`resolve_config`); `train` holds the training keys the user set (a missing or None key
    is filled by the layered defaults). `partition` names the partition in the run's metadata
    (default: the partitioner's name); `record` is the config `config.yaml` records (the
    command line's composed config), to which the resolved model, rounds, training settings
    and run folder are added; `group` is this process's place in a run across several
    (`fedshare.engine.distributed`)."""
    from fedshare.engine.simulation import Simulation

    config = resolve_config(
        strategy,
        data.dataset.name,
        rounds=rounds,
        train=train,
        seed=seed,
        device=device,
        memory_format=memory_format,
        progress=progress,
        clients=clients,
        eval=eval,
        checkpoint=checkpoint,
    )
    if isinstance(model, str):
        name = model_name(model, data)
        model = init_model(name, data, config.seed, model_params)
    else:
        name = type(model).__name__
    meta = {
        "strategy": strategy.name,
        "data": data.dataset.name,
        "partition": partition or data.partition.name,
        "model": name,
    }
    if record is not None:
        record = {**record, "model": {**record.get("model", {}), "name": name}}
        record.update(rounds=config.rounds, train=asdict(config.train), run_dir=str(run_dir))
    sim = Simulation(
        strategy,
        data,
        model,
        config,
        run_dir,
        meta,
        callbacks,
        record=record,
        overwrite=overwrite,
        group=group,
    )
    sim.model_spec = (name, dict(model_params or {}))
    return sim
