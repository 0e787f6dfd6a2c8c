"""The Strategy protocol and the strategy registry.

A strategy says what a client does with its data and what the server does with the updates;
the engine owns devices, loops, seeds, logging and files. Everything sent is a tensor in a
`Message` or `Update` (`fedshare.engine.messages`), so the engine counts bytes without the
strategy doing anything. Client steps run on the strategy's client side
(`fedshare.engine.client_side`), which holds the parameters and what `client_setup` derived,
never the server's state.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from fedshare.config import SimulationConfig
from fedshare.config.params import check_params
from fedshare.config.validation import check_fields
from fedshare.data.federated import FederatedData
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.architectures import ClientModels
from fedshare.engine.client import Client
from fedshare.engine.client_side import ClientSetup
from fedshare.engine.flat import FlatState
from fedshare.engine.messages import Message, Update
from fedshare.registry import Registry

M = TypeVar("M", bound=nn.Module)


@dataclass(frozen=True)
class Phase:
    """One exchange with the round's cohort: broadcast, a step on every client, aggregation.

    A round is one or more phases over the same cohort (FLea adds a sharing phase after the
    model is aggregated). `aggregate` receives the updates lazily, one client at a time.
    """

    name: str
    broadcast: Callable[[int], Message]
    client_step: Callable[[Client, Message], Update]
    aggregate: Callable[[Iterable[Update], int], None]
    participants: Callable[[int, list[int]], list[int]] | None = None
    """(round, cohort) -> the clients of this phase; None = the round's cohort. One-shot
    sharing (FedMix, FedData) gathers from every client in round 0 and nobody later."""
    personal: Callable[[int, int], Message | None] | None = None
    """(round, client) -> a message for that client alone, on top of the broadcast (FedAA's
    identifier I_k); the engine counts its bytes for that receiver and hands it to the client
    as `client.personal`."""
    keep: bool = False
    """Receivers keep this phase's broadcast for the rest of the run (a one-shot pool); a later
    client step finds it in `client.kept[name]`. The simulation stores it once."""
    batched_step: Callable[[list[Client], Message], list[Update]] | None = None
    """The same client step for several clients at once (`train.batched`,
    `fedshare.engine.batched`); None = this phase's clients always run one after another."""
    trains: bool = True
    """The client step trains a model. A phase that does not (a one-shot upload, feature
    statistics) runs serially under `train.batched` without the engine's warning."""
    weights_mean: Callable[[RunningMean, int], None] | None = None
    """`aggregate` written as a function of the running mean (cohort order) of the updates'
    weights, for a phase whose aggregate is exactly that (`Strategy.aggregate` kept): in a run
    across several processes the ranks then pass that mean along instead of exchanging every
    upload's weights (`fedshare.engine.distributed`)."""
    in_order: bool = False
    """A client step reads peer messages that earlier clients of the same phase sent it (a
    chain, a destination after its sources): in a run across several processes
    (`fedshare.engine.distributed`) every process runs this phase's whole cohort in order
    instead of its share."""


@dataclass(frozen=True)
class SetupContext:
    """What a strategy learns about the run before round 0."""

    model: nn.Module
    data: FederatedData
    config: SimulationConfig
    device: torch.device
    on_stage: Callable[[str], None] | None = None
    """Where `Strategy.server_stage` reports (the engine's progress line); None = nowhere."""
    client_models: ClientModels | None = None
    """The clients' own architectures (`clients.models`); None: every client has `model`."""


@dataclass
class Strategy:
    """Base class. Dataclass fields are the strategy's parameters (typed, checked by name).

    Subclasses implement `client_update`; the default `broadcast` sends the global weights and
    the default `aggregate` is the sample-weighted mean of the returned weights.
    """

    name: ClassVar[str] = "strategy"
    one_shot: ClassVar[bool] = False
    """A single communication round: the run's `rounds` defaults to 1 and must be 1."""
    clients_train: ClassVar[bool] = True
    """The train phase's client step trains a model (`Phase.trains`); False where clients
    only upload (data, encodings) and the server trains."""
    clients_in_order: ClassVar[bool] = False
    """The train phase's clients read peer messages sent earlier in the same phase
    (`Phase.in_order`)."""
    train_defaults: ClassVar[Mapping[str, Any]] = {}
    """Training settings of the method's paper (`train.*` keys); they apply to the keys that
    neither the command line nor a preset sets (`fedshare.config.defaults`)."""

    def __post_init__(self) -> None:
        """Every parameter against the rule its field declares (`ruled`), then `check`: a bad
        value is refused when the strategy is built, before a run or any sweep member starts."""
        check_fields(self, "strategy")
        self.check()

    def check(self) -> None:
        """Rules between parameters that no single field's rule states (none here); a
        subclass that adds some calls `super().check()`."""

    def setup(self, ctx: SetupContext) -> None:
        """The server side, before round 0."""
        self.model = ctx.model
        self.data = ctx.data
        self.config = ctx.config
        self.device = ctx.device
        self.flat = FlatState(ctx.model)
        self.round_metrics: dict[str, Any] = {}
        self.stage_listener = ctx.on_stage

    def server_stage(self, name: str) -> None:
        """Say which server step starts now (e.g. FedAA's "synthesis"): the progress bar and
        the log lines show it, so a long server step is never silent."""
        listener = getattr(self, "stage_listener", None)
        if listener is not None:
            listener(f"server: {name}")

    def client_setup(self, ctx: ClientSetup) -> None:
        """The client side, before round 0, from what every client knows; client steps run
        on it and see nothing else of the strategy (`fedshare.engine.client_side`). Sets
        `device`, `num_classes`, `num_clients` and `flat`."""
        self.device = ctx.device
        self.num_classes = ctx.num_classes
        self.num_clients = ctx.num_clients
        self.flat = FlatState(ctx.model)

    # ------------------------------------------------------------------ protocol
    def phases(self) -> list[Phase]:
        return [self.train_phase()]

    def train_phase(self) -> Phase:
        """The local-training phase: `broadcast`, `client_update` (batched through
        `batched_update` where the class has one), `aggregate`."""
        return Phase(
            "train",
            self.broadcast,
            self.client_update,
            self.aggregate,
            batched_step=self.batched_step(),
            trains=self.clients_train,
            weights_mean=self.load_mean if type(self).aggregate is Strategy.aggregate else None,
            in_order=self.clients_in_order,
        )

    def batched_step(self) -> Callable[[list[Client], Message], list[Update]] | None:
        """`batched_update` (several clients at once, `train.batched`) when the class that
        defines `client_update` also defines it: a subclass with another client step runs
        serially until it writes its batched form. None when there is none."""
        owners = [
            next((k for k in type(self).__mro__ if attr in vars(k)), None)
            for attr in ("client_update", "batched_update")
        ]
        if owners[1] is None or owners[0] is not owners[1]:
            return None
        # defined by the subclasses that batch; the MRO look-up above found it
        return self.batched_update  # type: ignore[attr-defined]

    def broadcast(self, round_idx: int) -> Message:
        return Message(weights=self.flat.flatten(self.model))

    def client_update(self, client: Client, message: Message) -> Update:
        raise NotImplementedError

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        self.load_mean(self.running_mean(updates), round_idx)

    def load_mean(self, mean: RunningMean, round_idx: int) -> None:
        """`aggregate`'s server step, given the running mean of the updates' weights."""
        self.load_weights(self.model, mean.value())

    def global_model(self) -> nn.Module:
        return self.model

    def personal_model(self, client_id: int, state: Mapping[str, torch.Tensor]) -> nn.Module:
        """The model client `client_id` would use, from the global model and its own state
        (for `eval.personal`); the global model unless the method keeps something local."""
        return self.global_model()

    def final_download(self) -> Message | None:
        """What every client downloads after the run, counted once at the end: for a one-shot
        method the trained parameters of its global model (the head, when the backbone is
        frozen); None for multi-round methods, whose clients got each round's broadcast."""
        if not self.one_shot:
            return None
        trained = [
            p.detach().flatten() for p in self.global_model().parameters() if p.requires_grad
        ]
        return Message(weights=torch.cat(trained)) if trained else None

    def summary_metrics(self) -> dict[str, Any]:
        """Extra run-level keys for `summary.json` (e.g. a privacy metric); none by default."""
        return {}

    def context_view(self) -> dict[str, Any] | None:
        """What an attacker sees of this method's shared items, as the `view` arguments of
        `fedshare.privacy.context.context_attack` (`eval.context_attack`); None = the method
        shares nothing derived from single inputs."""
        return None

    # ------------------------------------------------------------------ helpers
    def load_weights(self, model: M, flat: torch.Tensor | None) -> M:
        """`model`, with the flat weights `flat` (a message's `weights`) copied in place."""
        if flat is None:
            raise ValueError(f"{self.name}: the message carries no weights to load")
        self.flat.load_(model, flat)
        return model

    def average_weights(
        self, updates: Iterable[Update], collect: list[Update] | None = None
    ) -> torch.Tensor:
        """Running weighted mean of the updates' weights; if `collect` is given, the updates
        are appended to it with their weights dropped (payloads and metrics kept)."""
        return self.running_mean(updates, collect).value()

    def running_mean(
        self, updates: Iterable[Update], collect: list[Update] | None = None
    ) -> RunningMean:
        """`average_weights` before its final division (the accumulator itself)."""
        mean = RunningMean()
        for update in updates:
            if update.weights is not None:
                mean.add(update.weights, update.aggregation_weight)
                update.weights = None
            if collect is not None:
                collect.append(update)
        return mean

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Server state for checkpoints (tensors and plain Python values only)."""
        return {"model": self.model.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])


def sent_weights(item: Message | Update) -> torch.Tensor:
    """`item.weights` where the protocol always sends them; a ValueError if they are missing."""
    if item.weights is None:
        raise ValueError(f"{type(item).__name__} carries no weights where the protocol sends them")
    return item.weights


S = TypeVar("S", bound=type[Strategy])
STRATEGIES: Registry[type[Strategy]] = Registry("strategy", builtins="fedshare.strategies")


def register_strategy(name: str) -> Callable[[S], S]:
    def add(cls: S) -> S:
        cls.name = name
        STRATEGIES.register(name)(cls)
        return cls

    return add


def make_strategy(name: str, params: Mapping[str, Any] | None = None) -> Strategy:
    """Instantiate strategy `name` with checked parameters."""
    cls = STRATEGIES.get(name)
    return cls(**check_params(cls, dict(params or {}), "strategy", name))
