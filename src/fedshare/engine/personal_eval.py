"""Personal evaluation: each client's model on a test split with the client's label mix.

With `eval.personal=true` every client gets `eval.personal_size` test samples drawn, once and
deterministically (stream (seed, "personal_test", client)), with the class proportions of its
training data. At each evaluation the client's model scores its split: the global model, or
the strategy's `personal_model(client, state)` where the method keeps something local (FedBN's
BatchNorm, a fine-tuned head). The records get the mean and the lowest client accuracy.
"""

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from fedshare.data.dataset import Dataset
from fedshare.engine.rng import numpy_rng


def personal_test_splits(
    class_counts: np.ndarray, y_test: torch.Tensor, size: int, seed: int
) -> list[torch.Tensor]:
    """Per client, `size` test indices whose class proportions follow its training counts
    (largest-remainder rounding; a class with too few test samples gives what it has)."""
    labels = y_test.cpu().numpy()
    pools = [np.flatnonzero(labels == c) for c in range(class_counts.shape[1])]
    splits = []
    for client, counts in enumerate(np.asarray(class_counts, dtype=float)):
        rng = numpy_rng(seed, "personal_test", client)
        share = counts / max(counts.sum(), 1) * size
        take = np.floor(share).astype(int)
        take[np.argsort(take - share)[: size - take.sum()]] += 1
        chosen = [
            rng.choice(pool, min(n, len(pool)), replace=False)
            for pool, n in zip(pools, take, strict=True)
            if n > 0 and len(pool)
        ]
        splits.append(torch.from_numpy(np.sort(np.concatenate(chosen))))
    return splits


@torch.no_grad()
def split_accuracy(model: nn.Module, dataset: Dataset, indices: torch.Tensor) -> float:
    """Accuracy (%) of `model` on the test samples `indices`."""
    was_training = model.training
    model.eval()
    x = dataset.prepare(dataset.x_test[indices])
    hits = (model(x).argmax(dim=1) == dataset.y_test[indices]).float().mean()
    model.train(was_training)
    return 100.0 * float(hits)


def personal_metrics(
    splits: Sequence[torch.Tensor],
    dataset: Dataset,
    model_of: Callable[[int], nn.Module],
) -> dict[str, float]:
    """Mean and lowest accuracy of each client's model on its own split."""
    accs = [
        split_accuracy(model_of(k), dataset, ix.to(dataset.device)) for k, ix in enumerate(splits)
    ]
    return {"personal_accuracy": float(np.mean(accs)), "personal_accuracy_min": float(min(accs))}
