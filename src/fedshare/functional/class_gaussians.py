"""Per-class Gaussians of features: local statistics, their exact pooling, virtual samples.

CCVR (Luo et al., NeurIPS 2021, "No Fear of Heterogeneity", §4: "Feature distribution
estimation" and "Virtual representations generation"): client k computes, for every class c it
holds, N_{c,k} features z, their mean μ_{c,k} and unbiased covariance
Σ_{c,k} = 1/(N_{c,k} − 1) Σ (z − μ_{c,k})(z − μ_{c,k})ᵀ. The server recovers the statistics of
the pooled features of class c exactly (N_c = Σ_k N_{c,k}):

    μ_c = Σ_k N_{c,k}/N_c · μ_{c,k}
    Σ_c = Σ_k (N_{c,k} − 1)/(N_c − 1) · Σ_{c,k} + Σ_k N_{c,k}/(N_c − 1) · μ_{c,k} μ_{c,k}ᵀ
          − N_c/(N_c − 1) · μ_c μ_cᵀ

and draws M_c virtual features of label c from N(μ_c, Σ_c). A class with one feature has
covariance 0 (its term carries the factor N − 1 = 0 anyway).

Covariances are symmetric: on the wire only their upper triangles travel (`pack_symmetric`).
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ClassStatistics:
    """Per-class counts (n,), means (n, d) and unbiased covariances (n, d, d) of the classes in
    `classes` (n,)."""

    classes: torch.Tensor
    counts: torch.Tensor
    means: torch.Tensor
    covariances: torch.Tensor


def class_statistics(features: torch.Tensor, labels: torch.Tensor) -> ClassStatistics:
    """N_{c,k}, μ_{c,k}, Σ_{c,k} of every class present in `labels`, in float64."""
    z = features.flatten(1).double()
    classes = torch.unique(labels)
    counts, means, covs = [], [], []
    for c in classes:
        zc = z[labels == c]
        n = len(zc)
        mean = zc.mean(0)
        centred = zc - mean
        cov = centred.T @ centred / (n - 1) if n > 1 else torch.zeros_like(centred.T @ centred)
        counts.append(n)
        means.append(mean)
        covs.append(cov)
    return ClassStatistics(
        classes.long(),
        torch.tensor(counts, dtype=torch.long, device=z.device),
        torch.stack(means),
        torch.stack(covs),
    )


class PooledClassGaussians:
    """Adds clients' `ClassStatistics` one at a time (a running sum) and returns the statistics
    of the pooled features: the module docstring's equations, exactly."""

    def __init__(self, num_classes: int, dim: int, device: torch.device | str = "cpu") -> None:
        self.counts = torch.zeros(num_classes, dtype=torch.float64, device=device)
        self.weighted_means = torch.zeros(num_classes, dim, dtype=torch.float64, device=device)
        self.second = torch.zeros(num_classes, dim, dim, dtype=torch.float64, device=device)
        """Σ_k (N_{c,k} − 1) Σ_{c,k} + N_{c,k} μ_{c,k} μ_{c,k}ᵀ: the pooled scatter around 0."""

    def add(self, stats: ClassStatistics) -> None:
        n = stats.counts.to(self.counts)
        mu = stats.means.to(self.weighted_means)
        cov = stats.covariances.to(self.second)
        idx = stats.classes.to(self.counts.device)
        self.counts.index_add_(0, idx, n)
        self.weighted_means.index_add_(0, idx, n[:, None] * mu)
        outer = mu[:, :, None] * mu[:, None, :]
        self.second.index_add_(0, idx, (n - 1)[:, None, None] * cov + n[:, None, None] * outer)

    def result(self) -> ClassStatistics:
        """Counts, μ_c and Σ_c of the classes seen at least once."""
        classes = torch.nonzero(self.counts > 0).flatten()
        n = self.counts[classes]
        mean = self.weighted_means[classes] / n[:, None]
        outer = mean[:, :, None] * mean[:, None, :]
        denominator = (n - 1).clamp(min=1)[:, None, None]
        cov = (self.second[classes] - n[:, None, None] * outer) / denominator
        return ClassStatistics(classes, n.long(), mean, cov)


def sample_virtual_features(
    stats: ClassStatistics, per_class: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`per_class` draws from N(μ_c, Σ_c) for every class of `stats`, with label c: (x, y) in
    float32. Σ_c may be singular (fewer features than dimensions, dead ReLU units): the draw is
    μ_c + V·diag(√max(λ, 0))·ε from Σ_c's eigendecomposition, ε ~ N(0, I)."""
    eigenvalues, eigenvectors = torch.linalg.eigh(stats.covariances)
    roots = eigenvectors * eigenvalues.clamp(min=0).sqrt()[:, None, :]
    dim = stats.means.shape[1]
    noise = torch.randn(
        (len(stats.classes), per_class, dim),
        generator=generator,
        dtype=torch.float64,
        device=generator.device,
    ).to(roots.device)
    x = stats.means[:, None, :] + noise @ roots.transpose(1, 2)
    y = stats.classes.repeat_interleave(per_class)
    return x.flatten(0, 1).float(), y


def pack_symmetric(matrices: torch.Tensor) -> torch.Tensor:
    """(n, d, d) symmetric -> (n, d(d+1)/2): the upper triangles, row by row."""
    d = matrices.shape[-1]
    rows, cols = torch.triu_indices(d, d, device=matrices.device)
    return matrices[:, rows, cols]


def unpack_symmetric(packed: torch.Tensor, dim: int) -> torch.Tensor:
    """The inverse of `pack_symmetric`: (n, d(d+1)/2) -> (n, d, d)."""
    rows, cols = torch.triu_indices(dim, dim, device=packed.device)
    out = packed.new_zeros(len(packed), dim, dim)
    out[:, rows, cols] = packed
    out[:, cols, rows] = packed
    return out
