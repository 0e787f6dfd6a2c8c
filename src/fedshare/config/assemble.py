"""One path from a run's choices to a `Simulation`, shared by the command line
(`fedshare.run`) and the Python API (`fedshare.simulate`).

Both hand over the strategy, the federated data, the model (a registry name or a module) and
the settings the user set; what they leave unset is resolved here, the same way for both:
rounds and training settings by the layered defaults (`fedshare.config.defaults`: strategy > dataset
> global), the model `auto` by the dataset's default model, initialised from the run's seed.
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


def init_model(
    name: str, data: FederatedData, seed: int, params: Mapping[str, Any] | None = None
) -> nn.Module:
    """Build a registered model for `data` with initial weights drawn from the run's seed."""
    if name == "auto":
        name = data.dataset.default_model
    seed_global_torch(seed, "model_init")
    return build_model(name, data.dataset.input_shape, data.dataset.num_classes, params)


def assemble(
    strategy: Strategy,
    data: FederatedData,
    model: nn.Module | str,
    *,
    rounds: int | None,
    seed: int,
    train: Mapping[str, Any],
    clients: ClientsConfig,
    eval: EvalConfig,
    checkpoint: CheckpointConfig,
    device: str = "auto",
    memory_format: str = "auto",
    progress: bool = True,
    model_params: Mapping[str, Any] | None = None,
    partition: str | None = None,
    run_dir: str | Path | None = None,
    record: dict[str, Any] | None = None,
    callbacks: "list[RoundCallback] | None" = None,
    overwrite: bool = False,
    group: "RankGroup | None" = None,
) -> "Simulation":
    """The run's `Simulation`, nothing written yet. `train` holds the training keys the user
    set (a missing or None key is filled by the layered defaults); `rounds=None` likewise.
    `partition` names the partition in the run's metadata (default: the partitioner's name);
    `record` is the config `config.yaml` records (the command line's composed config), to
    which the resolved model, rounds, training settings and run folder are added; `group` is
    this process's place in a run across several (`fedshare.engine.distributed`)."""
    from fedshare.engine.simulation import Simulation

    resolved_rounds = resolve_rounds(rounds, strategy)
    resolved_train = resolve_train(train, strategy, data.dataset.name)
    if isinstance(model, str):
        model_name = data.dataset.default_model if model == "auto" else model
        model = init_model(model_name, data, seed, model_params)
    else:
        model_name = type(model).__name__
    config = SimulationConfig(
        rounds=resolved_rounds,
        seed=seed,
        device=device,
        memory_format=memory_format,
        progress=progress,
        clients=clients,
        train=resolved_train,
        eval=eval,
        checkpoint=checkpoint,
    )
    meta = {
        "strategy": strategy.name,
        "data": data.dataset.name,
        "partition": partition or data.partition.name,
        "model": model_name,
    }
    if record is not None:
        record = {**record, "model": {**record.get("model", {}), "name": model_name}}
        record.update(rounds=resolved_rounds, train=asdict(resolved_train), run_dir=str(run_dir))
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
    sim.model_spec = (model_name, dict(model_params or {}))
    return sim
