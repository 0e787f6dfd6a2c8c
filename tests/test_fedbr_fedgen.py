"""FedBR and FLea's input-space FedGen (`fedgen_input`; FLea's baselines, FLea's App. C.3 and
docs/flea.md): what crosses the network, their losses, the switches that reduce them to FedAvg,
state and resume."""

import math

import numpy as np
import pytest
import torch

from fedshare import simulate
from fedshare.engine.sampling import CohortSampler
from fedshare.functional.generative import diversity_loss
from fedshare.strategies import make_strategy
from fedshare.strategies.fedbr import log_p_positive
from fedshare.strategies.fedgen_input import Generator
from helpers import DIGITS_TRAIN, digits_federation, without_wall_time

CLIENTS = 10
CUTS = [(2, 1), pytest.param(4, 2, marks=pytest.mark.slow)]
"""(rounds, the round a run is cut after) of the resume tests: by default one round resumed
after one (its clients' state, the generator and its optimizer carried over), slow two after
two."""


def run(name, params=None, rounds=3, **kwargs):
    return simulate(
        make_strategy(name, params),
        digits_federation("dirichlet", CLIENTS),
        "cnn_small",
        rounds=rounds,
        train=DIGITS_TRAIN,
        **kwargs,
    )


def accuracies(result) -> list[tuple[float, float]]:
    return [(r["accuracy"], r["train_loss"]) for r in result.history]


# --------------------------------------------------------------------------- FedBR
def test_fedbr_shares_label_free_means_of_some_clients_and_sends_a_small_pool_to_all():
    result = run("fedbr", {"sharers": 4, "pool_items": 12}, rounds=2)
    strat, data = result.strategy, digits_federation("dirichlet", CLIENTS)
    assert set(strat.pool) == {"means"}  # no labels travel
    assert strat.pool["means"].shape[0] == 12
    sharers = strat._sharers_first(0, [])
    assert len(sharers) == 4 and strat._sharers_first(1, []) == []
    uploaded = sum(data.client_sizes[k] // 10 for k in sharers)
    item = strat.pool["means"][0].numel() * 4
    first, second = result.history
    # the sharers' uploads, then 12 means to each of the 10 clients
    assert first["bytes_shared_round"] == item * (uploaded + 12 * CLIENTS)
    assert second["bytes_shared_round"] == 0
    assert set(strat.pool_owners) <= set(sharers)
    assert result.summary["sharers"] == 4
    # every kept mean is the mean of 10 inputs of one sharer
    means = []
    for k in sharers:
        groups = strat.server_groups(k)
        x, _ = data.dataset.train_batch(data.client_indices[k][groups.flatten()])
        means.append(x.view(*groups.shape, *x.shape[1:]).mean(1).flatten(1))
    distance = torch.cdist(
        strat.pool["means"].flatten(1),
        torch.cat(means),
        compute_mode="donot_use_mm_for_euclid_dist",
    )
    assert float(distance.min(dim=1).values.max()) < 1e-5


def test_fedbr_without_its_terms_trains_like_fedavg():
    """μ = λ = γ = 0 leave the cross-entropy on the local batch (cut to the pool's batch, here
    never shorter): the same accuracy and loss as FedAvg, round by round."""
    base = run("fedavg")
    same = run("fedbr", {"mu": 0.0, "lam": 0.0, "gamma": 0.0})
    assert accuracies(same) == accuracies(base)
    changed = run("fedbr")
    assert accuracies(changed) != accuracies(base)


@pytest.mark.parametrize(("rounds", "cut"), CUTS)
def test_fedbr_keeps_each_clients_discriminator_in_its_own_state(tmp_path, rounds, cut):
    half = {"fraction": 0.5}
    full = run("fedbr", rounds=rounds, clients=half, run_dir=tmp_path / "full")
    assert full.summary["client_state_bytes"] > 0
    run("fedbr", rounds=cut, clients=half, run_dir=tmp_path / "cut")
    resumed = run("fedbr", rounds=rounds, clients=half, run_dir=tmp_path / "cut", resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    cohorts = CohortSampler(CLIENTS, CLIENTS // 2, np.ones(CLIENTS), seed=0)
    before, after = (
        {k for r in span for k in cohorts.cohort(r)} for span in (range(cut), range(cut, rounds))
    )
    assert before & after  # a client trains again after the cut, from the state it kept
    assert resumed.summary["client_state_bytes"] == full.summary["client_state_bytes"]


def test_fedbr_contrastive_probability_by_hand():
    gen = torch.Generator().manual_seed(0)
    u, g, x = (torch.randn(5, 7, generator=gen) for _ in range(3))
    got = log_p_positive(u, g, x, 2.0, 3.0)
    cos = torch.nn.functional.cosine_similarity
    a, b = torch.exp(2 * cos(u, g, dim=1)), torch.exp(3 * cos(u, x, dim=1))
    assert torch.allclose(got, torch.log(a / (a + b)), atol=1e-6)
    # a positive equal to the anchor and an opposite negative: p close to 1
    assert float(log_p_positive(u, u, -u, 2.0, 2.0).exp().min()) > 0.98


def test_fedbr_refuses_bad_values():
    with pytest.raises(Exception, match=r"strategy\.pool_items=0"):
        make_strategy("fedbr", {"pool_items": 0})
    with pytest.raises(Exception, match=r"strategy\.tau1=0"):
        make_strategy("fedbr", {"tau1": 0.0})


# --------------------------------------------------------------------------- FedGen
def test_fedgen_input_is_fedavg_during_its_warm_up():
    base = run("fedavg")
    same = run("fedgen_input", {"warmup_rounds": 3})
    assert accuracies(same) == accuracies(base)
    assert same.summary["bytes_shared"] == 0


def test_fedgen_input_sends_the_generator_with_every_broadcast_after_warm_up():
    result = run("fedgen_input", {"warmup_rounds": 1, "generator_steps": 5}, rounds=3)
    params = result.summary["generator_params"]
    generator_bytes = sum(
        t.numel() * 4
        for t in result.strategy.generator.state_dict().values()
        if t.is_floating_point()
    )
    assert generator_bytes >= params * 4  # weights and BN statistics
    rounds = result.history
    assert rounds[0]["bytes_shared_round"] == 0
    for r in rounds[1:]:
        assert r["bytes_shared_round"] == generator_bytes * r["clients"]
    assert all("generator_loss" in r for r in rounds)  # trained after every aggregation from 0


def test_fedgen_input_server_training_makes_the_global_model_recognise_the_generated_labels():
    """L_G's cross-entropy term: after training against a trained global model, that model
    labels the generated inputs as their conditioning labels far above chance."""
    params = {"warmup_rounds": 100, "generator_steps": 200, "diversity_weight": 0.0}
    strat = run("fedgen_input", params, rounds=4).strategy  # FedAvg so far: G untrained

    def agreement() -> float:
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            x, y, _ = strat.generator.eval().sample(500, gen)
            return float((strat.model.eval()(x).argmax(1) == y).float().mean())

    before = agreement()
    loss = strat.train_generator(0)
    assert math.isfinite(loss)
    assert agreement() > max(0.8, before + 0.3)


def test_fedgen_input_generator_shapes_and_diversity_loss():
    gen = torch.Generator().manual_seed(0)
    for shape in [(1, 8, 8), (3, 32, 32), (1, 128, 3), (20,)]:
        g = Generator(10, 32, shape, 8).eval()
        x, y, _ = g.sample(4, gen)
        assert x.shape == (4, *shape) and y.shape == (4,)
    with pytest.raises(Exception, match=r"\(C, H, W\) or \(D,\)"):
        Generator(10, 32, (2, 3, 4, 5), 8)
    z = torch.randn(6, 32, generator=gen)
    same = torch.ones(6, 5)
    assert float(diversity_loss(same, z)) == pytest.approx(1.0)
    assert float(diversity_loss(torch.randn(6, 5, generator=gen), z)) < 1.0


@pytest.mark.parametrize(("rounds", "cut"), CUTS)
def test_fedgen_input_resume_equals_the_uninterrupted_run(tmp_path, rounds, cut):
    """Every recorded number, the generator's loss included (its Adam state is resumed)."""
    params = {"warmup_rounds": 1, "generator_steps": 5}
    full = run("fedgen_input", params, rounds=rounds, run_dir=tmp_path / "full")
    run("fedgen_input", params, rounds=cut, run_dir=tmp_path / "cut")
    resumed = run("fedgen_input", params, rounds=rounds, run_dir=tmp_path / "cut", resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    assert all("generator_loss" in r for r in full.history)
