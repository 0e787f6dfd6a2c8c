"""FedBABU (Oh et al., ICLR 2022), as ReBaFL's baseline (Xu et al., Section 5.1): the classifier
head stays at its random initialisation; clients train only the body with cross-entropy and
the server averages the bodies. The global model is evaluated as is (no fine-tuning), as in
ReBaFL's tables; FedBABU's personalised fine-tuning is not part of this baseline.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from torch import nn

from fedshare.engine.client import Client
from fedshare.models.base import as_block_model, require_body
from fedshare.strategies._local import train_stacked
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
        # frozen parameters get no gradient, so SGD skips them
        with frozen(as_block_model(model).head):
            return self.trained_update(client, model)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """The same step for several clients at once: only the body's parameters are stacked
        (`StackedRun` stacks the trainable ones), the head stays the broadcast one."""
        model = self.load_weights(clients[0].model, message.weights)
        with frozen(as_block_model(model).head):
            return train_stacked(self.flat, clients, model)


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """`module`'s parameters without gradient for the duration of the block."""
    module.requires_grad_(False)
    try:
        yield
    finally:
        module.requires_grad_(True)
