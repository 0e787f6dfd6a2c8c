"""Mix-up building blocks: iterated two-sample mixing weights, mixes and soft labels.

Iterating the two-sample Mixup g(a, b) = α·a + (1 − α)·b over k samples (XorMixFL's Eq. 1,
Shin et al. 2020, Section 3) gives fixed weights per position; these helpers compute the weights
once and apply them to whole batches.
"""

import math

import numpy as np
import torch

from fedshare.functional.transfer import to_device

ORDERS = ("fold_left", "nested", "sequence", "equal")


def fold_weights(alpha: float, k: int, order: str = "fold_left") -> torch.Tensor:
    """Weights (float64, summing to 1) of k samples mixed by iterating g with ratio `alpha`.

    `fold_left`: s₀ = x₀, s_j = α·s_{j−1} + (1 − α)·x_j, so x₀ gets α^{k−1} and x_j (j ≥ 1)
    gets (1 − α)·α^{k−1−j}. `nested`: g(x₀, g(x₁, …)), so x_j gets α·(1 − α)^j and the last
    one (1 − α)^{k−1}. `sequence`: g applied k − 1 times to the sequence itself,
    (g x)_t = α·x_t + (1 − α)·x_{t+1}, so x_j gets C(k−1, j)·α^{k−1−j}·(1 − α)^j (binomial).
    `equal`: 1/k each (α unused).
    """
    if k < 1:
        raise ValueError(f"k={k} must be at least 1")
    if order == "fold_left":
        w = [alpha ** (k - 1)] + [(1 - alpha) * alpha ** (k - 1 - j) for j in range(1, k)]
    elif order == "nested":
        w = [alpha * (1 - alpha) ** j for j in range(k - 1)] + [(1 - alpha) ** (k - 1)]
    elif order == "sequence":
        w = [math.comb(k - 1, j) * alpha ** (k - 1 - j) * (1 - alpha) ** j for j in range(k)]
    elif order == "equal":
        w = [1.0 / k] * k
    else:
        raise ValueError(f"unknown blend order {order!r}; valid: {', '.join(ORDERS)}")
    return torch.tensor(w, dtype=torch.float64)


def mix(x: torch.Tensor, weights: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Σ_j weights[j] · x[..., j, ...] along `dim` (in float64, cast to float32)."""
    shape = [1] * x.dim()
    shape[dim] = -1
    w = weights.to(device=x.device, dtype=torch.float64).view(shape)
    return (x.double() * w).sum(dim=dim).float()


def soft_labels(labels: torch.Tensor, weights: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Mix-up label distributions: `labels` (n, k) class ids mixed with `weights` (k,)."""
    out = torch.zeros(labels.shape[0], num_classes, dtype=torch.float32, device=labels.device)
    w = weights.to(device=labels.device, dtype=torch.float32).expand(labels.shape[0], -1)
    return out.scatter_add_(1, labels, w.contiguous())


# --------------------------------------------------------------------------- Beta mix-up
# FLea's feature mix-up (Section 3.3.1, Eq. 2) and FedMix's input mix-up (FLea's App. C.3):
# ã = β·a + (1 − β)·b and ỹ = β·e(y_a) + (1 − β)·e(y_b), β ~ Beta(a, a) per sample or per batch.


def beta_weights(
    n: int,
    a: float,
    rng: np.random.Generator,
    per_sample: bool = True,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """n mixing weights β ~ Beta(a, a) (float32): independent draws, or one draw repeated."""
    draws = rng.beta(a, a, size=n if per_sample else 1).astype(np.float32)
    beta = to_device(torch.from_numpy(draws), device)
    return beta if per_sample else beta.expand(n).contiguous()


def mix_pair(first: torch.Tensor, second: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """β_i·first_i + (1 − β_i)·second_i for (n, ...) tensors and weights (n,)."""
    w = beta.to(first.dtype).view(-1, *([1] * (first.dim() - 1)))
    return w * first + (1.0 - w) * second


def as_soft_labels(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Class ids (n,) -> one-hot float rows; (n, C) label distributions pass through as float."""
    if labels.dim() == 2:
        return labels.float()
    classes = torch.arange(num_classes, device=labels.device)  # F.one_hot syncs to check
    return (labels.long().unsqueeze(-1) == classes).float()


def mix_labels(
    first: torch.Tensor, second: torch.Tensor, beta: torch.Tensor, num_classes: int
) -> torch.Tensor:
    """Soft labels β·e(y₁) + (1 − β)·e(y₂); either side may already be a distribution."""
    return mix_pair(as_soft_labels(first, num_classes), as_soft_labels(second, num_classes), beta)
