"""Local training loops shared by the strategies."""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.client import Client
from fedshare.errors import NonFiniteLossError

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
) -> torch.Tensor:
    """Train `model` on the client's batches; return the mean loss (a device tensor).

    The loss is summed on the device and checked once at the end (no host sync per step); a
    NaN or infinite loss raises `NonFiniteLossError`.
    """
    model.train()
    optimizer = client.make_optimizer(model.parameters())
    total = torch.zeros((), device=client.device)
    steps = 0
    for x, y in client.batches(epochs=epochs):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, x, y)
        loss.backward()
        if grad_hook is not None:
            grad_hook(model)
        optimizer.step()
        total += loss.detach()
        steps += 1
    return finite_mean(total, steps, client)


def finite_mean(total: torch.Tensor, steps: int, client: Client) -> torch.Tensor:
    """`total / steps`, checked once on the host; a NaN or inf raises `NonFiniteLossError`."""
    mean = total / max(steps, 1)
    if not torch.isfinite(mean):
        raise NonFiniteLossError(
            f"client {client.id} got a non-finite training loss in round {client.round}; "
            f"lower train.lr or check the data"
        )
    return mean
