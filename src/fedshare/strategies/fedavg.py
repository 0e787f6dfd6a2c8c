"""FedAvg (McMahan et al., 2017): local SGD, then the sample-count-weighted mean of weights."""

from dataclasses import dataclass

from fedshare.engine.client import Client
from fedshare.strategies._local import train_local
from fedshare.strategies.base import Message, Strategy, Update, register_strategy


@register_strategy("fedavg")
@dataclass
class FedAvg(Strategy):
    """θ ← Σ_k (n_k / Σ_j n_j) · θ_k over the round's participants."""

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        loss = train_local(client, model)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )
