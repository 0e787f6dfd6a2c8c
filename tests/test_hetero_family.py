"""The personal-model base and the logit/head-sharing methods: FD (per-label logits),
LG-FedAvg (a global head) and local-only training (nothing shared)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from fedshare.config import TrainConfig
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.functional.logit_sharing import label_distillation_loss
from fedshare.functional.losses import distillation_kl
from fedshare.strategies._personal import PERSONAL, personal_init
from fedshare.strategies.base import Update
from fedshare.strategies.fedproto import prototype_message
from helpers import DIGITS_TRAIN, digits_federation, without_wall_time
from hetero_runs import CLIENTS, chance_bound, digits_run, server_side

BOUND = chance_bound(digits_federation("iid", CLIENTS))


def held_labels() -> int:
    return sum(
        int((row > 0).sum()) for row in digits_federation("iid", CLIENTS).partition.class_counts
    )


# ---------------------------------------------------------------- personal models
def test_each_client_starts_from_its_own_deterministic_initialisation():
    strategy, _ = server_side("local_only")
    model = strategy.model
    before = FlatState(model).flatten(model).clone()
    first, again, other = (personal_init(model, 0, k) for k in (1, 1, 2))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert torch.equal(FlatState(model).flatten(model), before)  # the model is left as it was


def test_personal_model_is_the_clients_kept_weights_else_its_initialisation():
    strategy, _ = server_side("local_only")
    flat = FlatState(strategy.model)
    kept = torch.randn(flat.numel)
    assert torch.equal(flat.flatten(strategy.personal_model(3, {PERSONAL: kept})), kept)
    fresh = flat.flatten(strategy.personal_model(3, {}))
    assert torch.equal(fresh, personal_init(strategy.model, 0, 3))


def test_local_only_sends_nothing_and_learns():
    result = digits_run("local_only", rounds=2)
    assert result.summary["bytes_up"] == result.summary["bytes_down"] == 0
    assert result.summary["best_accuracy"] > BOUND


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("fedproto", None),
        pytest.param("fedtgp", {"server_epochs": 2}, marks=pytest.mark.slow),
        pytest.param("fedkd", None, marks=pytest.mark.slow),
        pytest.param("fedmrl", None, marks=pytest.mark.slow),
    ],
)
def test_personal_models_resume_exactly(tmp_path, name, params):
    """Client states, the server's shared state and the shown model survive a checkpoint."""

    def run(rounds: int, folder: str, resume: bool = False):
        return digits_run(
            name,
            rounds=rounds,
            params=params,
            run_dir=tmp_path / folder,
            resume=resume,
            eval={"personal": True},
        )

    full = run(4, "full")
    run(2, "cut")
    resumed = run(4, "cut", resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    assert full.history[-1]["personal_accuracy"] > BOUND


# ---------------------------------------------------------------- FD
def test_label_distillation_is_kd_toward_the_own_labels_global_logits():
    torch.manual_seed(0)
    z = torch.randn(4, 3)
    g = torch.randn(3, 3)
    y = torch.tensor([0, 2, 2, 1])
    mask = torch.tensor([True, False, True])
    loss = label_distillation_loss(z, y, g, mask, temperature=2.0)
    held = mask[y]
    expected = distillation_kl(z[held], g[y[held]], 2.0) * held.float().mean()
    torch.testing.assert_close(loss, expected)
    z.requires_grad_(True)
    label_distillation_loss(z, y, g, mask, temperature=1.0).backward()
    assert torch.equal(z.grad[3], torch.zeros(3))  # label 1 has no global logits
    moved = z.detach() - 10 * z.grad  # a step lowers the KL to the own label's logits
    before = distillation_kl(z.detach()[:3], g[y[:3]])
    assert distillation_kl(moved[:3], g[y[:3]]) < before


def test_fd_global_logits_are_the_unweighted_mean_across_clients():
    strategy, _ = server_side("fd")
    a, b = torch.randn(10, 10), torch.randn(10, 10)
    held_a = torch.zeros(10, dtype=torch.bool)
    held_b = torch.zeros(10, dtype=torch.bool)
    held_a[[0, 1]] = True
    held_b[[1]] = True
    updates = [
        Update(0, 100, payload=prototype_message(a, held_a).payload),
        Update(1, 5, payload=prototype_message(b, held_b).payload),
    ]
    strategy.aggregate(iter(updates), 0)
    torch.testing.assert_close(strategy.logits[1], (a[1] + b[1]) / 2)
    torch.testing.assert_close(strategy.logits[0], a[0])
    assert strategy.mask.tolist() == [True, True] + [False] * 8


def test_fd_sends_per_label_logits_only_and_learns():
    result = digits_run("fd", rounds=2)
    up = held_labels() * (10 * 4 + 8)  # a C-float logit vector and the label id per label held
    first, second = result.history
    assert first["bytes_up"] == up and first["bytes_down"] == 0
    assert second["bytes_down"] == CLIENTS * 10 * (10 * 4 + 8)
    assert result.summary["best_accuracy"] > BOUND


# ---------------------------------------------------------------- LG-FedAvg
def test_lg_global_head_is_the_sample_weighted_mean_and_dresses_personal_models():
    strategy, _ = server_side("lg_fedavg")
    n = strategy.global_head.numel()
    a, b = torch.randn(n), torch.randn(n)
    strategy.aggregate(iter([Update(0, 30, weights=a), Update(1, 10, weights=b)]), 0)
    torch.testing.assert_close(strategy.global_head, (30 * a + 10 * b) / 40)
    flat = FlatState(strategy.model)
    kept = torch.randn(flat.numel)
    model = strategy.personal_model(2, {PERSONAL: kept})
    assert torch.equal(FlatState(model.head).flatten(model.head), strategy.global_head)
    body = flat.flatten(model)[: flat.numel - n]
    assert torch.equal(body, kept[: flat.numel - n])  # the head's entries come last


def test_lg_sends_the_head_both_ways_and_learns():
    result = digits_run("lg_fedavg", rounds=2)
    head = (128 * 10 + 10) * 4  # cnn_small's head: Linear(128, 10)
    first = result.history[0]
    assert first["bytes_up"] == first["bytes_down"] == CLIENTS * head
    assert result.summary["bytes_shared"] == 0  # model traffic, not a payload
    assert result.summary["best_accuracy"] > BOUND


def test_fd_with_lambda_zero_is_local_training():
    """λ weights the distillation term: at λ = 0 FD's clients train as local-only ones."""
    fd = digits_run("fd", rounds=2, params={"lam": 0.0})
    local = digits_run("local_only", rounds=2)
    shown = [r.strategy.global_model() for r in (fd, local)]
    assert fd.summary["shown_client"] == local.summary["shown_client"]
    torch.testing.assert_close(
        FlatState(shown[0]).flatten(shown[0]), FlatState(shown[1]).flatten(shown[1])
    )
    assert fd.history[-1]["train_loss"] == pytest.approx(local.history[-1]["train_loss"])


def test_fd_client_loss_is_ce_plus_lambda_kd_and_it_sends_exactly_its_labels():
    """The local loss is CE + λ·KD toward the received logits (its sign and weight), and the
    upload holds every label the client has, a label of one sample too, and no other."""
    strategy, data = server_side("fd", {"lam": 0.5, "temperature": 2.0})
    y = data.dataset.y_train
    indices = torch.cat([torch.nonzero(y == 0).flatten()[:1], torch.nonzero(y == 3).flatten()[:9]])
    worker = copy.deepcopy(strategy.model)
    client = Client(0, 1, indices, data.dataset, worker, TrainConfig(**DIGITS_TRAIN), 0)
    targets = torch.randn(10, 10)
    held = torch.zeros(10, dtype=torch.bool)
    held[[0, 3, 5]] = True
    message = prototype_message(targets, held)
    net, loss_fn = strategy.local_step(client, message)
    x, labels = client.data()
    z = net(x)
    expected = F.cross_entropy(z, labels) + 0.5 * label_distillation_loss(
        z, labels, targets, held, 2.0
    )
    torch.testing.assert_close(loss_fn(net, x, labels), expected)
    sent = strategy.uploaded(client, net, torch.tensor(0.0), message).payload
    assert sent["proto_classes"].tolist() == [0, 3]
