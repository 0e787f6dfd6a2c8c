"""DP-FedPFT's release (FedPFT's Sec. 4.3, Theorem 4.1) statistic by statistic: the noise on
the mean and on every covariance entry has the scale its calibration returns, under both
calibrations; the budget checks name the bad value (docs/mutation.md, `dp`). And the privacy
metrics' inputs: exposure's direction and per-client fractions, MDS's kept dimensions."""

import math

import pytest
import torch

from fedshare.errors import FedshareError
from fedshare.privacy.dcor import (
    chunks,
    distance_correlation,
    double_center,
    mean_distance_correlation,
    squared_distances,
)
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
    assert tracker.metrics()["exposure_data_total"] == 1.0


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


# ------------------------------------------------ distance correlation against its definition
def rows(n: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def ref_distances(x: torch.Tensor, squared: bool, eps: float) -> list[list[float]]:
    """|x_j − x_k|² (squared) or √max(|x_j − x_k|², eps) with 0 on the diagonal when eps = 0,
    written out per pair."""
    n = x.shape[0]
    flat = x.reshape(n, -1).tolist()
    out = []
    for j in range(n):
        row = []
        for k in range(n):
            sq = sum((a - b) ** 2 for a, b in zip(flat[j], flat[k], strict=True))
            sq = 0.0 if j == k else sq
            row.append(sq if squared else (max(sq, eps) if eps > 0 else sq) ** 0.5)
        out.append(row)
    return out


def ref_centred(e: list[list[float]]) -> list[list[float]]:
    """Â_jk = a_jk − ā_j· − ā_·k + ā_·· (Székely's double centring), written out."""
    n = len(e)
    row = [sum(e[j]) / n for j in range(n)]
    col = [sum(e[j][k] for j in range(n)) / n for k in range(n)]
    grand = sum(row) / n
    return [[e[j][k] - row[j] - col[k] + grand for k in range(n)] for j in range(n)]


def ref_nu2(a: list[list[float]], b: list[list[float]]) -> float:
    n = len(a)
    return sum(a[j][k] * b[j][k] for j in range(n) for k in range(n)) / n**2


def ref_code_dcor(x: torch.Tensor, f: torch.Tensor, eps: float) -> float:
    """FLea's code form: √(ν²+ε) of plain distances, dCov / (√(dVar_x+ε)·√(dVar_f+ε))."""
    a, b = ref_centred(ref_distances(x, False, eps)), ref_centred(ref_distances(f, False, eps))
    dcov = max(ref_nu2(a, b) + eps, 0.0) ** 0.5
    dvar_x = max(ref_nu2(a, a) + eps, 0.0) ** 0.5
    dvar_f = max(ref_nu2(b, b) + eps, 0.0) ** 0.5
    return dcov / ((dvar_x + eps) ** 0.5 * (dvar_f + eps) ** 0.5)


def ref_paper_dcor(x: torch.Tensor, f: torch.Tensor, squared: bool, eps: float) -> float:
    """Eq. 5: ν²(x, f) / √(ν²(x, x)·ν²(f, f)), the denominator floored at ε (or the smallest
    positive float when ε = 0)."""
    a = ref_centred(ref_distances(x, squared, eps))
    b = ref_centred(ref_distances(f, squared, eps))
    floor = eps if eps > 0 else torch.finfo(torch.float64).tiny
    return ref_nu2(a, b) / max((ref_nu2(a, a) * ref_nu2(b, b)) ** 0.5, floor)


@pytest.mark.parametrize("eps", [0.0, 1e-7, 0.3])
def test_code_form_dcor_is_the_definition_with_the_codes_epsilons(eps):
    x, f = rows(7, 3, 0), torch.tanh(rows(7, 3, 0) @ rows(3, 2, 1)) + 0.1 * rows(7, 2, 2)
    value = distance_correlation(x, f, eps=eps)
    assert float(value) == pytest.approx(ref_code_dcor(x, f, eps), rel=1e-12, abs=1e-14)


def test_code_form_default_epsilon_is_the_codes_1e_minus_7():
    x, f = rows(6, 2, 3), rows(6, 4, 4)
    assert float(distance_correlation(x, f)) == pytest.approx(ref_code_dcor(x, f, 1e-7), rel=1e-12)


@pytest.mark.parametrize(("squared", "eps"), [(None, 0.0), (True, 0.2), (False, 0.0), (False, 0.3)])
def test_paper_form_dcor_is_eq5_on_squared_or_plain_distances(squared, eps):
    x, f = rows(6, 3, 5), rows(6, 3, 5).pow(3) + rows(6, 3, 6)
    value = distance_correlation(x, f, "paper", eps=eps, squared=squared)
    expected = ref_paper_dcor(x, f, squared is not False, eps)
    assert float(value) == pytest.approx(expected, rel=1e-12, abs=1e-14)


def test_the_paper_forms_denominator_is_floored_at_epsilon():
    x, f = 0.01 * rows(6, 3, 27), 0.01 * rows(6, 2, 28)  # √(ν²(x, x)·ν²(f, f)) ≈ 1e-7
    for eps in (0.5, 1e-3):
        value = distance_correlation(x, f, "paper", eps=eps)
        expected = ref_paper_dcor(x, f, True, eps)
        assert float(value) == pytest.approx(expected, rel=1e-12)
        assert float(value) < 1e-3


def test_two_samples_are_enough_and_one_is_refused():
    x, f = rows(2, 3, 7), rows(2, 1, 8)
    assert float(distance_correlation(x, f, eps=0.0)) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="at least 2 samples"):
        distance_correlation(rows(1, 3, 7), rows(1, 3, 8))


def test_a_constant_side_gives_zero_not_nan():
    x, constant = rows(5, 3, 9), torch.ones(5, 2, dtype=torch.float64)
    for variant in ("code", "paper"):
        assert float(distance_correlation(x, constant, variant, eps=0.0)) == 0.0
        assert float(distance_correlation(constant, x, variant, eps=0.0)) == 0.0
    # with ε > 0 the code form's floor: √ε / (√(√ε+ε)·√(dVar_f+ε))
    eps = 0.01
    assert float(distance_correlation(constant, x, eps=eps)) == pytest.approx(
        ref_code_dcor(constant, x, eps), rel=1e-12
    )


def test_inputs_of_any_shape_are_flattened_per_sample_and_batch_dims_index_groups():
    x, f = rows(5, 12, 10).reshape(5, 2, 3, 2), rows(5, 4, 11)
    assert float(distance_correlation(x, f, eps=0.0)) == pytest.approx(
        ref_code_dcor(x.reshape(5, -1), f, 0.0), rel=1e-12
    )
    one_d = rows(5, 1, 12).reshape(5)
    assert float(distance_correlation(one_d, f, eps=0.0)) == pytest.approx(
        ref_code_dcor(one_d.reshape(5, 1), f, 0.0), rel=1e-12
    )
    groups_x, groups_f = rows(12, 6, 13).reshape(3, 4, 2, 3), rows(12, 2, 14).reshape(3, 4, 2)
    batched = distance_correlation(groups_x, groups_f, "paper", eps=0.0, batch_dims=1)
    assert batched.shape == (3,)
    for g in range(3):
        expected = ref_paper_dcor(groups_x[g].reshape(4, -1), groups_f[g], True, 0.0)
        assert float(batched[g]) == pytest.approx(expected, rel=1e-12)


def test_a_representation_of_another_dtype_is_compared_in_the_inputs_dtype():
    x, f = rows(6, 3, 15), rows(6, 2, 16).float()
    value = distance_correlation(x, f, eps=0.0)
    assert value.dtype == torch.float64
    assert float(value) == pytest.approx(ref_code_dcor(x, f.double(), 0.0), rel=1e-14)


def test_squared_distances_and_centring_are_the_definitions_per_group():
    x = rows(10, 3, 17).reshape(2, 5, 3)
    sq = squared_distances(x)
    for g in range(2):
        expected = torch.tensor(ref_distances(x[g], True, 0.0), dtype=torch.float64)
        assert torch.allclose(sq[g], expected, rtol=1e-12, atol=1e-12)
    near = torch.tensor([[0.0, 0.0], [1e-9, 0.0], [1.0, 2.0]], dtype=torch.float64)
    assert (squared_distances(near) >= 0).all()
    e = rows(4, 4, 18).reshape(1, 4, 4)  # not symmetric: rows and columns differ
    centred = torch.tensor(ref_centred(e[0].tolist()), dtype=torch.float64)
    assert torch.allclose(double_center(e)[0], centred, rtol=0, atol=1e-12)


def test_a_zero_distance_has_a_zero_root_and_gradient_without_epsilon():
    x = torch.tensor([[0.0, 1.0], [0.0, 1.0], [3.0, 5.0]], dtype=torch.float64)
    x.requires_grad_(True)
    f = torch.tensor([[1.0], [2.0], [4.0]], dtype=torch.float64)
    value = distance_correlation(x, f, eps=0.0)
    (grad,) = torch.autograd.grad(value, x)
    assert float(value.detach()) == pytest.approx(ref_code_dcor(x.detach(), f, 0.0), rel=1e-12)
    assert torch.isfinite(grad).all()
    # the clamp at ε replaces every distance below √ε, the zero diagonal too
    eps = 4.0
    assert float(distance_correlation(x.detach(), f, eps=eps)) == pytest.approx(
        ref_code_dcor(x.detach(), f, eps), rel=1e-12
    )


def test_chunks_join_a_short_remainder_and_use_at_least_min_size():
    def spans(*args: int) -> list[tuple[int, int]]:
        return [(s.start, s.stop) for s in chunks(*args)]

    assert spans(5, 4) == [(0, 5)]
    assert spans(8, 4) == [(0, 4), (4, 8)]
    assert spans(11, 4) == [(0, 4), (4, 11)]
    assert spans(12, 4) == [(0, 4), (4, 8), (8, 12)]
    assert spans(9, 2) == [(0, 4), (4, 9)]
    assert spans(4, 32) == [(0, 4)]
    assert spans(3, 32) == []
    assert spans(6, 3, 2) == [(0, 3), (3, 6)]
    assert spans(7, 3, 2) == [(0, 3), (3, 7)]
    assert spans(1, 3, 1) == [(0, 1)]


def test_the_metric_is_the_mean_over_every_clients_chunks_in_double_precision():
    clients_x = [rows(9, 3, 20).float(), rows(4, 3, 21).float(), rows(3, 3, 22).float()]
    clients_f = [torch.tanh(x.double() @ rows(3, 2, 23)).float() for x in clients_x]
    parts = [(0, slice(0, 4)), (0, slice(4, 9)), (1, slice(0, 4))]  # client 2: too few
    for variant in ("code", "paper"):
        expected = sum(
            float(distance_correlation(clients_x[c][s].double(), clients_f[c][s].double(), variant))
            for c, s in parts
        ) / len(parts)
        value = mean_distance_correlation(clients_x, clients_f, chunk=4, variant=variant)
        assert value == pytest.approx(expected, rel=1e-12)
    single = mean_distance_correlation(clients_x[0], clients_f[0], chunk=4)
    assert single == pytest.approx(
        sum(
            float(distance_correlation(clients_x[0][s].double(), clients_f[0][s].double()))
            for _, s in parts[:2]
        )
        / 2,
        rel=1e-12,
    )
    assert mean_distance_correlation(clients_x[2], clients_f[2], chunk=2) is None  # 3 < 4 rows
    images = clients_x[0].reshape(9, 3, 1)
    assert mean_distance_correlation(images, clients_f[0], chunk=9) == pytest.approx(
        float(distance_correlation(clients_x[0].double(), clients_f[0].double())), rel=1e-12
    )
    with pytest.raises(ValueError):
        mean_distance_correlation(clients_x, clients_f[:2], chunk=4)


def test_the_metrics_default_chunk_is_32_items():
    x = rows(64, 3, 24)
    f = torch.tanh(x @ rows(3, 2, 25)) + 0.5 * rows(64, 2, 26)
    halves = [distance_correlation(x[:32], f[:32]), distance_correlation(x[32:], f[32:])]
    assert mean_distance_correlation(x, f) == pytest.approx(float(sum(halves)) / 2, rel=1e-12)
