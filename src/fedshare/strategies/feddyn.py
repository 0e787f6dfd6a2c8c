"""FedDyn (Acar et al., ICLR 2021): a dynamic regulariser aligns local and global optima.

Client k keeps ∇L_k(θ_k^{t−1}) in `client.state` (zero before its first round) and minimises

    L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + α/2·‖θ − θ^{t−1}‖²

(the two extra terms enter as gradients after backward), then updates its state
∇L_k ← ∇L_k − α(θ_k^t − θ^{t−1}). The server keeps h (zero at the start):

    h ← h − (α/m)·Σ_{k∈S}(θ_k^t − θ^{t−1}),   θ^t = mean_S(θ_k^t) − h/α,

m = the number of clients. The mean over the cohort S is weighted by sample counts by default
(`mean=samples`, as FedAvg's and ReBaFL's code); `mean=plain` is the paper's (1/|S|)·Σ_S θ_k
(Algorithm 1). State and h cover the trainable parameters; buffers (BatchNorm statistics) are
averaged. Only weights cross the network, so the traffic equals FedAvg's.

α defaults to 1e-2, the value of the FedDyn authors' code (alpemreacar/FedDyn,
example_cifar_10.py, alpha_coef); ReBaFL's baseline uses its code's 1e-4 (its Section 5.1
names no value), which the ReBaFL tables set explicitly. ReBaFL's code keeps h pre-divided by
α, which is the same rule.

Optimizer: any. The two terms are the gradient of the local objective, so every optimizer
minimises the same objective, and the state update ∇L_k ← ∇L_k − α(θ_k^t − θ^{t−1}) is the
first-order condition at its minimiser, whichever solver reached it (the paper: "any local
solver"; weight decay becomes part of L_k).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedshare.config.rules import POSITIVE, Rule, ruled
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.batched import Rows
from fedshare.engine.client import Client
from fedshare.strategies._local import train_local, train_stacked
from fedshare.strategies._param_vector import ParamVectorStrategy
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy, sent_weights

MEANS = ("samples", "plain")


@register_strategy("feddyn")
@dataclass
class FedDyn(ParamVectorStrategy):
    """FedDyn with the dynamic regulariser of weight `alpha` (> 0)."""

    alpha: float = ruled(
        1e-2,
        POSITIVE,
        source="code: FedDyn's code (alpemreacar/FedDyn at 48a19fa, example_cifar_10.py L65: "
        "alpha_coef = 1e-2)",
    )
    mean: str = ruled(
        "samples",
        Rule(choices=MEANS),
        source="rule: n_k-weighted, FedAvg's mean, so FedDyn differs from FedAvg by its "
        "regulariser only (the paper's plain 1/|S| is mean=plain)",
    )
    """samples: the cohort's models weighted by n_k (FedAvg's); plain: (1/|S|)·Σ (the paper)."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.h = torch.zeros(self.pv.numel, device=ctx.device)

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        params = self.pv.params(model)
        anchor = self.pv.of(sent_weights(message))
        grad_k = self._grad_k(client, anchor)

        def dynamic(_: nn.Module) -> None:
            # ∇[−⟨∇L_k, θ⟩ + α/2‖θ − θ^{t−1}‖²] = −∇L_k + α(θ − θ^{t−1})
            theta = torch.cat([p.detach().reshape(-1) for p in params])
            self.pv.add_to_grads(params, self.alpha * (theta - anchor) - grad_k)

        loss = train_local(client, model, grad_hook=dynamic)
        return self._upload(client, anchor, self.flat.flatten(model), loss)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients (`train.batched`), each row with its own ∇L_k."""
        model = self.load_weights(clients[0].model, message.weights)
        anchor = self.pv.of(sent_weights(message))
        anchors = self.pv.per_param(anchor.unsqueeze(0))
        grad_ks = self.pv.per_param(torch.stack([self._grad_k(k, anchor) for k in clients]))

        def dynamic(params: dict, grads: dict, rows: Rows) -> dict[str, torch.Tensor]:
            return {
                n: g + self.alpha * (params[n] - anchors[n]) - grad_ks[n][rows]
                for n, g in grads.items()
            }

        updates = train_stacked(self.flat, clients, model, grad_hook=dynamic)
        return [
            self._upload(client, anchor, sent_weights(u), u.metrics["train_loss"])
            for client, u in zip(clients, updates, strict=True)
        ]

    @staticmethod
    def _grad_k(client: Client, anchor: torch.Tensor) -> torch.Tensor:
        return client.state.get("grad", torch.zeros_like(anchor))

    def _upload(
        self, client: Client, anchor: torch.Tensor, weights: torch.Tensor, loss: torch.Tensor
    ) -> Update:
        """∇L_k ← ∇L_k − α(θ_k^t − θ^{t−1}) kept in the client's state; θ_k^t uploaded."""
        grad_k = self._grad_k(client, anchor)
        client.state["grad"] = grad_k - self.alpha * (self.pv.of(weights) - anchor)
        return Update(client.id, client.num_samples, weights=weights, metrics={"train_loss": loss})

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        before = self.pv.of(self.flat.flatten(self.model))
        mean = RunningMean()
        drift = torch.zeros_like(self.h)
        for update in updates:
            weights = sent_weights(update)
            mean.add(weights, update.aggregation_weight if self.mean == "samples" else 1.0)
            drift += self.pv.of(weights) - before
            update.weights = None
        if mean.empty:
            return
        self.h -= (self.alpha / self.data.num_clients) * drift
        new = mean.value()
        new[self.pv.index.to(new.device)] -= self.h / self.alpha
        self.load_weights(self.model, new)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "h": self.h.cpu()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.h = state["h"].to(self.device)
