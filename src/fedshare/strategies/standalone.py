"""Standalone ML, a baseline of the XorMixFL paper (§4, Tab. 2): the server trains the
global model on its own (label-deficient) data only; the devices send nothing."""

from collections.abc import Iterable
from dataclasses import dataclass

from fedshare.engine.client import Client
from fedshare.strategies.base import Message, Update, register_strategy
from fedshare.strategies.oneshot import OneShotServer


@register_strategy("standalone")
@dataclass
class Standalone(OneShotServer):
    """The server's imbalanced base samples are the whole training set; each device's
    update is empty (counted, with no bytes)."""

    def client_update(self, client: Client, message: Message) -> Update:
        return Update(client.id, 0)

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        for _ in updates:
            pass
        x, y = self.server_data()
        self.train_server(x, y, round_idx)
