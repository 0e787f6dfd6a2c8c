"""Gaussian mixtures (fedshare.functional.gmm): EM against scikit-learn, closed form, sampling,
the float16 wire format and the parameter counts of FedPFT's App. A, Sec. 6.3 Eqs. 9–11."""

import numpy as np
import pytest
import torch

from fedshare.errors import FedshareError
from fedshare.functional.gmm import (
    COVARIANCE_TYPES,
    GaussianMixture,
    _component_log_prob,
    _m_step,
    component_params,
    fit_gmm,
    kmeans_labels,
    pack_mixtures,
    point_mass,
    unpack_mixtures,
)


def clustered(n: int = 600, d: int = 6, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = [rng.normal(c, s, size=(n // 3, d)) for c, s in ((0, 1.0), (4, 0.5), (-4, 1.5))]
    return np.concatenate(parts)


@pytest.mark.parametrize("cov", COVARIANCE_TYPES)
def test_em_matches_scikit_learn_likelihood(cov: str) -> None:
    # imported here, not at collection: scikit-learn's mixtures take ~1.5 CPU-s to import
    from sklearn.mixture import GaussianMixture as SkGaussianMixture

    x = clustered()
    ours, info = fit_gmm(torch.tensor(x), 3, cov, generator=torch.Generator().manual_seed(0))
    sk = SkGaussianMixture(3, covariance_type=cov, random_state=0).fit(x)
    ll = float(ours.log_prob(torch.tensor(x)).mean())
    assert info.converged
    assert ll == pytest.approx(sk.score(x), abs=0.02)
    assert float(ours.weights.sum()) == pytest.approx(1.0)


def test_em_steps_from_the_kmeans_start_and_stops_on_tol_or_max_iter() -> None:
    """EM as scikit-learn runs it (FedPFT App. D.1): M-step on the k-means labels, then per
    iteration an E-step (whose mean log-likelihood is reported) and an M-step; stop when it moves by
    less than `tol` (the first iteration cannot: the previous value is −∞) or after
    `max_iter` iterations."""
    x = torch.tensor(clustered(150, 3))

    def gen() -> torch.Generator:
        return torch.Generator().manual_seed(5)

    g = _m_step(
        x, torch.nn.functional.one_hot(kmeans_labels(x, 3, gen()), 3).double(), "diag", 1e-6
    )
    models, lls = [g], []
    for _ in range(2):
        weighted = models[-1].weights.log() + _component_log_prob(x, models[-1])
        norm = torch.logsumexp(weighted, dim=1)
        lls.append(float(norm.mean()))
        models.append(_m_step(x, (weighted - norm[:, None]).exp(), "diag", 1e-6))
    for max_iter, tol, n_iter, converged in (
        (1, 0.0, 1, False),
        (2, 0.0, 2, False),
        (5, 1e9, 2, True),
    ):
        fitted, info = fit_gmm(x, 3, "diag", tol=tol, max_iter=max_iter, generator=gen())
        assert (info.n_iter, info.converged) == (n_iter, converged)
        assert info.mean_log_likelihood == lls[n_iter - 1]
        expected = models[n_iter]
        torch.testing.assert_close(fitted.means, expected.means, rtol=0, atol=1e-12)
        torch.testing.assert_close(fitted.covariances, expected.covariances, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cov", COVARIANCE_TYPES)
def test_single_component_is_the_closed_form(cov: str) -> None:
    x = torch.tensor(clustered(90, 4), dtype=torch.float64)
    g, info = fit_gmm(x, 1, cov, reg_covar=1e-6)
    mean = x.mean(0)
    biased = (x - mean).T @ (x - mean) / len(x)  # the 1/n covariance (scikit-learn's)
    expected = {
        "full": biased + 1e-6 * torch.eye(4, dtype=x.dtype),
        "diag": biased.diagonal() + 1e-6,
        "spherical": biased.diagonal().mean() + 1e-6,
    }[cov]
    assert info.n_iter == 0
    torch.testing.assert_close(g.means[0], mean)
    torch.testing.assert_close(g.covariances[0], expected)


def test_fit_is_determined_by_the_generator() -> None:
    x = torch.tensor(clustered())
    a, _ = fit_gmm(x, 4, "full", generator=torch.Generator().manual_seed(3))
    b, _ = fit_gmm(x, 4, "full", generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.means, b.means) and torch.equal(a.covariances, b.covariances)


def test_too_few_samples_is_a_clear_error() -> None:
    with pytest.raises(FedshareError, match="at least 5 samples"):
        fit_gmm(torch.zeros(3, 2), 5)
    with pytest.raises(FedshareError, match="a 0-component mixture"):
        fit_gmm(torch.zeros(3, 2), 0)


@pytest.mark.parametrize("cov", COVARIANCE_TYPES)
def test_sampling_reproduces_the_moments(cov: str) -> None:
    d = 3
    full = torch.tensor([[2.0, 0.6, 0.0], [0.6, 1.0, 0.3], [0.0, 0.3, 0.5]], dtype=torch.float64)
    covs = {
        "full": full[None],
        "diag": full.diagonal()[None],
        "spherical": full.diagonal().mean()[None],
    }[cov]
    g = GaussianMixture(
        torch.ones(1, dtype=torch.float64),
        torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64),
        covs,
        cov,
    )
    x = g.sample(200_000, torch.Generator().manual_seed(0))
    assert x.shape == (200_000, d)
    torch.testing.assert_close(x.mean(0), g.means[0], atol=0.02, rtol=0)
    torch.testing.assert_close(torch.cov(x.T), g.full_covariances()[0], atol=0.03, rtol=0)


def test_a_singular_full_covariance_samples_finite_points_on_its_line() -> None:
    """Eigenvalues of a rank-one Σ = vvᵀ come out of `eigh` as ±1e-17: they are clipped at 0
    (reg_covar = 0 is allowed, and then fitted covariances can be singular)."""
    v = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64)
    assert float(torch.linalg.eigvalsh(v.T @ v).min()) < 0  # the rounding this guards against
    mean = torch.tensor([[1.0, 0.0, -1.0]], dtype=torch.float64)
    g = GaussianMixture(torch.ones(1, dtype=torch.float64), mean, (v.T @ v)[None], "full")
    x = g.sample(500, torch.Generator().manual_seed(0))
    assert torch.isfinite(x).all()
    off_line = torch.linalg.cross(x - mean, v.expand(500, -1))
    assert float(off_line.abs().max()) < 1e-7  # √(1e-17)-sized, against a spread of 0.4
    assert float((x - mean).std()) > 0.05


def test_a_single_sample_fits_one_component_at_it() -> None:
    g, info = fit_gmm(torch.tensor([[2.0, -1.0]]), 1, "diag", reg_covar=0.5)
    assert info.n_iter == 0
    torch.testing.assert_close(g.means, torch.tensor([[2.0, -1.0]], dtype=torch.float64))
    torch.testing.assert_close(g.covariances, torch.full((1, 2), 0.5, dtype=torch.float64))


def test_mixture_counts_follow_the_weights() -> None:
    w = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    means = torch.tensor([[-10.0], [0.0], [10.0]], dtype=torch.float64)
    g = GaussianMixture(w, means, torch.full((3,), 1e-4, dtype=torch.float64), "spherical")
    x = g.sample(50_000, torch.Generator().manual_seed(1))
    share = torch.stack(
        [(x < -5).float().mean(), (x.abs() < 5).float().mean(), (x > 5).float().mean()]
    )
    torch.testing.assert_close(share, w.float(), atol=0.01, rtol=0)


@pytest.mark.parametrize("cov", COVARIANCE_TYPES)
def test_wire_round_trip_and_byte_count(cov: str) -> None:
    """Payload bytes = 2 × (FedPFT Eqs. 9–11) + 8 per (client, class); float32 is lossless."""
    x = torch.tensor(clustered(300, 5))
    gen = torch.Generator().manual_seed(0)
    mixtures = [
        (c, 100, fit_gmm(x[c * 100 : (c + 1) * 100], 2 + c, cov, generator=gen)[0])
        for c in range(3)
    ]
    payload = pack_mixtures(mixtures, cov, "float16")
    params = sum(g.num_params for _, _, g in mixtures)
    assert params == sum(k * component_params(5, cov) for k in (2, 3, 4))
    assert sum(t.numel() * t.element_size() for t in payload.values()) == 2 * params + 8 * 3
    exact = unpack_mixtures(pack_mixtures(mixtures, cov, "float32"), cov)
    for (label, count, g), (label2, count2, g2) in zip(mixtures, exact, strict=True):
        assert (label, count) == (label2, count2)
        torch.testing.assert_close(g2.means, g.means.float().double())
        torch.testing.assert_close(
            g2.covariances, g.covariances.float().double(), atol=1e-6, rtol=1e-5
        )


def test_float16_weights_are_renormalised_and_covariances_sanitised() -> None:
    """fedshare's float16 transfer (C12): after the round trip the weights sum to 1 in float64,
    variances stay >= reg_covar and full covariances are symmetric positive definite."""
    rng = np.random.default_rng(0)
    w = torch.tensor(rng.dirichlet(np.ones(7)), dtype=torch.float64)
    means = torch.tensor(rng.normal(size=(7, 4)))
    a = torch.tensor(rng.normal(size=(7, 4, 4))) * 1e-4
    full = a @ a.transpose(1, 2)  # tiny variances underflow in float16
    g = GaussianMixture(w, means, full, "full")
    ((_, _, back),) = unpack_mixtures(pack_mixtures([(0, 50, g)], "full", "float16"), "full", 1e-6)
    assert float(back.weights.sum()) == pytest.approx(1.0, abs=1e-12)
    torch.testing.assert_close(back.covariances, back.covariances.transpose(1, 2))
    assert float(torch.linalg.eigvalsh(back.covariances).min()) >= 1e-6 * (1 - 1e-9)
    assert torch.isfinite(back.sample(1000, torch.Generator().manual_seed(0))).all()


def test_point_mass_for_a_single_sample() -> None:
    g = point_mass(torch.ones(1, 3), "diag", 1e-6)
    assert g.n_components == 1 and torch.equal(
        g.covariances, torch.full((1, 3), 1e-6, dtype=torch.float64)
    )


@pytest.mark.parametrize("cov", COVARIANCE_TYPES)
def test_point_mass_is_one_component_at_the_mean_with_variance_reg_covar(cov: str) -> None:
    """Shrink for n = 1: weight 1, mean the sample, variance reg_covar in every family."""
    x = torch.tensor([[0.5, -2.0]])
    g = point_mass(x, cov, 0.25)
    assert g.weights.tolist() == [1.0]
    assert torch.equal(g.means, x.double())
    torch.testing.assert_close(g.full_covariances(), 0.25 * torch.eye(2, dtype=torch.float64)[None])
    assert g.sample(1, torch.Generator().manual_seed(0)).shape == (1, 2)
    assert g.sample(0).shape == (0, 2)
    line = point_mass(torch.tensor([[3.0]]), cov, 0.25)  # one feature
    assert line.full_covariances().tolist() == [[[0.25]]]


def test_server_sanitation_clamps_negative_weights_and_spreads_a_zero_total() -> None:
    """fedshare's choice: the server renormalises the received weights after clamping them at 0, a
    mixture whose weights sum to 0 gets 1/K each, variances are floored at reg_covar; float32
    weights come back exactly."""
    means = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
    g = GaussianMixture(
        torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64), means, torch.ones(3, 1), "diag"
    )
    payload = pack_mixtures([(4, 9, g)], "diag", "float32")
    ((_, _, back),) = unpack_mixtures(payload, "diag")
    torch.testing.assert_close(back.weights, g.weights.float().double())
    payload["gmm_weights"] = torch.tensor([-0.5, 1.0, 3.0])
    ((_, _, back),) = unpack_mixtures(payload, "diag")
    assert back.weights.tolist() == [0.0, 0.25, 0.75]
    payload["gmm_weights"] = torch.tensor([0.25, 0.25, 1.5]) / 5  # a total below 1
    ((_, _, back),) = unpack_mixtures(payload, "diag")
    torch.testing.assert_close(
        back.weights, torch.tensor([1 / 8, 1 / 8, 3 / 4], dtype=torch.float64)
    )
    payload["gmm_weights"] = torch.zeros(3)
    payload["gmm_covs"] = torch.tensor([[0.0], [-1.0], [2.0]])
    ((_, _, back),) = unpack_mixtures(payload, "diag")  # default reg_covar: 1e-6
    assert back.weights.tolist() == [1 / 3] * 3
    assert back.covariances.tolist() == [[1e-6], [1e-6], [2.0]]


def test_component_parameter_counts() -> None:
    """FedPFT §6.3's per-component counts (Eqs. 9–11)."""
    expected = {2048: (2_100_225, 4097, 2050), 768: (296_065, 1537, 770), 512: (131_841, 1025, 514)}
    for d, counts in expected.items():
        assert tuple(component_params(d, c) for c in COVARIANCE_TYPES) == counts


def test_kmeans_seeds_by_squared_distance_then_assigns_each_point_to_its_nearest_seed() -> None:
    """k-means++ (Arthur & Vassilvitskii 2007): a first centre uniformly, each next one drawn
    with probability ∝ D(x)², the squared distance to the nearest centre so far; then Lloyd's
    steps (none with max_iter = 0: the labels are the nearest seeds)."""
    points = [[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [5.0, 5.0], [6.0, 5.0], [9.0, 1.0]]
    x = torch.tensor(points, dtype=torch.float64)
    for seed in range(6):
        nearest, _ = reference_kmeans(x, 3, seed, max_iter=0)
        labels = kmeans_labels(x, 3, torch.Generator().manual_seed(seed), max_iter=0)
        assert labels.tolist() == nearest, seed


def reference_kmeans(
    x: torch.Tensor, k: int, seed: int, max_iter: int
) -> tuple[list[int], torch.Tensor]:
    """k-means++ then Lloyd's steps, written out point by point: a centre is the mean of its
    points (an empty cluster keeps its centre); stop when no label changes. Also the
    generator's state after the draws (the caller's stream goes on from there)."""
    gen = torch.Generator().manual_seed(seed)
    points = [p for p in x]

    def d2(p: torch.Tensor, c: torch.Tensor) -> float:
        return float(((p - c) ** 2).sum())

    centres = [points[int(torch.randint(len(x), (1,), generator=gen)[0])]]
    for _ in range(1, k):
        dist = torch.tensor([min(d2(p, c) for c in centres) for p in points], dtype=x.dtype)
        if float(dist.sum()) > 0:
            centres.append(points[int(torch.multinomial(dist / dist.sum(), 1, generator=gen)[0])])
        else:
            centres.append(points[int(torch.randint(len(x), (1,), generator=gen)[0])])

    def nearest() -> list[int]:
        return [min(range(k), key=lambda j: d2(p, centres[j])) for p in points]

    labels = nearest()
    for _ in range(max_iter):
        for j in range(k):
            members = [p for p, label in zip(points, labels, strict=True) if label == j]
            if members:
                centres[j] = torch.stack(members).mean(0)
        new = nearest()
        if new == labels:
            break
        labels = new
    return labels, gen.get_state()


def test_kmeans_runs_lloyds_steps_from_the_seeds_until_no_label_changes() -> None:
    # small: total squared distance < 1; data seed 20 has a cluster left with one point that
    # is not its centre (seed 3), data seed 195 a cluster left empty (seed 6)
    cases = [
        (torch.tensor(np.random.default_rng(d).normal(0.0, 0.05, (9, 2))), 4) for d in (20, 195)
    ]
    # two distinct points, three clusters: the third seed drawn uniformly
    cases.append((torch.tensor([[0.0, 0.0]] * 3 + [[1.0, 1.0]] * 2, dtype=torch.float64), 3))
    for x, k in cases:
        for seed in range(8):
            for max_iter in (1, 2, 100):
                gen = torch.Generator().manual_seed(seed)
                got = kmeans_labels(x, k, gen, max_iter=max_iter).tolist()
                labels, state = reference_kmeans(x, k, seed, max_iter)
                assert got == labels and torch.equal(gen.get_state(), state), (seed, max_iter)


def test_one_component_is_fitted_in_closed_form_and_reported_converged() -> None:
    _, info = fit_gmm(torch.tensor(clustered(30, 2)), 1)
    assert (info.n_iter, info.converged) == (0, True)


def test_sampling_clamps_negative_weights_and_variances_to_zero() -> None:
    g = GaussianMixture(
        torch.tensor([-0.5, 1.0], dtype=torch.float64),
        torch.tensor([[9.0, 9.0], [1.0, 2.0]], dtype=torch.float64),
        torch.tensor([[1.0, 1.0], [-4.0, 1.0]], dtype=torch.float64),
        "diag",
    )
    out = g.sample(50, torch.Generator().manual_seed(0))
    assert out[:, 0].tolist() == [1.0] * 50  # component 1 only, its first variance 0
    assert bool(out[:, 1].std() > 0)


def test_em_with_no_iteration_returns_the_kmeans_start() -> None:
    x = torch.tensor(clustered(60, 2))
    fitted, info = fit_gmm(x, 3, "diag", max_iter=0, generator=torch.Generator().manual_seed(1))
    labels = kmeans_labels(x, 3, torch.Generator().manual_seed(1))
    start = _m_step(x, torch.nn.functional.one_hot(labels, 3).double(), "diag", 1e-6)
    assert (info.n_iter, info.converged, info.mean_log_likelihood) == (0, False, -np.inf)
    torch.testing.assert_close(fitted.means, start.means, rtol=0, atol=0)


def test_a_payload_whose_lists_disagree_in_length_is_refused() -> None:
    payload = pack_mixtures([(0, 3, fit_gmm(torch.arange(6.0).view(3, 2), 1)[0])], "diag")
    payload["gmm_counts"] = payload["gmm_counts"][:0]
    with pytest.raises(ValueError):
        unpack_mixtures(payload, "diag")


def test_m_step_adds_ten_machine_epsilons_to_each_components_mass() -> None:
    """scikit-learn's guard against an empty component: N_k + 10·eps, so an empty component
    keeps a weight of 10·eps / (n + K·10·eps) and a zero mean."""
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    resp = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    eps = torch.finfo(torch.float64).eps
    g = _m_step(x, resp, "diag", 1e-6)
    assert g.weights.tolist() == [(2 + 10 * eps) / (2 + 20 * eps), 10 * eps / (2 + 20 * eps)]
    assert g.means[1].tolist() == [0.0, 0.0]
    torch.testing.assert_close(g.means[0], x.mean(0) * 2 / (2 + 10 * eps), rtol=0, atol=0)


@pytest.mark.parametrize("cov", ["diag", "spherical"])
def test_a_variance_below_zero_by_rounding_is_clamped_to_zero(cov: str) -> None:
    """100 copies of 3.3: E[x²] − E[x]² rounds to −4e-14 here; the variance is 0 + reg_covar."""
    x = torch.full((100, 1), 3.3, dtype=torch.float64)
    g = _m_step(x, torch.ones(100, 1, dtype=torch.float64), cov, 1e-6)
    assert g.covariances.flatten().tolist() == [1e-6]


def test_em_runs_a_hundred_iterations_by_default_and_kmeans_a_hundred_steps(monkeypatch) -> None:
    x = torch.tensor(clustered(30, 2))
    _, info = fit_gmm(x, 2, "diag", tol=0.0, generator=torch.Generator().manual_seed(0))
    assert (info.n_iter, info.converged) == (100, False)
    calls = []

    def flipping(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Distances under which every point changes cluster at every step."""
        calls.append(1)
        out = torch.ones(len(a), len(b), dtype=a.dtype)
        out[:, len(calls) % 2] = 0.0
        return out

    monkeypatch.setattr(torch, "cdist", flipping)
    kmeans_labels(x, 2, torch.Generator().manual_seed(0))
    assert len(calls) == 1 + 100  # the seeds' assignment, then max_iter = 100 steps


def test_sampling_draws_the_counts_then_each_components_gaussian_noise() -> None:
    """Algorithm 1 of FedPFT: counts ~ Multinomial(n; π), then μ_k + √σ²_k ⊙ z, z ~ N(0, I)."""
    g = GaussianMixture(
        torch.tensor([0.25, 0.75], dtype=torch.float64),
        torch.tensor([[1.0, -1.0], [5.0, 2.0]], dtype=torch.float64),
        torch.tensor([[4.0, 1.0], [0.25, 9.0]], dtype=torch.float64),
        "diag",
    )
    gen = torch.Generator().manual_seed(3)
    picks = torch.multinomial(g.weights, 12, replacement=True, generator=gen)
    expected = []
    for k, m in enumerate(torch.bincount(picks, minlength=2).tolist()):
        z = torch.randn(m, 2, generator=gen, dtype=torch.float64)
        expected.append(g.means[k] + z * g.covariances[k].sqrt())
    got = g.sample(12, torch.Generator().manual_seed(3))
    torch.testing.assert_close(got, torch.cat(expected), rtol=0, atol=0)
