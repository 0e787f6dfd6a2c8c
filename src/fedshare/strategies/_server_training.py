"""Server-side training on uploaded prototypes (FedGH's header, FedTGP's trainable global
prototypes): shuffled mini-batches from the run's derived streams, plain SGD as in the
HtFLlib's implementations (`servergh`, `servertgp`)."""

from collections.abc import Callable, Iterator
from dataclasses import replace

import torch
from torch import nn

from fedshare.config.rules import EPOCHS
from fedshare.engine.rng import torch_generator

SERVER_EPOCHS = replace(EPOCHS, low=1)
"""Passes of server training over the uploads: at least one."""


def prototype_batches(
    prototypes: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int,
    epochs: int,
    seed: int,
    purpose: str,
    round_idx: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`epochs` shuffled passes over (prototypes, labels) in batches of `batch_size` (the last
    one smaller), from the stream (seed, purpose, round)."""
    gen = torch_generator(seed, purpose, round_idx)
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=gen).to(labels.device)
        for start in range(0, len(labels), batch_size):
            pick = order[start : start + batch_size]
            yield prototypes[pick], labels[pick]


def train_on_prototypes(
    module: nn.Module,
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    lr: float,
) -> float:
    """SGD on `module` with `loss_fn(prototypes, labels)` per batch; the last batch's loss."""
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    module.train()
    loss = torch.zeros(())
    for protos, labels in batches:
        loss = loss_fn(protos, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    module.eval()
    return float(loss.detach())
