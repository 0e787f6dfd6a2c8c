"""The MDS privacy distance of XorMixFL (Shin et al. 2020, Section 4.2).

"The minimum MDS value between the augmented sample and any raw sample contributing to it":
for each shared/augmented sample a with contributing raw samples R(a),
MDS(a) = min_{r ∈ R(a)} ‖φ(a) − φ(r)‖₂, reported as the mean and population std over the
samples of a run. By default φ is the identity on the flattened pixels on the 0…255 scale:
classical MDS keeping every positive-eigenvalue dimension reproduces Euclidean distances
exactly, so this is the metric without approximation. `dims=k` instead embeds the union of
all samples and contributors with k-dimensional classical MDS and measures distances there.
"""

import torch


def classical_mds(points: torch.Tensor, dims: int) -> torch.Tensor:
    """Classical (Torgerson) MDS: (n, d) points -> (n, dims) coordinates (float64).

    Double-centres the squared-distance matrix and keeps the `dims` largest positive
    eigenvalues; with all positive ones the embedding preserves every pairwise distance.
    """
    x = points.double().flatten(1)
    d2 = torch.cdist(x, x).pow(2)
    n = d2.shape[0]
    centre = torch.eye(n, dtype=d2.dtype, device=d2.device) - 1.0 / n
    gram = -0.5 * centre @ d2 @ centre
    values, vectors = torch.linalg.eigh(gram)
    values, vectors = values.flip(0)[:dims], vectors.flip(1)[:, :dims]
    return vectors * values.clamp_min(0).sqrt()


def min_contributor_distance(
    samples: torch.Tensor, contributors: torch.Tensor, dims: int | None = None
) -> torch.Tensor:
    """MDS(a) for each sample: `samples` (n, ...) and `contributors` (n, r, ...) -> (n,).

    Inputs are taken on their own scale (pass bytes for the paper's 0…255 scale). A sample
    with fewer than r contributors may repeat one (the minimum is unchanged).
    """
    n, r = contributors.shape[:2]
    a = samples.reshape(n, -1).double()
    c = contributors.reshape(n, r, -1).double()
    if dims is not None:
        embedded = classical_mds(torch.cat([a, c.reshape(n * r, -1)]), dims)
        a, c = embedded[:n], embedded[n:].reshape(n, r, -1)
    return (c - a[:, None]).norm(dim=2).min(dim=1).values


def distance_stats(distances: torch.Tensor, prefix: str = "mds") -> dict[str, float]:
    """{prefix_mean, prefix_std} with the population std (Table 3's mean / std)."""
    d = distances.double()
    return {
        f"{prefix}_mean": float(d.mean()) if d.numel() else float("nan"),
        f"{prefix}_std": float(d.std(correction=0)) if d.numel() else float("nan"),
    }
