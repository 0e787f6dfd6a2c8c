"""`fedshare.simulate`: one call from Python, no Hydra."""

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from fedshare.config import (
    CheckpointConfig,
    ClientsConfig,
    EvalConfig,
    SimulationConfig,
    TrainConfig,
)
from fedshare.data.federated import FederatedData
from fedshare.defaults import resolve_rounds
from fedshare.engine.rng import seed_global_torch
from fedshare.engine.simulation import RoundCallback, RunResult, Simulation
from fedshare.errors import FedshareError
from fedshare.models.base import build_model
from fedshare.strategies.base import Strategy, make_strategy

C = TypeVar("C")


def as_config(cls: type[C], value: C | Mapping[str, Any] | None) -> C:
    """A config dataclass from an instance, a mapping of its fields, or None (defaults)."""
    if value is None:
        return cls()
    if is_dataclass(value):
        return value  # type: ignore[return-value]
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = set(value) - known
    if unknown:
        raise FedshareError(
            f"{cls.__name__} has no field(s) {sorted(unknown)}; its fields are {sorted(known)}"
        )
    return cls(**value)


def init_model(
    name: str, data: FederatedData, seed: int, params: Mapping[str, Any] | None = None
) -> nn.Module:
    """Build a registered model for `data` with initial weights drawn from the run's seed."""
    if name == "auto":
        name = data.dataset.default_model
    seed_global_torch(seed, "model_init")
    return build_model(name, data.dataset.input_shape, data.dataset.num_classes, params)


def simulate(
    strategy: Strategy | str,
    data: FederatedData,
    model: nn.Module | str = "auto",
    rounds: int | None = None,
    *,
    seed: int = 0,
    clients: ClientsConfig | Mapping[str, Any] | None = None,
    train: TrainConfig | Mapping[str, Any] | None = None,
    eval: EvalConfig | Mapping[str, Any] | None = None,
    checkpoint: CheckpointConfig | Mapping[str, Any] | None = None,
    device: str = "auto",
    memory_format: str = "auto",
    progress: bool = False,
    run_dir: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    callbacks: list[RoundCallback] | None = None,
) -> RunResult:
    """Run `strategy` on federated `data` with `model` for `rounds` rounds.

    `strategy` and `model` may be registry names; a named model is initialised from `seed`.
    `rounds=None` is 1 for a one-shot strategy, else 20. `train` is taken as given: the fields
    it leaves out keep `TrainConfig`'s defaults (the command line's layered defaults are
    `fedshare.defaults.resolve_train`). With `run_dir`, the run directory files are written
    there: a folder that holds a run is refused unless `overwrite=True`, and `resume=True`
    continues from its checkpoint. Returns a `RunResult` with the history and summary.
    """
    strategy_obj = make_strategy(strategy) if isinstance(strategy, str) else strategy
    config = SimulationConfig(
        rounds=resolve_rounds(rounds, strategy_obj),
        seed=seed,
        device=device,
        memory_format=memory_format,
        progress=progress,
        clients=as_config(ClientsConfig, clients),
        train=as_config(TrainConfig, train),
        eval=as_config(EvalConfig, eval),
        checkpoint=as_config(CheckpointConfig, checkpoint),
    )
    model_name = model if isinstance(model, str) else type(model).__name__
    model_obj = init_model(model, data, seed) if isinstance(model, str) else model
    meta = {
        "strategy": strategy_obj.name,
        "data": data.dataset.name,
        "partition": data.partition.name,
        "model": data.dataset.default_model if model_name == "auto" else model_name,
    }
    sim = Simulation(
        strategy_obj, data, model_obj, config, run_dir, meta, callbacks, overwrite=overwrite
    )
    return sim.run(resume=resume)
