"""Local training on a client's batches (`fedshare.engine.training` drives the steps)."""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.client import Client, Samples
from fedshare.engine.training import check_finite, fit

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
GradHook = Callable[[nn.Module], None]


def cross_entropy_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def train_local(
    client: Client,
    model: nn.Module,
    loss_fn: LossFn = cross_entropy_loss,
    grad_hook: GradHook | None = None,
    epochs: int | None = None,
    extra: Samples | None = None,
) -> torch.Tensor:
    """Train `model` with the configured optimizer on the client's batches (with `extra`
    received samples, if given); return the mean loss (a device tensor, checked finite)."""
    model.train()
    mean = fit(
        client.make_optimizer(model.parameters()),
        client.batches(epochs=epochs, extra=extra),
        lambda batch: loss_fn(model, *batch),
        None if grad_hook is None else lambda: grad_hook(model),
        client.amp_device,
    )
    return finite_mean(mean, client)


def finite_mean(mean: torch.Tensor, client: Client) -> torch.Tensor:
    """`mean`, checked once on the host; a NaN or inf raises `NonFiniteLossError`."""
    return check_finite(mean, f"client {client.id} in round {client.round}")
