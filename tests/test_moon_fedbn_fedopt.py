"""MOON, FedBN, the server optimizers (FedAdagrad/FedAdam/FedYogi/FedAvgM) and FedProx's plain
norm: unit properties, client state through a resume, and small real-data runs on digits
(docs/baselines.md)."""

import math

import pytest
import torch
from torch import nn

from fedshare import simulate
from fedshare.config import TrainConfig
from fedshare.config.api import init_model
from fedshare.engine.client import Client
from fedshare.errors import FedshareError
from fedshare.strategies import MOON, FedAdagrad, FedAdam, FedAvg, FedAvgM, FedBN, FedProx, FedYogi
from fedshare.strategies.base import SetupContext, Update
from fedshare.strategies.fedbn import batchnorm_mask
from fedshare.strategies.fedprox import add_proximal_grad_
from fedshare.strategies.moon import contrastive_loss
from helpers import (
    DIGITS_TRAIN,
    FULL_BATCH,
    client_data,
    digits_federation,
    flat,
    full_gradient,
    tiny_run,
    without_wall_time,
)


def run(strategy, data=None, model="cnn_small", rounds=3, tmp=None, resume=False, seed=0, frac=0.5):
    return simulate(
        strategy,
        data or digits_federation("iid", 6),
        model,
        rounds=rounds,
        seed=seed,
        train=DIGITS_TRAIN,
        clients={"fraction": frac},
        run_dir=tmp,
        resume=resume,
    )


def bn_cnn(data, seed=0):
    """cnn_small with BatchNorm after each conv, initialised from `seed` as a run does."""
    return init_model("cnn_small", data, seed, {"batchnorm": True})


# ---------------------------------------------------------------------------------- MOON
def test_moon_contrastive_loss_is_the_papers_formula():
    g = torch.Generator().manual_seed(0)
    z, zg, zp = (torch.randn(5, 7, generator=g) for _ in range(3))
    tau = 0.5
    cos = nn.functional.cosine_similarity
    pos, neg = torch.exp(cos(z, zg) / tau), torch.exp(cos(z, zp) / tau)
    expected = (-torch.log(pos / (pos + neg))).mean()
    torch.testing.assert_close(contrastive_loss(z, zg, zp, tau), expected)
    # first participation: the previous model is the global one, the loss the constant log 2
    z.requires_grad_(True)
    loss = contrastive_loss(z, zg, zg, tau)
    loss.backward()
    assert loss.item() == pytest.approx(math.log(2))
    assert z.grad.abs().max() < 1e-7


def test_moon_with_mu_zero_is_fedavg_exactly():
    moon, avg = run(MOON(mu=0.0)), run(FedAvg())
    assert without_wall_time(moon.history) == without_wall_time(avg.history)


def weights(result) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in result.strategy.model.parameters()])


def test_moon_changes_training_when_mu_is_positive():
    moon, avg = run(MOON(mu=5.0), rounds=3), run(FedAvg(), rounds=3)
    assert (weights(moon) - weights(avg)).abs().max() > 1e-3
    assert without_wall_time(moon.history) != without_wall_time(avg.history)


def cosines_after_a_step(mu: float, seed: int = 0) -> tuple[float, float]:
    """One SGD step of MOON's local loss from a fixed network on a digits batch, with z_glob
    and z_prev from two other networks: the mean cosine of the new z to each afterwards."""
    data = digits_federation("iid", 2)
    moon = MOON(mu=mu)
    nets = [
        moon._net(init_model("cnn_small", data, seed + i), torch.device("cpu"), 0) for i in range(3)
    ]
    net, glob, prev = nets
    x, y = data.dataset.train_batch(data.client_indices[0][:64])
    with torch.no_grad():
        z_glob, z_prev = glob(x)[1], prev(x)[1]
    moon._loss(net, x, y, z_glob, z_prev).backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= 0.5 * p.grad
        z = net(x)[1]
    cos = nn.functional.cosine_similarity
    return float(cos(z, z_glob).mean()), float(cos(z, z_prev).mean())


def test_moon_term_pulls_towards_the_global_and_away_from_the_previous_model():
    """The contrastive term's gradient, not its value: against the cross-entropy step alone,
    MOON's step moves z towards z_glob and away from z_prev."""
    to_glob, to_prev = cosines_after_a_step(mu=5.0)
    ce_glob, ce_prev = cosines_after_a_step(mu=0.0)
    assert to_glob > ce_glob + 0.01
    assert to_prev < ce_prev - 0.01


@pytest.mark.parametrize("projection_dim", [0, 8], ids=["features", "projection"])
def test_moon_local_loss_is_ce_plus_mu_times_l_con_value_and_gradient(projection_dim):
    """MOON's Eq. 3 (Li et al. 2021), ℓ = ℓ_sup + μ·ℓ_con with ℓ_con of Eq. 2, written out by
    hand (cosine and softmax by their formulas) on the representation z (the features, or the
    projection head's output): the loss and its gradient in every parameter."""
    data = digits_federation("iid", 2)
    mu, tau = 2.0, 0.5
    moon = MOON(mu=mu, tau=tau, projection_dim=projection_dim)
    cpu = torch.device("cpu")
    net, glob, prev = (moon._net(init_model("cnn_small", data, i), cpu, i) for i in range(3))
    x, y = data.dataset.train_batch(data.client_indices[0][:16])
    with torch.no_grad():
        z_glob, z_prev = glob(x)[1], prev(x)[1]
    params = list(net.parameters())
    got = moon._loss(net, x, y, z_glob, z_prev)
    got_grads = torch.autograd.grad(got, params)

    f = net.model.features(x).flatten(1)
    z = f if net.projection is None else net.projection(f)

    def cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))

    pos, neg = torch.exp(cos(z, z_glob) / tau), torch.exp(cos(z, z_prev) / tau)
    l_con = -torch.log(pos / (pos + neg)).mean()
    logits = net.model.head(f)
    l_sup = -(logits - logits.exp().sum(1, keepdim=True).log())[torch.arange(16), y].mean()
    expected = l_sup + mu * l_con
    torch.testing.assert_close(got, expected)
    for g, e in zip(got_grads, torch.autograd.grad(expected, params), strict=True):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=1e-4)


def test_moon_first_participation_contrasts_the_initial_network():
    """MOON's code: a client's previous model before it ever trained is its untrained network
    (here the run's initial model), not the global model; in round 0 they coincide."""
    data = digits_federation("iid", 6)
    seen: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    own = MOON._batches

    def recording(client, glob, prev):
        for batch in own(client, glob, prev):
            x, _, z_glob, z_prev = batch
            seen.append((client.round, client.id, x, z_glob, z_prev))
            yield batch

    MOON._batches = staticmethod(recording)
    try:
        run(MOON(mu=1.0), data, rounds=3, frac=0.5)
    finally:
        MOON._batches = staticmethod(own)
    initial = init_model("cnn_small", data, 0).eval()
    first: dict[int, int] = {}
    for rnd, cid, *_ in seen:
        first.setdefault(cid, rnd)
    late = [(x, zg, zp) for rnd, cid, x, zg, zp in seen if rnd == first[cid] and rnd > 0]
    assert late, "no client took part for the first time after round 0"
    for x, z_glob, z_prev in late:
        with torch.no_grad():
            torch.testing.assert_close(z_prev, initial.features(x))
        assert not torch.allclose(z_prev, z_glob)
    for rnd, _, _, z_glob, z_prev in seen:
        if rnd == 0:
            assert torch.equal(z_prev, z_glob)


def test_moon_batched_with_a_short_last_chunk_equals_serial():
    """Three clients a round trained two at a time (`train.batched=2`): the last chunk holds
    one client and uses one of the two previous-model copies; two rounds (the second with
    trained previous models) equal the serial run."""
    data = digits_federation("iid", 10)
    train = {**DIGITS_TRAIN, "momentum": 0.0}
    serial, batched = (
        simulate(
            MOON(mu=1.0),
            data,
            "cnn_small",
            rounds=2,
            train={**train, "batched": b},
            clients={"per_round": 3},
        )
        for b in (0, 2)
    )
    torch.testing.assert_close(weights(batched), weights(serial), atol=2e-3, rtol=0)


@pytest.mark.parametrize("projection_dim", [0, 16])
def test_moon_previous_model_is_client_state_and_survives_a_resume(tmp_path, projection_dim):
    full = run(MOON(mu=5.0, projection_dim=projection_dim), rounds=4, tmp=tmp_path / "full")
    run(MOON(mu=5.0, projection_dim=projection_dim), rounds=2, tmp=tmp_path / "cut")
    resumed = run(
        MOON(mu=5.0, projection_dim=projection_dim), rounds=4, tmp=tmp_path / "cut", resume=True
    )
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    # each client that took part holds one float32 copy of its last local model (+ projection)
    per_client = full.strategy.flat.numel * 4
    held = full.summary["client_state_bytes"]
    assert held % per_client == 0 and 3 <= held // per_client <= 6
    model_numel = sum(p.numel() for p in full.strategy.model.parameters())
    extra = 0 if projection_dim == 0 else 128 * 128 + 128 + 128 * 16 + 16
    assert full.strategy.flat.numel == model_numel + extra


# ---------------------------------------------------------------------------------- FedBN
def test_fedbn_without_batchnorm_is_fedavg_exactly():
    bn, avg = run(FedBN()), run(FedAvg())
    assert without_wall_time(bn.history) == without_wall_time(avg.history)
    assert bn.summary["client_state_bytes"] == 0


def client_of(strategy, data, model, cid, round_idx=0):
    return Client(
        cid,
        round_idx,
        data.client_indices[cid],
        data.dataset,
        model,
        TrainConfig(**DIGITS_TRAIN),
        0,
        state={},
    )


def test_fedbn_keeps_batchnorm_local_per_client_and_never_uploads_it():
    data = digits_federation({"name": "dirichlet", "alpha": 0.1}, 4)
    model = bn_cnn(data)
    strategy = FedBN()
    strategy.setup(SetupContext(model, data, None, torch.device("cpu")))
    mask = batchnorm_mask(model, strategy.flat.names, strategy.flat.sizes)
    bn_numel = 4 * (32 + 64)  # weight, bias, running mean, running var per channel
    assert int(mask.sum()) == bn_numel
    worker = bn_cnn(data, seed=1)
    message = strategy.broadcast(0)
    assert message.weights.numel() == strategy.flat.numel - bn_numel
    clients = [client_of(strategy, data, worker, cid) for cid in (0, 1)]
    updates = [strategy.client_update(c, message) for c in clients]
    assert all(u.weights.numel() == strategy.flat.numel - bn_numel for u in updates)
    assert all(c.state["bn"].numel() == bn_numel for c in clients)
    assert not torch.equal(clients[0].state["bn"], clients[1].state["bn"])
    # the evaluation model's BN: the sample-weighted mean of the participants' BN states
    strategy.aggregate(iter(updates), 0)
    n0, n1 = (c.num_samples for c in clients)
    mean_bn = (clients[0].state["bn"] * n0 + clients[1].state["bn"] * n1) / (n0 + n1)
    torch.testing.assert_close(strategy.flat.flatten(model)[strategy.bn_mask], mean_bn)
    # the next round starts each client from its own BN, and the personal model carries it
    again = client_of(strategy, data, worker, 0, round_idx=1)
    again.state = {"bn": clients[0].state["bn"].clone()}
    before = again.state["bn"]
    strategy.client_update(again, strategy.broadcast(1))
    assert not torch.equal(again.state["bn"], before)  # trained further from its own BN
    personal = strategy.personal_model(1, {"bn": clients[1].state["bn"]})
    torch.testing.assert_close(
        strategy.flat.flatten(personal)[strategy.bn_mask], clients[1].state["bn"]
    )


# ---------------------------------------------------------------------------------- FedOpt
def tiny_setup(strategy):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    strategy.setup(SetupContext(model, None, None, torch.device("cpu")))
    return model


SECOND_MOMENT = {
    FedAdagrad: lambda v, d2: v + d2,
    FedAdam: lambda v, d2: 0.99 * v + 0.01 * d2,
    FedYogi: lambda v, d2: v - 0.01 * d2 * torch.sign(v - d2),
}


def two_client_means(strategy, model, steps=2):
    """Aggregate `steps` rounds of two random clients (10 and 30 samples); yields (x, mean)."""
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = strategy.flat.flatten(model)
        y1, y2 = (x + torch.randn(x.shape, generator=g) for _ in range(2))
        strategy.aggregate(iter([Update(0, 10, weights=y1), Update(1, 30, weights=y2)]), step)
        yield x, (10 * y1 + 30 * y2) / 40


@pytest.mark.parametrize("cls", list(SECOND_MOMENT))
def test_fedopt_two_server_steps_equal_a_hand_computation(cls):
    decay = {} if cls is FedAdagrad else {"beta2": 0.99}
    strategy = cls(eta=0.1, beta1=0.9, tau=1e-3, v0=1e-6, **decay)
    model = tiny_setup(strategy)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    is_param = strategy.param_mask
    assert int(is_param.sum()) == params.numel() == 2 * 3 + 3 + 3 + 3
    m, v = torch.zeros(params.numel()), torch.full((params.numel(),), 1e-6)
    for x, mean in two_client_means(strategy, model):
        delta = (mean - x)[is_param]
        m = 0.9 * m + 0.1 * delta
        v = SECOND_MOMENT[cls](v, delta**2)
        expected = mean.clone()  # BN running statistics: the plain mean
        expected[is_param] = x[is_param] + 0.1 * m / (v.sqrt() + 1e-3)
        torch.testing.assert_close(strategy.flat.flatten(model), expected)
    torch.testing.assert_close(strategy.state_dict()["v"], v)


def test_fedavgm_three_server_steps_equal_a_hand_computation():
    """Hsu et al.'s v ← β·v + (x − mean), x ← x − η·v on the parameters; BN buffers averaged."""
    strategy = FedAvgM(server_lr=0.7, momentum=0.8)
    model = tiny_setup(strategy)
    is_param = strategy.param_mask
    velocity = torch.zeros(int(is_param.sum()))
    for x, mean in two_client_means(strategy, model, steps=3):
        velocity = 0.8 * velocity + (x - mean)[is_param]
        expected = mean.clone()
        expected[is_param] = x[is_param] - 0.7 * velocity
        torch.testing.assert_close(strategy.flat.flatten(model), expected)
    torch.testing.assert_close(strategy.state_dict()["velocity"], velocity)


def test_fedavgm_without_momentum_at_rate_one_is_fedavg():
    strategy, fedavg = FedAvgM(server_lr=1.0, momentum=0.0), FedAvg()
    model, reference = tiny_setup(strategy), tiny_setup(fedavg)
    for (_, mean), _ in zip(two_client_means(strategy, model, steps=2), range(2), strict=True):
        fedavg.load_weights(reference, mean)
        torch.testing.assert_close(strategy.flat.flatten(model), fedavg.flat.flatten(reference))


@pytest.mark.parametrize(
    ("cls", "key", "value"),
    [
        (FedAvgM, "momentum", 1.0),
        (FedAvgM, "server_lr", 0.0),
        (FedAdagrad, "beta1", -0.1),
        (FedAdagrad, "eta", 0.0),
    ],
)
def test_server_optimizers_reject_a_bad_value_by_name(cls, key, value):
    with pytest.raises(FedshareError, match=f"strategy.{key}={value}"):
        cls(**{key: value})


def test_fedadam_without_moments_is_a_sign_step():
    """β1 = β2 = τ = 0: m = Δ, v = Δ², so x ← x + η·sign(Δ) on every parameter."""
    strategy = FedAdam(eta=0.05, beta1=0.0, beta2=0.0, tau=0.0)
    model = tiny_setup(strategy)
    x = strategy.flat.flatten(model)
    y = x + torch.linspace(-1, 1, x.numel()).roll(1) + 1e-3
    strategy.aggregate(iter([Update(0, 1, weights=y)]), 0)
    mask = strategy.param_mask
    torch.testing.assert_close(
        strategy.flat.flatten(model)[mask], x[mask] + 0.05 * torch.sign((y - x)[mask])
    )


@pytest.mark.parametrize("make", [lambda: FedYogi(eta=0.03), lambda: FedAvgM(momentum=0.5)])
def test_server_optimizer_state_survives_a_resume(tmp_path, make):
    full = run(make(), rounds=4, tmp=tmp_path / "full")
    run(make(), rounds=2, tmp=tmp_path / "cut")
    resumed = run(make(), rounds=4, tmp=tmp_path / "cut", resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)


# ---------------------------------------------------------------------------------- FedProx
@pytest.mark.parametrize("norm", ["squared", "plain"])
def test_fedprox_hook_is_the_gradient_of_its_penalty(norm):
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(3, 4, generator=g, requires_grad=True), torch.randn(5, generator=g)]
    params[1].requires_grad_(True)
    anchor = [p.detach() + 0.3 * torch.randn(p.shape, generator=g) for p in params]
    mu = 0.1
    if norm == "squared":
        penalty = mu / 2 * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True))
    else:
        penalty = mu / 2 * sum((p - a).norm() for p, a in zip(params, anchor, strict=True))
    expected = torch.autograd.grad(penalty, params)
    for p in params:
        p.grad = torch.zeros_like(p)
    add_proximal_grad_(params, anchor, mu, norm)
    for p, e in zip(params, expected, strict=True):
        torch.testing.assert_close(p.grad, e)


def proximal_by_hand(drift: torch.Tensor, mu: float, norm: str) -> torch.Tensor:
    """∇ of μ/2·‖w − w_g‖² (squared), or of (μ/2)·Σ_t ‖w_t − w_g,t‖ over the linear model's
    weight and bias (plain; 0 where a tensor has not moved), at the flat drift w − w_g."""
    if norm == "squared":
        return mu * drift
    parts = drift[:640], drift[640:]
    return torch.cat([mu / 2 * d / d.norm() if d.norm() > 0 else d for d in parts])


@pytest.mark.parametrize("batched", [0, 2], ids=["serial", "batched"])
@pytest.mark.parametrize("norm", ["squared", "plain"])
def test_fedprox_rounds_equal_the_proximal_sgd_written_out(norm, batched):
    """FedProx (Li et al. 2020, Algorithm 2) on a linear model, K = 3 full-batch SGD steps
    w ← w − η(∇F_k(w) + ∇ prox(w − w_g)), then the n_k-weighted mean (FedAvg's), three rounds
    of two clients out of five of unequal sizes; serial and batched (each row its own norm)."""
    mu, eta = 0.5, 0.1
    fed, start, result, cohorts = tiny_run(
        FedProx(mu=mu, norm=norm), {**FULL_BATCH, "batched": batched}
    )
    data = client_data(fed)
    x = flat(start)
    for cohort in cohorts:
        total, n_s = torch.zeros_like(x), 0
        for k in cohort:
            (xb, yb), n_k = data[k]
            w = x.clone()
            for _ in range(3):
                w = w - eta * (full_gradient(w, xb, yb) + proximal_by_hand(w - x, mu, norm))
            total, n_s = total + n_k * w, n_s + n_k
        x = total / n_s
    got = flat(result.strategy.model.parameters()).detach()
    torch.testing.assert_close(got, x, atol=1e-6, rtol=0)
    avg = flat(tiny_run(FedAvg())[2].strategy.model.parameters()).detach()
    assert (avg - x).abs().max() > 1e-3  # the proximal term acted


def test_fedprox_batched_rows_take_their_own_plain_norm():
    """Mini-batches of equal shape stack both clients into one step (the full-batch test above
    steps each client alone): each row's proximal gradient uses its own tensors' norms, so the
    batched rounds equal the serial ones (checked by hand above)."""
    train = {**FULL_BATCH, "local_epochs": 1, "batch_size": 16}
    serial, batched = (
        flat(
            tiny_run(FedProx(mu=0.5, norm="plain"), {**train, "batched": b})[
                2
            ].strategy.model.parameters()
        )
        for b in (0, 2)
    )
    torch.testing.assert_close(batched.detach(), serial.detach(), atol=1e-5, rtol=0)


def test_fedprox_rejects_an_unknown_norm():
    with pytest.raises(Exception, match=r"strategy\.norm=.* must be one of squared, plain"):
        FedProx(norm="l1")


# ---------------------------------------------------------------------------------- real data
REAL = {
    "moon": (MOON, "cnn_small"),
    "fedbn": (FedBN, "bn"),
    "fedadam": (FedAdam, "cnn_small"),
    "fedyogi": (FedYogi, "cnn_small"),
    "fedadagrad": (FedAdagrad, "cnn_small"),
    "fedavgm": (FedAvgM, "cnn_small"),
    "fedprox_plain": (lambda: FedProx(mu=0.001, norm="plain"), "cnn_small"),
}


@pytest.mark.parametrize(
    "seed",
    [0, pytest.param(1, marks=pytest.mark.slow)],  # each also learns in the matrix
)
@pytest.mark.parametrize("name", list(REAL))
def test_digits_dirichlet_runs_learn(name, seed):
    """Digits, 10 clients (all every round), Dirichlet 0.1, 10 rounds, seeds 0 and 1 (1 in
    `slow`), the configs' defaults (measured final accuracies in docs/baselines.md: 43-72 %
    against 10 % chance)."""
    make, model_name = REAL[name]
    data = digits_federation({"name": "dirichlet", "alpha": 0.1}, 10, seed=seed)
    model = bn_cnn(data, seed) if model_name == "bn" else init_model(model_name, data, seed)
    result = run(make(), data, model, rounds=10, seed=seed, frac=1.0)
    assert all(math.isfinite(r["train_loss"]) for r in result.history)
    assert result.final_accuracy > 30.0, (name, seed, result.final_accuracy)
