"""FedBR (Guo et al., ICML 2023, "Improving Federated Learning on Heterogeneous Data via Local
Learning Bias Reduction") as FLea's code runs it (FLea's App. C.3).

Round 0: `sharers` clients (10, drawn once from the run's seed) upload means of `mean_size` = 10
samples of their inputs, *without labels*; the server keeps `pool_items` = 32 of them at random
and sends those to every client, which keeps them. Each local step then takes a local batch
(x, y) and a batch of pool means cut to the same length, and

* mixes every mean with one random sample of the local batch (`mix_local`, the code's
  `get_unlabeled_by_self`): x_u = (x_p + x_j)/2 with target q = (1/C + onehot(y_j))/2
  (`mix_local=false`: x_u = x_p, q = 1/C, the "uniform prediction" of FedBR's paper);
* **max step** — the client's discriminator φ (an MLP d→256→256→512 on the penultimate
  features, kept in `client.state` between its participations, never sent) takes one step of
  the configured optimizer on γ·mean log p, i.e. ascends the contrastive loss
  L_con = −log p, with p = e^{τ1·s(u,g)} / (e^{τ1·s(u,g)} + e^{τ2·s(u,x)}), s the cosine
  similarity of φ(z_u) (local features of x_u), φ(z_g) (the frozen round-start global model's
  features of x_u) and φ(z_x) (local features of the local batch);
* **min step** — the model minimises CE(x, y) + μ·L_con + λ·CE_soft(f(x_u), q).

Constants of FLea's code: μ = 0.5, λ = 0.8, γ = 1, τ1 = τ2 = 2. Aggregation is FedAvg.

Deviations (all settings): the discriminator of every client starts from one initial
discriminator drawn from the run's seed (the code builds each from the global RNG); its optimizer
is the run's (`train.*`, the code rebuilds an Adam each step, which `train.optimizer_reset_each_
step=true` reproduces); every client receives the pool (the code hands it to the 10 sharers'
objects only, which reads as an oversight since all clients train with it).
"""

import copy
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import ANY, NON_NEGATIVE, POSITIVE, SIZE, WIDTH, ruled
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.engine.training import shuffled_positions
from fedshare.functional.losses import soft_cross_entropy
from fedshare.models.base import BlockModel, as_block_model, feature_width, require_body
from fedshare.strategies._local import train_local
from fedshare.strategies._sharing import MeanSharing
from fedshare.strategies.base import ClientSetup, Message, Phase, Update, register_strategy


def discriminator(dim: int, hidden: int, out: int) -> nn.Module:
    """FedBR's φ: Linear d→hidden, ReLU, Linear hidden→hidden, ReLU, Linear hidden→out."""
    return nn.Sequential(
        nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, out),
    )  # fmt: skip


def log_p_positive(
    e_u: torch.Tensor, e_g: torch.Tensor, e_x: torch.Tensor, tau1: float, tau2: float
) -> torch.Tensor:
    """log p per row: log( e^{τ1 s(u,g)} / (e^{τ1 s(u,g)} + e^{τ2 s(u,x)}) ), s = cosine."""
    pos = tau1 * F.cosine_similarity(e_u, e_g, dim=1)
    neg = tau2 * F.cosine_similarity(e_u, e_x, dim=1)
    return pos - torch.logsumexp(torch.stack([pos, neg], dim=1), dim=1)


@register_strategy("fedbr")
@dataclass
class FedBR(MeanSharing):
    """Label-free shared means; min–max local training with a per-client discriminator."""

    shares_labels = False
    sharers: int = ruled(
        10,
        SIZE,
        source="code: FLea's code (XTxiatong/FLea at b85be07, myserver.py L208: 10 clients upload "
        "FedBR's means)",
    )
    pool_items: int = ruled(
        32,
        SIZE,
        source="paper: FLea App. C.3, FedBR with 32 mini-batch data averages",
    )
    mu: float = ruled(
        0.5,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py train_Max_Min: μ = 0.5)",
    )
    lam: float = ruled(
        0.8,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py train_Max_Min: λ = 0.8)",
    )
    gamma: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py train_Max_Min: γ = 1)",
    )
    tau1: float = ruled(
        2.0, POSITIVE, source="code: FLea's code (XTxiatong/FLea, myuser.py train_Max_Min: τ1 = 2)"
    )
    tau2: float = ruled(
        2.0, POSITIVE, source="code: FLea's code (XTxiatong/FLea, myuser.py train_Max_Min: τ2 = 2)"
    )
    mix_local: bool = ruled(
        True,
        ANY,
        source="code: FLea's code (XTxiatong/FLea, FedBR mixes each mean with a local sample)",
    )
    disc_hidden: int = ruled(
        256,
        WIDTH,
        source="code: FLea's code (XTxiatong/FLea, FedBR's discriminator MLP 1280-256-256-512)",
    )
    disc_dim: int = ruled(
        512,
        WIDTH,
        source="code: FLea's code (XTxiatong/FLea, FedBR's discriminator MLP 1280-256-256-512)",
    )

    # ------------------------------------------------------------------ round 0: the pool
    def phases(self) -> list[Phase]:
        share, distribute, train = super().phases()
        return [dataclasses.replace(share, participants=self._sharers_first), distribute, train]

    def _sharers_first(self, round_idx: int, cohort: list[int]) -> list[int]:
        if round_idx:
            return []
        order = torch.randperm(
            self.data.num_clients, generator=torch_generator(self.config.seed, "fedbr/sharers")
        )
        return sorted(order[: self.sharers].tolist())

    def collect(self, updates: Iterable[Update], round_idx: int) -> None:
        """Every uploaded mean reaches the server (bytes, exposure, dCor); it keeps
        `pool_items` of them, drawn at random, for the clients."""
        received = [u for u in updates if u.payload]
        super().collect(received, round_idx)
        if not received:
            return
        owners = torch.cat([torch.full((len(u.payload["means"]),), u.client_id) for u in received])
        gen = torch_generator(self.config.seed, "fedbr/pool")
        keep = torch.randperm(len(owners), generator=gen)[: self.pool_items]
        self.pool = {k: v[keep.to(v.device)] for k, v in self.pool.items()}
        self.pool_owners = sorted(set(owners[keep].tolist()))

    # ------------------------------------------------------------------ the client side
    def client_setup(self, ctx: ClientSetup) -> None:
        """A frozen scratch copy for the global model, and the initial discriminator (from the
        run's seed; each client's own copy lives in its state)."""
        super().client_setup(ctx)
        self.teacher = copy.deepcopy(require_body(ctx.model, self.name)).requires_grad_(False)
        dim = feature_width(ctx.model, ctx.input_shape)
        seed_global_torch(ctx.seed, "fedbr/discriminator")
        self.disc = discriminator(dim, self.disc_hidden, self.disc_dim).to(ctx.device)
        self.disc_flat = FlatState(self.disc)
        self.disc_init = self.disc_flat.flatten(self.disc).clone()

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        means = self.received_pool(client).get("means")
        if means is None or means.shape[0] == 0:
            return self._update(client, model, train_local(client, model))
        teacher = self.load_weights(self.teacher, message.weights).eval()
        disc = self.disc_flat.load_(self.disc, client.state.get("disc", self.disc_init))
        disc_opt = client.make_optimizer(disc.parameters())
        pool = shuffled_positions(  # endless
            means.shape[0], client.train.batch_size, client.rng("pool"), client.device
        )
        partners = client.rng("mix")
        split = as_block_model(model).num_blocks - 1  # the head's input
        taus = self.tau1, self.tau2
        uniform = torch.full((1, client.num_classes), 1.0 / client.num_classes, device=means.device)

        def min_max_loss(net: BlockModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            take = next(pool)
            n = min(len(x), len(take))
            x, y, x_u = x[:n], y[:n], means[take[:n]]
            q = uniform.expand(n, -1)
            if self.mix_local:
                j = torch.randint(n, (n,), generator=partners, device=x.device)
                x_u = (x_u + x[j]) / 2
                q = (q + F.one_hot(y[j], client.num_classes)) / 2
            z_x = net.encode(x, split).flatten(1)
            z_u = net.encode(x_u, split).flatten(1)
            with torch.no_grad():
                z_g = teacher.encode(x_u, split).flatten(1)
                e_g = disc(z_g)
            # max step: the discriminator ascends L_con (descends γ·log p) on detached features
            disc_opt.zero_grad()
            log_p = log_p_positive(disc(z_u.detach()), e_g, disc(z_x.detach()), *taus)
            (self.gamma * log_p.mean()).backward()
            disc_opt.step()
            # min step: the model descends CE + μ·L_con + λ·CE_soft on the pool's inputs
            with torch.no_grad():
                e_g = disc(z_g)
            l_con = -log_p_positive(disc(z_u), e_g, disc(z_x), *taus).mean()
            ce = F.cross_entropy(net.decode(z_x, split), y)
            aug = soft_cross_entropy(net.decode(z_u, split), q)
            return ce + self.mu * l_con + self.lam * aug

        loss = train_local(client, model, loss_fn=min_max_loss)
        client.state["disc"] = self.disc_flat.flatten(disc).clone()
        return self._update(client, model, loss)

    def _update(self, client: Client, model: nn.Module, loss: torch.Tensor) -> Update:
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )

    def summary_metrics(self) -> dict[str, Any]:
        return {**super().summary_metrics(), "sharers": self.sharers}
