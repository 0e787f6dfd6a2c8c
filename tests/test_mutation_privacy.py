"""DP-FedPFT's release (FedPFT's Sec. 4.3, Theorem 4.1) statistic by statistic: the noise on
the mean and on every covariance entry has the scale its calibration returns, under both
calibrations; the budget checks name the bad value (docs/mutation.md, `dp`). And the privacy
metrics' inputs: exposure's direction and per-client fractions, MDS's kept dimensions."""

import math

import pytest
import torch

from fedshare.errors import FedshareError
from fedshare.privacy.dp import (
    analytic_gaussian_std,
    fedpft_noise_std,
    gaussian_delta,
    mean_cov_sensitivity,
    noise_std,
    private_mean_cov,
    reduce_covariance,
    symmetric_noise,
)
from fedshare.privacy.exposure import ExposureTracker, expected_pair_exposure
from fedshare.privacy.mds import classical_mds, distance_stats, min_contributor_distance


def unit_rows(n: int, d: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    return 0.5 * torch.nn.functional.normalize(x, dim=1)


@pytest.mark.parametrize("calibration", ["paper", "analytic"])
def test_every_released_statistic_carries_noise_of_the_calibrated_scale(calibration):
    """Mean, covariance diagonal and each off-diagonal pair: i.i.d. N(0, σ²) per released
    number, σ = the calibration's; the lower triangle mirrors the upper one exactly."""
    n, d, trials = 50, 5, 400
    x = unit_rows(n, d, 0)
    mean, cov = x.mean(0), torch.cov(x.T, correction=0)
    want = noise_std(n, 1.0, 1 / n, calibration=calibration)
    assert want == pytest.approx(
        fedpft_noise_std(n, 1.0, 1 / n)
        if calibration == "paper"
        else analytic_gaussian_std(mean_cov_sensitivity(n), 1.0, 1 / n)
    )
    gen = torch.Generator().manual_seed(1)
    dm, dc = [], []
    for _ in range(trials):
        m, c, sigma = private_mean_cov(
            x, 1.0, generator=gen, calibration=calibration, project=False
        )
        assert sigma == want
        torch.testing.assert_close(c, c.T, atol=1e-12, rtol=0)
        dm.append(m - mean)
        dc.append(c - cov)
    noise_mean, noise_cov = torch.stack(dm), torch.stack(dc)
    upper = torch.triu_indices(d, d, offset=1)
    for values in (
        noise_mean,
        noise_cov.diagonal(dim1=1, dim2=2),
        noise_cov[:, upper[0], upper[1]],
    ):
        assert float(values.mean().abs()) < 4 * want / math.sqrt(values.numel())
        assert float(values.std()) == pytest.approx(want, rel=0.08)
    # the mean's noise and the covariance's noise are separate draws
    corr = torch.corrcoef(torch.stack([noise_mean[:, 0], noise_cov[:, 0, 0]]))[0, 1]
    assert abs(float(corr)) < 0.2


def test_the_paper_calibration_differs_from_the_analytic_one():
    """The two calibrations give different σ for the same budget (so a release that ignored the
    choice would fail the test above for one of them)."""
    paper = noise_std(50, 1.0, 0.02, calibration="paper")
    analytic = noise_std(50, 1.0, 0.02, calibration="analytic")
    assert abs(paper - analytic) > 0.1 * paper


def test_delta_defaults_to_one_over_n_and_the_log_term_moves_sigma():
    x = unit_rows(20, 3, 2)
    _, _, sigma = private_mean_cov(x, 2.0, generator=torch.Generator().manual_seed(0))
    assert sigma == pytest.approx(fedpft_noise_std(20, 2.0, 1 / 20))
    _, _, proof = private_mean_cov(x, 2.0, 0.01, log_term="2/delta", check=False)
    assert proof == pytest.approx(4 / (20 * 2.0) * math.sqrt(5 * math.log(2 / 0.01)))


def test_symmetric_noise_is_the_scaled_upper_triangle_mirrored():
    draw = torch.randn(4, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    noise = symmetric_noise(4, 0.3, torch.Generator().manual_seed(5), torch.float64, "cpu")
    upper = draw.triu()
    torch.testing.assert_close(noise, 0.3 * (upper + upper.T - torch.diag(draw.diagonal())))


def test_covariance_families_and_budget_errors():
    cov = torch.tensor([[2.0, 0.5], [0.5, 4.0]])
    assert torch.equal(reduce_covariance(cov, "full"), cov[None])
    assert torch.equal(reduce_covariance(cov, "diag"), torch.tensor([[2.0, 4.0]]))
    assert torch.equal(reduce_covariance(cov, "spherical"), torch.tensor([3.0]))
    for bad, match in (
        ((1.0, 0.0), "delta=0.0 must be in"),
        ((-1.0, 0.1), "epsilon=-1.0 must be positive"),
        ((1.0, 1.5), "delta=1.5 must be in"),
    ):
        with pytest.raises(FedshareError, match=match):
            fedpft_noise_std(10, *bad)
        with pytest.raises(FedshareError, match=match):
            analytic_gaussian_std(0.1, *bad)
    with pytest.raises(FedshareError, match="dp_log_term"):
        fedpft_noise_std(10, 1.0, 0.1, "3/delta")
    with pytest.raises(FedshareError, match="at least one sample"):
        private_mean_cov(torch.zeros(0, 3), 1.0)
    # a row exactly on the unit sphere is inside the ball
    on_sphere = torch.nn.functional.normalize(torch.ones(3, 2), dim=1)
    assert private_mean_cov(on_sphere, 1.0, 0.5)[2] > 0


# ------------------------------------------- the privacy metrics' inputs (docs/mutation.md)
def test_pair_exposure_is_directed_and_data_exposure_per_client():
    """FLea's exposure (Sec. 4.4): ξ_ij is set by a delivery from owner i to receiver j only;
    the data metrics average, maximise and pool the clients' exposed fractions."""
    tracker = ExposureTracker([4, 10, 5])
    tracker.record_delivery([1], [2])
    tracker.record_delivery([], [0, 1])  # nothing delivered
    assert tracker.pairs.nonzero().tolist() == [[1, 2]]
    tracker.record_shared(1, torch.tensor([], dtype=torch.long))
    tracker.record_shared(0, torch.tensor([0, 3]))
    tracker.record_shared(2, torch.tensor([4]))
    assert tracker.data_fractions() == [0.5, 0.0, 0.2]
    assert tracker.metrics() == pytest.approx(
        {
            "exposure_pairs": 1 / 9,
            "exposure_data_mean": 0.7 / 3,
            "exposure_data_max": 0.5,
            "exposure_data_total": 3 / 19,
            "exposure_clients": 2 / 3,
        }
    )
    assert expected_pair_exposure(1, 0.5) == 0.0
    assert expected_pair_exposure(3, 0.5) == pytest.approx(1 - 0.75**2)


def test_classical_mds_keeps_the_largest_eigenvalues():
    """XorMixFL's MDS distance (Sec. 4.2): `dims=1` keeps the principal axis, so points spread
    along x and barely along y keep their x-distances; dimensions past the positive
    eigenvalues are zero."""
    x = torch.tensor([[0.0, 0.0], [3.0, 0.1], [7.0, -0.1], [10.0, 0.0]], dtype=torch.float64)
    one = classical_mds(x, 1)
    torch.testing.assert_close(
        torch.cdist(one, one), torch.cdist(x[:, :1], x[:, :1]), atol=0.05, rtol=0
    )
    line = torch.tensor([[0.0, 0.0], [1.0, 1.0], [3.0, 3.0]], dtype=torch.float64)
    three = classical_mds(line, 3)
    assert float(three[:, 1:].abs().max()) < 1e-6
    torch.testing.assert_close(torch.cdist(three, three), torch.cdist(line, line))
    samples, parents = torch.zeros(2, 2), torch.tensor([[[3.0, 4.0], [6.0, 8.0]]] * 2)
    torch.testing.assert_close(
        min_contributor_distance(samples, parents, dims=1), torch.tensor([5.0, 5.0]).double()
    )


def test_distance_stats_of_no_samples_are_nan_under_the_prefix():
    stats = distance_stats(torch.tensor([]), prefix="mix")
    assert set(stats) == {"mix_mean", "mix_std"} and all(math.isnan(v) for v in stats.values())
    assert distance_stats(torch.tensor([2.0, 2.0, 5.0]))["mds_std"] == pytest.approx(math.sqrt(2))


@pytest.mark.parametrize("sensitivity", [1e-8, 0.05, 30.0])
def test_analytic_sigma_meets_the_exact_condition_at_any_sensitivity(sensitivity):
    """The bisection's bracket scales with Δ: at Δ = 1e-8 (n ≈ 6·10⁸) as at Δ = 30 the returned
    σ achieves δ with equality (Balle & Wang 2018, Theorem 8) and is proportional to Δ."""
    sigma = analytic_gaussian_std(sensitivity, 1.0, 1e-5)
    assert gaussian_delta(sigma, sensitivity, 1.0) == pytest.approx(1e-5, rel=1e-6)
    assert sigma / sensitivity == pytest.approx(analytic_gaussian_std(1.0, 1.0, 1e-5), rel=1e-9)


@pytest.mark.parametrize("epsilon", [0.1, 8.0, 30.0])
def test_analytic_sigma_is_the_smallest_at_any_epsilon(epsilon):
    """Also where σ is below Δ (large ε: the bracket's lower end must start below σ)."""
    sigma = analytic_gaussian_std(1.0, epsilon, 1e-5)
    assert gaussian_delta(sigma, 1.0, epsilon) == pytest.approx(1e-5, rel=1e-6)


def test_the_mean_takes_the_first_draw_of_the_generator_added_then_the_covariances():
    """Same seed, same release: the mean's noise is added (μ + σ·z) and drawn first."""
    x = unit_rows(6, 3, 2)
    mean, cov, sigma = private_mean_cov(
        x, 1.0, generator=torch.Generator().manual_seed(5), project=False
    )
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(3, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(mean, x.mean(0) + sigma * z, rtol=0, atol=1e-12)
    noise = symmetric_noise(3, sigma, gen, torch.float64, torch.device("cpu"))
    torch.testing.assert_close(cov, torch.cov(x.T, correction=0) + noise, rtol=0, atol=1e-12)


def test_one_sample_is_released_and_none_refused():
    x = torch.tensor([[0.6, 0.0]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    mean, cov, sigma = private_mean_cov(x, 1.0, 0.1, generator=gen, calibration="analytic")
    assert mean.shape == (2,) and cov.shape == (2, 2) and sigma > 0
    with pytest.raises(FedshareError, match="at least one sample"):
        private_mean_cov(x[:0], 1.0)


def test_a_row_just_outside_the_unit_ball_is_rejected():
    x = torch.tensor([[1.01, 0.0], [0.0, 0.5]], dtype=torch.float64)
    with pytest.raises(FedshareError, match="unit ball"):
        private_mean_cov(x, 1.0)


def test_a_tracker_of_no_clients_reports_zero_exposure():
    assert ExposureTracker([]).metrics() == {
        "exposure_pairs": 0.0,
        "exposure_data_mean": 0.0,
        "exposure_data_max": 0.0,
        "exposure_data_total": 0.0,
        "exposure_clients": 0.0,
    }


def test_one_client_of_one_sample_is_fully_exposed():
    tracker = ExposureTracker([1])
    tracker.record_shared(0, torch.tensor([0]))
    tracker.record_delivery([0], [0])
    assert tracker.data_fractions() == [1.0]
    assert tracker.pair_exposure() == 1.0


def test_the_expected_pair_exposure_is_zero_before_the_second_round():
    assert expected_pair_exposure(0, 0.5) == 0.0
    assert expected_pair_exposure(1, 0.5) == 0.0
    assert expected_pair_exposure(3, 0.5) == pytest.approx(1 - 0.75**2)


def test_contributor_distances_are_taken_in_the_mds_embedding_only_when_dims_is_given():
    sample = torch.tensor([[0.0, 0.0]])
    contributors = torch.tensor([[[3.0, 0.0], [0.0, 1.0]]])
    assert min_contributor_distance(sample, contributors).item() == pytest.approx(1.0)
    embedded = classical_mds(torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 1.0]]), 1)
    want = (embedded[1:] - embedded[0]).norm(dim=1).min().item()
    assert want < 0.5  # one dimension: the point off the main axis lands near the sample
    assert min_contributor_distance(sample, contributors, dims=1).item() == pytest.approx(want)
