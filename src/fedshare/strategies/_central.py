"""Central training on tensors the server holds (one-shot methods train inside `aggregate`)."""

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config import TrainConfig
from fedshare.data.dataset import Dataset
from fedshare.engine.optim import make_optimizer
from fedshare.engine.training import check_finite, fit, shuffled_positions


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

    def step_loss(idx: torch.Tensor) -> torch.Tensor:
        inputs = dataset.prepare(x[idx], train.augment, generator)
        return F.cross_entropy(model(inputs), y[idx])

    model.train()
    optimizer = make_optimizer(model.parameters(), train, lr)
    mean = torch.zeros(())
    for _ in range(epochs):
        passes = shuffled_positions(len(x), train.batch_size, generator, x.device, epochs=1)
        mean = fit(optimizer, passes, step_loss)
    return float(check_finite(mean, "the server"))
