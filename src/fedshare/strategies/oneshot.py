"""One-shot strategies whose server trains on data it holds (XorMixFL's setting).

Setting (XorMixFL, Shin et al. 2020, Sections 3 and 4): a server with base samples of its own and
devices; one round; the server trains the global model centrally inside `aggregate`. The server's
data is the partition's server pseudo-client, `partition.info["server"]` (the `xormix` partitioner,
`data/label_deficit.py`); the devices are `partition.info["devices"]` (default: every other client).
The engine still visits the server pseudo-client as a client; it sends nothing.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from fedshare.config.rules import EPOCHS, ruled
from fedshare.engine.optim import learning_rate
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.errors import FedshareError
from fedshare.strategies._central import train_central
from fedshare.strategies.base import Message, SetupContext, Strategy


@dataclass
class OneShotServer(Strategy):
    """Base: finds the server's data and trains the server model centrally (one-shot)."""

    one_shot: ClassVar[bool] = True
    clients_train: ClassVar[bool] = False
    train_defaults: ClassVar[Mapping[str, Any]] = {
        "optimizer": "adam",
        "lr": 1e-3,
        "momentum": 0.0,
        "batch_size": 64,
        "local_epochs": 10,
    }
    """The server's central training of XorMixFL's Table 2 (its preset; the paper gives no
    model nor optimizer)."""

    server_epochs: int | None = ruled(
        None,
        replace(EPOCHS, optional=True),
        source="rule: null, the dataset's train.local_epochs (one recipe for the server's "
        "training)",
    )
    """Epochs of the server's central training (None: `train.local_epochs`, as Vanilla FL's;
    0 shares and measures without training)."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        part = ctx.data.partition
        server = part.info.get("server")
        if server is None:
            raise FedshareError(
                f"strategy {self.name} needs the server's own data, but partition "
                f"{part.name!r} has no server pseudo-client; use partition=xormix (server: true)"
            )
        self.server = int(server)
        others = [k for k in range(ctx.data.num_clients) if k != self.server]
        self.devices = [int(k) for k in part.info.get("devices", others)]
        self._summary: dict[str, Any] = {}

    def broadcast(self, round_idx: int) -> Message:
        """Devices train nothing, so no model goes down before the server has trained."""
        return Message()

    def server_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The server's base samples (stored format) and their labels."""
        idx = self.data.client_indices[self.server]
        return self.data.dataset.x_train[idx], self.data.dataset.y_train[idx]

    def train_server(self, x: torch.Tensor, y: torch.Tensor, round_idx: int) -> None:
        """Train the global model from its initialisation on (x, y) (class ids or soft labels)."""
        cfg = self.config
        epochs = cfg.train.local_epochs if self.server_epochs is None else self.server_epochs
        seed_global_torch(cfg.seed, "server/dropout", round_idx)
        gen = torch_generator(cfg.seed, "server", round_idx, device=self.device)
        lr = learning_rate(cfg.train, round_idx)
        loss = train_central(self.model, x, y, self.data.dataset, cfg.train, lr, epochs, gen)
        self.round_metrics.update(server_train_loss=loss, server_train_samples=len(x))

    def summary_metrics(self) -> dict[str, Any]:
        return dict(getattr(self, "_summary", {}))

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "summary": dict(self._summary)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self._summary = dict(state.get("summary", {}))
