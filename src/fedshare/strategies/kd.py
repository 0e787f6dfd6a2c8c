"""One-shot knowledge distillation from source heads (FedPFT's "KD" baseline of Table 2).

FedPFT's Section 5.3 and Table 2 (Beitollahi et al., 2024).

One round over clients 0 … I−1 in id order: every client but the last (the sources) trains a
linear head on its own features and sends it once, straight to the destination (C·d + C numbers
in `head_dtype`, `Update.to_peers`: counted once in `bytes_peer`); the last client (the
destination) trains its own local head, then distils the teacher (the source head; with several
sources the mean of their logits) into a copy of it with CE(student, y) + T²·KL(softmax(t/T) ‖
softmax(s/T)) on its local features, for each temperature in `temperatures`, and keeps the
student with the best accuracy on a held-out `val_fraction` of its own data (selection
on a validation split, not on the test set as the paper did). The destination's student is the
evaluated model. Heads are trained with the run's `train` settings for `head_budget` passes,
the local heads and the distillation alike (I × `train.local_epochs` by default,
`_feature_heads.HeadBudget`). Deviation: no checkpoint selection within the
distillation epochs (the last epoch is kept).
"""

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from torch import nn

from fedshare.config.rules import POSITIVE, Rule, ruled
from fedshare.engine.client import Client
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.gmm import WIRE_DTYPES
from fedshare.strategies._feature_heads import (
    HEAD_TRAINING,
    FeatureClassifier,
    HeadBudget,
    client_features,
    fit_head,
    fresh_head,
    head_accuracy,
    head_dtype_param,
    head_from_vector,
    head_vector,
    l2_normalize_param,
    linear_head,
    load_head,
    local_head,
    split_head_vector,
)
from fedshare.strategies.base import Message, SetupContext, Strategy, Update, register_strategy


class MeanTeacher(nn.Module):
    """The mean of several heads' logits."""

    def __init__(self, heads: list[nn.Linear]) -> None:
        super().__init__()
        self.heads = nn.ModuleList(heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([h(x) for h in self.heads]).mean(0)


@register_strategy("kd")
@dataclass
class KnowledgeDistillation(HeadBudget, Strategy):
    """Sources send their heads once; the destination distils them into its own head."""

    clients_in_order = True

    one_shot: ClassVar[bool] = True
    train_defaults: ClassVar[Mapping[str, Any]] = HEAD_TRAINING

    temperatures: list[float] = ruled(
        rule=replace(POSITIVE, numbers=True, nonempty=True),
        default_factory=lambda: [1.0, 5.0, 10.0],
        source="paper: FedPFT App. D.1, KD temperatures {1, 5, 10}, the best kept",
    )
    val_fraction: float = ruled(
        0.2,
        Rule(low=0, high=1, low_open=True, high_open=True),
        source="rule: the temperature is chosen on a held-out 20 % of the destination's training "
        "data, never on the test set (FedPFT chose on test)",
    )
    head_dtype: str = head_dtype_param()
    l2_normalize: bool = l2_normalize_param()

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        n = ctx.data.num_clients
        if (
            n < 2
            or ctx.config.clients.fraction < 1.0
            or ctx.config.clients.per_round
            not in (
                None,
                n,
            )
        ):
            raise FedshareError(
                f"strategy kd needs at least 2 clients, all taking part (sources 0…{n - 2}, "
                f"destination {n - 1}); set clients.fraction=1"
            )
        self.head = linear_head(ctx.model)

    def broadcast(self, round_idx: int) -> Message:
        return Message()

    def client_update(self, client: Client, message: Message) -> Update:
        destination = self.num_clients - 1
        epochs = self.head_epochs(client.train)
        if client.id != destination:  # a source: its head goes straight to the destination
            head = local_head(client, self.num_classes, client.seed, self.l2_normalize, epochs)
            sent = Message(weights=head_vector(head, WIRE_DTYPES[self.head_dtype]))
            return Update(client.id, client.num_samples, to_peers={destination: sent})
        feats, labels = client_features(client, self.l2_normalize)
        dim = feats.shape[1]
        teachers = [head_from_vector(m.weights, dim, self.num_classes) for m in client.inbox]
        if not teachers:
            raise FedshareError("the kd destination received no source head")
        order = torch.randperm(len(labels), generator=client.rng("kd/val"), device=feats.device)
        n_val = max(1, round(self.val_fraction * len(labels)))
        val, train = order[:n_val], order[n_val:]
        init = torch_generator(client.seed, "oneshot/head_init", device=feats.device)
        local = fresh_head(dim, self.num_classes, init, feats.device)
        fit_head(
            local,
            feats[train],
            labels[train],
            client.train,
            client.lr,
            client.rng("kd/local"),
            epochs,
        )
        teacher = MeanTeacher(teachers)
        best, best_acc, selection = local, -1.0, {}
        for t in self.temperatures:
            student = copy.deepcopy(local)
            fit_head(
                student,
                feats[train],
                labels[train],
                client.train,
                client.lr,
                client.rng(f"kd/distil/{t:g}"),
                epochs,
                teacher=teacher,
                temperature=t,
            )
            acc = head_accuracy(student, feats[val], labels[val])
            selection[f"kd_val_accuracy_T{t:g}"] = acc
            if acc > best_acc:
                best, best_acc, selection["kd_temperature"] = student, acc, t
        # the student stays on the destination, where the simulation scores it (audit)
        audit = {"student": head_vector(best, torch.float32), "selection": selection}
        return Update(client.id, client.num_samples, audit=audit)

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        student = None
        for update in updates:
            if "student" in update.audit:
                student = update.audit["student"]
                self.round_metrics.update(update.audit["selection"])
        if student is None:
            raise FedshareError("the kd destination did not take part in the round")
        dim, classes = self.head.in_features, self.head.out_features
        load_head(self.head, *split_head_vector(student, dim, classes))

    def final_download(self) -> None:
        """Nothing: the student is on the destination, the only client that uses it."""
        return None

    def global_model(self) -> nn.Module:
        if self.l2_normalize:
            return FeatureClassifier(self.model, self.head, l2_normalize=True)
        return self.model
