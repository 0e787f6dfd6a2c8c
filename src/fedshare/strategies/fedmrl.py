"""FedMRL (Yi et al., NeurIPS 2024, "Federated Model Heterogeneous Matryoshka Representation
Learning"), §4 "The Proposed FedMRL Approach".

Every client adds a small shared homogeneous model G (the run's `model`: extractor G_ex, header
G_hd) to its own heterogeneous model F (extractor F_ex, header F_hd), and a personal lightweight
representation projector P (Linear(d1 + d → d)). An input's generalised and personalised
representations are spliced and projected, R̃ = P([G_ex(x), F_ex(x)]), and the projection is
read at two nested (matryoshka) granularities: its first d1 dimensions feed the shared header,
all d feed the local header,

    L = CE(G_hd(R̃[:d1]), y) + CE(F_hd(R̃), y)

(equal weights, as HtFLlib's implementation `clientmrl` uses). G, F and P train together;
the client uploads G, which the server averages sample-weighted (as FedAvg; HtFLlib takes the
plain mean over the round's clients) and broadcasts; F and P stay in the client's state.
Inference is F_hd(R̃) with the latest G (`dress`), as HtFLlib's test does; the run's `accuracy`
is that of the shown client's F and P with the global G (`_personal`). d1 is G's feature width
and must not exceed d (HtFLlib's `sub_feature_dim` = 128 ≤ `feature_dim` = 512).
"""

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.client import Client
from fedshare.engine.messages import Message, Update
from fedshare.errors import FedshareError
from fedshare.models.base import as_block_model, feature_width
from fedshare.strategies._local import LossFn
from fedshare.strategies._personal import PersonalStrategy
from fedshare.strategies._shared_model import SharedModelStrategy
from fedshare.strategies.base import (
    ClientSetup,
    SetupContext,
    register_strategy,
    sent_weights,
)


class MRLPersonal(nn.Module):
    """What a client keeps: its heterogeneous model F and its projector P."""

    def __init__(self, local: nn.Module, proj: nn.Module) -> None:
        super().__init__()
        self.local = as_block_model(local)
        self.proj = proj


class MRLNet(nn.Module):
    """G beside a client's F and P; `forward` is the inference F_hd(R̃)."""

    def __init__(self, shared: nn.Module, personal: MRLPersonal) -> None:
        super().__init__()
        self.shared = as_block_model(shared)
        self.personal = personal

    def both(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(G_hd(R̃[:d1]), F_hd(R̃)) for inputs x."""
        r_g = self.shared.features(x).flatten(1)
        r_l = self.personal.local.features(x).flatten(1)
        fused = self.personal.proj(torch.cat([r_g, r_l], dim=1))
        return self.shared.head(fused[:, : r_g.shape[1]]), self.personal.local.head(fused)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.both(x)[1]


def matryoshka_loss(net: MRLNet, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out_g, out_l = net.both(x)
    return F.cross_entropy(out_g, y) + F.cross_entropy(out_l, y)


@register_strategy("fedmrl")
@dataclass
class FedMRL(SharedModelStrategy):
    """A shared small model, personal models and projectors; matryoshka representations."""

    def _personal_module(self, model: nn.Module, shared_dim: int) -> MRLPersonal:
        d = feature_width(model, self.input_shape)
        if shared_dim > d:
            raise FedshareError(
                f"strategy fedmrl needs the shared model's features ({shared_dim}-d) no wider "
                f"than the clients' ({d}-d)"
            )
        return MRLPersonal(model, nn.Linear(shared_dim + d, d))

    def setup(self, ctx: SetupContext) -> None:
        self.input_shape = ctx.data.dataset.input_shape
        super().setup(ctx)

    def client_setup(self, ctx: ClientSetup) -> None:
        self.input_shape = ctx.input_shape
        super().client_setup(ctx)
        self.proj_worker = self._personal_module(ctx.model, self.feature_dim).proj.to(ctx.device)

    def wrap(self, model: nn.Module) -> nn.Module:
        return self._personal_module(model, self.feature_dim)

    def local_step(self, client: Client, message: Message) -> tuple[nn.Module, LossFn]:
        shared = self.load_weights(self.shared_worker, sent_weights(message).to(client.device))
        personal = MRLPersonal(client.model, self.proj_worker)
        self.personal(client, personal)  # loads the client's kept F and P into it, in place
        return MRLNet(shared, personal), matryoshka_loss

    def uploaded(
        self, client: Client, net: nn.Module, train_loss: torch.Tensor, message: Message
    ) -> Update:
        assert isinstance(net, MRLNet)
        update = Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(net.shared),
            metrics={"train_loss": train_loss},
        )
        return self.keep(client, net.personal, update)

    def dress(self, model: nn.Module) -> nn.Module:
        return MRLNet(self.model, model) if isinstance(model, MRLPersonal) else model

    def global_model(self) -> nn.Module:
        return MRLNet(self.model, cast(MRLPersonal, self.shown))

    def summary_metrics(self) -> dict[str, Any]:
        return PersonalStrategy.summary_metrics(self)  # the shown client's F and P are evaluated
