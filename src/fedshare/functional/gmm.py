"""Gaussian mixtures in torch: EM fitting, sampling, parameter counts and a 16-bit wire format.

FedPFT (Beitollahi et al., 2024): the GMM families of Eq. 2 (Section 3), EM as the paper's
scikit-learn calls run it (Appendix A), the parameter counts of Section 6.3 (Eqs. 9–11); the
float16 round trip and the server-side sanitation are choices made here.

Why our own EM instead of scikit-learn's `GaussianMixture`: it runs in float64 on whatever device
holds the features (a GPU for paper-scale CLIP/ResNet-50 features), it is seeded by a
`torch.Generator` (each (client, class) pair has its own stream derived from the run seed)
so results are bit-identical on CPU whatever ran before, and it starts no thread pools on a
shared CPU. It follows scikit-learn's semantics: k-means initialisation (k-means++ seeding,
one run), log-space E-step, M-step with `reg_covar` added to the covariance (full: ΣI, diag:
each variance, spherical: the mean variance), stop when the mean log-likelihood changes by less
than `tol` or at `max_iter`; K = 1 is the closed form (sample mean, biased covariance).
"""

import math
from dataclasses import dataclass

import torch

from fedshare.errors import FedshareError, choices_message

COVARIANCE_TYPES = ("full", "diag", "spherical")
_LOG_2PI = math.log(2 * math.pi)


def check_covariance_type(covariance_type: str) -> str:
    if covariance_type not in COVARIANCE_TYPES:
        raise FedshareError(
            choices_message("covariance type", covariance_type, list(COVARIANCE_TYPES))
        )
    return covariance_type


def component_params(dim: int, covariance_type: str) -> int:
    """Numbers sent per mixture component (FedPFT's Section 6.3): weight, mean, covariance.

    full: 2d + (d² − d)/2 + 1 (the upper triangle of Σ); diag: 2d + 1; spherical: d + 2.
    """
    check_covariance_type(covariance_type)
    if covariance_type == "full":
        return 2 * dim + (dim * dim - dim) // 2 + 1
    if covariance_type == "diag":
        return 2 * dim + 1
    return dim + 2


@dataclass
class GaussianMixture:
    """Σ_k π_k N(μ_k, Σ_k). `covariances`: full (K, d, d), diag (K, d) or spherical (K,)."""

    weights: torch.Tensor
    means: torch.Tensor
    covariances: torch.Tensor
    covariance_type: str

    @property
    def n_components(self) -> int:
        return int(self.means.shape[0])

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    @property
    def num_params(self) -> int:
        return self.n_components * component_params(self.dim, self.covariance_type)

    def full_covariances(self) -> torch.Tensor:
        """(K, d, d) covariance matrices whatever the family."""
        eye = torch.eye(self.dim, dtype=self.means.dtype, device=self.means.device)
        if self.covariance_type == "full":
            return self.covariances
        if self.covariance_type == "diag":
            return torch.diag_embed(self.covariances)
        return self.covariances[:, None, None] * eye

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """log density of every row of `x` (n,)."""
        return torch.logsumexp(self.weights.log() + _component_log_prob(x, self), dim=1)

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """n draws: per-component counts ~ Multinomial(n; π), then μ_k + A_k z (Algorithm 1).

        A_k is the eigen square root of Σ_k (eigenvalues clipped at 0) for full, √σ² for diag
        and √λ for spherical. Rows come grouped by component.
        """
        device, dtype = self.means.device, self.means.dtype
        if n <= 0:
            return torch.zeros(0, self.dim, dtype=dtype, device=device)
        probs = self.weights.to(torch.float64).clamp_min(0)
        picks = torch.multinomial(probs / probs.sum(), n, replacement=True, generator=generator)
        counts = torch.bincount(picks, minlength=self.n_components).tolist()
        out = []
        for k, m in enumerate(counts):
            if m == 0:
                continue
            z = torch.randn(m, self.dim, generator=generator, device=device, dtype=dtype)
            if self.covariance_type == "full":
                vals, vecs = torch.linalg.eigh(self.covariances[k])
                z = z @ (vecs * vals.clamp_min(0).sqrt()).T
            else:  # diag: per-coordinate, spherical: one scale
                z = z * self.covariances[k].clamp_min(0).sqrt()
            out.append(self.means[k] + z)
        return torch.cat(out)


# --------------------------------------------------------------------------- EM
def _component_log_prob(x: torch.Tensor, g: GaussianMixture) -> torch.Tensor:
    """log N(x_n | μ_k, Σ_k) for every row and component (n, K)."""
    d = x.shape[1]
    if g.covariance_type == "full":
        chol, _ = torch.linalg.cholesky_ex(g.covariances)
        out = []
        for k in range(g.n_components):
            diff = (x - g.means[k]).T
            sol = torch.linalg.solve_triangular(chol[k], diff, upper=False)
            logdet = 2 * chol[k].diagonal().log().sum()
            out.append(-0.5 * (d * _LOG_2PI + logdet + (sol * sol).sum(0)))
        return torch.stack(out, dim=1)
    var = g.covariances if g.covariance_type == "diag" else g.covariances[:, None].expand(-1, d)
    prec = 1.0 / var  # (K, d)
    maha = (x * x) @ prec.T - 2 * x @ (g.means * prec).T + (g.means**2 * prec).sum(1)
    return -0.5 * (d * _LOG_2PI + var.log().sum(1) + maha)


def _m_step(
    x: torch.Tensor, resp: torch.Tensor, covariance_type: str, reg_covar: float
) -> GaussianMixture:
    """Weights, means and regularised covariances from responsibilities (n, K)."""
    nk = resp.sum(0) + 10 * torch.finfo(resp.dtype).eps
    means = (resp.T @ x) / nk[:, None]
    if covariance_type == "full":
        eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
        covs = []
        for k in range(resp.shape[1]):
            diff = x - means[k]
            cov = (resp[:, k, None] * diff).T @ diff / nk[k]
            covs.append(0.5 * (cov + cov.T) + reg_covar * eye)
        covariances = torch.stack(covs)
    else:
        var = ((resp.T @ (x * x)) / nk[:, None] - means**2).clamp_min(0)
        covariances = var + reg_covar
        if covariance_type == "spherical":
            covariances = var.mean(1) + reg_covar
    return GaussianMixture(nk / nk.sum(), means, covariances, covariance_type)


def kmeans_labels(
    x: torch.Tensor, k: int, generator: torch.Generator | None, max_iter: int = 100
) -> torch.Tensor:
    """Cluster labels of one k-means run: k-means++ seeding, then Lloyd iterations until the
    assignment stops changing (empty clusters keep their centre)."""
    n = x.shape[0]
    first = torch.randint(n, (1,), generator=generator, device=x.device)
    centres = [x[first[0]]]
    dist = ((x - centres[0]) ** 2).sum(1)
    for _ in range(1, k):
        total = dist.sum()
        if total <= 0:  # fewer distinct points than clusters: take any point
            pick = torch.randint(n, (1,), generator=generator, device=x.device)[0]
        else:
            pick = torch.multinomial(dist / total, 1, generator=generator)[0]
        centres.append(x[pick])
        dist = torch.minimum(dist, ((x - x[pick]) ** 2).sum(1))
    c = torch.stack(centres)
    labels = torch.cdist(x, c).argmin(1)
    for _ in range(max_iter):
        counts = torch.bincount(labels, minlength=k).to(x.dtype)
        sums = torch.zeros_like(c).index_add_(0, labels, x)
        filled = counts > 0
        c = torch.where(filled[:, None], sums / counts.clamp_min(1)[:, None], c)
        new = torch.cdist(x, c).argmin(1)
        if torch.equal(new, labels):
            break
        labels = new
    return labels


@dataclass
class FitInfo:
    n_iter: int
    converged: bool
    mean_log_likelihood: float


def fit_gmm(
    x: torch.Tensor,
    n_components: int,
    covariance_type: str = "diag",
    reg_covar: float = 1e-6,
    tol: float = 1e-3,
    max_iter: int = 100,
    generator: torch.Generator | None = None,
) -> tuple[GaussianMixture, FitInfo]:
    """Fit a K-component mixture of the given family to the rows of `x` by EM (float64).

    K = 1 is the closed form: the sample mean and the biased (1/n) covariance plus `reg_covar`.
    """
    check_covariance_type(covariance_type)
    x = x.to(torch.float64)
    n = x.shape[0]
    if n < 1 or not 1 <= n_components <= n:
        raise FedshareError(
            f"a {n_components}-component mixture needs at least {n_components} samples, got {n}"
        )
    if n_components == 1:
        resp = torch.ones(n, 1, dtype=x.dtype, device=x.device)
        g = _m_step(x, resp, covariance_type, reg_covar)
        ll = float(g.log_prob(x).mean())
        return g, FitInfo(0, True, ll)
    labels = kmeans_labels(x, n_components, generator)
    resp = torch.nn.functional.one_hot(labels, n_components).to(x.dtype)
    g = _m_step(x, resp, covariance_type, reg_covar)
    previous, ll, converged, n_iter = -math.inf, -math.inf, False, 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007  (n_iter is reported)
        weighted = g.weights.log() + _component_log_prob(x, g)
        norm = torch.logsumexp(weighted, dim=1)
        ll = float(norm.mean())
        g = _m_step(x, (weighted - norm[:, None]).exp(), covariance_type, reg_covar)
        if abs(ll - previous) < tol:
            converged = True
            break
        previous = ll
    return g, FitInfo(n_iter, converged, ll)


def point_mass(x: torch.Tensor, covariance_type: str, reg_covar: float) -> GaussianMixture:
    """One component at the mean of `x` with variance `reg_covar` (for a class of one sample)."""
    x = x.to(torch.float64)
    d = x.shape[1]
    var = torch.full((1, d), reg_covar, dtype=x.dtype, device=x.device)
    cov = {
        "full": torch.diag_embed(var),
        "diag": var,
        "spherical": var[:, 0],
    }[covariance_type]
    weights = torch.ones(1, dtype=x.dtype, device=x.device)
    return GaussianMixture(weights, x.mean(0, keepdim=True), cov, covariance_type)


# --------------------------------------------------------------------------- wire format
WIRE_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def pack_mixtures(
    mixtures: list[tuple[int, int, GaussianMixture]], covariance_type: str, dtype: str = "float16"
) -> dict[str, torch.Tensor]:
    """The payload of a list of (label, count, mixture) as tensors (FedPFT's Section 6.3).

    `gmm_weights` (ΣK,), `gmm_means` (ΣK, d), `gmm_covs` (full: upper triangle (ΣK, d(d+1)/2),
    diag (ΣK, d), spherical (ΣK,)) in `dtype`: exactly 2·(Section 6.3's parameter count) bytes at
    float16. Per pair: `gmm_labels` int16, `gmm_components` int16, `gmm_counts` int32, the
    8 metadata bytes per (client, class) that the formula leaves out.
    """
    wire = WIRE_DTYPES[dtype]
    if not mixtures:
        return {}
    d = mixtures[0][2].dim
    iu = torch.triu_indices(d, d, device=mixtures[0][2].means.device)
    covs = []
    for _, _, g in mixtures:
        covs.append(g.covariances[:, iu[0], iu[1]] if covariance_type == "full" else g.covariances)
    return {
        "gmm_labels": torch.tensor([m[0] for m in mixtures], dtype=torch.int16),
        "gmm_components": torch.tensor([m[2].n_components for m in mixtures], dtype=torch.int16),
        "gmm_counts": torch.tensor([m[1] for m in mixtures], dtype=torch.int32),
        "gmm_weights": torch.cat([g.weights for _, _, g in mixtures]).to(wire),
        "gmm_means": torch.cat([g.means for _, _, g in mixtures]).to(wire),
        "gmm_covs": torch.cat(covs).to(wire),
    }


def unpack_mixtures(
    payload: dict[str, torch.Tensor], covariance_type: str, reg_covar: float = 1e-6
) -> list[tuple[int, int, GaussianMixture]]:
    """(label, count, mixture) from a payload, cast to float64 and sanitised: weights
    renormalised, variances clamped to at least `reg_covar`, full covariances symmetrised with
    eigenvalues clipped to at least `reg_covar`."""
    if "gmm_labels" not in payload:
        return []
    weights = payload["gmm_weights"].to(torch.float64)
    means = payload["gmm_means"].to(torch.float64)
    covs = payload["gmm_covs"].to(torch.float64)
    d = means.shape[1]
    out = []
    start = 0
    for label, k, count in zip(
        payload["gmm_labels"].tolist(),
        payload["gmm_components"].tolist(),
        payload["gmm_counts"].tolist(),
        strict=True,
    ):
        w = weights[start : start + k].clamp_min(0)
        w = w / w.sum() if float(w.sum()) > 0 else torch.full_like(w, 1.0 / k)
        cov = covs[start : start + k]
        if covariance_type == "full":
            iu = torch.triu_indices(d, d, device=cov.device)
            mat = torch.zeros(k, d, d, dtype=cov.dtype, device=cov.device)
            mat[:, iu[0], iu[1]] = cov
            mat = mat + mat.transpose(1, 2) - torch.diag_embed(mat.diagonal(dim1=1, dim2=2))
            vals, vecs = torch.linalg.eigh(mat)
            cov = (vecs * vals.clamp_min(reg_covar)[:, None, :]) @ vecs.transpose(1, 2)
        else:
            cov = cov.clamp_min(reg_covar)
        g = GaussianMixture(w, means[start : start + k], cov, covariance_type)
        out.append((int(label), int(count), g))
        start += k
    return out
