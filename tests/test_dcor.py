"""Distance correlation (fedshare.privacy.dcor): FLea's L_dec (Sec. 3, App. B Eqs. 10–11)."""

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


def gaussian(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def orthogonal(d: int, seed: int = 1) -> torch.Tensor:
    q, _ = torch.linalg.qr(gaussian(d, d, seed=seed))
    return q


def test_similarity_transform_gives_one_and_generic_linear_map_less():
    x = gaussian(32, 50)
    similar = 2.5 * x @ orthogonal(50) + 3.0
    assert distance_correlation(x, similar) == pytest.approx(1.0, abs=1e-4)
    assert distance_correlation(x, similar, eps=0.0) == pytest.approx(1.0, abs=1e-10)
    generic = distance_correlation(x, x @ gaussian(50, 50, seed=2), eps=0.0)
    assert 0.9 < generic < 1.0 - 1e-3  # measured: 0.968 for one random map


@pytest.mark.parametrize("variant", ["code", "paper"])
def test_values_lie_in_unit_interval(variant):
    for seed in range(5):
        x, f = gaussian(16, 8, seed=seed), gaussian(16, 3, 2, seed=seed + 10)
        for pair in ((x, f), (x, torch.tanh(x[:, :3])), (x, x.pow(2))):
            value = float(distance_correlation(*pair, variant=variant))
            assert -1e-6 <= value <= 1.0 + 1e-6


def test_small_batch_bias_of_independent_samples():
    far = distance_correlation(gaussian(1000, 2, seed=3), gaussian(1000, 2, seed=4))
    near = distance_correlation(gaussian(32, 3072, seed=5), gaussian(32, 3072, seed=6))
    assert far < 0.15 and near > 0.95  # measured: 0.08 and 0.999


def test_paper_form_and_its_relation_to_the_code_form():
    x = gaussian(24, 10)
    assert distance_correlation(x, 0.3 * x @ orthogonal(10) - 1, "paper") == pytest.approx(1.0)
    f = torch.tanh(x @ gaussian(10, 6, seed=7))
    code = distance_correlation(x, f, eps=0.0)
    plain_ratio = distance_correlation(x, f, "paper", eps=0.0, squared=False)
    assert float(code) == pytest.approx(float(plain_ratio.sqrt()), abs=1e-10)
    # with the code's epsilons the two differ only slightly
    assert distance_correlation(x, f) == pytest.approx(float(code), abs=1e-3)


def test_double_centring_matches_the_centring_matrix():
    e = squared_distances(gaussian(9, 4)).sqrt()
    c = torch.eye(9, dtype=e.dtype) - torch.full((9, 9), 1 / 9, dtype=e.dtype)
    centred = double_center(e)
    assert torch.allclose(centred, c @ e @ c, atol=1e-6)
    assert torch.allclose(centred.sum(0), torch.zeros(9, dtype=e.dtype), atol=1e-9)
    assert torch.allclose(centred.sum(1), torch.zeros(9, dtype=e.dtype), atol=1e-9)


def test_squared_distances_match_cdist():
    x = gaussian(7, 5)
    assert torch.allclose(squared_distances(x), torch.cdist(x, x).pow(2), atol=1e-9)
    assert torch.all(squared_distances(x).diagonal() == 0)


def test_batched_groups_equal_separate_calls():
    x, f = gaussian(4, 12, 3, 2), gaussian(4, 12, 5, seed=9)
    batched = distance_correlation(x, f, batch_dims=1)
    single = torch.stack([distance_correlation(x[i], f[i]) for i in range(4)])
    assert batched.shape == (4,) and torch.allclose(batched, single)


def test_gradients_are_finite_even_with_duplicate_samples():
    x = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    rows = torch.cat([x, x[:2]])  # duplicates give zero distances
    for eps in (1e-7, 0.0):
        value = distance_correlation(rows, torch.tanh(rows) * 2, eps=eps)
        (grad,) = torch.autograd.grad(value, x)
        assert torch.isfinite(grad).all()
    constant = torch.ones(5, 3)
    assert torch.isfinite(distance_correlation(torch.randn(5, 4), constant))


def test_errors_and_chunked_metric():
    with pytest.raises(FedshareError, match="unknown dcor variant 'x'"):
        distance_correlation(gaussian(4, 2), gaussian(4, 2), variant="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sample count"):
        distance_correlation(gaussian(4, 2), gaussian(5, 2))
    assert [(s.start, s.stop) for s in chunks(70, 32)] == [(0, 32), (32, 64), (64, 70)]
    assert [(s.start, s.stop) for s in chunks(66, 32)] == [(0, 32), (32, 66)]
    assert chunks(3, 32) == []
    x = gaussian(64, 6)
    assert mean_distance_correlation(x, x) == pytest.approx(1.0, abs=1e-4)
    assert mean_distance_correlation(x[:3], x[:3]) is None
