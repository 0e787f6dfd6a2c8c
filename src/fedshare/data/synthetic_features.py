"""Synthetic "foundation-model features": each class a mixture of anisotropic Gaussians.

A CPU stand-in for a foundation model's features, to check FedPFT's claims in minutes (the paper
itself uses real backbones, Section 5.1): d = 32, C = 10, each class a 3-mode Gaussian mixture with
random anisotropic covariances, class-centre scale 0.45; 4,500 train / 1,500 test; the DP runs use
3,000 per class. The generator's constants: class centres ~ N(0, centre_scale²·I), mode centres =
class centre + N(0, mode_scale²·I), each mode's covariance Q·diag(λ)·Qᵀ with Q a random rotation and
λ ~ U(0.25, 1.75) (mean 1), modes equally likely. Classes are balanced (sample j has class j mod C).
Everything is drawn from `data_seed`.
"""

import numpy as np
import torch

from fedshare.data.dataset import Dataset
from fedshare.data.datasets import LoadRequest, check_generated_sizes, register_dataset
from fedshare.errors import FedshareError


@register_dataset("synthetic_mixture")
def load_synthetic_mixture(
    request: LoadRequest,
    *,
    dim: int = 32,
    num_classes: int = 10,
    modes: int = 3,
    centre_scale: float = 0.45,
    mode_scale: float = 0.3,
    train_size: int = 4500,
    test_size: int = 1500,
    data_seed: int = 0,
) -> Dataset:
    """Class-conditional Gaussian mixtures (see the module docstring); default model `linear`."""
    if modes < 1:
        raise FedshareError(f"data.modes={modes} is not valid: it must be at least 1")
    values = num_classes * modes * dim * dim
    check_generated_sizes("synthetic_mixture", dim, num_classes, train_size, test_size, values)
    rng = np.random.default_rng(data_seed)
    centres = rng.normal(0.0, centre_scale, size=(num_classes, 1, dim))
    mode_means = centres + rng.normal(0.0, mode_scale, size=(num_classes, modes, dim))
    factors = np.empty((num_classes, modes, dim, dim))
    for c in range(num_classes):
        for m in range(modes):
            q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
            factors[c, m] = q * np.sqrt(rng.uniform(0.25, 1.75, size=dim))

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = np.arange(n) % num_classes
        mode = rng.integers(modes, size=n)
        z = rng.normal(size=(n, dim, 1))
        x = mode_means[y, mode] + (factors[y, mode] @ z)[..., 0]
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))

    x_tr, y_tr = draw(train_size)
    x_te, y_te = draw(test_size)
    return Dataset(
        "synthetic_mixture",
        x_tr,
        y_tr,
        x_te,
        y_te,
        num_classes=num_classes,
        default_model="linear",
    )
