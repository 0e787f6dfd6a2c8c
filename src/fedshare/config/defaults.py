"""Layered run defaults: command line > preset > strategy > dataset > global.

The command line and a preset (`experiment=...`) set keys explicitly. What they leave unset
comes from the strategy (the optimizer and schedule of its paper, `Strategy.train_defaults`;
`rounds=1` for a one-shot method), then from the dataset (training settings that learn with
the dataset's default model, `DATASET_TRAIN`), then from the global defaults: the field
defaults of `SimulationConfig` and `TrainConfig`, each written once, there. The resolved
values are what `config.yaml` records.
"""

from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from fedshare.config.schema import SimulationConfig, TrainConfig
from fedshare.errors import FedshareError
from fedshare.strategies.base import Strategy

_SGD_CNN = {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9}
_ADAM = {"optimizer": "adam", "lr": 1e-3, "momentum": 0.0}

DATASET_TRAIN: dict[str, dict[str, Any]] = {
    # small CNN on 8×8 / 28×28 digits: the quick start's recipe
    "digits": _SGD_CNN,
    "mnist": {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9},
    # lenet_fmnist: ReBaFL's recipe (ReBaFL §5.1; momentum: the authors' code); lr 0.05 /
    # momentum 0.9 diverges
    "fmnist": {"optimizer": "sgd", "lr": 0.01, "momentum": 0.5, "weight_decay": 5e-4},
    # MobileNetV2 / audio / HAR nets: FLea's optimizer (FLea App. C.2), without its schedule
    "cifar10": _ADAM,
    "cifar10_sample": _ADAM,
    "cifar100": _ADAM,
    "fsdd": _ADAM,
    "urbansound8k": _ADAM,
    "uci_har": _ADAM,
    # vectors with the mlp / linear models
    "synthetic": _SGD_CNN,
    "synthetic_mixture": _SGD_CNN,
    "features_file": _ADAM,
}


def resolve_train(
    explicit: Mapping[str, Any], strategy: type[Strategy] | Strategy, dataset: str
) -> TrainConfig:
    """The run's training settings: the keys set in `explicit` (not None) win, then the
    strategy's `train_defaults`, then the dataset's, then `TrainConfig`'s."""
    values = asdict(TrainConfig())
    values.update(DATASET_TRAIN.get(dataset, {}))
    values.update(strategy.train_defaults)
    values.update({k: v for k, v in explicit.items() if v is not None})
    return TrainConfig(**values)


def resolve_rounds(explicit: int | None, strategy: type[Strategy] | Strategy) -> int:
    """`rounds` as set, else 1 for a one-shot strategy, else `SimulationConfig`'s default; a
    one-shot strategy refuses any other explicit value."""
    if strategy.one_shot:
        if explicit not in (None, 1):
            raise FedshareError(
                f"strategy {strategy.name!r} is one-shot (a single communication round), but "
                f"rounds={explicit}; leave rounds unset or set rounds=1"
            )
        return 1
    return global_default(SimulationConfig, "rounds") if explicit is None else explicit


def global_default(cls: type, name: str) -> Any:
    """The default of field `name` of settings dataclass `cls` (the global layer)."""
    field = next(f for f in fields(cls) if f.name == name)
    return field.default
