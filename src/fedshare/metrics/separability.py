"""The Davies–Bouldin score of penultimate features with the true labels as clusters (FLea's
Fig. 3, §2.3): lower means classes that are tighter and further apart.

DB = (1/C) Σ_i max_{j≠i} (s_i + s_j) / ‖c_i − c_j‖, with c_i the mean feature of class i and
s_i the mean Euclidean distance of its samples to c_i (Davies & Bouldin 1979; scikit-learn's
`davies_bouldin_score`). Classes without samples are left out; fewer than two classes give NaN.
"""

import math
from collections.abc import Callable
from typing import cast

import torch
from torch import nn

from fedshare.models.base import BlockModel

CHUNK = 1024


def davies_bouldin(features: torch.Tensor, labels: torch.Tensor) -> float:
    f = features.flatten(1).double()
    classes = torch.unique(labels)
    if len(classes) < 2:
        return math.nan
    centroids = torch.stack([f[labels == c].mean(0) for c in classes])
    spread = torch.stack(
        [(f[labels == c] - centroids[i]).norm(dim=1).mean() for i, c in enumerate(classes)]
    )
    distances = torch.cdist(centroids, centroids)
    ratio = (spread[:, None] + spread[None, :]) / distances
    ratio.fill_diagonal_(-math.inf)
    return float(ratio.max(dim=1).values.mean())


@torch.no_grad()
def penultimate(
    model: nn.Module,
    inputs: torch.Tensor,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """`model.features` of `inputs` in eval mode, in chunks (`prepare` maps stored inputs to
    model inputs, e.g. the dataset's `prepare`)."""
    features = cast(Callable[[torch.Tensor], torch.Tensor], model.features)
    was_training = model.training
    model.eval()
    chunks = []
    for start in range(0, len(inputs), CHUNK):
        x = inputs[start : start + CHUNK]
        chunks.append(features(x if prepare is None else prepare(x)).flatten(1))
    model.train(was_training)
    return torch.cat(chunks)


def has_features(model: nn.Module) -> bool:
    return isinstance(model, BlockModel) and model.num_blocks >= 2
