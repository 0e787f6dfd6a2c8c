"""FedGH (Yi et al., ACM MM 2023, "FedGH: Heterogeneous Federated Learning with Generalized
Global Header"), §3 and its Algorithm 1.

Each client keeps its own feature extractor. Every round the server sends the generalised
global header (a Linear feature_dim → classes); the client puts it on its model as its head,
trains the whole model with cross-entropy on its data, and uploads, per class it holds, the
mean of its features (its local prototype). The server trains the header on the uploaded
(prototype, class) pairs alone with cross-entropy, and the next round's clients get it. A
client is evaluated with the latest header on its own features (`dress`).

Where the paper leaves the server's training settings open, HtFLlib's implementation settles
them (its `servergh` and its run script `total.sh`: `-slr 0.01 -se 1`, batches of the clients'
batch size 10): plain SGD at `server_lr` = 0.01, `server_epochs` = 1 shuffled pass over the
round's prototypes in batches of `server_batch_size` = 10. The header starts as the run's
initial model's head (the code takes client 0's). Local prototypes are computed after training
in eval mode, as that code's `collect_protos` does.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import LEARNING_RATE, SIZE, ruled
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.messages import Message, Update
from fedshare.functional.prototypes import feature_prototypes, unpack
from fedshare.metrics.prototype_leakage import PrototypeLeakage
from fedshare.strategies._local import LossFn, cross_entropy_loss
from fedshare.strategies._personal import PersonalStrategy
from fedshare.strategies._server_training import (
    SERVER_EPOCHS,
    prototype_batches,
    train_on_prototypes,
)
from fedshare.strategies.base import SetupContext, register_strategy, sent_weights
from fedshare.strategies.fedproto import prototype_message
from fedshare.strategies.lg_fedavg import head_weights, load_head


@register_strategy("fedgh")
@dataclass
class FedGH(PersonalStrategy):
    """Personal extractors; prototypes up, a header trained on them by the server down."""

    server_epochs: int = ruled(
        1,
        SERVER_EPOCHS,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L8, FedGH -se 1",
    )
    server_lr: float = ruled(
        0.01,
        LEARNING_RATE,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L8, FedGH -slr 0.01",
    )
    server_batch_size: int = ruled(
        10,
        SIZE,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) total.sh L8 -lbs 10; servergh.py L95 "
        "batches the server's prototypes at args.batch_size",
    )

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.header = nn.Linear(self.feature_dim, self.num_classes).to(self.device)
        self.header_flat = FlatState(self.header)
        self.header_flat.load_(self.header, head_weights(ctx.model))
        self._uploads: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.leakage = PrototypeLeakage(ctx.data, self.num_classes, self.seed)

    def header_weights(self) -> torch.Tensor:
        return self.header_flat.flatten(self.header)

    def broadcast(self, round_idx: int) -> Message:
        return Message(weights=self.header_weights())

    def local_step(self, client: Client, message: Message) -> tuple[nn.Module, LossFn]:
        return load_head(self.personal(client), sent_weights(message)), cross_entropy_loss

    def uploaded(
        self, client: Client, model: nn.Module, train_loss: torch.Tensor, message: Message
    ) -> Update:
        local, counts = feature_prototypes(model, *client.data(), self.num_classes)
        payload = prototype_message(local, counts > 0).payload
        update = Update(
            client.id, client.num_samples, payload=payload, metrics={"train_loss": train_loss}
        )
        return self.keep(client, model, update)

    def absorb(self, update: Update) -> None:
        protos, _, held = unpack(update.payload, self.num_classes, self.feature_dim, self.device)
        classes = torch.nonzero(held).flatten()
        self._uploads.append((protos[classes], classes))
        self.leakage.add(update.client_id, protos[classes], classes)

    def finish(self, round_idx: int) -> None:
        if not self._uploads:
            return
        leakage = self.leakage.measure(round_idx)
        protos = torch.cat([p for p, _ in self._uploads])
        labels = torch.cat([c for _, c in self._uploads])
        self._uploads = []
        batches = prototype_batches(
            protos,
            labels,
            self.server_batch_size,
            self.server_epochs,
            self.seed,
            "fedgh",
            round_idx,
        )
        loss = train_on_prototypes(
            self.header, batches, lambda p, y: F.cross_entropy(self.header(p), y), self.server_lr
        )
        self.round_metrics = {"header_loss": loss, **leakage}

    def dress(self, model: nn.Module) -> nn.Module:
        return load_head(model, self.header_weights())

    def summary_metrics(self) -> dict[str, Any]:
        return {**super().summary_metrics(), **self.leakage.last}

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "header": self.header.state_dict(),
            "leakage": dict(self.leakage.last),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.header.load_state_dict(state["header"])
        self.leakage.last = dict(state["leakage"])
