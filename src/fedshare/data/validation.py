"""The validation split (`data.val_fraction`): samples held out of each client's training data,
and of the server's, to choose hyperparameters and rounds on without reading the test set.

Client k keeps ⌊f·n_k + ½⌋ of its n_k samples out of training (f = `data.val_fraction`), drawn
uniformly from its own data with the stream (seed, "validation"); the server's data loses the
same fraction. The held-out samples of all clients and of the server form one validation set,
on which the global model is scored beside the test set. The partition's fingerprint covers
the split, so two runs with different splits never share a fingerprint.
"""

from dataclasses import dataclass, replace

import numpy as np

from fedshare.data.partitioners import Partition, fingerprint
from fedshare.engine.rng import numpy_rng
from fedshare.errors import FedshareError


@dataclass
class ValidationSplit:
    """The partition of the clients' training data, the validation indices (into the whole
    training set) and the server's remaining data."""

    partition: Partition
    indices: np.ndarray
    server: np.ndarray | None


def check_val_fraction(fraction: float) -> float:
    """`fraction` as a float in [0, 1), else one sentence naming it."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise FedshareError(
            f"data.val_fraction={fraction!r} is not a number; give a fraction in [0, 1), e.g. 0.1"
        )
    if not 0 <= fraction < 1:
        raise FedshareError(
            f"data.val_fraction={fraction} must be in [0, 1): the share of each client's "
            f"training samples held out for validation (0 = no validation split)"
        )
    return float(fraction)


def held_out(size: int, fraction: float) -> int:
    """How many of `size` samples the validation split takes: ⌊fraction·size + ½⌋."""
    return int(np.floor(fraction * size + 0.5))


def carve_validation(
    part: Partition,
    labels: np.ndarray,
    fraction: float,
    seed: int,
    server: np.ndarray | None = None,
) -> ValidationSplit:
    """Hold `fraction` of each client's samples (and of `server`'s) out for validation.

    `part.client_indices` index the whole training set (with `labels`). A client left with no
    training sample is refused, naming the client and the fraction.
    """
    rng = numpy_rng(seed, "validation")
    kept, held = [], []
    for k, indices in enumerate(part.client_indices):
        size = len(indices)
        count = held_out(size, fraction)
        if count >= size:
            raise FedshareError(
                f"data.val_fraction={fraction} leaves client {k} ({size} sample"
                f"{'' if size == 1 else 's'}) no training sample; lower data.val_fraction or "
                f"give the clients more data"
            )
        order = rng.permutation(size)
        held.append(np.asarray(indices)[order[:count]])
        kept.append(np.sort(np.asarray(indices)[order[count:]]))
    if server is not None:
        order = rng.permutation(len(server))
        count = min(held_out(len(server), fraction), len(server) - 1)
        held.append(server[order[:count]])
        server = np.sort(server[order[count:]])
    indices = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
    counts = np.stack([np.bincount(labels[ix], minlength=part.num_classes) for ix in kept])
    info = {**part.info}
    if server is not None and "server_data" in info:
        server_counts = np.bincount(labels[server], minlength=part.num_classes).tolist()
        info["server_data"] = {**info["server_data"], "size": len(server)}
        info["server_data"]["class_counts"] = server_counts
    info = {
        **info,
        "validation": {
            "fraction": fraction,
            "size": len(indices),
            "class_counts": np.bincount(labels[indices], minlength=part.num_classes).tolist(),
        },
    }
    extra = {"partition": part.fingerprint, "validation": indices.tolist()}
    split = replace(
        part,
        client_indices=kept,
        class_counts=counts,
        fingerprint=fingerprint(kept, extra),
        info=info,
    )
    return ValidationSplit(split, indices, server)
