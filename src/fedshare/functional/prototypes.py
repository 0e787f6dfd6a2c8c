"""Class prototypes of penultimate features: local class means, their count-weighted server
average, the wire format, and ReBaFL's inter-class feature transfer
(Xu et al., Section 4.2, Eqs. 15–16).

A prototype set is a `(C, d)` tensor plus a boolean mask of the classes it holds. On the wire
only the held classes travel (`pack` / `unpack`), so the engine's byte count is what the
protocol sends.
"""

import torch
from torch import nn

from fedshare.models.base import as_block_model


def class_means(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact per-class means of `features` (n × d) and the class counts (Eq. 21).

    Classes without samples get a zero row and count 0.
    """
    d = features.shape[1]
    sums = torch.zeros(num_classes, d, dtype=features.dtype, device=features.device)
    sums.index_add_(0, labels, features)
    counts = torch.bincount(labels, minlength=num_classes)[:num_classes].to(features.dtype)
    return sums / counts.clamp_min(1).unsqueeze(1), counts


@torch.no_grad()
def feature_prototypes(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    batch_size: int = 1000,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One no-grad pass of `model.features` over (x, y): per-class means and counts.

    The model is run in eval mode (no dropout, BatchNorm running statistics) and its mode is
    restored afterwards.
    """
    was_training = model.training
    model.eval()
    blocks = as_block_model(model)
    feats = torch.cat([blocks.features(chunk) for chunk in x.split(batch_size)])
    model.train(was_training)
    return class_means(feats, y, num_classes)


def pack(
    prototypes: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Wire format: only the classes in `mask` (default: count > 0) with their counts."""
    keep = counts > 0 if mask is None else mask
    classes = torch.nonzero(keep).flatten()
    return {
        "proto_classes": classes,
        "prototypes": prototypes[classes],
        "proto_counts": counts[classes],
    }


def unpack(
    payload: dict[str, torch.Tensor], num_classes: int, dim: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of `pack`: (C × d prototypes, per-class counts, presence mask); zeros elsewhere.
    A payload without counts (the server's broadcast) gets count 1 for each class it holds."""
    protos = torch.zeros(num_classes, dim, device=device)
    counts = torch.zeros(num_classes, device=device)
    mask = torch.zeros(num_classes, dtype=torch.bool, device=device)
    classes = payload.get("proto_classes")
    if classes is not None and classes.numel():
        protos[classes] = payload["prototypes"].to(device, protos.dtype)
        held = payload.get("proto_counts")
        counts[classes] = 1.0 if held is None else held.to(device, counts.dtype)
        mask[classes] = True
    return protos, counts, mask


class PrototypeAverager:
    """Server side of Eq. 23: P_c = Σ_i n_{i,c}·P̂_{i,c} / Σ_i n_{i,c} over the clients that
    reported class c, as a running sum. Classes nobody reported stay absent from the result."""

    def __init__(self, num_classes: int, dim: int, device: torch.device | str = "cpu") -> None:
        self.sums = torch.zeros(num_classes, dim, device=device)
        self.weights = torch.zeros(num_classes, device=device)

    def add(self, prototypes: torch.Tensor, counts: torch.Tensor) -> None:
        """Add one client's (C × d) prototypes with its class counts (0 = not reported)."""
        counts = counts.to(self.weights)
        self.sums += counts.unsqueeze(1) * prototypes.to(self.sums)
        self.weights += counts

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(C × d) averaged prototypes (zero rows where absent) and the presence mask."""
        mask = self.weights > 0
        return self.sums / self.weights.clamp_min(1e-12).unsqueeze(1), mask


def cyclic_targets(batch_size: int, num_classes: int, device: torch.device) -> torch.Tensor:
    """Target class of each batch position: k mod C (ReBaFL's code)."""
    return torch.arange(batch_size, device=device) % num_classes


def transfer_features(
    features: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    mask: torch.Tensor,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inter-class feature transfer (Eq. 15): h̃ = P_t + λ(h − P_y) with t = k mod C.

    A sample whose source or target class has no prototype, or whose target is its own class,
    keeps its feature and label. The transferred sample keeps its intra-class deviation
    scaled by λ: h̃ − P_t = λ(h − P_y).
    Detach `features` first to train the classifier only (Eq. 19).
    """
    targets = cyclic_targets(len(labels), prototypes.shape[0], features.device)
    ok = mask[targets] & mask[labels] & (targets != labels)
    moved = prototypes[targets] + lam * (features - prototypes[labels])
    new_features = torch.where(ok.unsqueeze(1), moved, features)
    return new_features, torch.where(ok, targets, labels)
