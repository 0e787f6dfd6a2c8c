"""DSFL (dynamic sparsification; Beitollahi et al., 2022) as FedPFT compares against it (its
Section 5.2 and Figure 4, a multi-round method; App. D.1): top-K with K half the head's
parameters.

FedAvg whose clients upload only the K = ⌈`keep`·|θ|⌉ largest-magnitude entries of their update
Δ_k = θ_k − θ, as one byte string (`functional/sparse.py`): a bit mask of the kept positions
(|θ|/8 bytes) and their fp32 values (4K bytes), 53 % of a dense upload at keep = 0.5 — the
engine counts that string as the client's upload. The server adds the n_k-weighted mean of the
sparse updates to θ. With `error_feedback` each client keeps what it dropped (in
`client.state`) and adds it to its next update. Deviation: K is fixed; how the original adapts the
sparsity over rounds is not built. Any local optimizer: the
sparsification and the residual act on the weight update Δ_k, whatever produced it.
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from fedshare.config.rules import ANY, PROBABILITY, ruled
from fedshare.engine.client import Client
from fedshare.functional.sparse import pack, top_k_mask, unpack
from fedshare.strategies._local import train_stacked
from fedshare.strategies.base import Message, Update, register_strategy, sent_weights
from fedshare.strategies.fedavg import FedAvg


@register_strategy("dsfl")
@dataclass
class DSFL(FedAvg):
    """FedAvg on top-K sparsified updates, uploaded as mask + values."""

    keep: float = ruled(
        0.5,
        PROBABILITY,
        source="paper: FedPFT App. D.1, DSFL's top-K set to half the number of the head's "
        "parameters",
    )
    error_feedback: bool = ruled(False, ANY, source="rule: off, the plain top-K sparsification")

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        return self.sparsify(client, self.trained_update(client, model), message)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """The same step for several clients at once: batched training, then each client's
        own top-K of its own update (and residual)."""
        model = self.load_weights(clients[0].model, message.weights)
        updates = train_stacked(self.flat, clients, model)
        return [self.sparsify(c, u, message) for c, u in zip(clients, updates, strict=True)]

    def sparsify(self, client: Client, update: Update, message: Message) -> Update:
        """Replace the trained weights by the packed top-K of Δ_k (plus the kept residual)."""
        delta = sent_weights(update) - sent_weights(message)
        if self.error_feedback:
            delta = delta + client.state.get("residual", torch.zeros_like(delta))
        mask = top_k_mask(delta, math.ceil(self.keep * delta.numel()))
        if self.error_feedback:
            client.state["residual"] = torch.where(mask, 0.0, delta)
        update.weights = pack(delta, mask)
        return update

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        theta = self.flat.flatten(self.model)
        total = torch.zeros_like(theta)
        weight = 0.0
        for update in updates:
            assert update.weights is not None
            w = update.aggregation_weight
            total += w * unpack(update.weights, theta.numel()).to(theta.dtype)
            weight += w
        if weight:
            self.load_weights(self.model, theta + total / weight)
