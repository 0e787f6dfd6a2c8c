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
from fedshare.errors import FedshareError


def personal_test_splits(
    class_counts: np.ndarray, y_test: torch.Tensor, size: int, seed: int
) -> list[torch.Tensor]:
    """Per client, `size` test indices whose class proportions follow its training counts
    (largest-remainder rounding; a class with too few test samples gives what it has). A
    client none of whose classes has a test sample is refused in one sentence."""
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
        if not chosen:
            classes = ", ".join(str(c) for c in np.flatnonzero(counts))
            raise FedshareError(
                f"eval.personal: client {client}'s classes ({classes}) have no sample among the "
                f"{len(labels)} test samples, so its personal accuracy would be over no sample; "
                f"give a larger test set (data.test_subset) or set eval.personal=false"
            )
        splits.append(torch.from_numpy(np.sort(np.concatenate(chosen))))
    return splits


@torch.no_grad()
def split_accuracy(model: nn.Module, dataset: Dataset, indices: torch.Tensor) -> float:
    """Accuracy (%) of `model` on the test samples `indices`."""
    return _accuracy(correct_on(model, dataset, indices))


def _accuracy(correct: torch.Tensor) -> float:
    return 100.0 * float(correct.float().mean())


@torch.no_grad()
def correct_on(
    model: nn.Module, dataset: Dataset, indices: torch.Tensor, batch_size: int = 200
) -> torch.Tensor:
    """Whether `model` classifies each of the test samples `indices` correctly (bool tensor)."""
    was_training = model.training
    model.eval()
    hits = []
    for start in range(0, len(indices), batch_size):
        ix = indices[start : start + batch_size]
        hits.append(model(dataset.prepare(dataset.x_test[ix])).argmax(dim=1) == dataset.y_test[ix])
    model.train(was_training)
    return torch.cat(hits) if hits else torch.zeros(0, dtype=torch.bool, device=dataset.device)


def _tensor_versions(model: nn.Module) -> tuple[tuple[int, int], ...]:
    """Identity and in-place version counter of every parameter and buffer: changes when any
    of them is replaced or written in place (`copy_`, `load_state_dict`, an optimizer step)."""
    tensors = [*model.parameters(), *model.buffers()]
    return tuple((id(t), t._version) for t in tensors)


def personal_metrics(
    splits: Sequence[torch.Tensor],
    dataset: Dataset,
    model_of: Callable[[int], nn.Module],
    groups: Sequence[str] | None = None,
) -> dict[str, float]:
    """Mean and lowest accuracy of each client's model on its own split; with `groups` (a
    label per client, e.g. its architecture) also each group's (`personal_accuracy/<label>`,
    `personal_accuracy_min/<label>`).

    Where consecutive clients get the same, unchanged model (every strategy whose
    `personal_model` is the global model), the model classifies the test samples any split
    holds once, and each client's accuracy is read from those results: one pass over at most
    the test set instead of one forward pass per client (10,000 clients: 10,000 passes). A
    strategy that loads each client's own weights into a reused module (FedBN) changes the
    module's tensors in place, so each of its clients is still scored on its own.
    """
    accs: list[float] = []
    shared: nn.Module | None = None  # the last client's model, kept alive so its id is unique
    shared_key: tuple[tuple[int, int], ...] = ()
    correct: torch.Tensor | None = None  # test-set positions -> hit, for `shared`
    for k, split in enumerate(splits):
        ix = split.to(dataset.device)
        model = model_of(k)
        key = _tensor_versions(model)
        if model is not shared or key != shared_key or not key:
            shared, shared_key, correct = model, key, None
            accs.append(split_accuracy(model, dataset, ix))
            continue
        if correct is None:  # the second client with this model: score every split's samples
            correct = _all_needed(model, dataset, splits)
        accs.append(_accuracy(correct[ix]))
    result = _mean_min(accs, "")
    for label in dict.fromkeys(groups or []):
        members = [acc for acc, group in zip(accs, groups or [], strict=True) if group == label]
        result.update(_mean_min(members, f"/{label}"))
    return result


def _mean_min(accs: Sequence[float], suffix: str) -> dict[str, float]:
    return {
        f"personal_accuracy{suffix}": float(np.mean(accs)),
        f"personal_accuracy_min{suffix}": float(min(accs)),
    }


def _all_needed(model: nn.Module, dataset: Dataset, splits: Sequence[torch.Tensor]) -> torch.Tensor:
    """A test-set-long bool tensor: `model`'s hits on every sample some split holds."""
    needed = torch.zeros(len(dataset.y_test), dtype=torch.bool, device=dataset.device)
    needed[torch.cat([s.to(dataset.device) for s in splits])] = True
    positions = torch.nonzero(needed).flatten()
    correct = torch.zeros_like(needed)
    correct[positions] = correct_on(model, dataset, positions)
    return correct
