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

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.client import Client
from fedshare.engine.rng import numpy_rng
from fedshare.engine.training import shuffled_positions
from fedshare.errors import FedshareError
from fedshare.functional.losses import soft_cross_entropy
from fedshare.functional.mixup import beta_weights, mix_labels, mix_pair
from fedshare.strategies._local import train_local
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
        pool = self.received_pool(client)
        means, label_means = pool.get("means"), pool.get("label_means")
        if means is None or means.shape[0] == 0:
            loss = train_local(client, model)
        else:
            pool = shuffled_positions(  # endless
                means.shape[0], client.train.batch_size, client.rng("pool"), client.device
            )
            rng = numpy_rng(client.seed, f"{client.phase}/mixup", client.round, client.id)
            num_classes = client.num_classes

            def mixed_loss(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                take = next(pool)
                n = min(x.shape[0], take.shape[0])
                lam = beta_weights(n, self.beta_a, rng, self.beta_per_sample, x.device)
                x_mix = mix_pair(x[:n], means[take[:n]], lam)
                y_mix = mix_labels(y[:n], label_means[take[:n]], lam, num_classes)
                loss = soft_cross_entropy(net(x_mix), y_mix)
                if self.local_ce_weight:
                    loss = loss + self.local_ce_weight * F.cross_entropy(net(x), y)
                return loss

            loss = train_local(client, model, loss_fn=mixed_loss)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )
