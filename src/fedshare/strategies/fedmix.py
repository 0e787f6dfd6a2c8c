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
from fedshare.functional.mixup import as_soft_labels, beta_weights, mix_labels, mix_pair
from fedshare.strategies._local import train_local
from fedshare.strategies._sharing import OneShotSharing, fixed_groups
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy


@register_strategy("fedmix")
@dataclass
class FedMix(OneShotSharing):
    """Mix-up of local inputs with globally shared mini-batch means (inputs and labels)."""

    mean_size: int = 10
    beta_a: float = 2.0
    beta_per_sample: bool = False
    local_ce_weight: float = 0.0

    def setup(self, ctx: SetupContext) -> None:
        if self.mean_size < 1:
            raise FedshareError(f"strategy.mean_size={self.mean_size} must be at least 1")
        if self.beta_a <= 0:
            raise FedshareError(f"strategy.beta_a={self.beta_a} must be positive")
        super().setup(ctx)

    def groups(self, seed: int, client_id: int, n: int) -> torch.Tensor:
        """The client's fixed groups of `mean_size` positions (the same on both sides)."""
        return fixed_groups(seed, "fedmix/groups", client_id, n, self.mean_size)

    def server_groups(self, client_id: int) -> torch.Tensor:
        return self.groups(self.config.seed, client_id, self.data.client_sizes[client_id])

    def shared_positions(self, client_id: int) -> torch.Tensor:
        return self.server_groups(client_id).flatten()

    def share_step(self, client: Client, message: Message) -> Update:
        groups = self.groups(client.seed, client.id, client.num_samples).to(client.device)
        if groups.numel() == 0:
            return Update(client.id, client.num_samples)
        x, y = client.data(groups.flatten())
        num_classes = client.num_classes
        means = x.view(*groups.shape, *x.shape[1:]).mean(dim=1)
        label_means = as_soft_labels(y, num_classes).view(*groups.shape, -1).mean(dim=1)
        return Update(
            client.id, client.num_samples, payload={"means": means, "label_means": label_means}
        )

    def metric_pairs(self, client_id: int, payload: dict[str, torch.Tensor]) -> tuple:
        groups = self.server_groups(client_id).to(self.device)
        x, _ = self.data.dataset.train_batch(self.data.client_indices[client_id][groups.flatten()])
        sources = x.reshape(groups.shape[0], -1)  # the M source inputs of each mean, side by side
        return sources, payload["means"]

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
