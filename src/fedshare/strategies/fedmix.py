"""FedMix: local training on inputs mixed with globally shared means (Yoon et al., ICLR 2021,
"FedMix: Approximation of Mix-up under Mean Augmented Federated Learning", MAFL).

Round 0: every client uploads ⌊|D_k|/M⌋ means of M samples of one shuffled pass of its
(prepared, normalised) inputs, with the means of their one-hot labels (M = `mean_size` = 10,
FLea's code's value); the server sends all the means to every
client once. Each local step draws a local batch (x, y) and a batch of means (x̄, ȳ), cuts both
to the shorter length and minimises, by `form`:

* `fedmix` (default) — Yoon et al.'s FedMix, the first-order approximation of global mix-up,
  around the scaled local input x_s = (1 − λ)x: (1 − λ)·CE(f(x_s), y) + λ·CE(f(x_s), ȳ)
  + λ·⟨∂CE(f(x_s), y)/∂x_s, x̄⟩ (per sample, averaged over the batch), λ = `mix_lambda` = 0.05
  (their CIFAR-10 value for FedMix).
* `naivemix` — Yoon et al.'s NaiveMix: fixed λ on the mean, (1 − λ)·CE(f(x̃), y) + λ·CE(f(x̃), ȳ)
  with x̃ = (1 − λ)x + λx̄ (their CIFAR-10 value for NaiveMix: λ = 0.1).
* `code` — FLea's code (`CE_MCE`), what FLea's Table 1 measures (its preset names `form=code`,
  `mean_size=10`): one λ ~ Beta(a, a) per batch (`beta_per_sample`: per sample; a = 2 in that
  code), soft-label cross-entropy on x̃ = λx + (1 − λ)x̄ with ỹ = λe_y + (1 − λ)ȳ, +
  `local_ce_weight` · CE(f(x), y). The code computes that local CE but back-propagates the mixed
  term only: `local_ce_weight=0`, the default; 1 is a variant that keeps FedMix above FedAvg under
  fedshare's FMNIST defaults (docs/flea.md, "FedMix's loss").

Aggregation is FedAvg. Differences from FedMix's paper: its clients share the mean of their
local data, here means of M = 10 samples (a documented rule, FLea's code's M: a mean of a whole
client's data is not offered because the shared items' dCor and the context attack pair each
mean with its M source inputs, which needs one M across clients of different sizes); it pairs
each local batch with one mean, here each local sample gets its own mean from the pool.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import ANY, NON_NEGATIVE, POSITIVE, Rule, ruled
from fedshare.engine.batched import Batch
from fedshare.engine.client import Client
from fedshare.engine.rng import numpy_rng
from fedshare.engine.training import shuffled_positions
from fedshare.functional.losses import soft_cross_entropy
from fedshare.functional.mixup import beta_weights, mix_labels, mix_pair
from fedshare.strategies._local import train_local, train_stacked
from fedshare.strategies._sharing import MeanSharing
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy

FORMS = ("code", "naivemix", "fedmix")


def fedmix_loss(
    net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    means: torch.Tensor,
    label_means: torch.Tensor,
    lam: torch.Tensor,
    form: str,
    local_ce_weight: float = 0.0,
) -> torch.Tensor:
    """One batch's loss of `form` (module docstring): local (x, y), shared (x̄, ȳ) paired row by
    row, `lam` (n,) the weight of the local side (`code`) or of the mean (`naivemix`,
    `fedmix`)."""
    num_classes = label_means.shape[1]
    if form == "code":
        x_mix = mix_pair(x, means, lam)
        loss = soft_cross_entropy(net(x_mix), mix_labels(y, label_means, lam, num_classes))
        if local_ce_weight:
            loss = loss + local_ce_weight * F.cross_entropy(net(x), y)
        return loss
    w = lam.view(-1, *([1] * (x.dim() - 1)))
    if form == "naivemix":
        logits = net((1 - w) * x + w * means)
        local = F.cross_entropy(logits, y, reduction="none")
        shared = -(label_means * F.log_softmax(logits, dim=-1)).sum(-1)
        return ((1 - lam) * local + lam * shared).mean()
    scaled = ((1 - w) * x).detach().requires_grad_(True)  # fedmix: expand around (1 − λ)x
    logits = net(scaled)
    local = F.cross_entropy(logits, y, reduction="none")
    shared = -(label_means * F.log_softmax(logits, dim=-1)).sum(-1)
    (grad,) = torch.autograd.grad(local.sum(), scaled, create_graph=True)  # ∂CE_i/∂x_s per row
    taylor = (grad * means).flatten(1).sum(1)
    return ((1 - lam) * local + lam * shared + lam * taylor).mean()


@register_strategy("fedmix")
@dataclass
class FedMix(MeanSharing):
    """Mix-up of local inputs with globally shared mini-batch means (inputs and labels)."""

    form: str = ruled(
        "fedmix",
        Rule(choices=FORMS),
        source="paper: FedMix (Yoon et al., ICLR 2021) §3, the first-order FedMix loss",
    )
    beta_a: float = ruled(
        2.0,
        POSITIVE,
        source="code: FLea's code (XTxiatong/FLea, λ ~ Beta(2, 2)); used by form=code only",
    )
    beta_per_sample: bool = ruled(
        False,
        ANY,
        source="code: FLea's code (XTxiatong/FLea, one λ per batch); used by form=code only",
    )
    local_ce_weight: float = ruled(
        0.0,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, CE_MCE back-propagates the mixed term only); "
        "used by form=code only",
    )
    mix_lambda: float = ruled(
        0.05,
        Rule(low=0, high=1, high_open=True),
        source="paper: FedMix (Yoon et al., ICLR 2021), λ = 0.05 on CIFAR-10",
    )
    """λ of `naivemix` / `fedmix` (FedMix's CIFAR-10 values: 0.1 NaiveMix, 0.05 FedMix)."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        batches = self._mixed_batches(client)
        if batches is None:
            loss = train_local(client, model)
        else:
            loss = train_local(client, model, loss_fn=self._mixed_loss, batches=batches)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients (`train.batched`): the mixing draws are made per
        client outside the vectorised step, from the client's own streams as in serial."""
        streams = [self._mixed_batches(client) for client in clients]
        pooled = [stream for stream in streams if stream is not None]
        # no pool: plain local training; `fedmix` differentiates through an input gradient
        if self.form == "fedmix" or len(pooled) < len(streams):
            return [self.client_update(client, message) for client in clients]
        model = self.load_weights(clients[0].model, message.weights)
        return train_stacked(self.flat, clients, model, self._mixed_loss, streams=pooled)

    def _mixed_batches(self, client: Client) -> Iterator[Batch] | None:
        """(local inputs, labels, means, label means, λ) per local batch, cut to the length of
        the next batch of means; λ ~ Beta(a, a) once per batch (or per sample) for `code`,
        else `mix_lambda`; None when the client holds no means."""
        pool = self.received_pool(client)
        means, label_means = pool.get("means"), pool.get("label_means")
        if means is None or label_means is None or means.shape[0] == 0:
            return None
        takes = shuffled_positions(  # endless
            means.shape[0], client.train.batch_size, client.rng("pool"), client.device
        )
        rng = numpy_rng(client.seed, f"{client.phase}/mixup", client.round, client.id)

        def mixed() -> Iterator[Batch]:
            for x, y in client.batches():
                take = next(takes)
                n = min(x.shape[0], take.shape[0])
                if self.form == "code":
                    lam = beta_weights(n, self.beta_a, rng, self.beta_per_sample, x.device)
                else:
                    lam = torch.full((n,), self.mix_lambda, device=x.device)
                yield x[:n], y[:n], means[take[:n]], label_means[take[:n]], lam

        return mixed()

    def _mixed_loss(
        self,
        net: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        means: torch.Tensor,
        label_means: torch.Tensor,
        lam: torch.Tensor,
    ) -> torch.Tensor:
        return fedmix_loss(net, x, y, means, label_means, lam, self.form, self.local_ce_weight)
