"""Differential privacy: the Gaussian mechanism, its noise calibrations, and DP-FedPFT's private
release of a Gaussian's mean and covariance.

DP-FedPFT: Beitollahi et al. (2024), Section 4.3, Theorem 4.1 and Appendix B.

DP-FedPFT (K = 1) releases μ̃ = μ̂ + Δμ and Σ̃ = Proj_PSD(Σ̂ + ΔΣ) of features in the unit ball,
with μ̂ the mean and Σ̂ the biased (1/n) covariance, every entry of Δμ and of the upper triangle
of ΔΣ i.i.d. N(0, σ²) (the lower triangle mirrors it, so Σ̃ stays symmetric). The
joint ℓ₂-sensitivity of (μ̂, Σ̂) under add/remove-one is 2√10/n (‖Δμ̂‖ ≤ 2/n, ‖ΔΣ̂‖_F ≤ 6/n).
Calibrations:
- "paper": σ = (4 / (nε))·√(5 ln(c/δ)), c = 4 (Theorem 4.1, the default) or 2 (the proof).
  The classical Gaussian mechanism behind it is proven only for ε < 1, and it stops being
  (ε, δ)-DP near ε ≈ 7–10 (n = 100, ε = 10: exact δ ≈ 0.0116 > 0.01), so by default
  (`check=True`) the exact condition below is evaluated at the paper's σ and a failure raises.
- "analytic": the smallest σ of the analytic Gaussian mechanism (Balle & Wang, 2018) for that
  sensitivity, valid for every ε > 0.
Exact condition (Balle & Wang 2018, Theorem 8): N(0, σ²) on a query of ℓ₂-sensitivity Δ is
(ε, δ)-DP iff δ(σ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) ≤ δ.
Reductions for the diag/spherical families (`reduce_covariance`): "raw" (FedPFT's default) reads
the diagonal/trace of the symmetric noisy Σ̂ + ΔΣ, an unbiased estimate of the true one;
"projected" reads them after the PSD projection, which keeps only the positive noise
eigenvalues and so inflates the variance (CIFAR-10 sample features, I = 10, ε = 1: mean λ 4.42
projected vs −0.0067 raw vs 0.0018 true). Both are post-processing of the same release: same
guarantee.
Deviation to note: the count n is released without noise (as in the paper, Section 4.3).
"""

import math

import torch

from fedshare.errors import FedshareError, choices_message

LOG_TERMS = ("4/delta", "2/delta")
CALIBRATIONS = ("paper", "analytic")
REDUCTIONS = ("raw", "projected")


def mean_cov_sensitivity(n: int) -> float:
    """Joint ℓ₂-sensitivity of (mean, biased covariance) of n points in the unit ball: 2√10/n."""
    return 2 * math.sqrt(10) / n


def fedpft_noise_std(n: int, epsilon: float, delta: float, log_term: str = "4/delta") -> float:
    """Theorem 4.1's σ = (4/(nε))·√(5 ln(c/δ)), with c = 4 ("4/delta") or 2 ("2/delta")."""
    _check_budget(epsilon, delta)
    if log_term not in LOG_TERMS:
        raise FedshareError(choices_message("dp_log_term", log_term, list(LOG_TERMS)))
    c = 4.0 if log_term == "4/delta" else 2.0
    return 4.0 / (n * epsilon) * math.sqrt(5.0 * math.log(c / delta))


def _phi(t: float) -> float:
    return 0.5 * math.erfc(-t / math.sqrt(2))


def gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """The smallest δ for which N(0, σ²) noise on a Δ-sensitive query is (ε, δ)-DP (exact)."""
    a, b = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    return _phi(a - b) - math.exp(epsilon) * _phi(-a - b)


def check_paper_calibration(n: int, epsilon: float, delta: float, log_term: str) -> None:
    """Raise unless Theorem 4.1's σ satisfies the exact (ε, δ) condition for n points."""
    sigma = fedpft_noise_std(n, epsilon, delta, log_term)
    achieved = gaussian_delta(sigma, mean_cov_sensitivity(n), epsilon)
    if achieved > delta:
        raise FedshareError(
            f"the paper's noise calibration is not ({epsilon:g}, {delta:.3g})-DP for n={n}: "
            f"its sigma={sigma:.4g} only achieves delta={achieved:.3g} > {delta:.3g} (exact "
            f"analytic Gaussian condition); use dp_calibration=analytic, or a smaller epsilon"
        )


def analytic_gaussian_std(sensitivity: float, epsilon: float, delta: float) -> float:
    """The smallest σ for which N(0, σ²) noise on a query of ℓ₂-sensitivity Δ is (ε, δ)-DP:
    Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) ≤ δ (Balle & Wang 2018, Theorem 8), by bisection."""
    _check_budget(epsilon, delta)

    def excess(sigma: float) -> float:
        return gaussian_delta(sigma, sensitivity, epsilon) - delta

    lo, hi = 1e-12 * sensitivity, sensitivity
    while excess(hi) > 0:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return hi


def noise_std(
    n: int,
    epsilon: float,
    delta: float,
    log_term: str = "4/delta",
    calibration: str = "paper",
    check: bool = True,
) -> float:
    """σ for DP-FedPFT's release from n points (see the module docstring); with `check`, the
    paper's σ must pass the exact (ε, δ) condition (`check_paper_calibration`)."""
    if calibration == "paper":
        if check:
            check_paper_calibration(n, epsilon, delta, log_term)
        return fedpft_noise_std(n, epsilon, delta, log_term)
    if calibration == "analytic":
        return analytic_gaussian_std(mean_cov_sensitivity(n), epsilon, delta)
    raise FedshareError(choices_message("dp_calibration", calibration, list(CALIBRATIONS)))


def project_psd(matrix: torch.Tensor) -> torch.Tensor:
    """The nearest (Frobenius) positive semi-definite matrix: symmetrise, clip eigenvalues at 0."""
    sym = 0.5 * (matrix + matrix.transpose(-1, -2))
    vals, vecs = torch.linalg.eigh(sym)
    return (vecs * vals.clamp_min(0).unsqueeze(-2)) @ vecs.transpose(-1, -2)


def symmetric_noise(
    dim: int,
    std: float,
    generator: torch.Generator | None,
    dtype: torch.dtype,
    device: torch.device | str,
) -> torch.Tensor:
    """A d×d symmetric matrix whose upper-triangle entries are i.i.d. N(0, std²)."""
    upper = torch.randn(dim, dim, generator=generator, dtype=dtype, device=device).triu()
    return (upper + upper.T - torch.diag_embed(upper.diagonal())) * std


def private_mean_cov(
    x: torch.Tensor,
    epsilon: float,
    delta: float | None = None,
    generator: torch.Generator | None = None,
    log_term: str = "4/delta",
    calibration: str = "paper",
    project: bool = True,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(μ̃, Σ̃, σ) of the rows of `x` (features with ‖x‖₂ ≤ 1) by DP-FedPFT's mechanism (Eqs. 6–8).

    `delta` defaults to 1/n (the paper's setting). Raises if a row lies outside the unit ball.
    `project=False` returns the symmetric noisy Σ̂ + ΔΣ before the PSD projection (for the "raw"
    reduction); `check` as in `noise_std`.
    """
    x = x.to(torch.float64)
    n, d = x.shape
    if n < 1:
        raise FedshareError("the Gaussian mechanism needs at least one sample")
    if float(x.norm(dim=1).max()) > 1 + 1e-6:
        raise FedshareError(
            "DP-FedPFT needs features in the unit ball (‖f(x)‖₂ ≤ 1); L2-normalise them first"
        )
    delta = 1.0 / n if delta is None else delta
    std = noise_std(n, epsilon, delta, log_term, calibration, check)
    mean = x.mean(0)
    diff = x - mean
    cov = diff.T @ diff / n
    noisy_mean = mean + std * torch.randn(d, generator=generator, dtype=x.dtype, device=x.device)
    noisy_cov = cov + symmetric_noise(d, std, generator, x.dtype, x.device)
    return noisy_mean, project_psd(noisy_cov) if project else noisy_cov, std


def reduce_covariance(cov: torch.Tensor, covariance_type: str) -> torch.Tensor:
    """A (d, d) covariance as one component of the family: full (1, d, d), diag (1, d) or
    spherical (1,) (λ = tr/d)."""
    return {
        "full": lambda: cov[None],
        "diag": lambda: cov.diagonal()[None],
        "spherical": lambda: cov.diagonal().mean()[None],
    }[covariance_type]()


def _check_budget(epsilon: float, delta: float) -> None:
    if not epsilon > 0:
        raise FedshareError(f"the privacy budget epsilon={epsilon} must be positive")
    if not 0 < delta < 1:
        raise FedshareError(f"the privacy parameter delta={delta} must be in (0, 1)")
