"""Central training on tensors the server holds (one-shot methods train inside `aggregate`)."""

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config import TrainConfig
from fedshare.data.dataset import Dataset
from fedshare.engine.optim import make_optimizer
from fedshare.errors import NonFiniteLossError


def train_central(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    dataset: Dataset,
    train: TrainConfig,
    lr: float,
    epochs: int,
    generator: torch.Generator,
) -> float:
    """Train `model` on stored-format inputs `x` for `epochs` shuffled passes; return the
    mean loss of the last epoch.

    `y` holds class ids (n,) or label distributions (n, C) (soft labels, cross-entropy with
    probability targets). Batches are prepared (scaled, augmented if `train.augment`,
    normalised) by `dataset.prepare`; the optimizer is the configured one
    (`fedshare.engine.optim.make_optimizer`). Seed torch's global generator before calling
    for deterministic dropout.
    """
    model.train()
    optimizer = make_optimizer(model.parameters(), train, lr)
    n, size = len(x), train.batch_size
    total = torch.zeros((), device=x.device)
    steps = 0
    for _ in range(epochs):
        total.zero_()
        steps = 0
        order = torch.randperm(n, generator=generator, device=x.device)
        for start in range(0, n, size):
            idx = order[start : start + size]
            inputs = dataset.prepare(x[idx], train.augment, generator)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(inputs), y[idx])
            loss.backward()
            optimizer.step()
            total += loss.detach()
            steps += 1
    mean = float(total) / max(steps, 1)
    if not torch.isfinite(torch.tensor(mean)):
        raise NonFiniteLossError(
            "the server's training loss became non-finite; lower train.lr or check the data"
        )
    return mean
