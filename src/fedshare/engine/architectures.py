"""Clients with different architectures (`clients.models`).

`clients.models=[cnn_small, cnn4, resnet8]` gives client k the architecture
`models[k mod len]`; the run's `model` stays the shared/global one. An entry is a registered
model name (built with its defaults) or a mapping `{name: cnn4, padding: 2, ...}` with the
model's options; where an entry leaves `feature_dim` unset and its model takes one, it is set
to the run's model's width. Every architecture and the run's model must share that
penultimate width (`require_feature_dim`), checked before round 0, so that prototypes,
per-label logits and heads are interchangeable (issue 45 §1).

The engine builds one module per architecture, seeded from the run's seed and the
architecture's position (the run's random streams are left as they were), and from it one
reused worker per architecture for the client steps; the strategy gets the modules
(`ClientModels`) to build its server-side views of a client's model.
"""

import copy
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fedshare.config import SimulationConfig
from fedshare.data.dataset import Dataset
from fedshare.engine.device import uses_channels_last
from fedshare.engine.rng import derive_seed
from fedshare.errors import FedshareError
from fedshare.models.base import MODELS, build_model, feature_width, prepare_for_device
from fedshare.models.feature_dim import require_feature_dim

if TYPE_CHECKING:
    from fedshare.strategies.base import Strategy


@dataclass(frozen=True)
class ClientModels:
    """The architectures of a run whose clients differ: client k has `models[k % len]`."""

    names: tuple[str, ...]
    """Each architecture's label (its model name; `name#i` where a name repeats)."""
    models: tuple[nn.Module, ...]
    """One module per architecture, as built: copy it, never train it."""

    def index(self, client_id: int) -> int:
        """The position of client `client_id`'s architecture."""
        return client_id % len(self.models)

    def name_of(self, client_id: int) -> str:
        return self.names[self.index(client_id)]


def model_entries(entries: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """`clients.models` as (model name, options) pairs; one sentence for a bad entry."""
    parsed: list[tuple[str, dict[str, Any]]] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str) and entry:
            parsed.append((entry, {}))
        elif isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            parsed.append((entry["name"], {k: v for k, v in entry.items() if k != "name"}))
        else:
            raise FedshareError(
                f"clients.models[{i}]={entry!r} is not valid: each entry is a registered model "
                f"name (one of {', '.join(MODELS.names())}) or a mapping with a name and the "
                f"model's options, e.g. {{name: cnn4, padding: 2}}"
            )
    return parsed


def _labels(names: Sequence[str]) -> tuple[str, ...]:
    """Model names, made unique by their position where one repeats."""
    return tuple(name if names.count(name) == 1 else f"{name}#{i}" for i, name in enumerate(names))


def _takes_feature_dim(name: str) -> bool:
    return "feature_dim" in inspect.signature(MODELS.get(name)).parameters


def build_client_models(
    entries: Sequence[Any], run_model: nn.Module, dataset: Dataset, seed: int
) -> ClientModels | None:
    """The architectures of `clients.models` (None when the list is empty: every client has
    the run's model), each checked to share the run's model's feature width."""
    if not entries:
        return None
    input_shape = dataset.input_shape
    width = feature_width(run_model, input_shape)
    models = []
    pairs = model_entries(entries)
    for i, (name, options) in enumerate(pairs):
        if "feature_dim" not in options and _takes_feature_dim(name):
            options = {**options, "feature_dim": width}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "client_model_init", i))
            try:
                model = build_model(name, input_shape, dataset.num_classes, options)
            except FedshareError as err:
                raise FedshareError(f"clients.models[{i}]: {err}") from None
        models.append(model)
    labels = _labels([name for name, _ in pairs])
    named = {"the run's model": run_model, **dict(zip(labels, models, strict=True))}
    require_feature_dim(named, input_shape, width)
    return ClientModels(labels, tuple(models))


def takes_client_models(strategy: type) -> bool:
    """Whether a strategy class runs clients of different architectures (its class says so:
    the personal-model strategies, FedGen sharing heads)."""
    return bool(getattr(strategy, "takes_client_models", False))


def refuse_strategy(strategy: "Strategy") -> None:
    """Refuse `clients.models` for a strategy that shares whole models, in one sentence."""
    from fedshare.strategies.base import STRATEGIES

    if not takes_client_models(type(strategy)):
        names = STRATEGIES.names()
        able = [n for n in names if takes_client_models(STRATEGIES.get(n))]
        raise FedshareError(
            f"strategy {strategy.name} cannot take clients with different architectures "
            f"(clients.models): it shares one model's weights; use a strategy that shares "
            f"less ({', '.join(able)}) or leave clients.models empty"
        )


@dataclass(frozen=True)
class Architectures:
    """A run's architectures and their workers, as the engine holds them."""

    models: ClientModels | None
    """The clients' own architectures (None: every client has the run's model)."""
    workers: tuple[nn.Module, ...]
    """One reused worker per architecture (copies: the built modules stay untouched)."""

    def worker_of(self, client_id: int, default: nn.Module) -> nn.Module:
        """The worker of client `client_id`'s architecture (`default`: the run's worker)."""
        return default if self.models is None else self.workers[self.models.index(client_id)]


def client_architectures(
    strategy: "Strategy",
    config: SimulationConfig,
    run_model: nn.Module,
    dataset: Dataset,
) -> Architectures:
    """The architectures of `config.clients.models` for `strategy` (refused where it shares
    whole models), with a worker each (compiled under `train.compile`)."""
    if config.clients.models:
        refuse_strategy(strategy)
    models = build_client_models(config.clients.models, run_model, dataset, config.seed)
    if models is not None:  # on the run's device, channels-last as the run's model
        device = next(run_model.parameters()).device
        for model in models.models:
            prepare_for_device(model, device, uses_channels_last(model, config.memory_format))
    workers = [] if models is None else [copy.deepcopy(m) for m in models.models]
    if config.train.compile:
        for worker in workers:
            worker.compile()
    return Architectures(models, tuple(workers))
