"""Federated data: the dataset on the run device plus each client's index tensor."""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from fedshare.data.dataset import Dataset
from fedshare.data.datasets import balanced_subset
from fedshare.data.partitioners import Partition, fingerprint, make_partition
from fedshare.data.shift import apply_domain_shift
from fedshare.data.validation import carve_validation, check_val_fraction
from fedshare.engine.rng import numpy_rng
from fedshare.errors import FedshareError


@dataclass
class FederatedData:
    """A dataset and its partition; a client is an index tensor into the training set.

    `server_indices` is the server's own data (`server_data.size` samples carved, class-
    balanced, from the training set before partitioning; no client holds them), `None` when
    the run has none; with `server_labelled=False` the server may use the inputs only.
    `val_indices` is the validation split (`data.val_fraction`, `fedshare.data.validation`):
    training-set samples no client or server trains on, `None` when the run has none.
    """

    dataset: Dataset
    partition: Partition
    client_indices: list[torch.Tensor]
    server_indices: torch.Tensor | None = None
    server_labelled: bool = True
    val_indices: torch.Tensor | None = None

    def __repr__(self) -> str:
        """One line, no tensors: dataset, sizes, partition, client sizes, server data."""
        data, part = self.dataset, self.partition
        sizes = self.client_sizes
        params = ", ".join(f"{k}={v}" for k, v in part.params.items() if v is not None)
        shape = "×".join(str(d) for d in data.input_shape)
        server = "none" if self.server_indices is None else f"{len(self.server_indices)} samples"
        if self.val_indices is not None:
            server += f"; validation: {len(self.val_indices)} samples"
        return (
            f"FederatedData({data.name}: {len(data.y_train):,} train / {len(data.y_test):,} "
            f"test, {data.num_classes} classes, input {shape}; partition {part.name}"
            f"({params}) over {self.num_clients} clients, {min(sizes, default=0)}–"
            f"{max(sizes, default=0)} samples each; server data: {server})"
        )

    def server_batch(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The server's data, prepared without augmentation; labels only if labelled."""
        if self.server_indices is None:
            raise FedshareError(
                "this strategy needs data on the server; set server_data.size (e.g. 300)"
            )
        x, y = self.dataset.train_batch(self.server_indices)
        return x, (y if self.server_labelled else None)

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    @property
    def client_sizes(self) -> list[int]:
        return self.partition.sizes

    def validation_batches(self, batch_size: int) -> "list[tuple[torch.Tensor, torch.Tensor]]":
        """The validation split's raw inputs and labels in batches of `batch_size`."""
        if self.val_indices is None:
            return []
        data, ix = self.dataset, self.val_indices
        return [
            (data.x_train[ix[i : i + batch_size]], data.y_train[ix[i : i + batch_size]])
            for i in range(0, len(ix), batch_size)
        ]

    def to(self, device: torch.device | str) -> "FederatedData":
        server = None if self.server_indices is None else self.server_indices.to(device)
        val = None if self.val_indices is None else self.val_indices.to(device)
        return FederatedData(
            self.dataset.to(device),
            self.partition,
            [ix.to(device) for ix in self.client_indices],
            server,
            self.server_labelled,
            val,
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
    server_size: int = 0,
    server_labelled: bool = True,
    val_fraction: float = 0.0,
) -> FederatedData:
    """Split `dataset` among clients; `partition` is a partitioner name or {name, **params}.

    With `server_size`, that many training samples (class-balanced, drawn from the stream
    (seed, "server_data")) go to the server first and the clients share the rest; the
    partition's fingerprint and `info["server_data"]` record them. A partition that carries
    input transforms (covariate shift) is applied to the dataset here. With `val_fraction`,
    that share of each client's samples (and of the server's) forms the validation split
    (`fedshare.data.validation`), in the partition's fingerprint too.
    """
    cfg = {"name": partition} if isinstance(partition, str) else dict(partition)
    labels = dataset.y_train.cpu().numpy()
    server, kept = carve_server_data(labels, server_size, seed)
    n = resolve_num_clients(len(kept), num_clients, samples_per_client)
    rng = numpy_rng(seed, "partition")
    part = make_partition(labels[kept], n, cfg, rng, dataset.num_classes)
    if server is not None:
        part = with_server_data(part, kept, server, labels, server_labelled)
    empty = [k for k, ix in enumerate(part.client_indices) if len(ix) == 0]
    if empty:
        raise FedshareError(
            f"partition {part.name!r} leaves {len(empty)} of {n} clients with no samples "
            f"(clients {empty[:5]}{' …' if len(empty) > 5 else ''}); use fewer clients or a "
            f"partition that gives every client data"
        )
    dataset = apply_domain_shift(dataset, part)  # a client's validation samples are in its domain
    val_indices = None
    if check_val_fraction(val_fraction) > 0:
        split = carve_validation(part, labels, val_fraction, seed, server)
        part, server, val_indices = split.partition, split.server, torch.from_numpy(split.indices)
    indices = [torch.from_numpy(ix) for ix in part.client_indices]
    server_indices = None if server is None else torch.from_numpy(server)
    return FederatedData(dataset, part, indices, server_indices, server_labelled, val_indices)


def carve_server_data(
    labels: np.ndarray, size: int, seed: int
) -> tuple[np.ndarray | None, np.ndarray]:
    """(the server's indices or None, the indices left for the clients)."""
    everything = np.arange(len(labels))
    if not size:
        return None, everything
    if not 0 < size < len(labels):
        raise FedshareError(
            f"server_data.size={size} must be between 1 and the {len(labels) - 1} training "
            f"samples that would leave the clients at least one"
        )
    server = balanced_subset(labels, size, numpy_rng(seed, "server_data")).numpy()
    return server, np.setdiff1d(everything, server)


def with_server_data(
    part: Partition, kept: np.ndarray, server: np.ndarray, labels: np.ndarray, labelled: bool
) -> Partition:
    """The partition of the clients' share, in indices of the whole training set, with the
    server's data in its fingerprint and info."""
    indices = [kept[ix] for ix in part.client_indices]
    counts = np.bincount(labels[server], minlength=part.num_classes).tolist()
    info = {
        **part.info,
        "server_data": {"size": len(server), "labelled": labelled, "class_counts": counts},
    }
    extra = {"server": np.sort(server).tolist(), "transforms": part.transforms}
    return replace(
        part,
        client_indices=indices,
        fingerprint=fingerprint(indices, extra),
        info=info,
    )
