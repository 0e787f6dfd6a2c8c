"""FedLC (Zhang et al., ICML 2022), as ReBaFL's baseline (Xu et al., Section 5.1): local
cross-entropy on logits calibrated by the client's class counts, z_c − τ·n_c^{−1/4}.

Absent classes count as 1e-9 (offset ≈ −177.8·τ), as in ReBaFL's code. FLea's code (its App. C.3
baseline) adds 1e-6 to every count instead (offset ≈ −31.6·τ): `missing_count=1e-6`; its scripts use
τ = 1.
"""

from dataclasses import dataclass

import torch

from fedshare.config.rules import NON_NEGATIVE, Rule, ruled
from fedshare.functional.calibration import logit_adjustment
from fedshare.strategies._calibrated import CalibratedFedAvg
from fedshare.strategies.base import register_strategy


@register_strategy("fedlc")
@dataclass
class FedLC(CalibratedFedAvg):
    """Local loss CE(z − τ·n^{−1/4}, y); server: sample-weighted FedAvg."""

    tau: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="code: ReBaFL's code and FLea's scripts (run/Image/run_FedLC.sh: --beta 1, the τ of "
        "myuser.py's CE_LC)",
    )
    missing_count: float = ruled(
        1e-9,
        Rule(low=0, low_open=True, high=1e6),
        source="code: ReBaFL's code (JianXu95/ReBaFL at 62834da, methods/fedlc.py L48: absent "
        "classes count 1e-9)",
    )

    def calibrate(self, logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return logits + logit_adjustment(counts, self.tau, self.missing_count)
