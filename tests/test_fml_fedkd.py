"""FML (mutual learning with a shared meme model) and FedKD (adaptive mutual distillation, an
SVD-compressed mentee): losses, compression, what travels, and digits runs."""

import pytest
import torch
import torch.nn.functional as F

from fedshare.engine.flat import FlatState
from fedshare.functional.logit_sharing import kl_to
from fedshare.functional.svd import compress, decompress, energy_rank, energy_schedule
from fedshare.strategies.base import Update
from fedshare.strategies.fedkd import adaptive_mutual_loss, factor_flat, unfactor_flat
from fedshare.strategies.fml import mutual_loss
from helpers import digits_federation
from hetero_runs import CLIENTS, chance_bound, digits_run, server_side

BOUND = chance_bound(digits_federation("iid", CLIENTS))


# ---------------------------------------------------------------- shared model and FML
def test_shared_model_is_the_sample_weighted_mean_of_the_uploads():
    strategy, _ = server_side("fml")
    n = strategy.flat.numel
    a, b = torch.randn(n), torch.randn(n)
    strategy.aggregate(iter([Update(0, 30, weights=a), Update(1, 10, weights=b)]), 0)
    mean = (30 * a + 10 * b) / 40
    torch.testing.assert_close(strategy.flat.flatten(strategy.global_model()), mean)


def test_kl_to_is_the_batch_mean_kl_from_the_teacher_and_reaches_both_inputs():
    torch.manual_seed(0)
    student = torch.randn(5, 4, requires_grad=True)
    teacher = torch.randn(5, 4, requires_grad=True)
    p = F.softmax(teacher, dim=1)
    by_hand = (p * (p.log() - F.log_softmax(student, dim=1))).sum() / 5
    loss = kl_to(student, teacher)
    torch.testing.assert_close(loss, by_hand)
    assert kl_to(student, student).abs() < 1e-6 and loss > 0
    loss.backward()
    assert student.grad.abs().sum() > 0 and teacher.grad.abs().sum() > 0


def test_mutual_loss_distils_each_model_toward_the_others_fixed_output():
    torch.manual_seed(0)
    z_p = torch.randn(5, 4, requires_grad=True)
    z_m = torch.randn(5, 4, requires_grad=True)
    y = torch.tensor([0, 1, 2, 3, 0])
    mutual_loss(z_p, z_m, y, alpha=0.3, beta=0.8).backward()
    ref_p = z_p.detach().clone().requires_grad_(True)
    (0.3 * F.cross_entropy(ref_p, y) + 0.7 * kl_to(ref_p, z_m.detach())).backward()
    torch.testing.assert_close(z_p.grad, ref_p.grad)  # β and the meme's CE do not reach z_p
    ref_m = z_m.detach().clone().requires_grad_(True)
    (0.8 * F.cross_entropy(ref_m, y) + 0.2 * kl_to(ref_m, z_p.detach())).backward()
    torch.testing.assert_close(z_m.grad, ref_m.grad)


def test_fml_sends_the_meme_model_and_both_models_learn():
    result = digits_run("fml", rounds=2, eval={"personal": True})
    strategy = result.strategy
    weights = strategy.flat.numel * 4
    assert result.history[0]["bytes_up"] == result.history[0]["bytes_down"] == CLIENTS * weights
    assert result.summary["best_accuracy"] > BOUND  # the meme model
    assert result.history[-1]["personal_accuracy"] > BOUND  # the private models


# ---------------------------------------------------------------- SVD compression
def test_energy_rank_keeps_the_fewest_singular_values_holding_the_energy():
    s = torch.tensor([3.0, 2.0, 1.0, 0.0])  # energies 9, 4, 1 of 14
    assert energy_rank(s, 0.5) == 1
    assert energy_rank(s, 0.9) == 2  # 13/14 = 0.93
    assert energy_rank(s, 0.95) == 3


def test_energy_rank_of_an_all_zero_spectrum_is_one():
    assert energy_rank(torch.zeros(3), 0.9) == 1


def test_energy_rank_holds_for_a_spectrum_of_total_energy_below_one():
    s = torch.tensor([0.6, 0.5, 0.4])  # energies 0.36, 0.25, 0.16 of 0.77
    assert energy_rank(s, 0.5) == 2


def test_a_matrix_is_factored_only_when_its_factors_are_fewer_numbers():
    """A rank-1 2×3 matrix: 2 + 1 + 3 factor entries, as many as its own 6, so it goes whole;
    a rank-1 2×4 one: 7 factor entries against 8, so its factors go."""
    gen = torch.Generator().manual_seed(0)
    for cols, kind in ((3, {"full"}), (4, {"u", "s", "v"})):
        matrix = torch.randn(2, 1, generator=gen) @ torch.randn(1, cols, generator=gen)
        assert set(compress(matrix, 0.99)) == kind


def test_a_low_rank_matrix_travels_as_its_factors_and_comes_back():
    gen = torch.Generator().manual_seed(0)
    matrix = torch.randn(40, 2, generator=gen) @ torch.randn(2, 30, generator=gen)
    factors = compress(matrix, 0.999)
    assert set(factors) == {"u", "s", "v"} and factors["s"].numel() == 2
    assert sum(f.numel() for f in factors.values()) < matrix.numel()
    torch.testing.assert_close(decompress(factors, matrix.shape), matrix, atol=1e-4, rtol=1e-4)
    assert set(compress(torch.randn(5), 0.5)) == {"full"}  # vectors travel whole


def test_factored_flat_state_round_trips_at_full_energy():
    strategy, _ = server_side("fedkd")
    flat = strategy.flat
    vector = flat.flatten(strategy.model)
    torch.testing.assert_close(unfactor_flat(flat, factor_flat(flat, vector, 1.0)), vector)


def test_energy_grows_linearly_from_start_to_end():
    assert energy_schedule(0.95, 0.98, 0, 4) == 0.95
    assert energy_schedule(0.95, 0.98, 3, 4) == pytest.approx(0.98)
    assert energy_schedule(0.95, 0.98, 1, 4) == pytest.approx(0.96)
    assert energy_schedule(0.95, 0.98, 0, 2) == 0.95
    assert energy_schedule(0.95, 0.98, 1, 2) == pytest.approx(0.98)
    assert energy_schedule(0.95, 0.98, 0, 1) == 0.98  # a single round keeps the end energy


# ---------------------------------------------------------------- FedKD
def test_adaptive_mutual_loss_matches_the_per_model_losses():
    torch.manual_seed(0)
    z_t, z_s = torch.randn(6, 3), torch.randn(6, 3)
    h_t, mapped = torch.randn(6, 5), torch.randn(6, 5)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    ce_t, ce_s = F.cross_entropy(z_t, y), F.cross_entropy(z_s, y)
    mse = F.mse_loss(h_t, mapped)
    expected = ce_t + ce_s + (kl_to(z_t, z_s) + kl_to(z_s, z_t) + 2 * mse) / (ce_t + ce_s)
    torch.testing.assert_close(adaptive_mutual_loss(z_t, z_s, h_t, mapped, y), expected)


def test_fedkd_counts_the_mentee_at_its_compressed_size():
    full = digits_run("fedkd", rounds=1, params={"energy_start": 1.0, "energy_end": 1.0})
    weights = FlatState(full.strategy.model).numel * 4
    assert full.summary["bytes_up"] == CLIENTS * weights  # nothing truncated: every tensor whole
    compressed = digits_run("fedkd", rounds=1, params={"energy_start": 0.5, "energy_end": 0.5})
    assert compressed.summary["bytes_up"] < 0.8 * CLIENTS * weights
    assert compressed.summary["bytes_down"] < 0.8 * CLIENTS * weights  # factors and the energy


def test_fedkd_mentee_and_mentors_learn():
    result = digits_run("fedkd", rounds=2, eval={"personal": True})
    assert result.summary["best_accuracy"] > BOUND  # the mentee
    assert result.history[-1]["personal_accuracy"] > BOUND  # the mentors
