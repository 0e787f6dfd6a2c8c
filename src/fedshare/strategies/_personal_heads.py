"""The server's view of clients that keep personal models under one global head: FedGen with
clients of different architectures (`clients.models`) shares heads only, and evaluates each
client's own model with the latest global head, as LG-FedAvg does (`lg_fedavg`)."""

from dataclasses import dataclass

from torch import nn

from fedshare.strategies._personal import PersonalStrategy
from fedshare.strategies.base import SetupContext
from fedshare.strategies.lg_fedavg import head_weights, load_head


@dataclass
class PersonalHeads(PersonalStrategy):
    """Personal models (`model_of`, `personal_model`, the shown client) dressed with `head`,
    the global head's flat weights, which the owning strategy updates."""

    name = "fedgen"

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.head = head_weights(ctx.model).clone()  # the run's initial head

    def dress(self, model: nn.Module) -> nn.Module:
        return load_head(model, self.head)
