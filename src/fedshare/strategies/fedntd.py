"""FedNTD (Lee et al., NeurIPS 2022): FedAvg whose local loss distils the global model's
predictions on the not-true classes, so local training does not forget what the client lacks.

As FLea's baseline (its App. C.3), with the original paper's defaults. Local loss:
CE + `beta` · τ²·KL(p_global ‖ p_local), both distributions softmax(logits/τ) over the classes
other than the sample's label (`fedshare.functional.losses.not_true_distillation`); the global
model is the round's broadcast, frozen in eval mode. `beta = 0` is FedAvg exactly.
"""

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import NON_NEGATIVE, POSITIVE, ruled
from fedshare.functional.losses import not_true_distillation
from fedshare.strategies._local import LossFn
from fedshare.strategies.base import ClientSetup, Message, register_strategy
from fedshare.strategies.fedavg import FedAvg


@register_strategy("fedntd")
@dataclass
class FedNTD(FedAvg):
    """CE + β·not-true distillation from the frozen global model; FedAvg aggregation."""

    beta: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="paper: FedNTD (Lee et al., NeurIPS 2022), β = 1 (its code, Lee-Gihun/FedNTD at "
        "be00ee5, config/fedntd.json L15); FLea App. C.3 keeps the original defaults",
    )
    tau: float = ruled(
        1.0,
        POSITIVE,
        source="paper: FedNTD (Lee et al., NeurIPS 2022), τ = 1 (its code, config/fedntd.json L15; "
        "criterion.py's own default is 3); FLea App. C.3 keeps the original defaults",
    )

    def client_setup(self, ctx: ClientSetup) -> None:
        """A scratch copy of the model holds the frozen global model of each round."""
        super().client_setup(ctx)
        self.teacher = copy.deepcopy(ctx.model).requires_grad_(False)

    def local_loss(self, model: nn.Module, message: Message) -> LossFn:
        """CE + β·NTD against the round's global model (the frozen teacher)."""
        teacher = self.load_weights(self.teacher, message.weights).eval()

        def loss_fn(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            logits = net(x)
            loss = F.cross_entropy(logits, y)
            if not self.beta:
                return loss
            with torch.no_grad():
                target = teacher(x)
            return loss + self.beta * not_true_distillation(logits, target, y, self.tau)

        return loss_fn
