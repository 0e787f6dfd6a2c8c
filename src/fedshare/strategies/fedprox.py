"""FedProx (Li et al., 2020): FedAvg with a proximal term mu/2·||w − w_g||² in the local loss.

`norm: plain` is the form of FLea's code (its App. C.3 baseline): (mu/2)·Σ_tensors
‖w_t − w_g,t‖₂, a non-squared L2 norm per parameter tensor, summed over tensors. The code reads
mu from `--beta`: its CIFAR-10 script passes 0.001, its UCI-HAR script 1, and its UrbanSound8K
script leaves main.py's default, 1 (the `fedprox` and `fedprox_mu1` rows of
`fedshare/paper/tables/flea.json`). The default `squared` is the paper's term.

Any local optimizer: the proximal gradient makes every optimizer minimise the paper's local
objective F_k(w) + mu/2·||w − w_g||², of which FedProx asks only an inexact solution by "any
local solver" (its γ-inexactness).
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fedshare.config.rules import NON_NEGATIVE, Rule, ruled
from fedshare.engine.batched import Rows
from fedshare.engine.client import Client
from fedshare.strategies._local import train_stacked
from fedshare.strategies.base import Message, Update, register_strategy
from fedshare.strategies.fedavg import FedAvg

NORMS = ("squared", "plain")


def proximal_grads(
    drift: list[torch.Tensor] | tuple[torch.Tensor, ...],
    mu: float,
    norm: str = "squared",
    per_row: bool = False,
) -> list[torch.Tensor]:
    """The proximal penalty's gradient for each tensor's drift w − w_g: mu·(w − w_g) for
    mu/2·||w − w_g||² (`squared`); (mu/2)·(w_t − w_g,t)/‖w_t − w_g,t‖ per tensor for
    (mu/2)·Σ_t ‖w_t − w_g,t‖ (`plain`; 0 where a tensor equals its anchor, torch's subgradient).
    With `per_row` the first axis indexes clients (batched training) and each row has its norm."""
    if norm == "squared":
        return list(torch._foreach_mul(drift, mu))
    norms: Sequence[torch.Tensor]
    if per_row:
        norms = [d.flatten(1).norm(dim=1).view(-1, *[1] * (d.dim() - 1)) for d in drift]
    else:
        norms = torch._foreach_norm(drift)
    return [
        d * (mu / 2 / torch.where(n > 0, n, torch.ones_like(n)))
        for d, n in zip(drift, norms, strict=True)
    ]


def add_proximal_grad_(
    params: Sequence[torch.Tensor], anchor: Sequence[torch.Tensor], mu: float, norm: str = "squared"
) -> None:
    """Add the proximal penalty's gradient (`proximal_grads`) to `params`' gradients, in place."""
    used = [i for i, p in enumerate(params) if p.grad is not None]
    grads = [g for i in used if (g := params[i].grad) is not None]
    drift = torch._foreach_sub([params[i] for i in used], [anchor[i] for i in used])
    torch._foreach_add_(grads, proximal_grads(drift, mu, norm))


@register_strategy("fedprox")
@dataclass
class FedProx(FedAvg):
    """The proximal gradient (`add_proximal_grad_`) is added to each parameter's gradient after
    backward, which equals differentiating the penalty without building it into the graph."""

    mu: float = ruled(
        0.01,
        NON_NEGATIVE,
        source="paper: FedPFT App. D.1 runs FedProx at 0.01, one value of FLea App. C.3's grid "
        "[0.1, 0.01, 0.001] and of FedProx's own (Li et al., MLSys 2020, §5.3.2 'Choosing µ': "
        "{0.001, 0.01, 0.1, 1})",
    )
    norm: str = ruled(
        "squared",
        Rule(choices=NORMS),
        source="paper: FedProx (Li et al., MLSys 2020) §3.2 (Eq. 2), h_k = F_k + μ/2·‖w − w^t‖²",
    )

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        params = [p for p in model.parameters() if p.requires_grad]
        anchor = [p.detach().clone() for p in params]

        def proximal(_: nn.Module) -> None:
            add_proximal_grad_(params, anchor, self.mu, self.norm)

        return self.trained_update(client, model, grad_hook=proximal)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        model = self.load_weights(clients[0].model, message.weights)
        anchor = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

        def proximal(params: dict, grads: dict, rows: Rows) -> dict[str, torch.Tensor]:
            drift = [params[n] - anchor[n] for n in anchor]
            prox = proximal_grads(drift, self.mu, self.norm, per_row=True)
            return {n: grads[n] + g for n, g in zip(anchor, prox, strict=True)}

        return train_stacked(self.flat, clients, model, grad_hook=proximal)
