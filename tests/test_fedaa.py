"""FedAA (FedAA's Sec. 3, Algorithm 4): its model, its partition and class subset, the pieces of a
round checked against its equations (docs/fedaa.md), and the bytes it counts."""

import copy
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fedshare import simulate
from fedshare.config import TrainConfig
from fedshare.config.api import init_model
from fedshare.data import federate
from fedshare.data.dataset import Dataset
from fedshare.data.datasets import keep_classes
from fedshare.engine.client_side import ClientSetup
from fedshare.engine.flat import FlatState
from fedshare.engine.optim import make_optimizer
from fedshare.engine.rng import numpy_rng, torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.fooling import Box, fool
from fedshare.models import build_model
from fedshare.privacy.dcor import distance_correlation
from fedshare.strategies import FedAA, FedAvg
from fedshare.strategies import fedaa as fedaa_module
from fedshare.strategies._identifier import (
    SLOPE,
    ClientIdentifier,
    identifier_loss,
    train_identifier,
)
from fedshare.strategies.base import Message
from fedshare.strategies.fedaa import _Uploads, input_box

SMALL_CNN = {"channels": [8, 16], "hidden": [32, 16]}
TRAIN = {"local_epochs": 2, "batch_size": 64, "lr": 0.05}
QUICK = {
    "adv_per_label": 6,
    "adv_max_iter": 15,
    "finetune_epochs": 2,
    "identifier_epochs": 30,
    "identifier_hidden": 64,
}


def toy_images(classes: int = 4, per_class: int = 40, seed: int = 0) -> Dataset:
    """uint8 3×16×16 images: one random template per class plus noise (train and test)."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(classes, 3, 16, 16, generator=g) * 200

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(classes).repeat_interleave(n)
        x = templates[y] + torch.rand(len(y), 3, 16, 16, generator=g) * 55
        return x.to(torch.uint8), y

    x_tr, y_tr = draw(per_class)
    x_te, y_te = draw(per_class // 2)
    return Dataset(
        "toy", x_tr, y_tr, x_te, y_te, classes, scale=1 / 255, mean=(0.5,) * 3, std=(0.25,) * 3
    )


def islands(classes: int = 4, seed: int = 0):
    return federate(toy_images(classes, seed=seed), "islands", classes, seed)


def fedaa_run(strategy, data=None, rounds=1, **kwargs):
    data = data or islands()
    model = init_model("fedaa_cnn", data, 0, SMALL_CNN)
    return simulate(strategy, data, model, rounds=rounds, train=TRAIN, **kwargs)


# ------------------------------------------------------------------ model, data, partition
def test_fedaa_cnn_features_bn_variant_and_identifier_size():
    """(The CNN's 2,948,554 parameters are checked with the zoo in test_models.)"""
    model = build_model("fedaa_cnn", (3, 32, 32), 10)
    assert model.features(torch.zeros(2, 3, 32, 32)).shape == (2, 192)
    with_bn = build_model("fedaa_cnn", (3, 32, 32), 10, {"batchnorm": True})
    bn = [m for m in with_bn.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert [m.num_features for m in bn] == [64, 256, 384]  # after conv1, conv2, fc1
    identifier = ClientIdentifier(192, 512)
    assert sum(p.numel() for p in identifier.parameters()) == 361_985  # FedAA's Sec. 3.4 identifier
    with pytest.raises(FedshareError, match="two conv widths"):
        build_model("fedaa_cnn", (3, 32, 32), 10, {"channels": [8]})


def test_islands_give_every_client_one_whole_class():
    fed = islands(classes=4)
    labels = fed.dataset.y_train
    held = [set(labels[ix].tolist()) for ix in fed.client_indices]
    assert sorted(c for s in held for c in s) == [0, 1, 2, 3]
    assert all(len(ix) == 40 for ix in fed.client_indices)
    with pytest.raises(FedshareError, match=r"needs clients\.num=4, got 5"):
        federate(toy_images(4), "islands", 5, 0)


def test_class_subset_keeps_drawn_classes_relabelled():
    data = toy_images(classes=6)
    kept = keep_classes(data, 3, numpy_rng(0, "class_subset"))
    assert kept.num_classes == 3
    assert sorted(set(kept.y_train.tolist())) == [0, 1, 2] == sorted(set(kept.y_test.tolist()))
    assert len(kept.y_train) == 3 * 40 and len(kept.y_test) == 3 * 20
    original = [int(c) for c in kept.source.split("[")[1].split("]")[0].split(",")]
    for new, old in enumerate(original):  # same images, new ids in ascending original order
        torch.testing.assert_close(
            kept.x_train[kept.y_train == new], data.x_train[data.y_train == old]
        )
    with pytest.raises(FedshareError, match="class_subset=7 must be between 1 and the 6"):
        keep_classes(data, 7, numpy_rng(0, "class_subset"))


# ------------------------------------------------------------------ Eq. 4: adversarial synthesis
@pytest.mark.parametrize("solver", ["lbfgsb", "torch"])
def test_synthesis_drives_the_frozen_models_loss_down_inside_the_box(solver):
    torch.manual_seed(0)
    model = build_model("fedaa_cnn", (3, 16, 16), 4, SMALL_CNN)
    with torch.no_grad():
        model.head.weight.mul_(20)  # logits wide enough for the box to allow a confident fit
    before = copy.deepcopy(model.state_dict())
    box = Box(torch.full((1, 3, 16, 16), -2.0), torch.full((1, 3, 16, 16), 2.0))
    targets = torch.tensor([0, 1, 2, 3]).repeat_interleave(5)
    result = fool(
        model, targets, (3, 16, 16), torch.Generator().manual_seed(1), 1.0, box, solver, 40
    )
    assert result.loss_end < 0.5 * result.loss_start
    assert result.hit_rate >= 0.9
    assert (result.x >= -2).all() and (result.x <= 2).all()
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])  # the model is frozen


def _linear_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(6, 3))


@pytest.mark.parametrize("solver", ["lbfgsb", "torch"])
def test_synthesis_starts_from_scaled_clamped_noise_and_reports_its_own_losses(solver):
    """Eq. 4, FedAA §3.3: x₀ = clamp(σ·N(0, 1)) drawn from the given generator, the result
    inside the box (an unbounded fit of a linear model leaves it), loss_start / loss_end the mean CE
    of x₀ and of the result, hit_rate the fraction the model assigns to its target,
    mode restored."""
    model = _linear_model().train()
    box = Box(torch.full((1, 6), -1.0), torch.full((1, 6), 0.5))
    targets = torch.tensor([0, 1, 2, 0, 1, 2, 2])
    x0 = (3.0 * torch.randn(7, 6, generator=torch.Generator().manual_seed(5))).clamp(-1.0, 0.5)
    result = fool(model, targets, (6,), torch.Generator().manual_seed(5), 3.0, box, solver, 30)
    assert model.training
    with torch.no_grad():
        start = nn.functional.cross_entropy(model(x0), targets).item()
        logits = model(result.x)
    assert result.loss_start == pytest.approx(start, rel=1e-5)
    assert result.loss_end == pytest.approx(
        nn.functional.cross_entropy(logits, targets).item(), rel=1e-5
    )
    assert result.loss_end < 0.5 * result.loss_start
    assert result.hit_rate == (logits.argmax(1) == targets).float().mean().item() >= 6 / 7
    assert (result.x >= -1.0).all() and (result.x <= 0.5).all()
    assert ((result.x == -1.0) | (result.x == 0.5)).any()  # the box binds


def test_torch_solver_runs_blocks_of_twenty_lbfgs_iterations_from_fresh_histories(monkeypatch):
    """fedshare's GPU solver: torch L-BFGS (lr 1, 20 iterations, history 10, strong Wolfe), a fresh
    optimizer (history) per block of 20 iterations, ⌈max_iter / 20⌉ blocks."""
    made: list[dict] = []
    lbfgs = torch.optim.LBFGS

    def spy(params, **kwargs):
        made.append(kwargs)
        return lbfgs(params, **kwargs)

    monkeypatch.setattr(torch.optim, "LBFGS", spy)
    model, targets = _linear_model(), torch.tensor([0, 1, 2])
    for max_iter, blocks in ((1, 1), (20, 1), (21, 2), (40, 2), (41, 3)):
        made.clear()
        fool(model, targets, (6,), torch.Generator().manual_seed(0), 1.0, None, "torch", max_iter)
        assert len(made) == blocks, max_iter
    expected = {"lr": 1.0, "max_iter": 20, "history_size": 10, "line_search_fn": "strong_wolfe"}
    assert made == [expected] * 3


def test_the_default_solve_is_scipys_lbfgsb_for_100_iterations_from_unit_noise(monkeypatch):
    """fedshare's defaults: σ = 1 and `minimize(method="L-BFGS-B", jac=True, bounds=box)` in
    float64 with maxiter = 100."""
    import scipy.optimize

    calls: list[dict] = []
    minimize = scipy.optimize.minimize

    def spy(fun, x0, **kwargs):
        calls.append({"dtype": x0.dtype, **kwargs})
        return minimize(fun, x0, **kwargs)

    monkeypatch.setattr(scipy.optimize, "minimize", spy)
    model, targets = _linear_model(), torch.tensor([0, 1, 2])
    box = Box(torch.full((1, 6), -1.0), torch.full((1, 6), 0.5))
    default = fool(model, targets, (6,), torch.Generator().manual_seed(2), box=box)
    (call,) = calls
    assert call["method"] == "L-BFGS-B" and call["jac"] is True
    assert call["options"] == {"maxiter": 100} and call["dtype"] == np.float64
    assert call["bounds"].lb.tolist() == [-1.0] * 18 and call["bounds"].ub.tolist() == [0.5] * 18
    unit = fool(model, targets, (6,), torch.Generator().manual_seed(2), 1.0, box, "lbfgsb", 100)
    assert default.loss_start == unit.loss_start


def test_the_box_is_the_normalised_image_of_the_stored_range():
    """fedshare's choice: bounds = the normalised image of [0, 255] (here (0 − 0.5)/0.25 and
    (1 − 0.5)/0.25); data not stored as uint8 is bounded by its stored training range."""
    data = toy_images()
    box = input_box(data, torch.device("cpu"))
    assert torch.equal(box.low, torch.full((1, 3, 16, 16), -2.0))
    assert torch.equal(box.high, torch.full((1, 3, 16, 16), 2.0))
    x = torch.linspace(-3.0, 5.0, 4 * 6).view(4, 6)
    floats = Dataset(
        "f", x, torch.arange(4), x, torch.arange(4), 4, scale=0.5, mean=(1.0,), std=(2.0,)
    )
    box = input_box(floats, torch.device("cpu"))
    assert torch.equal(box.low, torch.full((1, 6), (-3.0 * 0.5 - 1.0) / 2.0))
    assert torch.equal(box.high, torch.full((1, 6), (5.0 * 0.5 - 1.0) / 2.0))


def test_each_clients_examples_fool_its_own_model_with_its_own_labels_and_noise():
    """Eq. 4 per client (FedAA §3.3): client k's examples fool *its* phase-A model, the targets are
    its label set, each label `adv_per_label` times, the noise is k's own stream, and the logged
    diagnostics are the means over the cohort."""
    strategy = FedAA(**{**QUICK, "adv_max_iter": 3, "adv_init_std": 0.7})
    fedaa_run(strategy)
    base = strategy.flat.flatten(strategy.model).clone()
    moved = base + 0.05 * torch.randn(base.shape, generator=torch.Generator().manual_seed(0))
    labels = [torch.tensor([1]), torch.tensor([0, 3])]
    uploads = _Uploads(clients=[2, 0], sizes=[40.0, 40.0], weights=[base, moved], labels=labels)
    examples, stats = strategy._synthesise(uploads, 4)
    expected = []
    for cid, weights, held in zip(uploads.clients, uploads.weights, labels, strict=True):
        model = strategy.load_weights(strategy.scratch, weights)
        targets = held.repeat_interleave(6)
        noise = torch_generator(strategy.config.seed, "fedaa/noise", 4, cid)
        args = (strategy.input_shape, noise, 0.7, strategy.box, strategy.solver, 3)
        expected.append((fool(model, targets, *args), targets))
    assert len(examples) == 2
    for (x, y), (fooled, targets) in zip(examples, expected, strict=True):
        assert torch.equal(y, targets)
        assert torch.equal(x, fooled.x)
    for key, field in (("start", "loss_start"), ("end", "loss_end"), ("hit_rate", "hit_rate")):
        mean = sum(getattr(f, field) for f, _ in expected) / 2
        name = "adv_hit_rate" if key == "hit_rate" else f"adv_loss_{key}"
        assert stats[name] == pytest.approx(mean, rel=1e-6)
    assert expected[0][0].loss_start != expected[1][0].loss_start


# ------------------------------------------------------------------ Eq. 5: the fine-tune
def test_finetune_uses_only_the_other_clients_examples():
    fed = islands()
    strategy = FedAA(**QUICK)
    fedaa_run(strategy, fed)  # sets the server side up
    weights = strategy.flat.flatten(strategy.model).clone()
    poisoned = torch.full((6, 3, 16, 16), float("nan"))
    own_label = torch.zeros(6, dtype=torch.long)
    others = [(torch.randn(6, 3, 16, 16), torch.full((6,), c)) for c in (1, 2, 3)]
    tuned = strategy._finetuned(weights, [(poisoned, own_label), *others], 0, 0, 0)
    assert torch.isfinite(tuned).all()  # client 0's own (NaN) examples never entered
    assert not torch.equal(tuned, weights)
    alone = strategy._finetuned(weights, [(poisoned, own_label)], 0, 0, 0)
    assert torch.equal(alone, weights)  # m = 1: nothing to fine-tune on, bitwise unchanged


def test_finetune_fits_the_other_clients_labels_with_local_trainings_optimizer():
    """Eq. 5 with each example's own label, and the optimizer of local training (FedAA's Sec. 3.3):
    `finetune_lr=None` takes the round's local lr, so the result is that optimizer's steps."""
    strategy = FedAA(**{**QUICK, "finetune_epochs": 30})
    fedaa_run(strategy)
    weights = strategy.flat.flatten(strategy.model).clone()
    g = torch.Generator().manual_seed(3)
    examples = [(torch.randn(6, 3, 16, 16, generator=g), torch.full((6,), c)) for c in range(4)]
    x = torch.cat([x for x, _ in examples[1:]])
    y = torch.cat([y for _, y in examples[1:]])
    model = strategy.load_weights(strategy.scratch, weights)
    with torch.no_grad():
        before = nn.functional.cross_entropy(model(x), y).item()
    tuned = strategy._finetuned(weights, examples, 0, 0, 0)
    model = strategy.load_weights(strategy.scratch, tuned)
    with torch.no_grad():
        after = nn.functional.cross_entropy(model(x), y).item()
    assert after < 0.5 * before  # fitted to the others' examples *with their labels*
    # one epoch, one batch: exactly one step of local training's optimizer at its lr
    one = FedAA(**{**QUICK, "finetune_epochs": 1})
    fedaa_run(one)
    model = one.load_weights(one.scratch, weights).train()
    optimizer = make_optimizer(model.parameters(), one.config.train, TRAIN["lr"])
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    expected = one.flat.flatten(model)
    torch.testing.assert_close(one._finetuned(weights, examples, 0, 0, 0), expected)


# ------------------------------------------------------------------ Eq. 6: the identifier
def test_identifier_loss_is_eq6_with_separate_means():
    z = torch.tensor([2.0, -1.0, 0.5, 3.0])
    own = torch.tensor([True, False, False, False])
    sp = torch.nn.functional.softplus
    expected = sp(-z[0]) + sp(z[1:]).mean()  # not the mean over all four
    torch.testing.assert_close(identifier_loss(z, own), expected)
    torch.testing.assert_close(identifier_loss(z[1:], own[1:]), sp(z[1:]).mean())


def test_identifier_separates_its_clients_examples():
    g = torch.Generator().manual_seed(0)
    features = torch.randn(80, 16, generator=g)
    own = torch.arange(80) < 20
    features[own] += 1.5
    identifier = ClientIdentifier(16, 64)
    start, end, balanced = train_identifier(
        identifier, features, own, 150, 256, 4e-4, (0.5, 0.9), torch.Generator().manual_seed(1)
    )
    assert end < start
    assert balanced >= 0.9


def _spied_round(strategy: FedAA, rounds: int = 1) -> dict:
    """Run `strategy` and keep, per round, every client's examples, F_avg and the identifier
    each client was sent."""
    seen: dict = {"examples": [], "f_avg": [], "sent": []}
    synthesise, step, message = (
        strategy._synthesise,
        strategy.server_step,
        strategy.identifier_message,
    )

    def spy_synthesise(uploads, round_idx):
        examples, stats = synthesise(uploads, round_idx)
        seen["examples"].append(dict(zip(uploads.clients, examples, strict=True)))
        return examples, stats

    def spy_step(updates, round_idx):
        step(updates, round_idx)
        seen["f_avg"].append(copy.deepcopy(strategy.model).eval())

    def spy_message(round_idx, client_id):
        sent = message(round_idx, client_id)
        seen["sent"].append((round_idx, client_id, sent.payload["identifier"].clone()))
        return sent

    strategy._synthesise, strategy.server_step = spy_synthesise, spy_step
    strategy.identifier_message = spy_message
    seen["history"] = fedaa_run(strategy, rounds=rounds).history
    return seen


def test_each_client_is_sent_the_identifier_that_scores_its_own_examples_highest():
    """Eq. 6's labels (client k's examples are I_k's positives) and the routing of I_k to
    client k alone: on F_avg's features, the identifier client k receives gives k's own
    examples a higher mean logit than every other client's examples."""
    strategy = FedAA(**{**QUICK, "identifier_epochs": 300})
    seen = _spied_round(strategy)
    examples, f_avg = seen["examples"][0], seen["f_avg"][0]
    template = ClientIdentifier(f_avg.features(examples[0][0][:1]).flatten(1).shape[1], 64)
    flat = FlatState(template)
    assert sorted(cid for _, cid, _ in seen["sent"]) == sorted(examples)
    for _, cid, identifier in seen["sent"]:
        with torch.no_grad():
            means = {
                owner: torch.func.functional_call(
                    template, flat.views(identifier), f_avg.features(x)
                ).mean()
                for owner, (x, _) in examples.items()
            }
        assert max(means, key=means.get) == cid, (cid, means)
        assert means[cid] > 0 > max(v for k, v in means.items() if k != cid)


def test_each_identifier_trains_on_f_avgs_features_of_all_examples_and_the_round_logs_the_mean(
    monkeypatch,
):
    """Eq. 6's training set: F_avg's frozen features of every client's examples, client k's
    block as I_k's positives, Adam with the configured settings; the round logs the mean over
    the clients of each identifier's loss before and after and its balanced accuracy."""
    calls = []

    def spy(identifier, features, own, epochs, batch_size, lr, betas, generator):
        stats = train_identifier(
            identifier, features, own, epochs, batch_size, lr, betas, generator
        )
        calls.append((features.clone(), own.clone(), (epochs, batch_size, lr, tuple(betas)), stats))
        return stats

    monkeypatch.setattr(fedaa_module, "train_identifier", spy)
    strategy = FedAA(**QUICK, identifier_lr=1e-3, identifier_betas=[0.6, 0.8])
    seen = _spied_round(strategy)
    examples, f_avg = list(seen["examples"][0].values()), seen["f_avg"][0]
    assert len(calls) == len(examples) == 4
    with torch.no_grad():
        features = torch.cat([f_avg.features(x).flatten(1) for x, _ in examples])
    sizes = [len(y) for _, y in examples]
    for i, (got, own, settings, _) in enumerate(calls):
        torch.testing.assert_close(got, features)
        block = torch.zeros(sum(sizes), dtype=torch.bool)
        block[sum(sizes[:i]) : sum(sizes[: i + 1])] = True
        assert torch.equal(own, block)
        assert settings == (QUICK["identifier_epochs"], 256, 1e-3, (0.6, 0.8))
    record = seen["history"][0]
    for j, key in enumerate(
        ("identifier_loss_start", "identifier_loss_end", "identifier_balanced_accuracy")
    ):
        assert record[key] == pytest.approx(np.mean([stats[j] for *_, stats in calls]))


def _client_side(strategy: FedAA, model: nn.Module) -> FedAA:
    strategy.client_setup(
        ClientSetup(model, TrainConfig(), 0, torch.device("cpu"), 4, (3, 16, 16), 4)
    )
    return strategy


def test_the_second_pass_uses_the_received_identifier_exactly_when_lambda_is_positive():
    received = torch.randn(5)
    client = SimpleNamespace(personal=Message(payload={"identifier": received}))
    for weight in (0.03, 1.0, 2.5):
        assert FedAA(adv_loss_weight=weight).identifier_of(client) is received
    assert FedAA(adv_loss_weight=0.0).identifier_of(client) is None  # λ = 0: plain CE
    assert FedAA().identifier_of(SimpleNamespace(personal=None)) is None  # none sent (Non-I)


def test_eq7_is_ce_plus_weighted_softplus_of_the_identifiers_logit_with_its_gradient():
    """Eq. 7: CE + λ·mean softplus(I_k(F(x))) by hand, value and gradient (into F and T
    only); minimising it lowers I_k's logit on the client's data (FedAA's Eq. 6)."""
    torch.manual_seed(0)
    model = build_model("fedaa_cnn", (3, 16, 16), 4, SMALL_CNN)
    strategy = _client_side(FedAA(**QUICK, adv_loss_weight=0.3), model)
    identifier = ClientIdentifier(16, 64)
    flat_identifier = FlatState(identifier).flatten(identifier)
    x, y = torch.randn(10, 3, 16, 16), torch.randint(0, 4, (10,))

    def by_hand(net):
        f = net.features(x)
        h = nn.functional.leaky_relu(identifier.net[0](f), SLOPE)
        z = identifier.net[4](nn.functional.leaky_relu(identifier.net[2](h), SLOPE)).squeeze(1)
        return nn.functional.cross_entropy(net(x), y) + 0.3 * torch.log1p(z.exp()).mean(), z

    got = strategy.adversarial_loss(model, x, y, flat_identifier, 1.0)
    grads = torch.autograd.grad(got, list(model.parameters()))
    expected, _ = by_hand(model)
    torch.testing.assert_close(got, expected)
    for a, b in zip(grads, torch.autograd.grad(expected, list(model.parameters())), strict=True):
        torch.testing.assert_close(a, b)
    row_off = strategy.adversarial_loss(model, x, y, flat_identifier, 0.0)  # a row without I_k
    torch.testing.assert_close(row_off, nn.functional.cross_entropy(model(x), y))
    # the direction: plain SGD on Eq. 7 lowers the identifier's logit more than CE alone
    strong = _client_side(FedAA(**QUICK, adv_loss_weight=30.0), model)
    moved = {}
    for weight in (0.0, 1.0):
        net = copy.deepcopy(model)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
        for _ in range(10):
            optimizer.zero_grad()
            strong.adversarial_loss(net, x, y, flat_identifier, weight).backward()
            optimizer.step()
        moved[weight] = by_hand(net)[1].mean().item()
    assert moved[1.0] < moved[0.0] - 0.02, moved


def test_a_round_logs_its_diagnostics_and_time_split():
    """With enough Adam steps the identifiers separate their client's examples on F_avg's
    features (FedAA §3.4); fedshare's 10 epochs of one batch are 10 steps (docs/fedaa.md)."""
    result = fedaa_run(FedAA(**{**QUICK, "identifier_epochs": 300}), rounds=2)
    for record in result.history:
        assert record["adv_loss_end"] <= record["adv_loss_start"]
        assert record["adv_hit_rate"] >= 0.9
        assert record["identifier_loss_end"] < record["identifier_loss_start"]
        assert record["identifier_balanced_accuracy"] >= 0.9
        for stage in ("local", "synthesis", "finetune", "identifier", "second_pass"):
            assert record[f"time_{stage}_s"] >= 0
    assert result.summary["shared_items"] == 4
    assert result.summary["shared_item_percent"] == pytest.approx(100 * 4 / 160)


def test_both_client_phases_run_batched_as_serially():
    """`train.batched`: phase A (local training, the label set uploaded) and the second pass
    (each client's own identifier and weight as its row, the identifiers sent to one client
    each) step batched, with no serial fallback, and end where the serial run ends."""

    def run(batched: int):
        data = islands()
        model = init_model("fedaa_cnn", data, 0, SMALL_CNN)
        train = {**TRAIN, "batched": batched}
        return simulate(FedAA(**QUICK, adv_loss_weight=1.0), data, model, rounds=2, train=train)

    serial = run(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = run(4)
    for key in ("bytes_up", "bytes_down", "bytes_down_personal"):
        assert batched.summary[key] == serial.summary[key]
    for a, b in zip(batched.history, serial.history, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-3)
        assert a["second_pass_loss"] == pytest.approx(b["second_pass_loss"], rel=1e-3)
        assert a["second_pass_loss"] > a["train_loss"] + 0.5  # the identifier term acts
    for (name, x), (_, y) in zip(
        batched.strategy.model.state_dict().items(),
        serial.strategy.model.state_dict().items(),
        strict=True,
    ):
        if x.is_floating_point():
            torch.testing.assert_close(x, y, rtol=1e-4, atol=2e-3, msg=name)


# ------------------------------------------------------------------ Eq. 7 and the ablations
def test_non_i_keeps_the_first_aggregations_model_path():
    """Phase A equals a FedAvg round; without fine-tune F_avg is FedAvg's model, and turning the
    identifier off changes nothing before the second pass, where λ = 0 equals Non-I."""

    def first_aggregation(strategy: FedAA) -> list[torch.Tensor]:
        seen: list[torch.Tensor] = []
        step = strategy.server_step

        def spy(updates, round_idx):
            step(updates, round_idx)
            seen.append(strategy.flat.flatten(strategy.model).clone())

        strategy.server_step = spy
        return seen

    fedavg = fedaa_run(FedAvg(), rounds=1)
    no_finetune = FedAA(**QUICK, finetune=False, identifier=False)
    seen = first_aggregation(no_finetune)
    fedaa_run(no_finetune)
    fedavg_model = fedavg.strategy.global_model()
    assert torch.equal(seen[0], FlatState(fedavg_model).flatten(fedavg_model))
    full, non_i = FedAA(**QUICK), FedAA(**QUICK, identifier=False)
    full_seen, non_i_seen = first_aggregation(full), first_aggregation(non_i)
    fedaa_run(full)
    non_i_result = fedaa_run(non_i)
    assert torch.equal(full_seen[0], non_i_seen[0])
    zero_weight = fedaa_run(FedAA(**QUICK, adv_loss_weight=0.0))
    for a, b in zip(
        zero_weight.strategy.model.parameters(),
        non_i_result.strategy.model.parameters(),
        strict=True,
    ):
        assert torch.equal(a, b)


def test_every_exchanged_byte_is_counted():
    """Per client and round (FedAA's Sec. 4.5): 2|θ| up + 2|θ| down + |I_k| down (to that
    client alone) + its label ids (int16) up; FedAvg: |θ| each way."""
    strategy = FedAA(**QUICK)
    result = fedaa_run(strategy, rounds=2)
    theta = sum(p.numel() for p in strategy.model.parameters()) * 4
    identifier = 4 * (64 * 16 + 64 + 64 * 64 + 64 + 64 + 1)
    m, rounds = 4, 2
    summary = result.summary
    assert summary["bytes_up"] == rounds * m * (2 * theta + 2)
    assert summary["bytes_down"] == rounds * m * (2 * theta + identifier)
    assert summary["bytes_down_personal"] == rounds * m * identifier
    assert summary["bytes_shared"] == rounds * m * (identifier + 2)
    fedavg = fedaa_run(FedAvg(), rounds=2).summary
    assert fedavg["bytes_up"] == fedavg["bytes_down"] == rounds * m * theta
    non_i = fedaa_run(FedAA(**QUICK, identifier=False), rounds=1).summary
    assert non_i["bytes_down_personal"] == 0


def test_bad_settings_name_the_value():
    valid = "adv_solver='adam' is not valid: it must be one of auto, lbfgsb, torch"
    with pytest.raises(FedshareError, match=valid):
        FedAA(adv_solver="adam")
    with pytest.raises(
        FedshareError, match=r"adv_per_label=0 is not valid: .* number in \[1, 10000\]"
    ):
        FedAA(adv_per_label=0)
    with pytest.raises(
        FedshareError, match=r"finetune_lr=0.0 is not valid: .* number > 0 \(or null\)"
    ):
        FedAA(finetune_lr=0.0)


# ---------------------------------------------------------------- FedAA §3.6: the privacy argument
def test_the_papers_distance_correlation_bound_has_a_counterexample():
    """R_n² (Eqs. 10–13: plain distances, no outer root) is 0 for one class per client and
    near 0 for unpaired labels, but 1 when images are a function of the label: the paper's
    "max R_n² ≤ 0.5" bounds only a prefactor (FedAA's Sec. 3.6 and App. A)."""
    g = torch.Generator().manual_seed(0)

    def r2(x: torch.Tensor, y: torch.Tensor) -> float:
        return distance_correlation(x, y, variant="paper", eps=0.0, squared=False).item()

    images = torch.randn(60, 8, generator=g, dtype=torch.float64)
    assert r2(images, torch.zeros(60, 1, dtype=torch.float64)) == 0.0  # N = 1
    for classes in (2, 5):
        labels = torch.arange(60) % classes
        onehot = nn.functional.one_hot(labels, classes).double()
        assert r2(onehot * 3.0, onehot) == pytest.approx(1.0)  # X a function of Y
        assert (1 - 1 / classes) / classes <= 0.25  # the prefactor the paper bounds, squared
    labels = torch.arange(400) % 4
    clustered = nn.functional.one_hot(labels, 4).double() * 5 + torch.randn(400, 4, generator=g)
    shuffled = nn.functional.one_hot(labels[torch.randperm(400, generator=g)], 4).double()
    assert r2(clustered, shuffled) < 0.05


def test_the_bn_variant_trains_on_a_last_batch_of_one_sample():
    model = build_model("fedaa_cnn", (3, 16, 16), 4, {**SMALL_CNN, "batchnorm": True}).train()
    fc_bn = model.blocks["fc"][2]
    before = fc_bn.running_mean.clone()
    out = model(torch.randn(1, 3, 16, 16))  # plain BatchNorm1d raises here
    assert out.shape == (1, 4) and model.training and fc_bn.training
    assert torch.equal(fc_bn.running_mean, before)  # one sample leaves the statistics alone
    model(torch.randn(3, 3, 16, 16))
    assert not torch.equal(fc_bn.running_mean, before)
