"""FML, federated mutual learning (Shen et al. 2020, "Federated Mutual Learning"), §3 and its
Algorithm 1.

Every client trains its private model (its own architecture, kept in its state) together with
a copy of the shared meme model by deep mutual learning, each distilling from the other:

    L_private = α · CE(z_p, y) + (1 − α) · KL(softmax(z_m) ‖ softmax(z_p))
    L_meme    = β · CE(z_m, y) + (1 − β) · KL(softmax(z_p) ‖ softmax(z_m))

and uploads the meme model, which the server averages (sample-weighted, as FedAvg) and
broadcasts. The run evaluates the meme model; `eval.personal=true` the private ones.
Defaults α = β = 0.5 (the paper's). In each KL the other model's output is a fixed target, as in
deep mutual learning; HtFLlib's implementation (`clientfml`) lets both KL terms
reach both models and clips gradient norms at 10, which this does not.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import FRACTION, ruled
from fedshare.engine.client import Client
from fedshare.engine.messages import Message, Update
from fedshare.functional.logit_sharing import kl_to
from fedshare.strategies._local import LossFn
from fedshare.strategies._shared_model import Pair, SharedModelStrategy
from fedshare.strategies.base import register_strategy, sent_weights


def mutual_loss(
    z_personal: torch.Tensor, z_shared: torch.Tensor, y: torch.Tensor, alpha: float, beta: float
) -> torch.Tensor:
    """L_private + L_meme, each KL toward the other model's detached output."""
    private = alpha * F.cross_entropy(z_personal, y) + (1 - alpha) * kl_to(
        z_personal, z_shared.detach()
    )
    meme = beta * F.cross_entropy(z_shared, y) + (1 - beta) * kl_to(z_shared, z_personal.detach())
    return private + meme


@register_strategy("fml")
@dataclass
class FML(SharedModelStrategy):
    """Private models and a shared meme model trained by mutual learning; the meme averaged."""

    alpha: float = ruled(
        0.5,
        FRACTION,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L5, FML -al 0.5 (FML, "
        "Shen et al. 2020)",
    )
    beta: float = ruled(
        0.5,
        FRACTION,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L5, FML -bt 0.5 (FML, "
        "Shen et al. 2020)",
    )

    def local_step(self, client: Client, message: Message) -> tuple[nn.Module, LossFn]:
        def loss(net: Pair, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return mutual_loss(net.personal(x), net.shared(x), y, self.alpha, self.beta)

        return self.pair(client, sent_weights(message)), loss

    def uploaded(
        self, client: Client, pair: nn.Module, train_loss: torch.Tensor, message: Message
    ) -> Update:
        assert isinstance(pair, Pair)
        update = Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(pair.shared),
            metrics={"train_loss": train_loss},
        )
        return self.keep(client, pair.personal, update)
