"""FedKD (Wu et al., Nat. Commun. 2022, "Communication-efficient federated learning via
knowledge distillation"), §Methods: adaptive mutual distillation between a local mentor and a
shared mentee, and dynamic SVD compression of what is exchanged.

Every client trains its mentor (its own model, kept in its state) with a copy of the shared
mentee (the run's `model`) and a local map W_h from mentee to mentor features (kept in its
state). With task losses L^c_t = CE(z_t, y), L^c_s = CE(z_s, y) and S = L^c_t + L^c_s:

    mentor: L^c_t + KL(p_s ‖ p_t)/S + MSE(h_t, W_h h_s)/S
    mentee: L^c_s + KL(p_t ‖ p_s)/S + MSE(h_t, W_h h_s)/S

(the adaptive distillation: the better both models fit, the more they distil; h the penultimate
features). Each model's terms treat the other's outputs and S as fixed, as the paper's separate
per-model losses read; HtFLlib's implementation (`clientkd`) backpropagates
through both and clips gradient norms at 10, which this does not.

What travels is the mentee, factored by truncated SVD (`fedshare.functional.svd`): each weight
matrix (a conv kernel as out × in·k·k) keeps the fewest singular values holding a fraction T of
its energy, T growing linearly from `energy_start` = 0.95 in the first round to `energy_end` =
0.98 in the last (the paper's T_start and T_end). The paper factors the mentee's gradients;
HtFLlib's implementation factors its weights, both ways, which also serves clients that skipped
rounds: this follows that implementation (FedKD's own repository was not read). The server
decompresses the uploads, takes their sample-weighted mean, and factors the result for the
broadcast; bytes are counted at the factored size.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import PROBABILITY, ruled
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.messages import Message, Update
from fedshare.functional.logit_sharing import kl_to
from fedshare.functional.svd import compress, decompress, energy_schedule
from fedshare.models.base import as_block_model
from fedshare.strategies._local import LossFn
from fedshare.strategies._personal import personal_init
from fedshare.strategies._shared_model import Pair, SharedModelStrategy
from fedshare.strategies.base import ClientSetup, register_strategy

HIDDEN_MAP = "w_h"
"""The key of a client's mentee-to-mentor feature map W_h in `client.state`."""


def factor_flat(flat: FlatState, vector: torch.Tensor, energy: float) -> dict[str, torch.Tensor]:
    """The flat state `vector`, each entry SVD-factored, as payload tensors `<i>.<factor>`."""
    payload = {}
    for i, (chunk, shape) in enumerate(zip(vector.split(flat.sizes), flat.shapes, strict=True)):
        for key, tensor in compress(chunk.view(shape), energy).items():
            payload[f"{i}.{key}"] = tensor
    return payload


def unfactor_flat(flat: FlatState, payload: dict[str, torch.Tensor]) -> torch.Tensor:
    """Inverse of `factor_flat` (up to the truncation)."""
    parts = []
    for i, shape in enumerate(flat.shapes):
        factors = {
            k.split(".", 1)[1]: v for k, v in payload.items() if k.split(".", 1)[0] == str(i)
        }
        parts.append(decompress(factors, shape).reshape(-1))
    return torch.cat(parts)


def adaptive_mutual_loss(
    z_t: torch.Tensor,
    z_s: torch.Tensor,
    h_t: torch.Tensor,
    mapped_s: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """Mentor loss + mentee loss (see the module docstring); `mapped_s` = W_h h_s (W_h trains
    in the mentee's term)."""
    ce_t, ce_s = F.cross_entropy(z_t, y), F.cross_entropy(z_s, y)
    scale = (ce_t + ce_s).detach()
    mentor = ce_t + (kl_to(z_t, z_s.detach()) + F.mse_loss(h_t, mapped_s.detach())) / scale
    mentee = ce_s + (kl_to(z_s, z_t.detach()) + F.mse_loss(h_t.detach(), mapped_s)) / scale
    return mentor + mentee


class MentorMentee(Pair):
    """Mentor (personal), mentee (shared) and the map W_h between their features."""

    def __init__(self, personal: nn.Module, shared: nn.Module, w_h: nn.Linear) -> None:
        super().__init__(personal, shared)
        self.w_h = w_h


@register_strategy("fedkd")
@dataclass
class FedKD(SharedModelStrategy):
    """Local mentors, a shared mentee exchanged SVD-compressed; adaptive mutual distillation."""

    energy_start: float = ruled(
        0.95,
        PROBABILITY,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L6 and main.py L398, "
        "-Ts 0.95 (FedKD, Wu et al., Nat. Commun. 2022)",
    )
    energy_end: float = ruled(
        0.98,
        PROBABILITY,
        source="code: HtFLlib (TsingZ0/HtFLlib at e959261) system/total.sh L6 and main.py L399, "
        "-Te 0.98 (FedKD, Wu et al., Nat. Commun. 2022)",
    )

    def energy(self, round_idx: int) -> float:
        return energy_schedule(self.energy_start, self.energy_end, round_idx, self.config.rounds)

    def client_setup(self, ctx: ClientSetup) -> None:
        super().client_setup(ctx)
        d = self.feature_dim  # mentor and mentee share the penultimate width
        self.w_h_worker = nn.Linear(d, d, bias=False).to(ctx.device)

    def broadcast(self, round_idx: int) -> Message:
        mentee = self.flat.flatten(self.model)
        payload = factor_flat(self.flat, mentee, self.energy(round_idx))
        payload["energy"] = torch.tensor(self.energy(round_idx))
        return Message(payload=payload)

    def local_step(self, client: Client, message: Message) -> tuple[nn.Module, LossFn]:
        payload = {k: v for k, v in message.payload.items() if k != "energy"}
        pair = self.pair(client, unfactor_flat(self.flat, payload))

        def loss(m: MentorMentee, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            mentor, mentee = as_block_model(m.personal), as_block_model(m.shared)
            h_t, h_s = mentor.features(x).flatten(1), mentee.features(x).flatten(1)
            z_t, z_s = mentor.head(h_t), mentee.head(h_s)
            return adaptive_mutual_loss(z_t, z_s, h_t, m.w_h(h_s), y)

        return MentorMentee(pair.personal, pair.shared, self.w_h(client)), loss

    def uploaded(
        self, client: Client, net: nn.Module, train_loss: torch.Tensor, message: Message
    ) -> Update:
        assert isinstance(net, MentorMentee)
        client.state[HIDDEN_MAP] = net.w_h.weight.detach().flatten().clone()
        energy = float(message.payload["energy"])
        mentee = factor_flat(self.flat, self.flat.flatten(net.shared), energy)
        update = Update(
            client.id, client.num_samples, payload=mentee, metrics={"train_loss": train_loss}
        )
        return self.keep(client, net.personal, update)

    def w_h(self, client: Client) -> nn.Linear:
        """The client's W_h: kept from its last participation, else its own initialisation."""
        w_h = self.w_h_worker
        kept = client.state.get(HIDDEN_MAP)
        flat = kept if kept is not None else personal_init(w_h, self.seed, client.id)
        FlatState(w_h).load_(w_h, flat.to(client.device))
        return w_h

    def absorb(self, update: Update) -> None:
        if update.payload:
            self._mean.add(unfactor_flat(self.flat, update.payload), update.aggregation_weight)
