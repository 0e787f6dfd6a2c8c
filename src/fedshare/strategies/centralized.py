"""Centralized training: the model trained on the union of all clients' data (the upper reference).

FedPFT's "Centralized (oracle)" (Section 5.2): the head trained on the pooled raw features; its
cost is the raw features at 16-bit. Usable with any dataset and model.

The first time a client takes part it uploads its stored training samples with their labels
(payload, so `bytes_shared` is the cost of sending the data: floating-point inputs such as
features in `wire_dtype`, float16 by default as in the paper; integer inputs such as uint8 images
as they are; labels in the smallest integer type that holds them). Every round the server trains the
global model for `train.local_epochs` shuffled passes over the pool with the configured
optimizer, batch size, augmentation and this round's learning rate
(`fedshare.strategies._central.train_central`); `rounds` > 1 gives a learning curve. The pool is
part of the checkpoint, so a resumed run equals an uninterrupted one.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fedshare.config.rules import Rule, ruled
from fedshare.engine.client import Client
from fedshare.engine.optim import learning_rate
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.gmm import WIRE_DTYPES
from fedshare.strategies._central import train_central
from fedshare.strategies.base import Message, SetupContext, Strategy, Update, register_strategy


def label_dtype(num_classes: int) -> torch.dtype:
    if num_classes <= 256:
        return torch.uint8
    return torch.int16 if num_classes <= 32768 else torch.int32


@register_strategy("centralized")
@dataclass
class Centralized(Strategy):
    """Pool every client's data at the server once, then train there."""

    clients_train: ClassVar[bool] = False

    wire_dtype: str = ruled(
        "float16",
        Rule(choices=tuple(WIRE_DTYPES)),
        source="rule: engineering only (bytes on the wire; uint8 images travel as they are)",
    )
    """Precision of floating-point inputs on the wire (float16 | float32 | float64)."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.pool_x: torch.Tensor | None = None
        self.pool_y: torch.Tensor | None = None

    def broadcast(self, round_idx: int) -> Message:
        return Message()

    def client_update(self, client: Client, message: Message) -> Update:
        if "sent" in client.state or client.num_samples == 0:
            return Update(client.id, client.num_samples)  # the server already has the data
        client.state["sent"] = torch.ones((), dtype=torch.bool)
        x, y = client.raw()
        if x.is_floating_point():
            x = x.to(WIRE_DTYPES[self.wire_dtype])
        y = y.to(label_dtype(client.num_classes))
        return Update(client.id, client.num_samples, payload={"samples": x, "labels": y})

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        xs, ys = [], []
        for update in updates:
            if "samples" in update.payload:
                xs.append(update.payload["samples"])
                ys.append(update.payload["labels"])
        if xs:
            stored = self.data.dataset.x_train.dtype
            x, y = torch.cat(xs).to(stored), torch.cat(ys).long()
            self.pool_x = x if self.pool_x is None else torch.cat([self.pool_x, x])
            self.pool_y = y if self.pool_y is None else torch.cat([self.pool_y, y])
        if self.pool_x is None or self.pool_y is None:
            raise FedshareError("no client sent any data to the centralized server")
        train = self.config.train
        seed_global_torch(self.config.seed, "centralized/train", round_idx)
        gen = torch_generator(
            self.config.seed, "centralized/batches", round_idx, device=self.device
        )
        loss = train_central(
            self.model,
            self.pool_x,
            self.pool_y,
            self.data.dataset,
            train,
            learning_rate(train, round_idx),
            train.local_epochs,
            gen,
        )
        self.round_metrics.update(server_loss=loss, pooled_samples=len(self.pool_y))

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "pool_x": self.pool_x,
            "pool_y": self.pool_y,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.pool_x, self.pool_y = state.get("pool_x"), state.get("pool_y")
