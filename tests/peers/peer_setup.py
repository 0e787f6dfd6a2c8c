"""The deterministic setting every differential test shares: a linear model on digits with a
fixed initialisation, full-batch plain SGD (one step an epoch, so the client order inside a batch
cannot matter), and each peer fed the same client tensors fedshare trains on."""

from collections.abc import Iterable

import torch
from torch import nn

from fedshare import simulate
from fedshare.data.federated import FederatedData
from fedshare.strategies.base import Strategy, Update
from helpers import client_data, digits_federation

EPOCHS = 3
LR = 0.1
ROUNDS = 3
TRAIN = {"local_epochs": EPOCHS, "batch_size": 10_000, "lr": LR, "momentum": 0.0}
ATOL = 1e-6
"""float32 sums in another order: the runs below agree to ~3e-8 (measured)."""


def unequal_federation(clients: int = 4) -> FederatedData:
    """Dir(1.0) label skew: clients of different sizes (sample weighting matters)."""
    return digits_federation({"name": "dirichlet", "alpha": 1.0}, clients)


def equal_federation(clients: int = 3) -> FederatedData:
    """IID over 1,797 digits: three clients of 599."""
    fed = digits_federation("iid", clients)
    assert len(set(fed.client_sizes)) == 1
    return fed


def linear_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def run_fedshare(
    strategy: Strategy, fed: FederatedData, clients: dict | None = None
) -> tuple[torch.Tensor, list[list[int]]]:
    """fedshare's final parameters after `ROUNDS` rounds and each round's cohort, in order."""
    cohorts: list[list[int]] = []
    own_aggregate = strategy.aggregate

    def recording(updates: Iterable[Update], round_idx: int) -> None:
        updates = list(updates)
        cohorts.append(sorted(u.client_id for u in updates))
        own_aggregate(updates, round_idx)

    strategy.aggregate = recording
    result = simulate(
        strategy,
        fed,
        linear_model(),
        rounds=ROUNDS,
        train=TRAIN,
        clients=clients or {"fraction": 1.0},
    )
    return flat(result.strategy.model), cohorts


def client_tensors(fed: FederatedData) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each client's whole training set as fedshare prepares it."""
    return [batch for batch, _ in client_data(fed)]
