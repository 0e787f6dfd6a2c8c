"""MOON (Li, He & Song, CVPR 2021, "Model-Contrastive Federated Learning").

Local loss: CE + μ·ℓ_con with, for each sample's representation z,

    ℓ_con = −log( exp(sim(z, z_glob)/τ) / (exp(sim(z, z_glob)/τ) + exp(sim(z, z_prev)/τ)) )

sim = cosine similarity; z_glob comes from the received global model (frozen) and z_prev from
the client's own local model of its previous participation (frozen), kept as a flat vector in
`client.state["prev"]` (stored off-device by the engine and checkpointed; updated only when the
client participates). Before a client's first participation its previous
model is its untrained local network, as in MOON's code, whose pool of previous models holds
every party's network, trained or not. MOON's code builds each party's network separately
(`init_nets`), so there that network is the party's own random initialisation; here every client
starts from the run's initial model (fedshare's choice: one initial network for all, as the
global model's), so a client that first takes part in round t > 0 contrasts against that initial
network, and ℓ_con has a gradient. In round 0 the global model is the initial
one, z_prev = z_glob, and ℓ_con is the constant log 2 with zero gradient (MOON's code: its
empty pool gives round 0 no negative and no contrastive gradient).

Representation z: with `projection_dim=0` (default) the penultimate features `features(x)` (the
head's input, FedAA's extractor output F). With `projection_dim=p > 0` a projection MLP
(Linear d→d, ReLU, Linear d→p, MOON's code) maps the features to z. The projection head is
trained and averaged with the model (its weights travel in the same flat weight vector and are
checkpointed) but, unlike MOON's code, the classifier stays on the features, so the evaluated
model is the dataset's model unchanged. Defaults: μ = 1, τ = 0.5 (MOON's published settings;
FedAA's tables use μ = 5 for CIFAR-10 and 1 for CIFAR-100, set in its presets).
μ = 0 gives FedAvg exactly.
"""

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import NON_NEGATIVE, POSITIVE, WIDTH, ruled
from fedshare.engine.batched import Batch
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.training import bf16_autocast
from fedshare.errors import FedshareError
from fedshare.models.base import BlockModel, require_body
from fedshare.strategies._local import train_local, train_stacked
from fedshare.strategies.base import (
    ClientSetup,
    Message,
    SetupContext,
    Update,
    register_strategy,
    sent_weights,
)
from fedshare.strategies.fedavg import FedAvg


class MoonNet(nn.Module):
    """A block model and its optional projection head; `forward` gives (logits, z)."""

    def __init__(self, model: BlockModel, projection: nn.Module | None) -> None:
        super().__init__()
        self.model = model
        self.projection = projection

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.model.features(x)
        z = f if self.projection is None else self.projection(f)
        return self.model.head(f), z


def contrastive_loss(
    z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float
) -> torch.Tensor:
    """MOON's ℓ_con, averaged over the batch (positive: z_glob, negative: z_prev)."""
    z = z.flatten(1)
    pos = F.cosine_similarity(z, z_glob.flatten(1), dim=1)
    neg = F.cosine_similarity(z, z_prev.flatten(1), dim=1)
    logits = torch.stack([pos, neg], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


@register_strategy("moon")
@dataclass
class MOON(FedAvg):
    """CE + μ·ℓ_con against the global (positive) and previous local (negative) model."""

    mu: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="paper: MOON (Li, He & Song, CVPR 2021) §4.2, μ = 1 (its CIFAR-100 value; 5 on "
        "CIFAR-10); the authors' main.py L42 (QinbinLi/MOON at 8fcba3c) defaults to 1; ReBaFL's "
        "baseline uses 1",
    )
    tau: float = ruled(
        0.5,
        POSITIVE,
        source="paper: MOON (Li, He & Song, CVPR 2021) §4.1, τ = 0.5; the authors' main.py L44 "
        "--temperature 0.5",
    )
    projection_dim: int = ruled(
        0,
        replace(WIDTH, low=0),
        source="rule: 0, the model's own penultimate features, as ReBaFL's MOON baseline "
        "(methods/moon.py L88-92); MOON §4.1 adds a 2-layer MLP projection head of 256 outputs "
        "(projection_dim=256)",
    )

    def _net(self, model: nn.Module, device: torch.device, seed: int) -> MoonNet:
        """`model` with the projection head (if any, initialised from the run's `seed`, so the
        server and the clients build the same initial head); the flat state covers both."""
        model = require_body(model, "moon")
        projection = None
        if self.projection_dim:
            d = model.head.in_features if isinstance(model.head, nn.Linear) else None
            if d is None:
                raise FedshareError("strategy.projection_dim needs a model whose head is a Linear")
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                projection = nn.Sequential(
                    nn.Linear(d, d), nn.ReLU(), nn.Linear(d, self.projection_dim)
                ).to(device)
        return MoonNet(model, projection)

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.net = self._net(ctx.model, ctx.device, ctx.config.seed)
        self.flat = FlatState(self.net)  # == FlatState(model) without a projection head

    def client_setup(self, ctx: ClientSetup) -> None:
        """The worker with its own projection head, and scratch copies for the global and the
        previous models (their weights come from the message and `client.state`): one previous
        model per client that trains at once (`train.batched`), made here, not per round. The
        initial network (`ctx.model` holds the initial weights here) is every client's previous
        model until it first takes part."""
        super().client_setup(ctx)
        self.net = self._net(ctx.model, ctx.device, ctx.seed)
        self.flat = FlatState(self.net)
        self._initial = self.flat.flatten(self.net).clone()
        frozen = copy.deepcopy(self.net).requires_grad_(False).eval()
        self._global_net = frozen
        self._prev_nets = [copy.deepcopy(frozen) for _ in range(max(1, ctx.train.batched))]

    def broadcast(self, round_idx: int) -> Message:
        return Message(weights=self.flat.flatten(self.net))

    def client_update(self, client: Client, message: Message) -> Update:
        net = self.load_weights(self.net, message.weights)  # the worker and its projection
        glob = self.load_weights(self._global_net, message.weights)
        prev = self.load_weights(self._prev_nets[0], self._previous(client))
        loss = train_local(client, net, self._loss, batches=self._batches(client, glob, prev))
        return self._upload(client, self.flat.flatten(net), loss)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients (`train.batched`): each client's stream adds
        z_glob and z_prev of its batch (frozen models, no gradient), computed per client
        outside the vectorised step; the stacked worker with its projection trains on them."""
        glob = self.load_weights(self._global_net, message.weights)
        prevs = [
            self.load_weights(net, self._previous(c))
            for c, net in zip(clients, self._prev_nets, strict=False)  # one per chunk position
        ]
        streams = [self._batches(c, glob, p) for c, p in zip(clients, prevs, strict=True)]
        net = self.load_weights(self.net, message.weights)
        updates = train_stacked(self.flat, clients, net, self._loss, streams=streams)
        return [
            self._upload(c, sent_weights(u), u.metrics["train_loss"])
            for c, u in zip(clients, updates, strict=True)
        ]

    def _previous(self, client: Client) -> torch.Tensor:
        """The client's local model of its last participation, else its untrained network."""
        return client.state.get("prev", self._initial)

    @staticmethod
    def _batches(client: Client, glob: MoonNet, prev: MoonNet) -> Iterator[Batch]:
        """(x, y, z_glob, z_prev) per local batch; the frozen models run as the serial loss
        ran them (no gradient, under `train.amp`'s autocast)."""
        for x, y in client.batches():
            with torch.no_grad(), bf16_autocast(client.amp_device):
                z_glob, z_prev = glob(x)[1], prev(x)[1]
            yield x, y, z_glob, z_prev  # outside the no-grad context, which would leak

    def _loss(
        self,
        net: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        z_glob: torch.Tensor,
        z_prev: torch.Tensor,
    ) -> torch.Tensor:
        logits, z = net(x)
        return F.cross_entropy(logits, y) + self.mu * contrastive_loss(z, z_glob, z_prev, self.tau)

    @staticmethod
    def _upload(client: Client, weights: torch.Tensor, loss: torch.Tensor) -> Update:
        """The trained weights go up and stay with the client as its next z_prev model."""
        client.state["prev"] = weights.clone()
        return Update(client.id, client.num_samples, weights=weights, metrics={"train_loss": loss})

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        self.load_weights(self.net, self.average_weights(updates))

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.net.projection is not None:
            state["projection"] = self.net.projection.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        if self.net.projection is not None:
            self.net.projection.load_state_dict(state["projection"])
