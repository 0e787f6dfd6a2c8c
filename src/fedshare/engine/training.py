"""The one training driver: shuffled batches, and optimizer steps on a loss function.

Every loop in fedshare is these two pieces: a client's local epochs (`client.batches`), a
head fitted on features, the server's central training, FLea's mixed-feature steps. Losses are
summed on the device; the caller checks the mean once (`check_finite`), so no step syncs
with the host.
"""

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import torch

from fedshare.errors import NonFiniteLossError

B = TypeVar("B")


def shuffled_positions(
    n: int,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device | str,
    epochs: int | None = None,
    drop_last: bool = False,
) -> Iterator[torch.Tensor]:
    """Batches of positions in range(n), reshuffled at every pass (`epochs=None`: endless).

    Lazy: each pass draws its permutation when the previous pass is used up, so draws made
    from `generator` between batches (augmentation) keep their place in the stream."""
    done = 0
    while epochs is None or done < epochs:
        order = torch.randperm(n, generator=generator, device=device)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            yield order[start : start + batch_size]
        done += 1


def bf16_autocast(amp_device: str | None) -> torch.autocast:
    """bfloat16 autocast on `amp_device` ("cpu", "cuda"; `train.amp`), or a disabled one."""
    return torch.autocast(amp_device or "cpu", torch.bfloat16, enabled=amp_device is not None)


def fit(
    optimizer: torch.optim.Optimizer,
    batches: Iterable[B],
    loss_fn: Callable[[B], torch.Tensor],
    grad_hook: Callable[[], None] | None = None,
    amp_device: str | None = None,
) -> torch.Tensor:
    """One optimizer step per batch on `loss_fn(batch)` (`grad_hook` runs between backward and
    step); returns the mean loss as a device tensor (0 for no batch). With `amp_device` ("cpu",
    "cuda") the loss is computed under bfloat16 autocast there; backward and step stay outside."""
    total: torch.Tensor | None = None
    steps = 0
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        with bf16_autocast(amp_device):
            loss = loss_fn(batch)
        loss.backward()
        if grad_hook is not None:
            grad_hook()
        optimizer.step()
        total = loss.detach() if total is None else total + loss.detach()
        steps += 1
    return torch.zeros(()) if total is None else total / steps


def check_finite(mean: torch.Tensor, where: str) -> torch.Tensor:
    """`mean`, checked once on the host; NaN or inf raises `NonFiniteLossError`."""
    if not torch.isfinite(mean):
        raise NonFiniteLossError(
            f"{where} got a non-finite training loss; lower train.lr or check the data"
        )
    return mean
