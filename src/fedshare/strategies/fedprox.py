"""FedProx (Li et al., 2020): FedAvg with a proximal term mu/2·||w − w_g||² in the local loss."""

from dataclasses import dataclass

import torch
from torch import nn

from fedshare.engine.client import Client
from fedshare.errors import FedshareError
from fedshare.strategies._local import train_local
from fedshare.strategies.base import Message, Update, register_strategy
from fedshare.strategies.fedavg import FedAvg


@register_strategy("fedprox")
@dataclass
class FedProx(FedAvg):
    """The proximal gradient mu·(w − w_g) is added to each parameter's gradient after backward,
    which equals differentiating mu/2·||w − w_g||² without building it into the graph."""

    mu: float = 0.01

    def __post_init__(self) -> None:
        if self.mu < 0:
            raise FedshareError(f"strategy.mu={self.mu} must be >= 0 (0 is FedAvg)")

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        params = [p for p in model.parameters() if p.requires_grad]
        anchor = [p.detach().clone() for p in params]

        def proximal(_: nn.Module) -> None:
            used = [i for i, p in enumerate(params) if p.grad is not None]
            grads = [params[i].grad for i in used]
            drift = torch._foreach_sub([params[i] for i in used], [anchor[i] for i in used])
            torch._foreach_add_(grads, drift, alpha=self.mu)

        loss = train_local(client, model, grad_hook=proximal)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )
