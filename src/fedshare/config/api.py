"""`fedshare.simulate`: one call from Python, no Hydra."""

from collections.abc import Mapping
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from torch import nn

from fedshare.config.assemble import assemble, init_model
from fedshare.config.schema import CheckpointConfig, ClientsConfig, EvalConfig, TrainConfig
from fedshare.data.federated import FederatedData
from fedshare.engine.simulation import RoundCallback, RunResult
from fedshare.errors import FedshareError
from fedshare.strategies.base import Strategy, make_strategy

__all__ = ["as_config", "init_model", "simulate"]

C = TypeVar("C")


def as_config(cls: type[C], value: C | Mapping[str, Any] | None) -> C:
    """A config dataclass from an instance, a mapping of its fields, or None (defaults)."""
    if value is None:
        return cls()
    if is_dataclass(value):
        return value
    settings = cast(Mapping[str, Any], value)  # not a dataclass: the mapping of its fields
    check_fields(cls, settings)
    return cls(**settings)


def check_fields(cls: type, value: Mapping[str, Any]) -> None:
    known = {f.name for f in fields(cls)}
    unknown = set(value) - known
    if unknown:
        raise FedshareError(
            f"{cls.__name__} has no field(s) {sorted(unknown)}; its fields are {sorted(known)}"
        )


def explicit_train(train: TrainConfig | Mapping[str, Any] | None) -> dict[str, Any]:
    """The training keys the caller set: all of a `TrainConfig`, a mapping's keys, or none."""
    if train is None:
        return {}
    if isinstance(train, TrainConfig):
        return asdict(train)
    check_fields(TrainConfig, train)
    return dict(train)


def simulate(
    strategy: Strategy | str,
    data: FederatedData,
    model: nn.Module | str = "auto",
    rounds: int | None = None,
    *,
    seed: int | None = None,
    strategy_params: Mapping[str, Any] | None = None,
    model_params: Mapping[str, Any] | None = None,
    clients: ClientsConfig | Mapping[str, Any] | None = None,
    train: TrainConfig | Mapping[str, Any] | None = None,
    eval: EvalConfig | Mapping[str, Any] | None = None,
    checkpoint: CheckpointConfig | Mapping[str, Any] | None = None,
    device: str | None = None,
    memory_format: str | None = None,
    progress: bool | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    callbacks: list[RoundCallback] | None = None,
) -> RunResult:
    """Run `strategy` on federated `data` with `model` for `rounds` rounds, resolved exactly
    as the command line resolves them (`fedshare.config.assemble`, one code path).

    `strategy` and `model` may be registry names (with `strategy_params` / `model_params`, the
    keys of `configs/strategy/<name>.yaml` / `configs/model/<name>.yaml`); a named model is
    initialised from `seed`, `auto` is the dataset's default model. What is left unset (None)
    has the command line's default: `rounds` and the `train` keys not given (a mapping may
    give some) come from the layered defaults (`fedshare.config.defaults`: strategy > dataset
    > global; `rounds` is 1 for a one-shot strategy), every other setting from
    `SimulationConfig`'s field defaults; a `TrainConfig` instance sets every key. With
    `run_dir`, the run directory files are written there: a folder that holds a run is
    refused unless `overwrite=True`, and `resume=True` continues from its checkpoint. Returns
    a `RunResult` with the history and summary.
    """
    if isinstance(strategy, str):
        strategy = make_strategy(strategy, strategy_params)
    elif strategy_params:
        raise FedshareError("strategy_params needs a strategy name, not a Strategy object")
    sim = assemble(
        strategy,
        data,
        model,
        rounds=rounds,
        seed=seed,
        train=explicit_train(train),
        clients=as_config(ClientsConfig, clients),
        eval=as_config(EvalConfig, eval),
        checkpoint=as_config(CheckpointConfig, checkpoint),
        device=device,
        memory_format=memory_format,
        progress=progress,
        model_params=model_params,
        run_dir=run_dir,
        callbacks=callbacks,
        overwrite=overwrite,
    )
    return sim.run(resume=resume)
