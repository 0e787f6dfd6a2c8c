"""FedAvg followed by one calibration of the classifier head: after the last round's
aggregation every client answers a `calibrate` phase once (what it uploads is the subclass's
`calibration_step`), and the server re-fits the head on what it received (`calibrate`, through
`refit_head`). Shared by CCVR (class Gaussians) and FLea's feature re-calibration (features)."""

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedshare.config.rules import EPOCHS, POSITIVE, SIZE, ruled
from fedshare.engine.client import Client
from fedshare.engine.training import fit, shuffled_positions
from fedshare.models.base import as_block_model
from fedshare.strategies._feature_heads import head_accuracy
from fedshare.strategies.base import Message, Phase, Update
from fedshare.strategies.fedavg import FedAvg


@dataclass
class HeadCalibration(FedAvg):
    """FedAvg, then the server re-fits the head once on what every client uploaded."""

    calibration_epochs: int = ruled(10, EPOCHS)
    calibration_lr: float = ruled(1e-3, POSITIVE)
    calibration_batch_size: int = ruled(32, SIZE)

    def phases(self) -> list[Phase]:
        calibrate = Phase(
            "calibrate",
            self.broadcast,
            self.calibration_step,
            self.calibrate,
            participants=self.after_training,
            trains=False,
        )
        return [*super().phases(), calibrate]

    def after_training(self, round_idx: int, cohort: list[int]) -> list[int]:
        """Every client, once, after the last round's aggregation."""
        return list(range(self.data.num_clients)) if round_idx == self.config.rounds - 1 else []

    def calibration_step(self, client: Client, message: Message) -> Update:
        """What a client uploads for the calibration."""
        raise NotImplementedError

    def calibrate(self, updates: Iterable[Update], round_idx: int) -> None:
        """The server's re-fit of the head on the clients' uploads."""
        raise NotImplementedError

    def refit_head(
        self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator
    ) -> tuple[float, float]:
        """Re-train the global head on (x, y) with Adam (`calibration_lr`, `calibration_epochs`
        passes of shuffled batches drawn from `gen`); its accuracy on them before and after."""
        head = as_block_model(self.model).head
        before = head_accuracy(head, x, y)
        optimizer = torch.optim.Adam(head.parameters(), lr=self.calibration_lr)
        batches = shuffled_positions(
            len(y), self.calibration_batch_size, gen, self.device, self.calibration_epochs
        )
        fit(optimizer, batches, lambda pos: F.cross_entropy(head(x[pos]), y[pos]))
        return before, head_accuracy(head, x, y)
