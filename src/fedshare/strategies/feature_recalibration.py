"""Feature re-calibration: the "CCVR" row of FLea's Table 1 (FLea's App. C.3). Not CCVR itself (Luo
et al., NeurIPS 2021), which is `strategy=ccvr` (`strategies/ccvr.py`): FLea's paper (App. C.3) fits
the classifier "using the features instead of distributions as used in" CCVR, "the same amount of
features as our method".

FedAvg for every round; after the last round's aggregation a `calibrate` phase sends the
global model to every client, each client uploads the features at the head's input (`features`,
the frozen extractor in eval mode) of a random `share_fraction` of its samples with their labels
(counted as shared bytes), and the server re-trains the linear head on them: Adam, lr 1e-4,
20 epochs (FLea's code values), from the FedAvg head. The last round is evaluated with the
calibrated head.

FLea's paper form: the features themselves ("the same amount of features as FLea": 10 % of each
client's data, FLea's α), not CCVR's Gaussians fitted to per-class feature statistics, which
FLea calls an upper bound for CCVR; its script (`run/Image/run_FedCCVR.sh`, read at b85be07)
instead fine-tunes the model on the shared 10 % subsets of raw inputs (`--layer -1`), which this
strategy does not do (it follows the paper). Every uploaded feature is one input's: the
summary counts them (`shared_single_features`, `shared_sample_fraction`). With
`calibration_epochs=0` the run is FedAvg exactly (plus the counted feature upload).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from fedshare.config.rules import EPOCHS, POSITIVE, PROBABILITY, SIZE, ruled
from fedshare.engine.client import Client
from fedshare.engine.rng import torch_generator
from fedshare.models.base import as_block_model, require_body
from fedshare.strategies._feature_heads import extract
from fedshare.strategies._head_calibration import HeadCalibration
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy

FEATURES, LABELS = "features", "labels"


@register_strategy("feature_recalibration")
@dataclass
class FeatureRecalibration(HeadCalibration):
    """FedAvg, then the server re-fits the classifier on uploaded features (module docstring)."""

    share_fraction: float = ruled(
        0.1,
        PROBABILITY,
        source="paper: FLea App. C.3, 'the same amount of features as our method' (FLea's α = 0.1)",
    )
    calibration_epochs: int = ruled(
        20,
        EPOCHS,
        source="code: FLea's code (XTxiatong/FLea at b85be07, run_FedCCVR.sh: --local_epochs 20)",
    )
    calibration_lr: float = ruled(
        1e-4,
        POSITIVE,
        source="code: FLea's code (XTxiatong/FLea at b85be07, run_FedCCVR.sh: "
        "--personal_learning_rate 0.0001, Adam in myuser.py post_train)",
    )
    calibration_batch_size: int = ruled(
        32,
        SIZE,
        source="paper: FLea §4.1.2, local batch 32 'for all methods' (its run_FedCCVR.sh passes "
        "--batch_size 64)",
    )

    def setup(self, ctx: SetupContext) -> None:
        require_body(ctx.model, "feature_recalibration")
        super().setup(ctx)
        self.shared_features = 0

    def summary_metrics(self) -> dict[str, Any]:
        """Privacy exposure: single-input features the server received, and their share of all
        training samples."""
        total = sum(self.data.client_sizes)
        return {
            "shared_single_features": self.shared_features,
            "shared_sample_fraction": self.shared_features / max(total, 1),
        }

    def context_view(self) -> dict[str, Any]:
        """Single-input head-input features of the final global model."""
        model = as_block_model(self.global_model())
        return {"view": "features", "model": model, "split": model.num_blocks - 1}

    def calibration_step(self, client: Client, message: Message) -> Update:
        """Features of a random `share_fraction` of the client's samples, with their labels."""
        model = self.load_weights(client.model, message.weights)
        count = max(1, int(self.share_fraction * client.num_samples))
        order = torch.randperm(client.num_samples, generator=client.rng("subset"), device="cpu")
        x, y = client.data(order[:count].to(client.device))
        payload = {FEATURES: extract(model, x), LABELS: y.to(torch.int16)}
        return Update(client.id, client.num_samples, payload=payload)

    def calibrate(self, updates: Iterable[Update], round_idx: int) -> None:
        received = [(u.payload[FEATURES], u.payload[LABELS].long()) for u in updates]
        if not received:
            return
        x = torch.cat([f for f, _ in received])
        y = torch.cat([labels for _, labels in received])
        self.shared_features = len(y)
        require_body(self.model, "feature_recalibration")
        # the seed purpose of its earlier name, so the documented runs repeat exactly
        gen = torch_generator(self.config.seed, "ccvr/calibration", device=self.device)
        before, after = self.refit_head(x, y, gen)
        self.round_metrics = {
            "calibration_features": len(y),
            "calibration_feature_accuracy_before": before,
            "calibration_feature_accuracy_after": after,
        }
