"""FedRS (Li & Zhan, KDD 2021), as ReBaFL's baseline (Xu et al., Section 5.1): restricted
softmax — during local training the logits of classes the client does not hold are multiplied
by α, so their classifier rows are pushed less by the client's features.

The scaling is applied to the logits (weight and bias of the row alike).
"""

from dataclasses import dataclass

import torch

from fedshare.config.rules import FRACTION, ruled
from fedshare.functional.calibration import restricted_logits
from fedshare.strategies._calibrated import CalibratedFedAvg
from fedshare.strategies.base import register_strategy


@register_strategy("fedrs")
@dataclass
class FedRS(CalibratedFedAvg):
    """Local loss CE(z ⊙ s, y) with s_c = 1 for local classes and α otherwise; FedAvg server."""

    alpha: float = ruled(
        0.5,
        FRACTION,
        source="paper: FedRS (Li & Zhan, KDD 2021), α = 0.5; ReBaFL's code (JianXu95/ReBaFL at "
        "62834da, methods/fedrs.py L55) uses the same",
    )

    def calibrate(self, logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return restricted_logits(logits, counts > 0, self.alpha)
