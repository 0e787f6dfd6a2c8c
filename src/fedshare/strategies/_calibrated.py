"""FedAvg with a label-prior-calibrated local loss: the shared shape of BSM-FedAvg, FedLC and FedRS
(ReBaFL's baselines, Xu et al., Section 5.1). Each subclass only says how the logits are calibrated
from the client's class counts; the server is plain sample-weighted FedAvg and inference is the
plain softmax of the global model.
"""

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.client import Client
from fedshare.functional.calibration import class_counts
from fedshare.strategies._local import train_stacked
from fedshare.strategies.base import Message, Update
from fedshare.strategies.fedavg import FedAvg


def client_class_counts(client: Client) -> torch.Tensor:
    """The client's samples per class over its whole local training set (float, length C)."""
    return class_counts(client.labels, client.num_classes)


@dataclass
class CalibratedFedAvg(FedAvg):
    """Local loss: cross-entropy of `calibrate(logits, counts)`; not registered itself."""

    def calibrate(self, logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def calibrated_loss(
        self, net: nn.Module, x: torch.Tensor, y: torch.Tensor, counts: torch.Tensor
    ) -> torch.Tensor:
        """The local loss of a client with class `counts` (one client's row when batched)."""
        return F.cross_entropy(self.calibrate(net(x), counts), y)

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        loss_fn = partial(self.calibrated_loss, counts=client_class_counts(client))
        return self.trained_update(client, model, loss_fn)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients at once: each client's counts are its row."""
        model = self.load_weights(clients[0].model, message.weights)
        counts = torch.stack([client_class_counts(c) for c in clients])
        return train_stacked(self.flat, clients, model, self.calibrated_loss, client_inputs=counts)
