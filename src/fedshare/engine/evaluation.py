"""Evaluation of the global model on the test set."""

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.data.dataset import Dataset
from fedshare.errors import FedshareError


@torch.no_grad()
def evaluate(
    model: nn.Module, dataset: Dataset, batch_size: int = 1024, per_class: bool = False
) -> dict[str, Any]:
    """Accuracy (percent), mean cross-entropy loss and optionally per-class accuracy."""
    n = len(dataset.y_test)
    if n == 0 or batch_size < 1:
        raise FedshareError(
            f"cannot evaluate on {n} test samples of {dataset.name} in batches of {batch_size}: "
            f"an accuracy needs at least one sample and eval.batch_size >= 1"
        )
    was_training = model.training
    model.eval()
    correct = torch.zeros(dataset.num_classes, device=dataset.device)
    total = torch.zeros(dataset.num_classes, device=dataset.device)
    loss_sum = torch.zeros((), device=dataset.device)
    for start in range(0, n, batch_size):
        x = dataset.prepare(dataset.x_test[start : start + batch_size])
        y = dataset.y_test[start : start + batch_size]
        logits = model(x)
        loss_sum += F.cross_entropy(logits, y, reduction="sum")
        hit = (logits.argmax(dim=1) == y).float()
        correct.index_add_(0, y, hit)
        total.index_add_(0, y, torch.ones_like(hit))
    model.train(was_training)
    result: dict[str, Any] = {
        "accuracy": 100.0 * float(correct.sum()) / n,
        "loss": float(loss_sum) / n,
    }
    if per_class:
        acc = 100.0 * correct / total.clamp_min(1)
        result["per_class_accuracy"] = [round(a, 4) for a in acc.tolist()]
    return result
