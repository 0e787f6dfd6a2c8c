"""FedAvg (McMahan et al., 2017): local SGD, then the sample-count-weighted mean of weights."""

from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn

from fedshare.engine.batched import Batch
from fedshare.engine.client import Client
from fedshare.strategies._local import (
    GradHook,
    LossFn,
    cross_entropy_loss,
    train_local,
    train_stacked,
)
from fedshare.strategies.base import Message, Strategy, Update, register_strategy


@register_strategy("fedavg")
@dataclass
class FedAvg(Strategy):
    """θ ← Σ_k (n_k / Σ_j n_j) · θ_k over the round's participants. Batched (`train.batched`)
    through `batched_update`, and so is every heir that keeps its client step or changes only
    `local_loss`."""

    def local_loss(self, model: nn.Module, message: Message) -> LossFn:
        """The loss of local training, `(model, x, y) -> loss` (cross-entropy): a variant that
        changes only this loss (FedDecorr, FedNTD) overrides it and keeps both client steps,
        serial and batched (so it must run under `vmap`: fixed shapes, no branching on values)."""
        return cross_entropy_loss

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        return self.trained_update(client, model, self.local_loss(model, message))

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients at once (`fedshare.engine.batched`)."""
        model = self.load_weights(clients[0].model, message.weights)
        return train_stacked(self.flat, clients, model, self.local_loss(model, message))

    def trained_update(
        self,
        client: Client,
        model: nn.Module,
        loss_fn: LossFn = cross_entropy_loss,
        grad_hook: GradHook | None = None,
        batches: Iterable[Batch] | None = None,
    ) -> Update:
        """Train `model` on the client's batches, or on `batches` (`train_local`), and upload
        its weights: the client step of every FedAvg variant that changes only the local loss,
        gradient or batches."""
        loss = train_local(client, model, loss_fn, grad_hook, batches=batches)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )
