"""Pieces shared by the one-shot feature-level strategies (FedPFT and its baselines).

FedPFT (Beitollahi et al. 2024): the model is w = h∘f, a frozen extractor f and a linear
head h.

The extractor f is the model's `features` (the penultimate representation of a `BlockModel`):
on a feature dataset (`data.features=...` or `data=features_file`) with `model=linear` it is the
identity; on images with e.g. `model=resnet20_cifar model.pretrained=true` it is the frozen
backbone, run in eval mode without gradients. It is known to every party and never sent.
The head h is the model's single `nn.Linear` inside its `head` block.

Every head here is trained with the run's `train` settings (optimizer, lr, batch size, and
`train.local_epochs` passes), on a client or on the server, so the methods compared under one
config train their heads alike (the paper: Adam, lr 1e-4 for all; the presets set it).

The baselines' local heads see a client's share of the data, FedPFT's and Centralized's head
the pooled set: at the same epochs a local head takes about I times fewer optimizer steps, and
at Adam 1e-4 on a few hundred samples it stays near its initialisation (docs/fedpft.md, "Local
heads' budget"). `HeadBudget.head_budget=pooled` (the default) gives every local head
I × `train.local_epochs` passes over its client's own data: the optimizer steps of
`train.local_epochs` passes over the pooled data when the clients hold equal shares; at unequal
shares a larger client's head takes more steps than the pooled head and a smaller one's fewer.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config import TrainConfig
from fedshare.config.rules import ANY, Rule, ruled
from fedshare.engine.client import Client
from fedshare.engine.optim import make_optimizer
from fedshare.engine.rng import torch_generator
from fedshare.engine.training import check_finite, fit, shuffled_positions
from fedshare.errors import FedshareError
from fedshare.functional.gmm import WIRE_DTYPES
from fedshare.functional.losses import distillation_kl
from fedshare.models.base import BlockModel, as_block_model


def head_dtype_param() -> str:
    """The `head_dtype` parameter of the head-sharing baselines (a fresh dataclass field)."""
    return ruled(
        "float16",
        Rule(choices=tuple(WIRE_DTYPES)),
        source="paper: FedPFT Table 5's Comm. counts the heads at 2 bytes a weight (CIFAR-100: "
        "50 heads of 2048·100 + 100 → 19 MB), §5.1's 16-bit encoding (Table 2's CIFAR rows fit 4)",
    )


def l2_normalize_param() -> bool:
    """The `l2_normalize` parameter of the head-sharing baselines (a fresh dataclass field)."""
    return ruled(
        False,
        ANY,
        source="rule: off, the features as the extractor gives them (FedPFT normalises only for "
        "DP)",
    )


EXTRACT_BATCH = 1024
HEAD_TRAINING = {
    "optimizer": "adam",
    "lr": 1e-4,
    "momentum": 0.0,
    "batch_size": 32,
    "local_epochs": 50,
}
"""FedPFT's head training (Adam at lr 1e-4, the paper's appendix; batch 32 and 50 epochs are
the library's choice, within the paper's epoch grid {50, 100, 200} for FedAvg), the default of
the one-shot feature strategies (`Strategy.train_defaults`)."""


HEAD_BUDGETS = ("pooled", "epochs")


@dataclass
class HeadBudget:
    """Mixin: how many passes a one-shot baseline's local head takes over its client's data."""

    head_budget: str = ruled(
        "pooled",
        Rule(choices=HEAD_BUDGETS),
        source="rule: the local head takes as many steps as FedPFT's head (I x train.local_epochs "
        "passes), so the one-shot baselines get FedPFT's budget (FedPFT App. D.1 compares "
        "them at one training recipe)",
    )
    """pooled: I × `train.local_epochs` passes, the optimizer steps of `train.local_epochs`
    passes over the pooled data (FedPFT's and Centralized's head) when clients hold equal
    shares | epochs: `train.local_epochs` passes (the paper's wording; underfits small clients)."""

    def head_epochs(self, train: TrainConfig) -> int:
        """Passes of a local head over its own data (client side: `num_clients` is public)."""
        # a mixin: `num_clients` is the Strategy's (`client_setup`), which mypy cannot see here
        scale = self.num_clients if self.head_budget == "pooled" else 1  # type: ignore[attr-defined]
        return train.local_epochs * scale


def passes_for_steps(epochs: int, pooled: int, own: int, batch_size: int) -> int:
    """Passes over `own` samples that take at least the optimizer steps of `epochs` passes over
    `pooled` samples, in batches of `batch_size` (the last batch of a pass may be short)."""
    steps = epochs * math.ceil(pooled / batch_size)
    return math.ceil(steps / max(1, math.ceil(own / batch_size)))


def linear_head(model: nn.Module) -> nn.Linear:
    """The one `nn.Linear` of the model's head block (FedPFT's h)."""
    head = model.head if isinstance(model, BlockModel) else None
    layers = [m for m in head.modules() if isinstance(m, nn.Linear)] if head is not None else []
    if len(layers) != 1:
        raise FedshareError(
            f"the one-shot feature strategies need a model whose head is one linear layer, got "
            f"{type(model).__name__}; use model=linear on a feature dataset, or a backbone such "
            f"as model=resnet20_cifar model.pretrained=true"
        )
    if layers[0].bias is None:
        raise FedshareError(
            f"the one-shot feature strategies need a head with a bias, but "
            f"{type(model).__name__}'s head has none; use model=linear on a feature dataset"
        )
    return layers[0]


@torch.no_grad()
def extract(model: nn.Module, x: torch.Tensor, l2_normalize: bool = False) -> torch.Tensor:
    """f(x) as (n, d) float32 for prepared inputs `x`, in eval mode, in chunks."""
    was_training = model.training
    model.eval()
    blocks = as_block_model(model)
    chunks = []
    for start in range(0, len(x), EXTRACT_BATCH):
        f = blocks.features(x[start : start + EXTRACT_BATCH])
        chunks.append(f.flatten(1).float())
    model.train(was_training)
    feats = torch.cat(chunks) if chunks else torch.zeros(0, 0, device=x.device)
    return F.normalize(feats, dim=1) if l2_normalize else feats


def client_features(
    client: Client, l2_normalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(F, y): the client's features under the frozen extractor (its worker model) and labels."""
    x, y = client.data()
    return extract(client.model, x, l2_normalize), y


def fresh_head(
    dim: int, num_classes: int, generator: torch.Generator, device: torch.device | str
) -> nn.Linear:
    """A new linear head with PyTorch's default init U(−1/√d, 1/√d), drawn from `generator`."""
    head = nn.Linear(dim, num_classes).to(device)
    bound = 1.0 / math.sqrt(dim)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_((torch.rand(p.shape, generator=generator, device=p.device) * 2 - 1) * bound)
    return head


def fit_head(
    head: nn.Linear,
    x: torch.Tensor,
    y: torch.Tensor | None,
    train: TrainConfig,
    lr: float,
    generator: torch.Generator,
    epochs: int | None = None,
    teacher: nn.Module | None = None,
    temperature: float = 1.0,
    average: "IterateAverage | None" = None,
) -> torch.Tensor:
    """Train `head` by cross-entropy on features `x` (n, d) with the configured optimizer for
    `epochs` (default `train.local_epochs`) shuffled passes; return the mean loss (a tensor).

    With a `teacher`, the loss is CE + T²·KL(softmax(teacher/T) ‖ softmax(head/T)) (the KD
    baseline of FedPFT's appendix; `fedshare.functional.losses.distillation_kl`); with a teacher
    and `y=None` (unlabelled inputs) the distillation term alone. With an `average` (SWA), the
    head ends as the mean of its iterates at the steps `average` picks."""
    if y is None and teacher is None:
        raise ValueError("fit_head needs labels, a teacher, or both")

    def step_loss(idx: torch.Tensor) -> torch.Tensor:
        logits = head(x[idx])
        loss = torch.zeros((), device=x.device) if y is None else F.cross_entropy(logits, y[idx])
        if teacher is not None:
            with torch.no_grad():
                target = teacher(x[idx])
            loss = loss + distillation_kl(logits, target, temperature)
        return loss

    head.train()
    optimizer = make_optimizer(head.parameters(), train, lr)
    epochs = train.local_epochs if epochs is None else epochs
    batches = shuffled_positions(len(x), train.batch_size, generator, x.device, epochs)
    if average is None:
        return check_finite(fit(optimizer, batches, step_loss), "a head")
    loss = check_finite(fit(optimizer, average.after_steps(batches, head), step_loss), "a head")
    average.load_into(head)
    return loss


class IterateAverage:
    """Stochastic weight averaging (Izmailov et al. 2018; FedBE's server distillation): the
    running mean of a module's parameters after optimizer steps `start`, `start + every`, …
    (1-based), as torchcontrib's SWA(swa_start, swa_freq) that FedBE's code runs."""

    def __init__(self, start: int, every: int) -> None:
        if start < 1 or every < 1:
            raise ValueError(f"SWA needs start >= 1 and every >= 1, got {start}, {every}")
        self.start, self.every = start, every
        self.count = 0
        self.sums: list[torch.Tensor] = []

    def add(self, module: nn.Module) -> None:
        params = [p.detach() for p in module.parameters()]
        if not self.sums:
            self.sums = [torch.zeros_like(p) for p in params]
        for total, p in zip(self.sums, params, strict=True):
            total.add_(p)
        self.count += 1

    def after_steps(
        self, batches: Iterator[torch.Tensor], module: nn.Module
    ) -> Iterator[torch.Tensor]:
        """`batches`, adding `module` to the average once each chosen step has been taken (the
        training loop asks for the next batch only after stepping on the previous one)."""
        for step, batch in enumerate(batches, start=1):
            yield batch
            if step >= self.start and (step - self.start) % self.every == 0:
                self.add(module)

    def load_into(self, module: nn.Module) -> None:
        """Replace the parameters by their average (unchanged if no step was averaged)."""
        if not self.count:
            return
        with torch.no_grad():
            for p, total in zip(module.parameters(), self.sums, strict=True):
                p.copy_(total / self.count)


def load_head(target: nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    with torch.no_grad():
        target.weight.copy_(weight)
        target.bias.copy_(bias)


@torch.no_grad()
def head_accuracy(head: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Accuracy (%) of `head` on features `x` (e.g. the server's synthetic set, FedPFT §6.2)."""
    if len(y) == 0:
        return float("nan")
    hits = sum(
        int((head(x[s : s + EXTRACT_BATCH]).argmax(1) == y[s : s + EXTRACT_BATCH]).sum())
        for s in range(0, len(y), EXTRACT_BATCH)
    )
    return 100.0 * hits / len(y)


class FeatureClassifier(nn.Module):
    """h(normalise(f(x))): the evaluated model when features are L2-normalised (FedPFT App. B)."""

    def __init__(self, model: nn.Module, head: nn.Module, l2_normalize: bool) -> None:
        super().__init__()
        self.model = as_block_model(model)
        self.classifier = head
        self.l2_normalize = l2_normalize

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.model.features(x).flatten(1)
        return self.classifier(F.normalize(f, dim=1) if self.l2_normalize else f)


# --------------------------------------------------------------------------- local heads
def local_head(
    client: Client,
    num_classes: int,
    seed: int,
    l2_normalize: bool = False,
    epochs: int | None = None,
) -> nn.Linear:
    """A head trained on the client's own features (the baselines' local model, FedPFT App. D.1).

    Every client starts from the same initialisation, drawn from the run seed (as if the server
    had broadcast it; a shared seed costs no traffic), and trains with `train` settings for
    `epochs` passes (default `train.local_epochs`; `HeadBudget.head_epochs`).
    """
    feats, labels = client_features(client, l2_normalize)
    head = fresh_head(
        feats.shape[1],
        num_classes,
        torch_generator(seed, "oneshot/head_init", device=client.device),
        client.device,
    )
    fit_head(head, feats, labels, client.train, client.lr, client.rng("head_batches"), epochs)
    return head


def head_vector(head: nn.Linear, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """[W.flatten(), b] in the wire dtype: C·d + C numbers."""
    return torch.cat([head.weight.detach().flatten(), head.bias.detach()]).to(dtype)


def head_from_vector(vector: torch.Tensor, dim: int, num_classes: int) -> nn.Linear:
    """A linear head holding a `head_vector` (in float32, on the vector's device)."""
    head = nn.utils.skip_init(nn.Linear, dim, num_classes, device=vector.device)
    load_head(head, *split_head_vector(vector, dim, num_classes))
    return head


def split_head_vector(
    vector: torch.Tensor, dim: int, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, b) in float32 from a `head_vector`."""
    v = vector.float()
    return v[: dim * num_classes].view(num_classes, dim), v[dim * num_classes :]
