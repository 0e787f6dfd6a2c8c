"""Local training on a client's batches (`fedshare.engine.training` drives the steps)."""

from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.batched import Batch, StackedGradHook, StackedLoss, StackedRun
from fedshare.engine.client import Client, Samples
from fedshare.engine.flat import FlatState
from fedshare.engine.messages import Update
from fedshare.engine.training import check_finite, fit

LossFn = Callable[..., torch.Tensor]
"""`loss(model, *batch)`: `loss(model, x, y)`, or more tensors where the batches carry more."""
GradHook = Callable[[nn.Module], None]
StepHook = Callable[[nn.Module], None]


def cross_entropy_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def train_local(
    client: Client,
    model: nn.Module,
    loss_fn: LossFn = cross_entropy_loss,
    grad_hook: GradHook | None = None,
    epochs: int | None = None,
    extra: Samples | None = None,
    batches: Iterable[Batch] | None = None,
    step_hook: StepHook | None = None,
) -> torch.Tensor:
    """Train `model` with the configured optimizer on the client's batches (with `extra`
    received samples, if given; or on `batches`, which `loss_fn` takes after the model);
    return the mean loss (a device tensor, checked finite). `grad_hook` runs between backward
    and the optimizer step, `step_hook` after each step."""
    model.train()
    optimizer = client.make_optimizer(model.parameters())
    if step_hook is not None:
        optimizer.register_step_post_hook(lambda *_: step_hook(model))
    mean = fit(
        optimizer,
        client.batches(epochs=epochs, extra=extra) if batches is None else batches,
        lambda batch: loss_fn(model, *batch),
        None if grad_hook is None else lambda: grad_hook(model),
        client.amp_device,
    )
    return finite_mean(mean, client)


def train_stacked(
    flat: FlatState,
    clients: list[Client],
    model: nn.Module,
    loss_fn: StackedLoss = cross_entropy_loss,
    grad_hook: StackedGradHook | None = None,
    client_inputs: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
    streams: list[Iterator[Batch]] | None = None,
    aux_metrics: Callable[[torch.Tensor], dict[str, torch.Tensor]] | None = None,
    starts: Sequence[torch.Tensor] | None = None,
) -> list[Update]:
    """`train_local` for several clients at once (`fedshare.engine.batched.StackedRun`), each
    from `model`'s current weights, or from its own flat state in `starts`; every client
    uploads its trained weights and mean loss, and `aux_metrics` of its summed `(loss, aux)`
    statistics when the loss returns them."""
    run, losses = run_stacked(clients, model, loss_fn, grad_hook, client_inputs, streams, starts)
    updates = []
    for i, client in enumerate(clients):
        metrics = {"train_loss": losses[i]}
        if aux_metrics is not None and run.aux is not None:
            metrics.update(aux_metrics(run.aux[i]))
        weights = flat.flatten(run.load_client(i))
        updates.append(Update(client.id, client.num_samples, weights=weights, metrics=metrics))
    return updates


def run_stacked(
    clients: list[Client],
    model: nn.Module,
    loss_fn: StackedLoss = cross_entropy_loss,
    grad_hook: StackedGradHook | None = None,
    client_inputs: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
    streams: list[Iterator[Batch]] | None = None,
    starts: Sequence[torch.Tensor] | None = None,
) -> tuple[StackedRun, list[torch.Tensor]]:
    """The stacked run of `train_stacked`, trained (client i from `model`'s weights, or from
    its flat state `starts[i]`), and each client's mean loss, checked finite; `run.load_client`
    puts a client's trained weights into `model`."""
    run = StackedRun(clients, model, loss_fn, grad_hook, client_inputs, streams)
    flat = FlatState(model)
    for i, start in enumerate(starts or ()):
        run.start_row(i, flat.load_(model, start))
    losses = run.run()
    return run, [finite_mean(loss, client) for loss, client in zip(losses, clients, strict=True)]


def finite_mean(mean: torch.Tensor, client: Client) -> torch.Tensor:
    """`mean`, checked once on the host; a NaN or inf raises `NonFiniteLossError`."""
    return check_finite(mean, f"client {client.id} in round {client.round}")
