"""BSM-FedAvg: FedAvg whose local loss is balanced softmax (the BSM loss of FedRoD, Chen &
Chao, ICLR 2022) with the client's exact label prior, as ReBaFL's baseline
(Xu et al., Eq. 8, Section 3.2; the baselines of Section 5.1).

Deviation: absent classes get an exact −∞ logit offset (they leave the softmax) where the
official code adds 1e-9 to the prior (offset ≈ −20.7); with ε = 0 this is ReBaFL's R-BSM.
"""

from dataclasses import dataclass

import torch

from fedshare.functional.calibration import log_relaxed_prior
from fedshare.strategies._calibrated import CalibratedFedAvg
from fedshare.strategies.base import register_strategy


@register_strategy("bsm_fedavg")
@dataclass
class BSMFedAvg(CalibratedFedAvg):
    """Local loss CE(z + log(n_c/n), y) (Eq. 8); server: sample-weighted FedAvg."""

    def calibrate(self, logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return logits + log_relaxed_prior(counts, 0.0)
