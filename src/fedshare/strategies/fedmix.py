"""FedMix as FLea ran it: "naive", mean-augmented mix-up (flea.md §5 and §8 item 22).

Round 0: every client uploads ⌊|D_k|/M⌋ means of M consecutive samples of one shuffled pass of
its (prepared, normalised) inputs, with the means of their one-hot labels (M = `mean_size`,
10 in the code); the server sends all the means to every client once. Each local step draws a
local batch and a batch of means, cuts both to the shorter length, draws one λ ~ Beta(a, a)
per batch, mixes the raw inputs and the labels, and minimises only the soft-label
cross-entropy on the mixed batch. Aggregation is FedAvg.

This is not FedMix's Taylor-approximated loss (Yoon et al., 2021); it is the form FLea's Table 1
measures. Options: `beta_per_sample` (one λ per sample), `local_ce_weight` (add plain CE on
the local batch; 0 in the code).
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.batched import Batch
from fedshare.engine.client import Client
from fedshare.engine.rng import numpy_rng
from fedshare.engine.training import shuffled_positions
from fedshare.errors import FedshareError
from fedshare.functional.losses import soft_cross_entropy
from fedshare.functional.mixup import beta_weights, mix_labels, mix_pair
from fedshare.strategies._local import train_local, train_stacked
from fedshare.strategies._sharing import MeanSharing
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy


@register_strategy("fedmix")
@dataclass
class FedMix(MeanSharing):
    """Mix-up of local inputs with globally shared mini-batch means (inputs and labels)."""

    beta_a: float = 2.0
    beta_per_sample: bool = False
    local_ce_weight: float = 0.0

    def setup(self, ctx: SetupContext) -> None:
        if self.beta_a <= 0:
            raise FedshareError(f"strategy.beta_a={self.beta_a} must be positive")
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
        if any(stream is None for stream in streams):  # no pool: plain local training
            return [self.client_update(client, message) for client in clients]
        model = self.load_weights(clients[0].model, message.weights)
        return train_stacked(self.flat, clients, model, self._mixed_loss, streams=streams)

    def _mixed_batches(self, client: Client) -> Iterator[Batch] | None:
        """(mixed inputs, mixed soft labels, local inputs, local labels) per local batch: each
        batch is cut to the length of the next batch of means, mixed with one λ ~ Beta(a, a)
        (or one per sample); None when the client holds no means."""
        pool = self.received_pool(client)
        means, label_means = pool.get("means"), pool.get("label_means")
        if means is None or means.shape[0] == 0:
            return None
        takes = shuffled_positions(  # endless
            means.shape[0], client.train.batch_size, client.rng("pool"), client.device
        )
        rng = numpy_rng(client.seed, f"{client.phase}/mixup", client.round, client.id)

        def mixed() -> Iterator[Batch]:
            for x, y in client.batches():
                take = next(takes)
                n = min(x.shape[0], take.shape[0])
                lam = beta_weights(n, self.beta_a, rng, self.beta_per_sample, x.device)
                x_mix = mix_pair(x[:n], means[take[:n]], lam)
                y_mix = mix_labels(y[:n], label_means[take[:n]], lam, client.num_classes)
                yield x_mix, y_mix, x, y

        return mixed()

    def _mixed_loss(
        self,
        net: nn.Module,
        x_mix: torch.Tensor,
        y_mix: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
    ) -> torch.Tensor:
        """Soft-label cross-entropy on the mixed batch (+ `local_ce_weight` · CE on the local
        batch)."""
        loss = soft_cross_entropy(net(x_mix), y_mix)
        if self.local_ce_weight:
            loss = loss + self.local_ce_weight * F.cross_entropy(net(x), y)
        return loss
