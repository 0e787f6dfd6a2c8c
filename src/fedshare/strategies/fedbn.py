"""FedBN (Li et al., ICLR 2021, "FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization"): BatchNorm layers stay local. As FedAA's baseline (its Section 4.1).

Each client keeps its own BatchNorm state (weight, bias, running mean and variance of every BN
layer) in `client.state["bn"]`; the server broadcasts, and the clients upload, only the non-BN
entries, whose sample-weighted mean is the next global model. A client's first participation
starts from the BN state of the initial (round-0) model, as every FedBN client starts from the
same initialisation: the client side derives it in `client_setup` from the worker, which holds
the initial weights before round 0; it is not sent. A model without BN layers gives FedAvg
exactly.

Evaluation on the global test set (the FedBN paper evaluates personalised models only; FedAA
compares global models): the global model is the averaged non-BN weights plus the n_k-weighted
mean of the BN states that this round's participants hold after training. That mean is
bookkeeping of the simulator for evaluation, not traffic: the BN states travel in
`Update.audit`, not in the upload, and are not counted in `bytes_up` (a deployment would need
one extra BN upload per client to build it).
`eval.personal=true` scores the FedBN model proper: the global non-BN weights with each client's
own BN state (`personal_model`).
"""

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from fedshare.engine.aggregation import RunningMean
from fedshare.engine.client import Client
from fedshare.strategies._local import train_stacked
from fedshare.strategies.base import (
    ClientSetup,
    Message,
    SetupContext,
    Update,
    register_strategy,
    sent_weights,
)
from fedshare.strategies.fedavg import FedAvg

BN_ENTRIES = ("weight", "bias", "running_mean", "running_var")


def batchnorm_mask(model: nn.Module, names: list[str], sizes: list[int]) -> torch.Tensor:
    """Boolean mask over a flat state (entries `names` of sizes `sizes`): True on BN entries."""
    prefixes = {
        f"{name}."
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
    }
    parts = []
    for name, n in zip(names, sizes, strict=True):
        prefix, _, leaf = name.rpartition(".")
        is_bn = f"{prefix}." in prefixes and leaf in BN_ENTRIES
        parts.append(torch.full((n,), is_bn, dtype=torch.bool))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.bool)


@register_strategy("fedbn")
@dataclass
class FedBN(FedAvg):
    """Local BN (client.state["bn"]); the non-BN weights are averaged as in FedAvg."""

    def _masks(self, model: nn.Module, device: torch.device) -> None:
        self.bn_mask = batchnorm_mask(model, self.flat.names, self.flat.sizes).to(device)
        self.shared_mask = ~self.bn_mask
        self.initial_bn = self.flat.flatten(model)[self.bn_mask].clone()

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self._masks(ctx.model, ctx.device)
        self._personal: nn.Module | None = None

    def client_setup(self, ctx: ClientSetup) -> None:
        """The initial BN state is the worker's before round 0: every client starts from the
        same initialisation (the run's seed), which costs no traffic."""
        super().client_setup(ctx)
        self._masks(ctx.model, ctx.device)

    @property
    def has_bn(self) -> bool:
        return bool(self.bn_mask.any())

    def broadcast(self, round_idx: int) -> Message:
        return Message(weights=self.flat.flatten(self.model)[self.shared_mask])

    def compose(self, shared: torch.Tensor, bn: torch.Tensor) -> torch.Tensor:
        """The full flat state from the non-BN entries `shared` and the BN entries `bn`."""
        full = torch.empty(self.flat.numel, device=shared.device, dtype=shared.dtype)
        full[self.shared_mask] = shared
        full[self.bn_mask] = bn.to(full.device)
        return full

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, self.start(client, message))
        return self.keep_bn(client, self.trained_update(client, model))

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """The same step for several clients at once, each row starting from its own BN."""
        starts = [self.start(client, message) for client in clients]
        updates = train_stacked(self.flat, clients, clients[0].model, starts=starts)
        return [self.keep_bn(c, u) for c, u in zip(clients, updates, strict=True)]

    def start(self, client: Client, message: Message) -> torch.Tensor:
        """The received non-BN weights with the client's own BN state."""
        return self.compose(sent_weights(message), client.state.get("bn", self.initial_bn))

    def keep_bn(self, client: Client, update: Update) -> Update:
        """Keep the trained BN state on the client; upload only the non-BN entries."""
        flat = sent_weights(update)
        if self.has_bn:
            client.state["bn"] = flat[self.bn_mask].clone()
            update.audit["bn"] = client.state["bn"]  # for the evaluated global model only
        update.weights = flat[self.shared_mask]
        return update

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        bn_mean = RunningMean()

        def noting_bn() -> Iterable[Update]:
            for update in updates:
                if "bn" in update.audit:
                    bn_mean.add(update.audit.pop("bn"), update.num_samples)
                yield update

        shared = self.average_weights(noting_bn())
        bn = bn_mean.value() if self.has_bn else shared.new_zeros(0)
        self.load_weights(self.model, self.compose(shared, bn))

    def personal_model(self, client_id: int, state: Mapping[str, torch.Tensor]) -> nn.Module:
        """The global non-BN weights with client `client_id`'s own BN state."""
        if not self.has_bn:
            return self.global_model()
        if self._personal is None:
            self._personal = copy.deepcopy(self.model)
        flat = self.flat.flatten(self.model)
        bn = state.get("bn", self.initial_bn)
        return self.load_weights(self._personal, self.compose(flat[self.shared_mask], bn))
