"""FedAvg (McMahan et al., 2017): local SGD, then the sample-count-weighted mean of weights."""

from dataclasses import dataclass

from torch import nn

from fedshare.engine.client import Client
from fedshare.strategies._local import GradHook, LossFn, cross_entropy_loss, train_local
from fedshare.strategies.base import Message, Strategy, Update, register_strategy


@register_strategy("fedavg")
@dataclass
class FedAvg(Strategy):
    """θ ← Σ_k (n_k / Σ_j n_j) · θ_k over the round's participants."""

    def client_update(self, client: Client, message: Message) -> Update:
        return self.trained_update(client, self.load_weights(client.model, message.weights))

    def trained_update(
        self,
        client: Client,
        model: nn.Module,
        loss_fn: LossFn = cross_entropy_loss,
        grad_hook: GradHook | None = None,
    ) -> Update:
        """Train `model` on the client's batches (`train_local`) and upload its weights: the
        client step of every FedAvg variant that changes only the local loss or gradient."""
        loss = train_local(client, model, loss_fn, grad_hook)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )
