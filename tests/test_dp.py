"""DP-FedPFT's mechanism (fedshare.privacy.dp): FedPFT's Sec. 4.3, Theorem 4.1, App. B."""

import math

import numpy as np
import pytest
import torch

from fedshare.errors import FedshareError
from fedshare.functional.gmm import GaussianMixture
from fedshare.privacy.dp import (
    analytic_gaussian_std,
    check_paper_calibration,
    fedpft_noise_std,
    gaussian_delta,
    mean_cov_sensitivity,
    noise_std,
    private_mean_cov,
    project_psd,
    reduce_covariance,
)


def test_noise_scale_values() -> None:
    """Theorem 4.1's σ: σ(100, 1, 0.01) ≈ 0.21893, σ(500, 1, 1/500) ≈ 0.04932, and more."""
    assert fedpft_noise_std(100, 1.0, 0.01) == pytest.approx(0.21893, rel=1e-4)
    assert fedpft_noise_std(500, 1.0, 1 / 500) == pytest.approx(0.04932, rel=1e-4)
    assert fedpft_noise_std(10, 1.0, 0.1) == pytest.approx(1.7179, rel=1e-4)
    assert fedpft_noise_std(10, 1.0, 0.1, "2/delta") == pytest.approx(1.5481, rel=1e-4)
    assert fedpft_noise_std(50, 10.0, 1 / 50) == pytest.approx(0.0412, rel=1e-3)


def test_noise_scale_is_inverse_in_n_and_epsilon() -> None:
    base = fedpft_noise_std(100, 1.0, 0.01)
    assert fedpft_noise_std(300, 1.0, 0.01) == pytest.approx(base / 3)
    assert fedpft_noise_std(100, 4.0, 0.01) == pytest.approx(base / 4)


def test_analytic_calibration_meets_its_privacy_condition() -> None:
    """Balle & Wang's condition holds with equality at the returned σ (and it beats the
    classical σ = Δ√(2 ln(1.25/δ))/ε for ε < 1)."""
    sens, eps, delta = mean_cov_sensitivity(100), 0.5, 1e-3
    sigma = analytic_gaussian_std(sens, eps, delta)

    def phi(t: float) -> float:
        return 0.5 * math.erfc(-t / math.sqrt(2))

    a, b = sens / (2 * sigma), eps * sigma / sens
    assert phi(a - b) - math.exp(eps) * phi(-a - b) == pytest.approx(delta, rel=1e-6)
    assert sigma < sens * math.sqrt(2 * math.log(1.25 / delta)) / eps
    assert noise_std(100, eps, delta, calibration="analytic") == sigma


def test_bad_budgets_are_clear_errors() -> None:
    with pytest.raises(FedshareError, match="epsilon"):
        fedpft_noise_std(10, 0.0, 0.1)
    with pytest.raises(FedshareError, match="delta"):
        fedpft_noise_std(10, 1.0, 1.0)
    with pytest.raises(FedshareError, match="dp_calibration"):
        noise_std(10, 1.0, 0.1, calibration="renyi")


def _stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(0)
    return mean, (x - mean).T @ (x - mean) / len(x)


def test_sensitivity_bounds_on_random_neighbours() -> None:
    """C8: for data in the unit ball and add/remove-one neighbours (biased covariance),
    ‖Δμ̂‖₂ ≤ 2/n and ‖ΔΣ̂‖_F ≤ 6/n, n the larger dataset's size; the mean bound is tight."""
    rng = np.random.default_rng(0)
    worst_mean = worst_cov = 0.0
    for _ in range(400):
        d, n = int(rng.integers(1, 17)), int(rng.integers(5, 201))
        x = rng.normal(size=(n, d))
        x *= (rng.uniform(0, 1, size=(n, 1)) ** (1 / d)) / np.linalg.norm(x, axis=1, keepdims=True)
        m1, c1 = _stats(x)
        m0, c0 = _stats(x[:-1])
        worst_mean = max(worst_mean, float(np.linalg.norm(m1 - m0)) * n)
        worst_cov = max(worst_cov, float(np.linalg.norm(c1 - c0)) * n)
    assert worst_mean <= 2 + 1e-9 and worst_cov <= 6 + 1e-9
    # tightness of the mean bound: n−1 points at u, the new point at −u
    n = 50
    x = np.vstack([np.tile([1.0, 0.0], (n - 1, 1)), [[-1.0, 0.0]]])
    assert float(np.linalg.norm(_stats(x)[0] - _stats(x[:-1])[0])) == pytest.approx(2 / n)
    assert mean_cov_sensitivity(n) == pytest.approx(math.sqrt((2 / n) ** 2 + (6 / n) ** 2))


def test_psd_projection_and_sampling_never_fail() -> None:
    """C9: the noisy covariance is symmetric PSD after projection, and sampling (with
    reg_covar) works even for n = 2 in d = 64 at ε = 1."""
    gen = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(2, 64, generator=gen, dtype=torch.float64), dim=1)
    mean, cov, sigma = private_mean_cov(x, 1.0, generator=gen)
    assert sigma == pytest.approx(fedpft_noise_std(2, 1.0, 0.5))
    torch.testing.assert_close(cov, cov.T)
    assert float(torch.linalg.eigvalsh(cov).min()) >= -1e-10
    g = GaussianMixture(
        torch.ones(1, dtype=torch.float64),
        mean[None],
        (cov + 1e-6 * torch.eye(64, dtype=cov.dtype))[None],
        "full",
    )
    assert torch.isfinite(g.sample(500, gen)).all()
    m = torch.randn(5, 5, dtype=torch.float64, generator=gen)
    p = project_psd(m)
    assert float(torch.linalg.eigvalsh(p).min()) >= -1e-12
    sym = 0.5 * (m + m.T)
    vals = torch.linalg.eigvalsh(sym)
    torch.testing.assert_close(torch.linalg.eigvalsh(p), vals.clamp_min(0), atol=1e-10, rtol=0)


def test_noise_is_symmetric_and_has_the_calibrated_scale() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.nn.functional.normalize(
        torch.randn(400, 8, generator=gen, dtype=torch.float64), dim=1
    )
    sigma = fedpft_noise_std(400, 1.0, 1 / 400)
    errors = []
    for _ in range(200):
        mean, _, _ = private_mean_cov(x, 1.0, generator=gen)
        errors.append(mean - x.mean(0))
    assert float(torch.stack(errors).std()) == pytest.approx(sigma, rel=0.1)


def test_features_outside_the_unit_ball_are_rejected() -> None:
    with pytest.raises(FedshareError, match="unit ball"):
        private_mean_cov(torch.full((10, 3), 2.0), 1.0)


def test_paper_calibration_is_checked_against_the_exact_condition() -> None:
    """n = 100, δ = 0.01: ε = 1 passes; ε = 10 achieves δ ≈ 0.0116 > 0.01 and stops with a
    sentence naming ε, δ, the achieved δ and the analytic calibration; check=False and the
    analytic calibration still work."""
    n, delta = 100, 0.01
    sigma = fedpft_noise_std(n, 10.0, delta)
    assert gaussian_delta(sigma, mean_cov_sensitivity(n), 10.0) == pytest.approx(0.0116, abs=1e-4)
    check_paper_calibration(n, 1.0, delta, "4/delta")
    assert noise_std(n, 1.0, delta) == fedpft_noise_std(n, 1.0, delta)
    with pytest.raises(FedshareError, match=r"\(10, 0\.01\)-DP.*delta=0\.0116.*analytic"):
        noise_std(n, 10.0, delta)
    assert noise_std(n, 10.0, delta, check=False) == sigma
    assert noise_std(n, 10.0, delta, calibration="analytic") > sigma
    x = torch.nn.functional.normalize(torch.randn(n, 4, dtype=torch.float64), dim=1)
    with pytest.raises(FedshareError, match="dp_calibration=analytic"):
        private_mean_cov(x, 10.0)


def test_raw_reduction_is_unbiased_and_the_projected_one_is_not() -> None:
    """E[diag(Σ̂ + ΔΣ)] = diag(Σ̂): the unprojected reading is unbiased for the true diagonal
    and trace; the PSD projection keeps only positive noise eigenvalues and inflates both."""
    gen = torch.Generator().manual_seed(3)
    n, d, trials = 40, 16, 400
    x = torch.nn.functional.normalize(torch.randn(n, d, generator=gen, dtype=torch.float64), dim=1)
    x = 0.2 * x  # small true variances, as for well-clustered features
    true = torch.cov(x.T, correction=0)
    sigma = fedpft_noise_std(n, 1.0, 1 / n)
    reads: dict[bool, list[torch.Tensor]] = {True: [], False: []}
    for project in (True, False):
        g = torch.Generator().manual_seed(4)
        for _ in range(trials):
            _, cov, _ = private_mean_cov(x, 1.0, generator=g, project=project)
            reads[project].append(reduce_covariance(cov, "diag")[0])
    raw, proj = torch.stack(reads[False]).mean(0), torch.stack(reads[True]).mean(0)
    se = sigma / math.sqrt(trials)
    assert float((raw - true.diagonal()).abs().max()) < 4.5 * se
    assert abs(float(raw.mean() - true.diagonal().mean())) < 4 * se / math.sqrt(d)
    assert float((proj - true.diagonal()).min()) > 5 * se  # every coordinate biased upward
    assert float(proj.mean() - true.diagonal().mean()) > 0.5 * sigma
    assert reduce_covariance(true, "spherical")[0] == pytest.approx(float(true.trace()) / d)
