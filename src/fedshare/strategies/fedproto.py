"""FedProto (Tan et al., AAAI 2022, "FedProto: Federated Prototype Learning across
Heterogeneous Clients"), §"Federated Prototype Learning" and its Algorithm 1.

Each client keeps its own model (any architecture with the shared penultimate width d). After
local training it sends, per class j it holds, its local prototype C_i^(j), the mean of its
features f_i(x) over its samples of class j, with the class count |D_i,j|. The server's global
prototype of class j is their count-weighted mean

    C̄^(j) = Σ_i |D_i,j| C_i^(j) / Σ_i |D_i,j|       (over the clients i that hold class j)

and it broadcasts the held classes' C̄^(j). A client's local loss on (x, y) is

    CE(head(f(x)), y) + λ · mean_d (f(x) − C̄^(y))²

(the squared L2 distance to its own class's global prototype, averaged over the d features as
HtFLlib's `MSELoss` does; a class without a global prototype adds zero). Prediction:
by the personal head (the run's `accuracy`) and by the nearest global prototype (the paper's
inference, `proto_accuracy` per round, on the same shown model; see `_personal`).

Where the paper is silent, HtFLlib's implementation (`clientproto`; Zhang et al.'s
heterogeneous-FL library, a second source) settles it: λ = 1
(its default), the global prototypes of a round are those of that round's uploads only, and a
class nobody uploaded has none. Two choices differ from that code and are stated: local
prototypes are computed after training in eval mode (the code averages the features seen during
training), and the server weights by class counts as the paper's aggregation does (the code
takes an unweighted mean over clients).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import NON_NEGATIVE, ruled
from fedshare.engine.client import Client
from fedshare.engine.messages import Message, Update
from fedshare.functional.prototype_losses import nearest_prototype, prototype_distance_loss
from fedshare.functional.prototypes import PrototypeAverager, feature_prototypes, pack, unpack
from fedshare.metrics.prototype_leakage import PrototypeLeakage
from fedshare.models.base import as_block_model
from fedshare.strategies._local import LossFn
from fedshare.strategies._personal import PersonalStrategy
from fedshare.strategies.base import SetupContext, register_strategy


def prototype_message(prototypes: torch.Tensor, mask: torch.Tensor) -> Message:
    """The held classes' global prototypes and their class ids (no counts)."""
    classes = torch.nonzero(mask).flatten()
    return Message(payload={"proto_classes": classes, "prototypes": prototypes[classes]})


@torch.no_grad()
def prototype_accuracy(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor, mask: torch.Tensor
) -> float:
    """Accuracy (%) of nearest-prototype prediction on the features of `model`."""
    was_training = model.training
    model.eval()
    blocks = as_block_model(model)
    features = torch.cat([blocks.features(chunk).flatten(1) for chunk in x.split(1000)])
    model.train(was_training)
    return 100.0 * float((nearest_prototype(features, prototypes, mask) == y).float().mean())


@register_strategy("fedproto")
@dataclass
class FedProto(PersonalStrategy):
    """Personal models; class prototypes up, count-weighted global prototypes down."""

    lam: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/main.py L387, -lam default 1 "
        "(its total.sh L2 runs FedProto at -lam 10)",
    )
    """λ, the prototype term's weight (0: local training)."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.prototypes = torch.zeros(self.num_classes, self.feature_dim, device=self.device)
        self.mask = torch.zeros(self.num_classes, dtype=torch.bool, device=self.device)
        self._averager = PrototypeAverager(self.num_classes, self.feature_dim, self.device)
        self.leakage = PrototypeLeakage(ctx.data, self.num_classes, self.seed)

    def broadcast(self, round_idx: int) -> Message:
        return prototype_message(self.prototypes, self.mask)

    def local_step(self, client: Client, message: Message) -> tuple[nn.Module, LossFn]:
        protos, _, mask = unpack(message.payload, self.num_classes, self.feature_dim, client.device)

        def loss(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            blocks = as_block_model(net)
            f = blocks.features(x)
            ce = F.cross_entropy(blocks.head(f), y)
            return ce + self.lam * prototype_distance_loss(f.flatten(1), y, protos, mask)

        return self.personal(client), loss

    def uploaded(
        self, client: Client, net: nn.Module, train_loss: torch.Tensor, message: Message
    ) -> Update:
        local, counts = feature_prototypes(net, *client.data(), self.num_classes)
        update = Update(
            client.id,
            client.num_samples,
            payload=self.upload(local, counts),
            metrics={"train_loss": train_loss},
        )
        return self.keep(client, net, update)

    @staticmethod
    def upload(prototypes: torch.Tensor, counts: torch.Tensor) -> dict[str, torch.Tensor]:
        """What a client sends: its held classes' prototypes with their class counts."""
        return pack(prototypes, counts)

    def absorb(self, update: Update) -> None:
        protos, counts, held = unpack(
            update.payload, self.num_classes, self.feature_dim, self.device
        )
        self._averager.add(protos, counts)
        classes = torch.nonzero(held).flatten()
        self.leakage.add(update.client_id, protos[classes], classes)

    def finish(self, round_idx: int) -> None:
        self.round_metrics = {}
        self.prototypes, self.mask = self.global_prototypes(round_idx)
        dataset = self.data.dataset
        x = dataset.prepare(dataset.x_test)
        self.round_metrics["proto_accuracy"] = prototype_accuracy(
            self.shown, x, dataset.y_test, self.prototypes, self.mask
        )
        self.round_metrics.update(self.leakage.measure(round_idx))

    def global_prototypes(self, round_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The server step: this round's count-weighted mean per class, and its mask."""
        result = self._averager.result()
        self._averager = PrototypeAverager(self.num_classes, self.feature_dim, self.device)
        return result

    def summary_metrics(self) -> dict[str, Any]:
        return {**super().summary_metrics(), **self.leakage.last}

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "prototypes": self.prototypes,
            "mask": self.mask,
            "leakage": dict(self.leakage.last),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.prototypes = state["prototypes"].to(self.device)
        self.mask = state["mask"].to(self.device)
        self.leakage.last = dict(state["leakage"])
