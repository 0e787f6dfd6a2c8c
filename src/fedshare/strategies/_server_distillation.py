"""One-shot local heads distilled on the server's own unlabelled inputs (FedPFT's Table 5
baselines FedBE and FedKT, its Section 5.2; the engine's `server_data`).

Every client trains a head on its own features from the common initialisation and uploads it
once (as `oneshot_avg`, whose sample-weighted mean the server also forms). The server then
extracts the features of its `server_data.size` inputs (their labels are never read), asks its
teachers (`teachers`, method-specific) for targets on them, and trains the global head on those
targets with the run's `train` settings, from the mean head (`student_init=mean`) or the common
initialisation (`fresh`). Its budget follows `head_budget`: `pooled` (default) takes the
optimizer steps of `distill_epochs` passes over the pooled training set (the sum of the
clients' sample counts, the steps FedPFT's head takes), however few inputs the server holds;
`epochs` takes `distill_epochs` passes over the server's inputs.
"""

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from fedshare.config.rules import EPOCHS, Rule, ruled
from fedshare.engine.optim import learning_rate
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError
from fedshare.strategies._feature_heads import (
    IterateAverage,
    extract,
    fit_head,
    fresh_head,
    head_from_vector,
    passes_for_steps,
)
from fedshare.strategies.base import SetupContext, Update
from fedshare.strategies.oneshot_avg import OneShotAverage

STUDENT_INITS = ("mean", "fresh")


class ProbabilityMean(nn.Module):
    """log of the mean of several heads' softmax outputs (an ensemble's predictive
    distribution, as logits a softmax maps back to it)."""

    def __init__(self, heads: list[nn.Module]) -> None:
        super().__init__()
        self.heads = nn.ModuleList(heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.stack([h(x).softmax(dim=-1) for h in self.heads]).mean(0)
        return probs.clamp_min(1e-12).log()


@dataclass
class ServerDistillation(OneShotAverage):
    """Local heads up once; the server distils its teachers into the global head."""

    distill_epochs: int = ruled(
        50,
        EPOCHS,
        source="paper: FedPFT App. D.1, KD distils for 50 epochs (the appendix gives FedBE and "
        "FedKT no count; the same 50)",
    )
    student_init: str = ruled(
        "mean",
        Rule(choices=STUDENT_INITS),
        source="paper: FedBE §4, the student starts from the clients' mean model",
    )

    def check(self) -> None:
        super().check()
        if self.to_last_client:
            raise FedshareError(f"strategy {self.name} needs the server: to_last_client=false")

    def setup(self, ctx: SetupContext) -> None:
        if ctx.data.server_indices is None:
            raise FedshareError(
                f"strategy {self.name} distils on the server's own inputs; set server_data.size "
                f"(e.g. 500) and, for unlabelled public data, server_data.labelled=false"
            )
        super().setup(ctx)

    # ------------------------------------------------------------------ method hooks
    def teachers(self, heads: list[tuple[torch.Tensor, float]]) -> list[nn.Module]:
        """The ensemble for the targets; called while `self.head` is the mean head."""
        raise NotImplementedError

    def distill(
        self, teachers: list[nn.Module], feats: torch.Tensor, gen: torch.Generator
    ) -> torch.Tensor:
        """Train `self.head` on the teachers' targets for the server's features; the loss."""
        raise NotImplementedError

    # ------------------------------------------------------------------ server
    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        received = list(updates)
        super().aggregate(received, round_idx)  # the mean head
        heads = [(v.float(), w) for v, w in self.heads_of(received) if w > 0]
        x, _ = self.data.server_batch()  # labels, if any, are not used
        feats = extract(self.model, x, self.l2_normalize)
        if not self.distill_epochs:
            return
        self.passes = self.distill_passes(len(feats), int(sum(w for _, w in heads)))
        teachers = self.teachers(heads)  # `self.head` still holds the mean head here
        if self.student_init == "fresh":
            init = torch_generator(self.config.seed, "oneshot/head_init", device=self.device)
            start = fresh_head(feats.shape[1], self.head.out_features, init, self.device)
            self.head.load_state_dict(start.state_dict())
        gen = torch_generator(self.config.seed, f"{self.name}/server", device=self.device)
        self.round_metrics["teachers"] = len(teachers)
        self.round_metrics["distill_passes"] = self.passes
        self.round_metrics["distill_loss"] = float(self.distill(teachers, feats, gen))

    def distill_passes(self, server_inputs: int, pooled: int) -> int:
        """Passes over the server's inputs (`head_budget`, module docstring)."""
        if self.head_budget == "epochs":
            return self.distill_epochs
        batch = self.config.train.batch_size
        return passes_for_steps(self.distill_epochs, pooled, server_inputs, batch)

    def fit(
        self,
        feats: torch.Tensor,
        labels: torch.Tensor | None,
        gen: torch.Generator,
        teacher: nn.Module | None = None,
        average: IterateAverage | None = None,
    ) -> torch.Tensor:
        """Train the global head for `self.passes` passes (set in `aggregate`)."""
        train = self.config.train
        lr = learning_rate(train, 0)
        return fit_head(
            self.head, feats, labels, train, lr, gen, self.passes, teacher, average=average
        )

    def client_heads(self, heads: list[tuple[torch.Tensor, float]]) -> list[nn.Module]:
        dim, classes = self.head.in_features, self.head.out_features
        return [head_from_vector(v, dim, classes).requires_grad_(False) for v, _ in heads]
