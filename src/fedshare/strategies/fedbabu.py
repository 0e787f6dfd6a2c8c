"""FedBABU (Oh et al., ICLR 2022), as ReBaFL's baseline (shared/specs/rebafl.md §5): the classifier
head stays at its random initialisation; clients train only the body with cross-entropy and
the server averages the bodies. The global model is evaluated as is (no fine-tuning), as in
ReBaFL's tables; FedBABU's personalised fine-tuning is not part of this baseline.
"""

from dataclasses import dataclass

from fedshare.engine.client import Client
from fedshare.models.base import require_body
from fedshare.strategies._local import train_local
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy
from fedshare.strategies.fedavg import FedAvg


@register_strategy("fedbabu")
@dataclass
class FedBABU(FedAvg):
    """Local SGD on every parameter except the model's `head`; server: FedAvg (the head, equal
    on every client, stays at its initial value)."""

    def setup(self, ctx: SetupContext) -> None:
        require_body(ctx.model, self.name)
        super().setup(ctx)

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        head = model.head
        head.requires_grad_(False)
        try:  # frozen parameters get no gradient, so SGD (and its weight decay) skips them
            loss = train_local(client, model)
        finally:
            head.requires_grad_(True)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss},
        )
