"""ReBaFL (Xu, Yang, Ding, Huang, arXiv 2303.06314): re-balanced local classifier training for
label skew with client dropout. The paper's Section 4 (Algorithm 1).

Client (Section 4.3, Eq. 16): R-BSM loss CE(z + log π̂_i, y) (Eq. 9) with the relaxed prior of its
own class counts (Eq. 10), plus μ × the R-BSM loss of the classifier alone on features moved to the
class k mod C of their batch position, h̃ = P_t + λ(h − P_y) (Eq. 15, features detached, prior
recomputed from the augmented labels, Section 4.3 after Eq. 16). After training it uploads the class
means of its penultimate features (Eq. 21) with their class counts. Server (Algorithm 1):
sample-weighted FedAvg of the whole model and the class-count-weighted mean of the prototypes
(Eq. 23); classes no active client reported have no global prototype next round.

Choices the paper leaves open: prototypes live in the classifier-input space `model.features(x)`
(the code's projection-head space is not offered since the zoo's models have no such head);
`refresh_own_prototypes` overwrites the client's own classes with means under the received model
before training (Eq. 18; false = the code); `prototype_memory="last"` keeps a class's last global
prototype (default none); clients with fewer than `min_classes_for_aug` classes neither augment
nor upload prototypes (the code). With μ = 0 nothing but the weights is exchanged (the R-BSM-only
ablation).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import ANY, FRACTION, NON_NEGATIVE, Rule, ruled
from fedshare.engine.client import Client
from fedshare.errors import FedshareError
from fedshare.functional import prototypes as protos
from fedshare.functional.calibration import log_relaxed_prior
from fedshare.models.base import BlockModel, require_body
from fedshare.strategies._calibrated import client_class_counts
from fedshare.strategies._local import train_local, train_stacked
from fedshare.strategies.base import (
    ClientSetup,
    Message,
    SetupContext,
    Strategy,
    Update,
    register_strategy,
    sent_weights,
)

MEMORY = ("none", "last")


def head_input_width(model: nn.Module, strategy: str) -> int:
    """d, the width of the features the model's linear head reads (the prototypes' size)."""
    head = require_body(model, strategy).head
    if not isinstance(head, nn.Linear):
        raise FedshareError(
            f"strategy {strategy} needs a model whose head is a Linear layer; "
            f"got {type(head).__name__}"
        )
    return head.in_features


@register_strategy("rebafl")
@dataclass
class ReBaFL(Strategy):
    """R-BSM local training + prototype-based classifier augmentation (Section 4)."""

    eps: float = ruled(0.01, FRACTION, source="paper: ReBaFL §5.1, ε = 0.01")
    mu: float = ruled(0.1, NON_NEGATIVE, source="paper: ReBaFL §5.1, μ = 0.1")
    lam: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="paper: ReBaFL §4.2 Eq. 15, h̃ = P_t + λ(h − P_y), λ = 1 by default",
    )
    refresh_own_prototypes: bool = ruled(True, ANY, source="paper: ReBaFL §4.3, Eq. 18")
    prototype_memory: str = ruled(
        "none",
        Rule(choices=MEMORY),
        source="paper: ReBaFL §4.3, Eq. 23 averages the round's received prototypes only, no "
        "memory (the code neither)",
    )
    min_classes_for_aug: int = ruled(
        2,
        NON_NEGATIVE,
        source="code: ReBaFL's code (JianXu95/ReBaFL at 62834da, methods/rebafl.py L43: clients "
        "with one class do not augment)",
    )
    client_eps: dict[str, float] | None = ruled(
        None,
        ANY,
        source="paper: ReBaFL §5.1, one ε for every client (null; §4.1 Eq. 10 allows a "
        "per-client ε_i)",
    )
    """Optional per-client ε override, {client id: ε}; others use `eps`."""

    def check(self) -> None:
        """Each client's own ε (`client_eps`) lies in [0, 1], as `eps` does."""
        super().check()
        for client, value in (self.client_eps or {}).items():
            if not str(client).isdigit() or not FRACTION.accepts(value):
                raise FedshareError(
                    f"strategy.client_eps.{client}={value!r} is not valid: it must be "
                    f"{FRACTION.describe()}, keyed by a client's number"
                )

    def setup(self, ctx: SetupContext) -> None:
        self.dim = head_input_width(ctx.model, self.name)
        super().setup(ctx)
        self.num_classes = ctx.data.dataset.num_classes
        self.prototypes = torch.zeros(self.num_classes, self.dim, device=ctx.device)
        self.proto_mask = torch.zeros(self.num_classes, dtype=torch.bool, device=ctx.device)

    def client_setup(self, ctx: ClientSetup) -> None:
        super().client_setup(ctx)
        self.dim = head_input_width(ctx.model, self.name)

    def client_eps_of(self, client_id: int) -> float:
        overrides = {int(k): float(v) for k, v in (self.client_eps or {}).items()}
        return overrides.get(client_id, self.eps)

    # ------------------------------------------------------------------ server -> client
    def broadcast(self, round_idx: int) -> Message:
        payload = {}
        if self.mu > 0 and bool(self.proto_mask.any()):
            payload = protos.pack(self.prototypes, self.proto_mask.float(), self.proto_mask)
            del payload["proto_counts"]  # clients need only the prototypes and their classes
        return Message(weights=self.flat.flatten(self.model), payload=payload)

    # ------------------------------------------------------------------ client
    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        plan = self._plan(client, model, message)
        if plan.augment:
            loss_fn = partial(
                self._local_loss,
                plan.eps,
                log_prior=plan.log_prior,
                prototypes=plan.prototypes,
                mask=plan.mask,
                weight=self.mu,
            )
        else:
            loss_fn = partial(self._plain_loss, log_prior=plan.log_prior)
        loss = train_local(client, model, loss_fn)
        return self._upload(client, model, plan, self.flat.flatten(model), loss)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients (`train.batched`): each client's prior,
        prototypes, mask and augmentation weight (μ, or 0 where the serial step would train
        without augmentation) are its rows of `client_inputs`. Clients with different ε
        (`client_eps`) in one chunk run serially."""
        if len({self.client_eps_of(c.id) for c in clients}) > 1:
            return [self.client_update(c, message) for c in clients]
        model = self.load_weights(clients[0].model, message.weights)
        plans = [self._plan(c, model, message) for c in clients]
        inputs = (
            torch.stack([p.log_prior for p in plans]),
            torch.stack([p.prototypes for p in plans]),
            torch.stack([p.mask for p in plans]),
            torch.tensor([self.mu if p.augment else 0.0 for p in plans], device=clients[0].device),
        )
        loss_fn = partial(self._local_loss, plans[0].eps)
        updates = train_stacked(self.flat, clients, model, loss_fn, client_inputs=inputs)
        return [
            self._upload(
                c, self.load_weights(model, u.weights), p, sent_weights(u), u.metrics["train_loss"]
            )
            for c, p, u in zip(clients, plans, updates, strict=True)
        ]

    def _plan(self, client: Client, model: nn.Module, message: Message) -> "_LocalPlan":
        """The client's prior (Eq. 10) and, when it augments, the prototypes it transfers
        features to, its own classes refreshed under the received model (Eq. 18)."""
        counts = client_class_counts(client).to(client.device)
        eps = self.client_eps_of(client.id)
        shares = self.mu > 0 and int((counts > 0).sum()) >= self.min_classes_for_aug
        P, _, mask = protos.unpack(message.payload, self.num_classes, self.dim, client.device)
        augment = shares and bool(mask.any())  # no prototypes yet in round 0
        data = client.data() if shares else None  # gathered once, for Eq. 18 and Eq. 21
        if augment and self.refresh_own_prototypes and data is not None:  # Eq. 18
            own, own_counts = protos.feature_prototypes(model, *data, self.num_classes)
            P = torch.where((own_counts > 0).unsqueeze(1), own, P)
            mask = mask | (own_counts > 0)
        return _LocalPlan(log_relaxed_prior(counts, eps), eps, augment, P, mask, data)

    def _upload(
        self,
        client: Client,
        model: nn.Module,
        plan: "_LocalPlan",
        weights: torch.Tensor,
        loss: torch.Tensor,
    ) -> Update:
        """The trained weights and, from a sharing client, the class means of its features
        under the trained model with their counts (Eq. 21)."""
        payload: dict[str, torch.Tensor] = {}
        if plan.data is not None:  # a sharing client
            local, local_counts = protos.feature_prototypes(model, *plan.data, self.num_classes)
            payload = protos.pack(local, local_counts)
        return Update(
            client.id,
            client.num_samples,
            weights=weights,
            payload=payload,
            metrics={"train_loss": loss, "augmented": float(plan.augment)},
        )

    @staticmethod
    def _plain_loss(
        model: nn.Module, x: torch.Tensor, y: torch.Tensor, log_prior: torch.Tensor
    ) -> torch.Tensor:
        """R-BSM(z, y): the local loss without augmentation."""
        return F.cross_entropy(model(x) + log_prior, y)

    def _local_loss(
        self,
        eps: float,
        model: BlockModel,
        x: torch.Tensor,
        y: torch.Tensor,
        log_prior: torch.Tensor,
        prototypes: torch.Tensor,
        mask: torch.Tensor,
        weight: torch.Tensor | float,
    ) -> torch.Tensor:
        """L = R-BSM(z, y) + weight·R-BSM_aug(φ(h̃), ỹ) with h̃ detached (Eqs. 15–16);
        fixed shapes, so it also runs under `vmap`."""
        h = model.features(x)
        main = F.cross_entropy(model.head(h) + log_prior, y)
        h_aug, y_aug = protos.transfer_features(h.detach(), y, prototypes, mask, self.lam)
        classes = torch.arange(self.num_classes, device=y_aug.device)
        aug_counts = (y_aug.unsqueeze(1) == classes).sum(0).float()
        aug_prior = log_relaxed_prior(aug_counts, eps)
        return main + weight * F.cross_entropy(model.head(h_aug) + aug_prior, y_aug)

    # ------------------------------------------------------------------ server
    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        averager = protos.PrototypeAverager(self.num_classes, self.dim, self.device)

        def reported() -> Iterable[Update]:
            for update in updates:
                if update.payload.get("proto_classes") is not None:
                    P, counts, _ = protos.unpack(
                        update.payload, self.num_classes, self.dim, self.device
                    )
                    averager.add(P, counts)
                yield update

        self.load_weights(self.model, self.average_weights(reported()))
        new, mask = averager.result()
        if self.prototype_memory == "last":
            new = torch.where(mask.unsqueeze(1), new, self.prototypes)
            mask = mask | self.proto_mask
        self.prototypes, self.proto_mask = new, mask
        self.round_metrics = {"prototype_classes": int(mask.sum())}

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "prototypes": self.prototypes.clone(),
            "proto_mask": self.proto_mask.clone(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.prototypes = state["prototypes"].to(self.device)
        self.proto_mask = state["proto_mask"].to(self.device)


@dataclass(frozen=True)
class _LocalPlan:
    """What a client's local step uses besides its batches (`ReBaFL._plan`)."""

    log_prior: torch.Tensor
    eps: float
    augment: bool
    prototypes: torch.Tensor
    mask: torch.Tensor
    data: tuple[torch.Tensor, torch.Tensor] | None
    """The client's own samples when it shares prototypes (≥ `min_classes_for_aug` classes)."""
