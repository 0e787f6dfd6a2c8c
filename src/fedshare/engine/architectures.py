"""Clients with different architectures (`clients.models`).

`clients.models=[cnn_small, cnn4, resnet8]` gives each client one of these architectures, by
`clients.model_of`: `cyclic` (the default, HtFLlib's rule: client k has `models[k mod len]`),
`blocks` (contiguous runs: client k has `models[⌊k·len/K⌋]`), `random` (the cyclic counts,
shuffled with the run's seed) or one entry per client (a position in `models` or its label);
the run's `model` stays the shared/global one. An entry is a registered
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


ASSIGNMENTS = ("cyclic", "blocks", "random")
"""The named rules of `clients.model_of` (else one entry per client)."""


@dataclass(frozen=True)
class ClientModels:
    """The architectures of a run whose clients differ: client k has `models[assignment[k]]`."""

    names: tuple[str, ...]
    """Each architecture's label (its model name; `name#i` where a name repeats)."""
    models: tuple[nn.Module, ...]
    """One module per architecture, as built: copy it, never train it."""
    assignment: tuple[int, ...]
    """Client k's architecture position, for every client of the run."""

    def index(self, client_id: int) -> int:
        """The position of client `client_id`'s architecture."""
        return self.assignment[client_id]

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


def assign_architectures(
    model_of: Any, labels: Sequence[str], num_clients: int, seed: int
) -> tuple[int, ...]:
    """Each client's architecture position under `clients.model_of` (module doc); one
    sentence for a bad value."""
    count = len(labels)
    if model_of == "cyclic":
        return tuple(k % count for k in range(num_clients))
    if model_of == "blocks":
        return tuple(k * count // num_clients for k in range(num_clients))
    if model_of == "random":
        cyclic = torch.arange(num_clients) % count
        order = torch.randperm(
            num_clients,
            generator=torch.Generator().manual_seed(derive_seed(seed, "client_model_of")),
        )
        return tuple(int(i) for i in cyclic[order])
    if isinstance(model_of, str) or not isinstance(model_of, Sequence):
        raise FedshareError(
            f"clients.model_of={model_of!r} is not valid: choose {', '.join(ASSIGNMENTS)} or "
            f"give one entry per client (a position in clients.models or its label)"
        )
    if len(model_of) != num_clients:
        raise FedshareError(
            f"clients.model_of has {len(model_of)} entries for {num_clients} clients: give one "
            f"per client (a position in clients.models or its label) or one of "
            f"{', '.join(ASSIGNMENTS)}"
        )
    return tuple(_position(entry, k, labels) for k, entry in enumerate(model_of))


def _position(entry: Any, client: int, labels: Sequence[str]) -> int:
    """Client `client`'s `clients.model_of` entry as a position in `clients.models`."""
    if isinstance(entry, str) and entry in labels:
        return labels.index(entry)
    if isinstance(entry, int) and not isinstance(entry, bool) and 0 <= entry < len(labels):
        return entry
    raise FedshareError(
        f"clients.model_of[{client}]={entry!r} is not valid: give a position 0-{len(labels) - 1} "
        f"in clients.models or one of its labels ({', '.join(labels)})"
    )


def _takes_feature_dim(name: str) -> bool:
    return "feature_dim" in inspect.signature(MODELS.get(name)).parameters


def build_client_models(
    entries: Sequence[Any],
    run_model: nn.Module,
    dataset: Dataset,
    seed: int,
    num_clients: int,
    model_of: Any = "cyclic",
) -> ClientModels | None:
    """The architectures of `clients.models` (None when the list is empty: every client has
    the run's model), each checked to share the run's model's feature width, and assigned to
    the `num_clients` clients by `model_of`."""
    if not entries:
        if model_of != "cyclic":
            raise FedshareError(
                f"clients.model_of={model_of!r} needs clients.models: give the architectures "
                f"(clients.models=[...]) or leave clients.model_of at cyclic"
            )
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
    assignment = assign_architectures(model_of, labels, num_clients, seed)
    named = {"the run's model": run_model, **dict(zip(labels, models, strict=True))}
    require_feature_dim(named, input_shape, width)
    return ClientModels(labels, tuple(models), assignment)


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
    num_clients: int,
) -> Architectures:
    """The architectures of `config.clients.models` for `strategy` (refused where it shares
    whole models), with a worker each (compiled under `train.compile`)."""
    if config.clients.models:
        refuse_strategy(strategy)
    clients = config.clients
    models = build_client_models(
        clients.models, run_model, dataset, config.seed, num_clients, clients.model_of
    )
    if models is not None:  # on the run's device, channels-last as the run's model
        device = next(run_model.parameters()).device
        for model in models.models:
            prepare_for_device(model, device, uses_channels_last(model, config.memory_format))
    workers = [] if models is None else [copy.deepcopy(m) for m in models.models]
    if config.train.compile:
        for worker in workers:
            worker.compile()
    return Architectures(models, tuple(workers))
