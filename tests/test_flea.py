"""FLea, FedMix, FedData (FLea's Sec. 3): unit properties, buffer lifecycle, exposure, resume."""

import copy
import inspect
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from conftest import data_root_or_skip
from fedshare.config import TrainConfig, api
from fedshare.data.datasets import DATASETS, load_dataset
from fedshare.engine.optim import learning_rate, make_optimizer
from fedshare.engine.sampling import CohortSampler
from fedshare.errors import FedshareError
from fedshare.functional.losses import distillation_kl, soft_cross_entropy
from fedshare.functional.mixup import beta_weights, mix_labels, mix_pair
from fedshare.models import build_model
from fedshare.privacy.dcor import distance_correlation
from fedshare.privacy.exposure import ExposureTracker, expected_pair_exposure
from fedshare.strategies import make_strategy
from fedshare.strategies.flea import FLea, dcor_weight_at
from helpers import digits_federation, without_wall_time

TRAIN = {
    "optimizer": "adam",
    "lr": 1e-3,
    "local_epochs": 1,
    "batch_size": 32,
    "optimizer_reset_each_step": True,
}


@pytest.fixture(scope="module")
def digits20():
    return digits_federation(partition={"name": "dirichlet", "alpha": 0.3}, num_clients=10)


def run(strategy, data, rounds=3, fraction=0.3, **kwargs):
    strat = (
        make_strategy(strategy, kwargs.pop("params", {})) if isinstance(strategy, str) else strategy
    )
    return api.simulate(
        strat,
        data,
        "cnn_small",
        rounds=rounds,
        clients={"fraction": fraction},
        train=TRAIN,
        device="cpu",
        **kwargs,
    )


# --------------------------------------------------------------------------- FLea Eq. 2: mix-up
def test_beta_two_two_moments_and_per_batch_draws():
    beta = beta_weights(100_000, 2.0, np.random.default_rng(0))
    assert float(beta.mean()) == pytest.approx(0.5, abs=0.005)
    assert float(beta.var()) == pytest.approx(0.05, abs=0.002)
    one = beta_weights(8, 2.0, np.random.default_rng(1), per_sample=False)
    assert one.shape == (8,) and torch.all(one == one[0])


def test_mixup_identities():
    f, fb = torch.randn(5, 3, 4, 4), torch.randn(5, 3, 4, 4)
    assert torch.equal(mix_pair(f, fb, torch.ones(5)), f)
    assert torch.equal(mix_pair(f, fb, torch.zeros(5)), fb)
    beta = beta_weights(5, 2.0, np.random.default_rng(2))
    mixed = mix_pair(f, fb, beta)
    assert torch.allclose(mixed[2], beta[2] * f[2] + (1 - beta[2]) * fb[2])
    y_mix = mix_labels(torch.tensor([0, 1, 2, 3, 4]), torch.tensor([4, 4, 1, 0, 2]), beta, 6)
    assert torch.allclose(y_mix.sum(1), torch.ones(5))
    assert y_mix[0, 0] == pytest.approx(float(beta[0])) and y_mix[0, 4] == pytest.approx(
        1 - float(beta[0])
    )
    soft = mix_labels(torch.tensor([1]), torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([0.5]), 3)
    assert torch.allclose(soft, torch.tensor([[0.25, 0.75, 0.0]]))


def test_soft_cross_entropy_and_distillation():
    logits, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    assert soft_cross_entropy(logits, F.one_hot(y, 4).float()) == pytest.approx(
        float(F.cross_entropy(logits, y))
    )
    teacher = torch.randn(6, 4)
    assert distillation_kl(logits, logits) == pytest.approx(0.0, abs=1e-7)
    expected = F.kl_div(F.log_softmax(logits, 1), F.softmax(teacher, 1), reduction="batchmean")
    assert distillation_kl(logits, teacher) == pytest.approx(float(expected), rel=1e-5)
    reverse = F.kl_div(F.log_softmax(teacher, 1), F.softmax(logits, 1), reduction="batchmean")
    assert distillation_kl(logits, teacher, direction="student_to_teacher") == pytest.approx(
        float(reverse), rel=1e-5
    )
    hot = distillation_kl(logits, teacher, temperature=2.0)
    soft_t = F.kl_div(
        F.log_softmax(logits / 2, 1), F.softmax(teacher / 2, 1), reduction="batchmean"
    )
    assert hot == pytest.approx(4 * float(soft_t), rel=1e-5)


# --------------------------------------------------------------- FLea App. C.2 and code: schedules
def test_learning_rate_and_dcor_weight_schedules():
    cfg = TrainConfig(lr=1e-3, lr_schedule="linear", lr_decay=0.018, lr_floor=1e-4)
    rates = [learning_rate(cfg, g) for g in (0, 1, 49, 50, 99)]
    assert rates == pytest.approx([1e-3, 9.82e-4, 1.18e-4, 1e-4, 1e-4])
    code = [dcor_weight_at(g, 3.0, "linear", 0.1, 1.0) for g in (1, 19, 20, 60)]
    assert code == pytest.approx([2.9, 1.1, 1.0, 1.0])
    assert dcor_weight_at(50, 3.0, "constant", 0.1, 1.0) == 3.0
    assert dcor_weight_at(5, 0.0, "linear", 0.1, 1.0) == 0.0  # λ2 = 0 stays 0
    flea = make_strategy("flea")
    assert flea.warmup and flea.warmup_dcor_weight == 3.0


def test_optimizer_reset_each_step_equals_a_new_adam_per_step():
    torch.manual_seed(0)
    a = torch.nn.Linear(5, 3)
    b = copy.deepcopy(a)
    cfg = TrainConfig(optimizer="adam", optimizer_reset_each_step=True)
    opt = make_optimizer(a.parameters(), cfg, 1e-2)
    for step in range(4):
        x = torch.randn(8, 5, generator=torch.Generator().manual_seed(step))
        for model, optimizer in ((a, opt), (b, torch.optim.Adam(b.parameters(), lr=1e-2))):
            optimizer.zero_grad()
            model(x).pow(2).sum().backward()
            optimizer.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa, pb)
    keep = make_optimizer(a.parameters(), TrainConfig(optimizer="adam"), 1e-2)
    a(torch.randn(2, 5)).sum().backward()
    keep.step()
    assert keep.state  # the default keeps the Adam moments


# --------------------------------------------------------------------------- FLea §3.2: buffer
@pytest.mark.parametrize(
    ("model", "input_shape", "classes", "shape"),
    [
        ("mobilenetv2_cifar", (3, 32, 32), 10, (16, 32, 32)),
        ("audionet", (2, 64, 344), 10, (16, 16, 86)),
        ("harnet", (1, 128, 3), 6, (128, 20, 7)),
    ],
)
def test_shared_layer_shapes_of_fleas_models(model, input_shape, classes, shape):
    net = build_model(model, input_shape, classes).eval()
    assert make_strategy("flea").resolve_split(net) == net.flea_layer == 2
    with torch.no_grad():
        assert net.encode(torch.zeros(1, *input_shape), net.flea_layer).shape[1:] == shape


# --------------------------------------------------------------------------- the split l
def test_default_split_is_the_models_flea_layer_not_its_share_layer():
    model = build_model("lenet_fmnist", (1, 28, 28), 10)  # share_layer: ReBaFL's penultimate
    assert model.share_layer == model.penultimate == 3
    assert make_strategy("flea").resolve_split(model) == model.flea_layer == 1
    assert make_strategy("flea", {"split_layer": 2}).resolve_split(model) == 2


def test_penultimate_split_is_refused_unless_allowed(digits20):
    model = build_model("cnn_small", (1, 8, 8), 10)
    with pytest.raises(FedshareError, match=r"split 3 is the penultimate split") as err:
        make_strategy("flea", {"split_layer": 3}).resolve_split(model)
    assert "allow_penultimate_split=true" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(FedshareError, match="penultimate"):
        run("flea", digits20, rounds=1, params={"split_layer": 3})
    allowed = make_strategy("flea", {"split_layer": 3, "allow_penultimate_split": True})
    assert allowed.resolve_split(model) == 3
    one_hidden = build_model("mlp", (1, 8, 8), 10, {"hidden": [16]})  # its flea_layer = head input
    with pytest.raises(FedshareError, match="penultimate"):
        make_strategy("flea").resolve_split(one_hidden)
    with pytest.raises(FedshareError, match="needs a model with a feature extractor"):
        make_strategy("flea").resolve_split(build_model("linear", (12,), 5))


# --------------------------------------------------------------------------- FLea §3.3: KD
def _kd_only_loss(model, teacher, x, y, f_buf, y_buf, detach_teacher=True):
    """Reference KD term with kd_input=mixed: KL(θ^(t)[l:](f̃) ‖ θ_k[l:](f̃)), β from seed 0."""
    f = model.encode(x, 1)
    beta = beta_weights(len(y), 2.0, np.random.default_rng(0))
    f_mix = mix_pair(f, f_buf, beta)
    target = teacher.decode(f_mix, 1)
    return distillation_kl(model.decode(f_mix, 1), target.detach() if detach_teacher else target)


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def test_kd_teacher_is_frozen_with_mixed_inputs():
    torch.manual_seed(0)
    model = build_model("cnn_small", (1, 8, 8), 10)
    teacher = copy.deepcopy(model)  # requires_grad stays on, so a leak would show
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.1 * torch.randn_like(p))
    flea = make_strategy("flea", {"kd_input": "mixed", "local_ce_weight": 0, "mix_ce_weight": 0})
    flea.split, flea.num_classes = 1, 10
    x, y = torch.randn(6, 1, 8, 8), torch.randint(0, 10, (6,))
    f_buf, y_buf = model.encode(torch.randn(6, 1, 8, 8), 1).detach(), torch.randint(0, 10, (6,))
    beta = beta_weights(len(y), 2.0, np.random.default_rng(0))  # as _kd_only_loss draws it
    loss = flea._mixed_loss(model, teacher, y, model.encode(x, 1), f_buf, y_buf, beta)
    got = _grads(model, loss)
    assert all(p.grad is None for p in teacher.parameters())
    frozen = _kd_only_loss(model, teacher, x, y, f_buf, y_buf)
    leaky = _kd_only_loss(model, teacher, x, y, f_buf, y_buf, detach_teacher=False)
    assert loss.item() == pytest.approx(frozen.item(), rel=1e-6)  # the value is unchanged
    assert leaky.item() == pytest.approx(frozen.item(), rel=1e-6)
    for a, b in zip(got, _grads(model, frozen), strict=True):
        assert torch.allclose(a, b, atol=1e-7)
    through = _grads(model, leaky)  # what a teacher path with gradient would give
    assert not all(torch.allclose(a, b, atol=1e-7) for a, b in zip(got, through, strict=True))


def _by_hand_kl(student, teacher, tau):
    """KL(softmax(teacher/τ) ‖ softmax(student/τ))·τ², batch mean (FLea's code form)."""
    p = F.softmax(teacher / tau, 1)
    return (p * (F.log_softmax(teacher / tau, 1) - F.log_softmax(student / tau, 1))).sum(
        1
    ).mean() * tau**2


def _flea_step_setup():
    torch.manual_seed(0)
    model = build_model("cnn_small", (1, 8, 8), 10)
    teacher = copy.deepcopy(model)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.2 * torch.randn_like(p))
    teacher.requires_grad_(False).eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(10, 1, 8, 8, generator=g), torch.randint(0, 10, (10,), generator=g)
    return model, teacher, x, y


def test_step_loss_is_the_code_form_term_by_term_value_and_gradient():
    """One local step after the warm-up (FLea's Eqs. 3–6, code form), written out by hand:
    mix·CE_soft(θ[l:](β f + (1 − β) f_buf), β e(y) + (1 − β) e(y_buf)) + local·CE(θ(x), y)
    + kd·τ²·KL(θ^(t)[l:](f_buf) ‖ θ[l:](f_buf)) + λ2(g)·dCor(x, f), with a buffer batch shorter
    than the local one (the local side cut to its length), distinct weights, asymmetric β.
    Its value and its gradient must match (a dropped term, a flipped sign, a label mixed with
    the wrong weight or a lost gradient all fail)."""
    model, teacher, x, y = _flea_step_setup()
    params = {"local_ce_weight": 0.7, "mix_ce_weight": 1.3, "kd_weight": 0.4}
    flea = make_strategy("flea", {**params, "kd_temperature": 2.0})
    flea.split, flea.num_classes = 1, 10
    g = torch.Generator().manual_seed(2)
    f_buf = model.encode(torch.randn(8, 1, 8, 8, generator=g), 1).detach()
    y_buf = torch.randint(0, 10, (8,), generator=g)
    beta = torch.linspace(0.05, 0.9, 8)
    loss, (dcor, counted) = flea._step_loss(5, teacher)(model, x, y, f_buf, y_buf, beta)

    f = model.encode(x, 1)
    w = beta.view(-1, 1, 1, 1)
    z_mix = model.decode(w * f[:8] + (1 - w) * f_buf, 1)
    y_mix = beta[:, None] * F.one_hot(y[:8], 10) + (1 - beta[:, None]) * F.one_hot(y_buf, 10)
    mixed = -(y_mix * F.log_softmax(z_mix, 1)).sum(1).mean()
    kd = _by_hand_kl(model.decode(f_buf, 1), teacher.decode(f_buf, 1), 2.0)
    dcor_ref = distance_correlation(x, f, "code")
    lam2 = 3.0 - 0.1 * 5  # the code's schedule at g = 5
    expected = 1.3 * mixed + 0.7 * F.cross_entropy(model.decode(f, 1), y) + 0.4 * kd
    expected = expected + lam2 * dcor_ref
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(dcor, dcor_ref.detach())
    assert float(counted) == 1.0
    for a, b in zip(_grads(model, loss), _grads(model, expected), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_dcor_counts_from_two_samples_and_skips_a_batch_of_one():
    """Eq. 5's term needs two samples: a batch of two adds λ2·dCor and counts, one does not."""
    model, teacher, x, y = _flea_step_setup()
    flea = make_strategy("flea")
    flea.split, flea.num_classes = 1, 10
    step = flea._step_loss(5, teacher)
    loss, (dcor, counted) = step(model, x[:2], y[:2])
    f = model.encode(x[:2], 1)
    expected = F.cross_entropy(model.decode(f, 1), y[:2]) + 2.5 * distance_correlation(x[:2], f)
    torch.testing.assert_close(loss, expected)
    assert float(counted) == 1.0
    loss, (dcor, counted) = step(model, x[:1], y[:1])
    torch.testing.assert_close(loss, F.cross_entropy(model(x[:1]), y[:1]))
    assert float(counted) == 0.0 and float(dcor) == 0.0


def test_warmup_step_loss_is_ce_plus_kd_on_raw_inputs_plus_dcor():
    """Round 0 of FLea's code: CE + 0.5·KL(θ^(1)(x) ‖ θ_k(x)) + 3·dCor(x, f)."""
    model, teacher, x, y = _flea_step_setup()
    flea = make_strategy("flea")
    flea.split, flea.num_classes = 1, 10
    loss, _ = flea._step_loss(0, teacher)(model, x, y)
    f = model.encode(x, 1)
    logits = model.decode(f, 1)
    expected = F.cross_entropy(logits, y) + 0.5 * _by_hand_kl(logits, teacher(x), 1.0)
    expected = expected + 3.0 * distance_correlation(x, f, "code")
    torch.testing.assert_close(loss, expected)
    for a, b in zip(_grads(model, loss), _grads(model, expected), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_clients_mix_with_the_last_buffer_each_activation_with_its_own_label(digits20, monkeypatch):
    """Buffer routing: every buffer activation a client mixes with in round t is a row of the
    buffer built at the end of round t − 1, carried with that row's label."""
    buffers, mixed = [], []
    original = FLea._mixed_loss

    def spy(self, model, teacher, y, f, f_buf, y_buf, beta):
        mixed.append((self_round[0], f_buf.detach().clone(), y_buf.clone()))
        return original(self, model, teacher, y, f, f_buf, y_buf, beta)

    self_round = [0]

    def watch(sim, rounds_done, record):
        buffers.append(dict(sim.strategy.buffer))
        self_round[0] = rounds_done

    monkeypatch.setattr(FLea, "_mixed_loss", spy)
    run("flea", digits20, rounds=3, callbacks=[watch])
    assert {r for r, _, _ in mixed} == {1, 2}
    for round_idx, f_buf, y_buf in mixed:
        buffer = buffers[round_idx - 1]
        rows = buffer["features"].flatten(1)
        match = torch.cdist(f_buf.flatten(1), rows).argmin(1)
        torch.testing.assert_close(rows[match], f_buf.flatten(1))
        assert torch.equal(buffer["labels"][match], y_buf)


def test_buffer_lifecycle_bytes_and_exposure(digits20):
    data = digits20
    seen = []

    def watch(sim, rounds_done, record):
        strat = sim.strategy
        seen.append(
            (
                sim.sampler.cohort(rounds_done - 1),
                dict(strat.buffer),
                list(strat.buffer_owners),
                copy.deepcopy(strat.model),
            )
        )

    result = run("flea", data, rounds=3, callbacks=[watch])
    strat = result.strategy
    sizes = data.client_sizes
    pairs = torch.zeros(10, 10, dtype=torch.bool)
    exposed = np.zeros(10)
    for t, (cohort, buffer, owners, model) in enumerate(seen):
        sharing = [c for c in cohort if sizes[c] >= 10]
        assert owners == sharing  # only this round's participants, the old buffer is gone
        expected = sum(int(0.1 * sizes[c]) for c in sharing)
        assert buffer["features"].shape[0] == buffer["labels"].shape[0] == expected
        idx = torch.cat([data.client_indices[c][strat.share_positions(c)] for c in sharing])
        x, y = data.dataset.train_batch(idx)
        model.eval()
        with torch.no_grad():  # extracted by the *new* global model, BN in eval mode
            assert torch.allclose(buffer["features"], model.encode(x, strat.split), atol=1e-5)
        assert torch.equal(buffer["labels"], y)
        record = result.history[t]
        # round 0 has no buffer to send; later rounds send the previous buffer to the cohort
        sent = 0 if t == 0 else _payload_bytes(seen[t - 1][1]) * len(cohort)
        assert record["bytes_shared_round"] == sent + _payload_bytes(buffer)
        assert record["buffer_size"] == (0 if t == 0 else seen[t - 1][1]["labels"].numel())
        if t > 0:
            for owner in seen[t - 1][2]:
                pairs[owner, cohort] = True
        for c in sharing:
            exposed[c] = len(set(strat.share_positions(c).tolist())) / sizes[c]
    summary = result.summary
    assert summary["exposure_pairs"] == pytest.approx(float(pairs.float().mean()))
    assert summary["exposure_data_mean"] == pytest.approx(exposed.mean())
    assert 0 < summary["exposure_data_max"] <= 0.1
    assert 0 < result.history[-1]["shared_dcor"] <= 1
    assert 0 < result.history[-1]["train_dcor"] <= 1


def _payload_bytes(payload: dict) -> int:
    return sum(t.numel() * t.element_size() for t in payload.values())


# --------------------------------------------------------------------------- FLea §4.4: exposure
@pytest.mark.parametrize("clients", [100, 500])
def test_directed_pair_exposure_follows_the_closed_form(clients):
    sampler = CohortSampler(clients, clients // 10, np.ones(clients), seed=clients)
    tracker = ExposureTracker([10] * clients)
    values = {}
    previous = None
    for t in range(1, 101):
        cohort = sampler.cohort(t - 1)
        if previous is not None:
            tracker.record_delivery(previous, cohort)
        previous = cohort
        values[t] = tracker.pair_exposure()
    assert 0.37 <= values[50] <= 0.41 and 0.61 <= values[100] <= 0.65
    assert values[50] == pytest.approx(expected_pair_exposure(50, 0.1), abs=0.02)


def test_exposure_tracker_data_fractions_and_state():
    tracker = ExposureTracker([10, 4, 0])
    tracker.record_shared(0, torch.tensor([1, 1, 3]))
    tracker.record_delivery([0], [0, 2])
    assert tracker.data_fractions() == [0.2, 0.0, 0.0]
    m = tracker.metrics()
    assert m["exposure_pairs"] == pytest.approx(2 / 9)
    assert m["exposure_clients"] == pytest.approx(1 / 3)
    assert m["exposure_data_total"] == pytest.approx(2 / 14)
    other = ExposureTracker([10, 4, 0])
    other.load_state_dict(tracker.state_dict())
    assert other.metrics() == m


# --------------------------------------------------------------------------- FedMix, FedData
def test_fedmix_shares_means_once_with_full_exposure(digits20):
    data = digits20
    result = run("fedmix", data, rounds=2)
    strat = result.strategy
    sizes = data.client_sizes
    assert strat.pool_size == sum(n // 10 for n in sizes)
    groups = strat.server_groups(3)
    x, _ = data.dataset.train_batch(data.client_indices[3][groups.flatten()])
    start = sum(n // 10 for n in sizes[:3])
    means = strat.pool["means"][start : start + groups.shape[0]]
    assert torch.allclose(means, x.view(*groups.shape, *x.shape[1:]).mean(1), atol=1e-6)
    label_means = strat.pool["label_means"]
    assert torch.allclose(label_means.sum(1), torch.ones(len(label_means)))
    sharing = sum(n >= 10 for n in sizes)
    assert result.summary["exposure_pairs"] == pytest.approx(sharing / 10)
    fractions = result.summary["exposure_data_per_client"]
    assert fractions == pytest.approx([10 * (n // 10) / n for n in sizes], abs=1e-4)
    first, second = result.history
    pool_bytes = _payload_bytes(strat.pool)
    assert first["bytes_shared_round"] == pool_bytes * (1 + 10)  # uploads + one send to all
    assert second["bytes_shared_round"] == 0
    assert 0 < first["shared_dcor"] < 1


def test_feddata_pool_is_appended_to_every_client(digits20):
    data = digits20
    result = run("feddata", data, rounds=2, params={"share_fraction": 0.05})
    strat = result.strategy
    sizes = data.client_sizes
    shared = torch.cat(
        [data.client_indices[c][strat.shared_positions(c)] for c in strat.pool_owners]
    )
    assert strat.pool_size == len(shared) == sum(int(0.05 * n) for n in sizes)
    assert torch.equal(strat.pool["labels"], data.dataset.y_train[shared])
    assert torch.equal(strat.pool["samples"], data.dataset.x_train[shared])
    # every client keeps the pool it received; the simulation stores it once
    assert result.summary["client_state_bytes"] == _payload_bytes(strat.pool)
    assert result.summary["exposure_pairs"] == 1.0
    assert result.summary["exposure_data_mean"] == pytest.approx(
        np.mean([int(0.05 * n) / n for n in sizes])
    )
    assert result.summary["shared_dcor"] == pytest.approx(1.0, abs=1e-4)  # raw data


# --------------------------------------------------------------------------- options, resume
def test_paper_forms_run_and_bad_options_are_refused(digits20):
    paper = {
        "local_ce_weight": 0.0,
        "kd_input": "mixed",
        "kd_direction": "student_to_teacher",
        "dcor_variant": "paper",
        "dcor_schedule": "constant",
        "warmup": False,
        "beta_per_sample": False,
        "share_with_replacement": True,
    }
    result = run("flea", digits20, rounds=2, params=paper)
    assert np.isfinite(result.history[-1]["train_loss"])
    ablation = run("flea", digits20, rounds=1, params={"share_features": False})
    assert ablation.summary["exposure_pairs"] == 0 and ablation.summary["bytes_shared"] == 0
    with pytest.raises(
        FedshareError, match=r"strategy\.kd_input='x' is not valid: it must be one of buffer, mixed"
    ):
        run("flea", digits20, rounds=1, params={"kd_input": "x"})
    with pytest.raises(FedshareError, match=r"split_layer=9 is not a split point"):
        run("flea", digits20, rounds=1, params={"split_layer": 9})
    with pytest.raises(
        FedshareError, match=r"share_fraction=1\.5 is not valid: .* number in \[0, 1\]"
    ):
        run("feddata", digits20, rounds=1, params={"share_fraction": 1.5})


@pytest.mark.parametrize("strategy", ["flea", "fedmix"])
def test_killed_and_resumed_run_equals_uninterrupted(tmp_path, digits20, strategy):
    params = {"warmup_epoch_multiplier": 1} if strategy == "flea" else {}
    full = run(strategy, digits20, rounds=2, run_dir=tmp_path / "full", params=params)
    part = tmp_path / "part"
    run(strategy, digits20, rounds=1, run_dir=part, checkpoint={"every": 1}, params=params)
    resumed = run(strategy, digits20, rounds=2, run_dir=part, resume=True, params=params)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    keys = ("exposure_pairs", "exposure_data_mean", "shared_dcor")
    assert {k: resumed.summary[k] for k in keys} == {k: full.summary[k] for k in keys}


# --------------------------------------------------------------------------- FLea's code: test set
AUGMENT_TEST_DATASETS = ("cifar10", "cifar100", "urbansound8k", "fsdd")
DATA_CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "data"


@pytest.mark.parametrize("name", AUGMENT_TEST_DATASETS)
def test_augment_test_is_one_switch_off_by_default(name):
    default = inspect.signature(DATASETS.get(name)).parameters["augment_test"].default
    assert default is False
    assert OmegaConf.load(DATA_CONFIGS / f"{name}.yaml").augment_test is False


def test_cifar_augment_test_crops_the_test_images_too():
    root = data_root_or_skip("cifar10_sample")
    cfg = {"name": "cifar10_sample", "root": str(root), "cache": False}
    clean = load_dataset(cfg)
    train = load_dataset(cfg | {"static_augment": "train"})
    both = load_dataset(cfg | {"static_augment": "train", "augment_test": True})
    assert torch.equal(train.x_test, clean.x_test) and torch.equal(both.x_train, train.x_train)
    assert not torch.equal(both.x_test, clean.x_test)
    assert torch.equal(load_dataset(cfg | {"static_augment": "all"}).x_test, both.x_test)
    with pytest.raises(FedshareError, match=r"augment_test=true needs data\.static_augment"):
        load_dataset(cfg | {"augment_test": True})


def _write_fsdd(root: Path) -> None:
    folder = root / "fsdd" / "recordings"
    folder.mkdir(parents=True)
    t = np.arange(2400) / 8000
    for digit, take in [(1, 0), (2, 1), (1, 5), (2, 6)]:
        x = 0.3 * np.sin(2 * np.pi * (200 + 50 * digit + take) * t)
        with wave.open(str(folder / f"{digit}_theo_{take}.wav"), "wb") as fh:
            fh.setnchannels(1)
            fh.setsampwidth(2)
            fh.setframerate(8000)
            fh.writeframes((x * 32767).astype("<i2").tobytes())


def test_audio_augment_test_and_its_older_alias(tmp_path):
    _write_fsdd(tmp_path)
    cfg = {"name": "fsdd", "root": str(tmp_path), "cache": False}
    plain = {"random_pad": False, "time_shift": 0.0, "freq_masks": 0, "time_masks": 0}
    clean = load_dataset(cfg | {"spectrogram": plain})
    default = load_dataset(cfg)
    both = load_dataset(cfg | {"augment_test": True})
    assert torch.equal(default.x_test, clean.x_test)  # clean test clips by default
    assert torch.equal(both.x_train, default.x_train)
    assert not torch.equal(both.x_test, clean.x_test)
    alias = load_dataset(cfg | {"spectrogram": {"augment_test": True}})
    assert torch.equal(alias.x_test, both.x_test)
    with pytest.raises(FedshareError, match="contradicts"):
        load_dataset(cfg | {"augment_test": True, "spectrogram": {"augment_test": False}})
