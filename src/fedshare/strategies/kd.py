"""One-shot knowledge distillation from source heads (FedPFT's "KD" baseline of Table 2).

Spec: shared/specs/fedpft.md §4.3 (KD), §7 A15.

One round over clients 0 … I−1 in id order: every client but the last (the sources) trains a
linear head on its own features and uploads it once (C·d + C numbers in `head_dtype`, counted
as `bytes_up`); the last client (the destination) trains its own local head, then distils the
teacher (the source head; with several sources the mean of their logits) into a copy of it with
CE(student, y) + T²·KL(softmax(t/T) ‖ softmax(s/T)) on its local features, for each temperature
in `temperatures`, and keeps the student with the best accuracy on a held-out `val_fraction` of
its own data (§7 A15: selection on a validation split, not on the test set as the paper did).
The destination's student is the evaluated model. Heads are trained with the run's `train`
settings (`train.local_epochs` passes for the local heads and for the distillation).
Deviation: no checkpoint selection within the distillation epochs (the last epoch is kept).
"""

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from fedshare.engine.client import Client
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError, choices_message
from fedshare.functional.gmm import WIRE_DTYPES
from fedshare.strategies._feature_heads import (
    HEAD_TRAINING,
    FeatureClassifier,
    client_features,
    fit_head,
    fresh_head,
    head_accuracy,
    head_vector,
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
class KnowledgeDistillation(Strategy):
    """Sources send their heads once; the destination distils them into its own head."""

    one_shot: ClassVar[bool] = True
    train_defaults: ClassVar[Mapping[str, Any]] = HEAD_TRAINING

    temperatures: list[float] = field(default_factory=lambda: [1.0, 5.0, 10.0])
    val_fraction: float = 0.2
    head_dtype: str = "float16"
    l2_normalize: bool = False

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        if not self.temperatures or min(self.temperatures) <= 0:
            raise FedshareError(
                f"strategy.temperatures={self.temperatures} must be a non-empty list of "
                f"positive temperatures"
            )
        if not 0.0 < self.val_fraction < 1.0:
            raise FedshareError(f"strategy.val_fraction={self.val_fraction} must be in (0, 1)")
        if self.head_dtype not in WIRE_DTYPES:
            raise FedshareError(
                choices_message("strategy.head_dtype", self.head_dtype, list(WIRE_DTYPES))
            )
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
        self.destination = n - 1
        self.teachers: list[nn.Linear] = []
        self.student: nn.Linear | None = None
        self.selection: dict[str, float] = {}

    def broadcast(self, round_idx: int) -> Message:
        return Message()

    def client_update(self, client: Client, message: Message) -> Update:
        classes = self.data.dataset.num_classes
        if client.id != self.destination:
            head = local_head(client, classes, self.config.seed, self.l2_normalize)
            vector = head_vector(head, WIRE_DTYPES[self.head_dtype])
            return Update(client.id, client.num_samples, weights=vector)
        if not self.teachers:
            raise FedshareError("the kd destination received no source head")
        feats, labels = client_features(client, self.l2_normalize)
        order = torch.randperm(len(labels), generator=client.rng("kd/val"), device=feats.device)
        n_val = max(1, round(self.val_fraction * len(labels)))
        val, train = order[:n_val], order[n_val:]
        init = torch_generator(self.config.seed, "oneshot/head_init", device=feats.device)
        local = fresh_head(feats.shape[1], classes, init, feats.device)
        fit_head(
            local, feats[train], labels[train], client.train, client.lr, client.rng("kd/local")
        )
        teacher = MeanTeacher(self.teachers)
        best, best_acc = None, -1.0
        for t in self.temperatures:
            student = copy.deepcopy(local)
            fit_head(
                student,
                feats[train],
                labels[train],
                client.train,
                client.lr,
                client.rng(f"kd/distil/{t:g}"),
                teacher=teacher,
                temperature=t,
            )
            acc = head_accuracy(student, feats[val], labels[val])
            self.selection[f"kd_val_accuracy_T{t:g}"] = acc
            if acc > best_acc:
                best, best_acc, self.selection["kd_temperature"] = student, acc, t
        self.student = best
        return Update(client.id, client.num_samples)  # the destination sends nothing

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        dim, classes = self.head.in_features, self.head.out_features
        for update in updates:
            if update.weights is not None:
                w, b = split_head_vector(update.weights, dim, classes)
                teacher = nn.Linear(dim, classes).to(self.device)
                load_head(teacher, w, b)
                self.teachers.append(teacher)
        if self.student is None:
            raise FedshareError("the kd destination did not take part in the round")
        load_head(self.head, self.student.weight, self.student.bias)
        self.round_metrics.update(self.selection)

    def global_model(self) -> nn.Module:
        if self.l2_normalize:
            return FeatureClassifier(self.model, self.head, l2_normalize=True)
        return self.model
