"""FedDecorr (Shi et al., ICLR 2023): FedAvg whose local loss penalises the correlation of the
penultimate features, against dimensional collapse under heterogeneous data.

As FLea's baseline (its App. C.3; its code adds 0.1 × the penalty). Local loss:
CE + `beta` · L_decorr(z), with z the head's input (`model.features`) and L_decorr of
`fedshare.functional.losses.decorrelation_loss`: standardise each dimension over the batch,
K = zᵀz, mean squared off-diagonal entry of K, divided by the batch size. Aggregation is
FedAvg. `beta = 0` is FedAvg exactly.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import NON_NEGATIVE, ruled
from fedshare.functional.losses import decorrelation_loss
from fedshare.models.base import BlockModel, as_block_model, require_body
from fedshare.strategies._local import LossFn
from fedshare.strategies.base import ClientSetup, Message, register_strategy
from fedshare.strategies.fedavg import FedAvg


@register_strategy("feddecorr")
@dataclass
class FedDecorr(FedAvg):
    """CE + β·L_decorr(penultimate features); FedAvg aggregation."""

    beta: float = ruled(
        0.1,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea at b85be07, myuser.py L168 adds 0.1 x the "
        "penalty); FedDecorr (Shi et al., ICLR 2023) suggests 0.1",
    )

    def client_setup(self, ctx: ClientSetup) -> None:
        super().client_setup(ctx)
        require_body(ctx.model, self.name)

    def local_loss(self, model: nn.Module, message: Message) -> LossFn:
        split = as_block_model(model).num_blocks - 1  # the head's input

        def loss_fn(net: BlockModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            f = net.encode(x, split)
            loss = F.cross_entropy(net.decode(f, split), y)
            return loss + self.beta * decorrelation_loss(f.flatten(1)) if self.beta else loss

        return loss_fn
