"""FedTGP (Zhang et al., AAAI 2024, "FedTGP: Trainable Global Prototypes with
Adaptive-Margin-Enhanced Contrastive Learning for Data and Model Heterogeneity in Federated
Learning"), §"Method": trainable global prototypes and the adaptive-margin-enhanced
contrastive loss.

Clients are FedProto's (`fedproto`): personal models trained with CE + λ·mean (f(x) − P_y)²
toward the global prototype P_y of the own class, and their per-class feature means sent up
(classes and prototypes only; FedTGP's server uses no counts). The server does not average
them. It holds trainable global prototypes, P = TGP(c) for every class c, an embedding of the
class id through a two-layer MLP (Embedding(C, d) → Linear(d, h) → ReLU → Linear(h, d), h = d),
and trains them on the round's uploaded prototypes with

    L = CE(−(‖p − P_c‖ + δ·1[c = y])_c, y),      δ = min(max_c gap_c, τ)

where gap_c is the distance from the mean of class c's uploads to the nearest other class's
mean (the adaptive margin; a class nobody uploaded takes the smallest gap) and τ the margin
threshold. Then every class's TGP(c) goes down.

Settings the paper leaves open follow the authors' code (HtFLlib, by FedTGP's first author:
`servertgp`, and its run script `total.sh`: `-lam 10 -se 100 -mart 100`): λ = 10,
`server_epochs` = 100 shuffled passes in batches of `server_batch_size` = 10 (the clients' batch
size), plain SGD at `server_lr` = 0.01 (the clients' learning rate), τ = 100, h = d; the margin
uses the largest class gap, as that code does.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedshare.config.rules import LEARNING_RATE, NON_NEGATIVE, SIZE, ruled
from fedshare.engine.messages import Update
from fedshare.engine.rng import derive_seed
from fedshare.functional.prototype_losses import class_gap, margin_prototype_loss
from fedshare.functional.prototypes import PrototypeAverager, unpack
from fedshare.strategies._server_training import (
    SERVER_EPOCHS,
    prototype_batches,
    train_on_prototypes,
)
from fedshare.strategies.base import SetupContext, register_strategy
from fedshare.strategies.fedproto import FedProto, prototype_message


class TrainableGlobalPrototypes(nn.Module):
    """P_c = fc(ReLU(middle(embedding(c)))) for class ids c."""

    def __init__(self, num_classes: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_classes, dim)
        self.middle = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU())
        self.fc = nn.Linear(hidden, dim)

    def forward(self, classes: torch.Tensor) -> torch.Tensor:
        return self.fc(self.middle(self.embedding(classes)))


@register_strategy("fedtgp")
@dataclass
class FedTGP(FedProto):
    """FedProto's clients; trainable global prototypes with an adaptive margin on the server."""

    lam: float = ruled(
        10.0,
        NON_NEGATIVE,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L9, FedTGP -lam 10",
    )
    margin_threshold: float = ruled(
        100.0,
        NON_NEGATIVE,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L9, FedTGP -mart 100",
    )
    server_epochs: int = ruled(
        100,
        SERVER_EPOCHS,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L9, FedTGP -se 100",
    )
    server_lr: float = ruled(
        0.01,
        LEARNING_RATE,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) servertgp.py L28: the clients' learning "
        "rate, total.sh L9 -lr 0.01",
    )
    server_batch_size: int = ruled(
        10,
        SIZE,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) servertgp.py L29: args.batch_size, "
        "total.sh L9 -lbs 10",
    )

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        d = self.feature_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.seed, "fedtgp_init"))
            self.tgp = TrainableGlobalPrototypes(self.num_classes, d, d).to(self.device)
        self._uploads: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.margin = 0.0

    @staticmethod
    def upload(prototypes: torch.Tensor, counts: torch.Tensor) -> dict[str, torch.Tensor]:
        """The held classes' prototypes, without counts."""
        return prototype_message(prototypes, counts > 0).payload

    def absorb(self, update: Update) -> None:
        protos, _, held = unpack(update.payload, self.num_classes, self.feature_dim, self.device)
        classes = torch.nonzero(held).flatten()
        self._uploads.append((protos[classes], classes))
        self._averager.add(protos, held)  # the class centers: unweighted means over clients
        self.leakage.add(update.client_id, protos[classes], classes)

    def global_prototypes(self, round_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Train the TGP on the round's uploads with the adaptive margin; every class's P_c."""
        centers, present = self._averager.result()
        self._averager = PrototypeAverager(self.num_classes, self.feature_dim, self.device)
        if not self._uploads:
            return self.prototypes, self.mask
        protos = torch.cat([p for p, _ in self._uploads])
        labels = torch.cat([c for _, c in self._uploads])
        self._uploads = []
        gap = class_gap(centers, present)
        largest = float(gap.max()) if bool(gap.isfinite().any()) else 0.0
        self.margin = min(largest, self.margin_threshold)
        classes = torch.arange(self.num_classes, device=self.device)
        batches = prototype_batches(
            protos,
            labels,
            self.server_batch_size,
            self.server_epochs,
            self.seed,
            "fedtgp",
            round_idx,
        )
        loss = train_on_prototypes(
            self.tgp,
            batches,
            lambda p, y: margin_prototype_loss(p, y, self.tgp(classes), self.margin),
            self.server_lr,
        )
        self.round_metrics.update(tgp_loss=loss, margin=self.margin)
        with torch.no_grad():
            return self.tgp(classes), torch.ones(
                self.num_classes, dtype=torch.bool, device=self.device
            )

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "tgp": self.tgp.state_dict(), "margin": self.margin}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.tgp.load_state_dict(state["tgp"])
        self.margin = float(state["margin"])
