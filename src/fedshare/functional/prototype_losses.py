"""Losses and predictions on class prototypes for the prototype-sharing family (FedProto, FedTGP).

A prototype set is a `(C, d)` tensor plus a boolean mask of the classes it holds, as in
`fedshare.functional.prototypes` (whose count-weighted `PrototypeAverager` is FedProto's server
step).
"""

import torch
import torch.nn.functional as F


def prototype_distance_loss(
    features: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """FedProto's regulariser (Tan et al. 2022, Eq. 5 with the squared L2 distance):
    mean over the batch and the d features of (f(x) − p̄_y)², where p̄_y is the global prototype
    of the sample's own class. A sample whose class has no global prototype adds zero (and
    still counts in the mean), as in the authors' code."""
    held = mask[labels].unsqueeze(1)
    targets = torch.where(held, prototypes[labels].to(features), features.detach())
    return F.mse_loss(features, targets)


def prototype_distances(
    features: torch.Tensor, prototypes: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """(n, C) Euclidean distances of each feature to each prototype; +inf for absent classes."""
    dist = torch.cdist(features.flatten(1).float(), prototypes.float())
    return dist.masked_fill(~mask.unsqueeze(0), float("inf"))


def nearest_prototype(
    features: torch.Tensor, prototypes: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """FedProto's inference (Tan et al. 2022, §4 "Inference"): the class of the nearest held
    prototype."""
    return prototype_distances(features, prototypes, mask).argmin(dim=1)


def class_gap(centers: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per class, the distance from its center to the nearest other held class's center; a
    class without a center (or the only one) gets the smallest gap found (inf if none)."""
    dist = torch.cdist(centers.float(), centers.float())
    pair = mask.unsqueeze(0) & mask.unsqueeze(1)
    pair.fill_diagonal_(False)
    gap = dist.masked_fill(~pair, float("inf")).min(dim=1).values
    finite = gap.isfinite()
    if finite.any():
        gap = torch.where(finite, gap, gap[finite].min())
    return gap


def margin_prototype_loss(
    features: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, margin: float
) -> torch.Tensor:
    """FedTGP's adaptive-margin-enhanced contrastive loss (Zhang et al. 2024, Eq. 7):
    cross-entropy over −distances of each uploaded prototype to every global prototype, the
    distance to its own class enlarged by `margin`, so the own class must win by the margin."""
    dist = torch.cdist(features.float(), prototypes.float())
    dist = dist + margin * F.one_hot(labels, prototypes.shape[0]).to(dist)
    return F.cross_entropy(-dist, labels)
