"""FedMix's three losses (strategies/fedmix.py) against closed forms on a linear model: FLea's
code form, and NaiveMix and FedMix of Yoon et al. 2021 (docs/flea.md, "FedMix's loss")."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from fedshare.config import api
from fedshare.engine.rng import numpy_rng, torch_generator
from fedshare.strategies import make_strategy
from fedshare.strategies.fedmix import fedmix_loss
from helpers import digits_federation

C, D, N = 4, 6, 5


@pytest.fixture
def batch():
    gen = torch.Generator().manual_seed(0)
    net = torch.nn.Linear(D, C).double()
    with torch.no_grad():
        net.weight.copy_(torch.randn(C, D, generator=gen, dtype=torch.float64))
        net.bias.copy_(torch.randn(C, generator=gen, dtype=torch.float64))
    x = torch.randn(N, D, generator=gen, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3, 1])
    means = torch.randn(N, D, generator=gen, dtype=torch.float64)
    label_means = torch.softmax(torch.randn(N, C, generator=gen, dtype=torch.float64), -1)
    lam = torch.tensor([0.1, 0.3, 0.6, 0.8, 0.95], dtype=torch.float64)  # never symmetric
    return net, x, y, means, label_means, lam


def log_probs(net, x):
    return F.log_softmax(x @ net.weight.T + net.bias, dim=-1)


def test_code_form_is_soft_cross_entropy_on_the_beta_mix(batch):
    net, x, y, means, label_means, lam = batch
    w = lam[:, None]
    target = w * F.one_hot(y, C) + (1 - w) * label_means  # λ on the local side, inputs alike
    expected = -(target * log_probs(net, w * x + (1 - w) * means)).sum(1).mean()
    got = fedmix_loss(net, x, y, means, label_means, lam, "code")
    assert got.item() == pytest.approx(expected.item(), rel=1e-6)  # soft labels in float32
    local_ce = -log_probs(net, x)[torch.arange(N), y].mean()
    with_ce = fedmix_loss(net, x, y, means, label_means, lam, "code", local_ce_weight=0.5)
    assert with_ce.item() == pytest.approx((expected + 0.5 * local_ce).item(), rel=1e-6)


def test_naivemix_weighs_the_local_and_the_mean_label_by_one_minus_lambda_and_lambda(batch):
    net, x, y, means, label_means, lam = batch
    w = lam[:, None]
    lp = log_probs(net, (1 - w) * x + w * means)  # λ on the mean
    local = -lp[torch.arange(N), y]
    shared = -(label_means * lp).sum(1)
    expected = ((1 - lam) * local + lam * shared).mean()
    got = fedmix_loss(net, x, y, means, label_means, lam, "naivemix")
    assert got.item() == pytest.approx(expected.item(), rel=1e-10)


def test_fedmix_is_the_first_order_expansion_with_its_local_term(batch):
    """(1 − λ)CE(f(x_s), y) + λCE(f(x_s), ȳ) + λ⟨∂CE/∂x_s, x̄⟩, x_s = (1 − λ)x; for a linear
    model ∂CE_i/∂x_s = Wᵀ(softmax(z_i) − e_{y_i})."""
    net, x, y, means, label_means, lam = batch
    w = lam[:, None]
    lp = log_probs(net, (1 - w) * x)
    local = -lp[torch.arange(N), y]
    shared = -(label_means * lp).sum(1)
    input_grad = (lp.exp() - F.one_hot(y, C)) @ net.weight
    taylor = (input_grad * means).sum(1)
    expected = ((1 - lam) * local + lam * shared + lam * taylor).mean()
    got = fedmix_loss(net, x, y, means, label_means, lam, "fedmix")
    assert got.item() == pytest.approx(expected.item(), rel=1e-10)
    # the Taylor term trains the model too (its input gradient is differentiated through)
    (want,) = torch.autograd.grad(expected, net.weight)
    (have,) = torch.autograd.grad(got, net.weight)
    assert torch.allclose(have, want, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("form", ["code", "naivemix", "fedmix"])
def test_every_form_trains_and_the_form_reaches_the_loss(form):
    data = digits_federation(partition={"name": "dirichlet", "alpha": 0.3}, num_clients=5)
    result = api.simulate(
        make_strategy("fedmix", {"form": form, "mix_lambda": 0.1}),
        data,
        "cnn_small",
        rounds=2,
        train={"optimizer": "adam", "lr": 1e-3, "local_epochs": 2, "batch_size": 32},
        device="cpu",
    )
    assert result.best_accuracy > 18.0  # digits: chance is 10 ± 4.7 % (3 std, 360 test images)
    history = result.history
    assert all("train_loss" in r for r in history[1:])


def test_a_bad_form_or_lambda_is_refused():
    data = digits_federation(num_clients=3)
    for params, match in (
        ({"form": "taylor"}, "strategy.form"),
        ({"mix_lambda": 1.0}, r"strategy.mix_lambda=1.0 is not valid: .* in \[0, 1\)"),
    ):
        with pytest.raises(Exception, match=match):
            api.simulate(make_strategy("fedmix", params), data, "cnn_small", rounds=1)


@pytest.mark.parametrize(
    ("form", "per_sample"), [("code", False), ("code", True), ("naivemix", False)]
)
def test_each_local_batch_is_cut_to_the_next_batch_of_means_with_its_own_lambda(form, per_sample):
    """`_mixed_batches`: batch t of local data pairs row by row with the next batch of an endless
    reshuffled pass over the received means (the client's `pool` stream), both cut to the
    shorter; λ ~ Beta(a, a) from its `mixup` stream, once per batch or per sample (`code`), else
    `mix_lambda`; a client without means gets None (plain local training)."""
    seed, round_idx, cid, a = 4, 2, 1, 0.5
    gen = torch.Generator().manual_seed(3)
    means = torch.randn(7, D, generator=gen)
    label_means = torch.softmax(torch.randn(7, C, generator=gen), -1)
    local = [(torch.randn(n, D, generator=gen), torch.arange(n) % C) for n in (5, 5, 3)]

    def client(pool):
        return SimpleNamespace(
            kept={} if pool is None else {"distribute": SimpleNamespace(payload=pool)},
            train=SimpleNamespace(batch_size=5),
            rng=lambda purpose: torch_generator(seed, f"train/{purpose}", round_idx, cid),
            device="cpu",
            seed=seed,
            phase="train",
            round=round_idx,
            id=cid,
            batches=lambda: iter(local),
        )

    params = {"form": form, "beta_a": a, "beta_per_sample": per_sample, "mix_lambda": 0.2}
    strategy = make_strategy("fedmix", params)
    got = list(strategy._mixed_batches(client({"means": means, "label_means": label_means})))
    order = torch_generator(seed, "train/pool", round_idx, cid)
    first, second = torch.randperm(7, generator=order), torch.randperm(7, generator=order)
    takes = [first[:5], first[5:], second[:3]]  # batches of 5 over 7 means, a new pass at 3
    draws = numpy_rng(seed, "train/mixup", round_idx, cid)
    assert len(got) == 3
    for (x, y), take, batch in zip(local, takes, got, strict=True):
        n = len(take)
        if form == "naivemix":
            lam = torch.full((n,), 0.2)
        else:
            lam = torch.from_numpy(draws.beta(a, a, size=n if per_sample else 1)).float()
            lam = lam.expand(n)
        for have, want in zip(
            batch, (x[:n], y[:n], means[take], label_means[take], lam), strict=True
        ):
            assert torch.equal(have, want)
    assert strategy._mixed_batches(client(None)) is None
    empty = {"means": means[:0], "label_means": label_means[:0]}
    assert strategy._mixed_batches(client(empty)) is None
