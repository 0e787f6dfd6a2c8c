"""FD, federated distillation (Jeong et al. 2018, "Communication-Efficient On-Device Machine
Learning: Federated Distillation and Augmentation under Non-IID Private Data"), §2 "Federated
Distillation".

Each client keeps its own model. After local training it sends, per label it holds, its local
average logit vector (the mean model output over its samples of that label); the server
averages them per label over the clients that sent one (an unweighted mean across devices, as
the paper's global average and HtFLlib's implementation, `serverfd`, do) and
broadcasts the global average logits. The local loss on (x, y) adds a distillation regulariser
toward the global logits ḡ_y of the sample's own label:

    CE(z, y) + λ · τ² · KL(softmax(ḡ_y/τ) ‖ softmax(z/τ))

The paper names the regulariser without fixing its form; HtFLlib passes ḡ_y as soft targets to
its cross-entropy. Here it is the KL divergence of knowledge distillation (equal to the
cross-entropy toward softmax(ḡ_y/τ) up to a constant). Defaults λ = 1 (HtFLlib's `lamda`),
τ = 1. Local average logits are computed after training in eval mode (HtFLlib averages the
outputs seen during training).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import NON_NEGATIVE, POSITIVE, ruled
from fedshare.engine.client import Client
from fedshare.engine.messages import Message, Update
from fedshare.functional.logit_sharing import label_distillation_loss, label_logits
from fedshare.functional.prototypes import PrototypeAverager, unpack
from fedshare.strategies._local import LossFn
from fedshare.strategies._personal import PersonalStrategy
from fedshare.strategies.base import SetupContext, register_strategy
from fedshare.strategies.fedproto import prototype_message


@register_strategy("fd")
@dataclass
class FedDistill(PersonalStrategy):
    """Personal models; per-label average logits up, global per-label logits down."""

    lam: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L4, FD -lam 1",
    )
    """The distillation term's weight (0: local training)."""
    temperature: float = ruled(
        1.0,
        POSITIVE,
        source="rule: plain softmax (τ = 1), as HtFLlib's FD, which has no temperature",
    )

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        c = self.num_classes
        self.logits = torch.zeros(c, c, device=self.device)
        self.mask = torch.zeros(c, dtype=torch.bool, device=self.device)
        self._averager = PrototypeAverager(c, c, self.device)

    def broadcast(self, round_idx: int) -> Message:
        return prototype_message(self.logits, self.mask)

    def local_step(self, client: Client, message: Message) -> tuple[nn.Module, LossFn]:
        c = self.num_classes
        targets, _, mask = unpack(message.payload, c, c, client.device)

        def loss(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            z = net(x)
            kd = label_distillation_loss(z, y, targets, mask, self.temperature)
            return F.cross_entropy(z, y) + self.lam * kd

        return self.personal(client), loss

    def uploaded(
        self, client: Client, model: nn.Module, train_loss: torch.Tensor, message: Message
    ) -> Update:
        means, counts = label_logits(model, *client.data(), self.num_classes)
        sent = prototype_message(means, counts > 0).payload
        update = Update(
            client.id, client.num_samples, payload=sent, metrics={"train_loss": train_loss}
        )
        return self.keep(client, model, update)

    def absorb(self, update: Update) -> None:
        c = self.num_classes
        means, held, _ = unpack(update.payload, c, c, self.device)
        self._averager.add(means, held)  # 1 per label held: the mean across devices

    def finish(self, round_idx: int) -> None:
        self.logits, self.mask = self._averager.result()
        self._averager = PrototypeAverager(self.num_classes, self.num_classes, self.device)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "logits": self.logits, "mask": self.mask}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.logits = state["logits"].to(self.device)
        self.mask = state["mask"].to(self.device)
