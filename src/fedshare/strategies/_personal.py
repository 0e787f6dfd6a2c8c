"""The base of the heterogeneous family: every client trains a personal model of its own.

Methods for clients with different architectures (FedProto, FedDistill, LG-FedAvg, FedGH,
FedTGP, FML, FedKD, FedMRL, local-only training) share prototypes, per-label logits, a head or a
small shared model, never a client's whole model. So a client's model lives in its per-client
state, `client.state["model"]` (a flat tensor, kept by the engine between participations and
checkpointed), and the worker `client.model` is only the module it is loaded into. Across
clients the strategy relies only on the penultimate width (`features(x)`, the head's input) and
the number of classes, so it runs whatever architecture the engine gives each client.

Initialisation: a client's first participation starts from its own random initialisation
(every module's `reset_parameters` under the stream (seed, "personal_init", client)), as the
heterogeneous-FL code (HtFLlib) builds each client's model independently; the server derives
the same weights for a client it has not seen yet (`personal_model`), with no traffic.

A client step is `local_step` (the module the client trains, its personal model dressed with
what it received, and the loss), local training, then `uploaded` (what it sends and keeps). The
same two hooks give the batched step (`train.batched`): the engine hands it clients of one
architecture, whose modules are stacked under vmap (`fedshare.engine.batched`), each row
starting from its own client's module.

Evaluation: the run's `accuracy` is that of `global_model()`. A method without a global model
shows there the personal model of the lowest-numbered client of the last cohort, which reaches
the server in `Update.audit` (measurement only: never counted, never read by the algorithm);
`eval.personal=true` scores every client's own model on a test split with its label mix
(`personal_model`), which is what the papers report.
"""

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.messages import Message, Update
from fedshare.engine.rng import derive_seed
from fedshare.models.base import feature_width, require_body
from fedshare.strategies._local import LossFn, cross_entropy_loss, run_stacked, train_local
from fedshare.strategies.base import ClientSetup, SetupContext, Strategy

PERSONAL = "model"
"""The key of a client's personal model (flat weights) in `client.state`."""


def personal_init(model: nn.Module, seed: int, client_id: int) -> torch.Tensor:
    """Flat weights of `model`'s architecture re-initialised for `client_id` (deterministic;
    the run's random streams are left as they were). `model` itself is left unchanged."""
    scratch = copy.deepcopy(model)
    devices = [p.device for p in scratch.parameters() if p.device.type == "cuda"][:1]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(derive_seed(seed, "personal_init", client_id))
        for module in scratch.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
    return FlatState(scratch).flatten(scratch)


def load_personal(client: Client, model: nn.Module, seed: int) -> nn.Module:
    """`model` (built around client `client`'s worker) loaded with the client's kept personal
    weights, or with its first initialisation (`personal_init`)."""
    flat = client.state.get(PERSONAL)
    if flat is None:
        flat = personal_init(model, seed, client.id)
    return FlatState(model).load_(model, flat.to(client.device))


@dataclass
class PersonalStrategy(Strategy):
    """Clients keep personal models; subclasses say what is shared (`absorb`, `finish`)."""

    takes_client_models: ClassVar[bool] = True
    """Clients may have architectures of their own (`clients.models`)."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        require_body(ctx.model, self.name)
        self.seed = ctx.config.seed
        self.feature_dim = feature_width(ctx.model, ctx.data.dataset.input_shape)
        self.num_classes = ctx.data.dataset.num_classes
        self._architectures = ctx.client_models
        self._templates = [ctx.model] if ctx.client_models is None else ctx.client_models.models
        self.shown = self.wrap(copy.deepcopy(self._templates[0])).to(self.device)
        self.shown_client = -1
        self._shown_architecture = 0
        self._scratch = {0: copy.deepcopy(self.shown)}

    def client_setup(self, ctx: ClientSetup) -> None:
        super().client_setup(ctx)
        require_body(ctx.model, self.name)
        self.seed = ctx.seed
        self.feature_dim = feature_width(ctx.model, ctx.input_shape)

    # ------------------------------------------------------------------ client side
    def local_step(self, client: Client, message: Message) -> tuple[nn.Module, LossFn]:
        """The module client `client` trains (built around its worker, loaded with its own
        state and what `message` brought) and its loss; by default its personal model and
        the cross-entropy."""
        return self.personal(client), cross_entropy_loss

    def uploaded(
        self, client: Client, net: nn.Module, train_loss: torch.Tensor, message: Message
    ) -> Update:
        """What the client sends after training `net` (its mean loss `train_loss`), having
        kept its personal part; by default nothing but its metrics."""
        update = Update(client.id, client.num_samples, metrics={"train_loss": train_loss})
        return self.keep(client, net, update)

    def client_update(self, client: Client, message: Message) -> Update:
        net, loss = self.local_step(client, message)
        return self.uploaded(client, net, train_local(client, net, loss), message)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for clients of one architecture at once: each client's module
        from `local_step` is a row of one stacked run, trained under vmap, then loaded back
        into the module for its `uploaded`."""
        starts = []
        for client in clients:  # the modules share the architecture's worker: copy each
            net, loss = self.local_step(client, message)
            starts.append(FlatState(net).flatten(net).clone())
        run, losses = run_stacked(clients, net, loss, starts=starts)
        return [
            self.uploaded(client, run.load_client(i), losses[i], message)
            for i, client in enumerate(clients)
        ]

    def personal(self, client: Client, model: nn.Module | None = None) -> nn.Module:
        """The client's personal model, loaded into its worker `client.model` (or into
        `model`, a module built around that worker)."""
        return load_personal(client, client.model if model is None else model, self.seed)

    @staticmethod
    def keep(client: Client, model: nn.Module, update: Update) -> Update:
        """Store the trained personal model in the client's state; the evaluation's copy goes
        in the update's audit (never sent, never counted)."""
        flat = FlatState(model).flatten(model).clone()
        client.state[PERSONAL] = flat
        update.audit[PERSONAL] = flat
        return update

    # ------------------------------------------------------------------ server side
    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        for update in self.showing(updates):
            self.absorb(update)
        self.finish(round_idx)
        self.dress(self.shown)

    def showing(self, updates: Iterable[Update]) -> Iterator[Update]:
        """`updates`, each without the personal model in its audit; once they are consumed,
        `shown` holds that of the lowest-numbered client among them."""
        shown: tuple[int, torch.Tensor] | None = None
        for update in updates:
            flat = update.audit.pop(PERSONAL, None)
            if flat is not None and (shown is None or update.client_id < shown[0]):
                shown = (update.client_id, flat)
            yield update
        if shown is not None:
            self._show(shown[0])
            FlatState(self.shown).load_(self.shown, shown[1].to(self.device))

    def absorb(self, update: Update) -> None:
        """Take one client's upload (its payload) into the server's running state."""

    def finish(self, round_idx: int) -> None:
        """The server step after the cohort's uploads."""

    def dress(self, model: nn.Module) -> nn.Module:
        """A personal model as the client would use it now (e.g. with the latest global head);
        as it was trained by default."""
        return model

    def global_model(self) -> nn.Module:
        return self.shown

    def wrap(self, model: nn.Module) -> nn.Module:
        """The personal module built around a model of a client's architecture (the model
        itself by default; FedMRL adds its projector)."""
        return model

    def _architecture(self, client_id: int) -> int:
        return 0 if self._architectures is None else self._architectures.index(client_id)

    def _built(self, architecture: int) -> nn.Module:
        """A new personal module of architecture `architecture`, on the server's device (the
        run's random streams are left as they were: its weights are always loaded over)."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            return self.wrap(copy.deepcopy(self._templates[architecture])).to(self.device)

    def _show(self, client_id: int) -> None:
        """Make `shown` a module of client `client_id`'s architecture (rebuilt on a change)."""
        architecture = self._architecture(client_id)
        if architecture != self._shown_architecture:
            self.shown = self._built(architecture)
            self._shown_architecture = architecture
        self.shown_client = client_id

    def model_of(self, client_id: int) -> nn.Module:
        """A server-side module of client `client_id`'s architecture (`clients.models`: the
        engine's module of that architecture, copied once and reused)."""
        architecture = self._architecture(client_id)
        if architecture not in self._scratch:
            self._scratch[architecture] = self._built(architecture)
        return self._scratch[architecture]

    def personal_model(self, client_id: int, state: Mapping[str, torch.Tensor]) -> nn.Module:
        """Client `client_id`'s own model: its kept weights, else its initialisation."""
        model = self.model_of(client_id)
        flat = state.get(PERSONAL)
        if flat is None:
            flat = personal_init(model, self.seed, client_id)
        return self.dress(FlatState(model).load_(model, flat.to(self.device)))

    def summary_metrics(self) -> dict[str, Any]:
        return {"shown_client": self.shown_client}

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "shown": self.shown.state_dict(),
            "shown_client": self.shown_client,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        shown_client = int(state["shown_client"])
        if shown_client >= 0:
            self._show(shown_client)
        self.shown.load_state_dict(state["shown"])
