"""Federated data: the dataset on the run device plus each client's index tensor."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from fedshare.data.dataset import Dataset
from fedshare.data.partition import Partition, make_partition
from fedshare.data.shift import apply_domain_shift
from fedshare.engine.rng import numpy_rng
from fedshare.errors import FedshareError


@dataclass
class FederatedData:
    """A dataset and its partition; a client is an index tensor into the training set."""

    dataset: Dataset
    partition: Partition
    client_indices: list[torch.Tensor]

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    @property
    def client_sizes(self) -> list[int]:
        return self.partition.sizes

    def to(self, device: torch.device | str) -> "FederatedData":
        return FederatedData(
            self.dataset.to(device), self.partition, [ix.to(device) for ix in self.client_indices]
        )


def resolve_num_clients(train_size: int, num: int | None, samples_per_client: int | None) -> int:
    """`clients.num`, or train_size // `clients.samples_per_client` (FLea's |D_k|)."""
    if samples_per_client is not None:
        if samples_per_client < 1 or samples_per_client > train_size:
            raise FedshareError(
                f"clients.samples_per_client={samples_per_client} must be between 1 and the "
                f"{train_size} training samples"
            )
        return train_size // samples_per_client
    if num is None or num < 1:
        raise FedshareError(f"clients.num={num} must be a positive integer")
    return num


def federate(
    dataset: Dataset,
    partition: str | Mapping[str, Any] = "iid",
    num_clients: int | None = 10,
    seed: int = 0,
    samples_per_client: int | None = None,
) -> FederatedData:
    """Split `dataset` among clients; `partition` is a partitioner name or {name, **params}.

    A partition that carries input transforms (covariate shift) is applied to the dataset here.
    """
    cfg = {"name": partition} if isinstance(partition, str) else dict(partition)
    n = resolve_num_clients(len(dataset.y_train), num_clients, samples_per_client)
    labels = dataset.y_train.cpu().numpy()
    part = make_partition(labels, n, cfg, numpy_rng(seed, "partition"), dataset.num_classes)
    empty = [k for k, ix in enumerate(part.client_indices) if len(ix) == 0]
    if empty:
        raise FedshareError(
            f"partition {part.name!r} leaves {len(empty)} of {n} clients with no samples "
            f"(clients {empty[:5]}{' …' if len(empty) > 5 else ''}); use fewer clients or a "
            f"partition that gives every client data"
        )
    dataset = apply_domain_shift(dataset, part)
    indices = [torch.from_numpy(ix) for ix in part.client_indices]
    return FederatedData(dataset, part, indices)
