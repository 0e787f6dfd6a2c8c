"""Exact unit tests of the attacks of FLea's Sec. 4.4 / App. D (the context identification of
Fig. 9(d), the reconstruction of Fig. 9(c)) and of the host-to-device copy (docs/mutation.md,
entries `privacy_context`, `privacy_reconstruction`, `functional_transfer`): which samples each
attack sees, in which model mode, on which scale, and what it reports. Synthetic tensors and a
tiny BatchNorm model; no simulation."""

import copy
import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedshare.data.dataset import Dataset
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.transfer import to_device
from fedshare.models.base import BlockModel
from fedshare.privacy import context, reconstruction
from fedshare.privacy.context import (
    ContextAttack,
    check_images,
    check_run_attack,
    classifier,
    context_attack,
    run_attack_summary,
    stamp,
    train_classifier,
)
from fedshare.privacy.reconstruction import (
    AttackResult,
    DenseDecoder,
    activations,
    reconstruction_attack,
    ridge_decoder,
    table5_decoder,
    unnormalised,
)


def images(n: int = 60, channels: int = 1, side: int = 7, seed: int = 0) -> Dataset:
    """uint8 images in [0, 100] (the marker's 255 stands out), normalised per channel."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 101, (n, channels, side, side), generator=g, dtype=torch.uint8)
    xt = torch.randint(0, 101, (n, channels, side, side), generator=g, dtype=torch.uint8)
    y = torch.zeros(n, dtype=torch.long)
    mean, std = (0.2,) * channels, (0.3,) * channels
    return Dataset("tiny", x, y, xt, y.clone(), 2, scale=1 / 255, mean=mean, std=std)


def bn_model(channels: int = 1, side: int = 7, flea_layer: int | None = 2) -> BlockModel:
    """conv -> BatchNorm -> head: eval and train mode give different activations."""
    torch.manual_seed(0)
    model = BlockModel(
        [
            ("conv", nn.Conv2d(channels, 2, 3, padding=1)),
            ("bn", nn.BatchNorm2d(2)),
            ("head", nn.Sequential(nn.Flatten(), nn.Linear(2 * side * side, 2))),
        ],
        share_layer=1,
        flea_layer=flea_layer,
    )
    model.blocks["bn"].running_mean.fill_(0.3)
    model.blocks["bn"].running_var.fill_(2.0)
    return model


# --- the context attack (privacy/context.py) ---


@pytest.mark.parametrize("shape", [(1, 7, 7), (3, 9, 8)])
def test_images_of_at_least_7x7_with_channels_are_accepted(shape):
    check_images(shape)


@pytest.mark.parametrize("shape", [(7, 7), (1, 1, 7, 7), (1, 6, 7), (1, 7, 6), (1, 6, 6)])
def test_other_shapes_are_refused_naming_the_shape(shape):
    with pytest.raises(
        FedshareError,
        match=rf"at least 7×7, got {tuple(shape)}".replace("(", r"\(").replace(")", r"\)"),
    ):
        check_images(shape)


@pytest.mark.parametrize(
    ("dtype", "scale", "full"), [(torch.uint8, 1 / 255, 255), (torch.float32, 0.5, 2.0)]
)
def test_the_stamp_is_full_intensity_at_2_7_in_channel_zero_only(dtype, scale, full):
    stored = torch.arange(2 * 2 * 8 * 8).reshape(2, 2, 8, 8).remainder(50).to(dtype)
    data = Dataset("d", stored, torch.zeros(2), stored, torch.zeros(2), 2, scale=scale)
    kept = stored.clone()
    marked = stamp(stored, data)
    expected = stored.clone()
    expected[:, 0, 2:7, 2:7] = full
    assert torch.equal(marked, expected) and marked.dtype == dtype
    assert torch.equal(stored, kept)  # the input is not stamped in place


def test_samples_for_is_the_smallest_size_reaching_the_target():
    attack = ContextAttack({1000: 99.0, 300: 90.0, 100: 89.99, 3000: 95.0})
    assert attack.samples_for(90.0) == 300
    assert attack.samples_for() == 300  # the default target is 90 %
    assert attack.samples_for(95.0) == 1000
    assert attack.samples_for(99.5) is None
    assert ContextAttack({5: 90.0}).samples_for() == 5


def test_the_classifier_is_four_linear_layers_512_256_128_2_with_relus():
    net = classifier(49)
    layers = [
        (type(m).__name__, getattr(m, "in_features", None), getattr(m, "out_features", None))
        for m in net
    ]
    assert layers == [
        ("Linear", 49, 512),
        ("ReLU", None, None),
        ("Linear", 512, 256),
        ("ReLU", None, None),
        ("Linear", 256, 128),
        ("ReLU", None, None),
        ("Linear", 128, 2),
    ]


def test_train_classifier_is_adam_on_cross_entropy_one_step_per_batch_per_epoch():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    f, y = torch.randn(6, 3), torch.tensor([0, 1, 1, 0, 1, 0])
    reference = copy.deepcopy(net)
    optimizer = torch.optim.Adam(reference.parameters(), lr=0.05)
    for _ in range(2):  # two epochs of one full batch: the order does not change the mean
        optimizer.zero_grad()
        F.cross_entropy(reference(f), y).backward()
        optimizer.step()
    train_classifier(net, f, y, epochs=2, batch_size=6, lr=0.05, gen=torch.Generator())
    for got, want in zip(net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want)
    untouched = copy.deepcopy(net)
    train_classifier(net, f, y, epochs=0, batch_size=6, lr=0.05, gen=torch.Generator())
    assert all(
        torch.equal(a, b) for a, b in zip(net.parameters(), untouched.parameters(), strict=True)
    )


@pytest.mark.parametrize(("view", "per_example"), [("raw", 1), ("features", 1), ("average", 3)])
def test_examples_mark_the_first_half_every_image_of_a_group_and_no_other(view, per_example):
    data = images(20)
    gen = torch.Generator().manual_seed(1)
    x, y = context._examples(data.x_train, 5, 3, view, data, gen)
    assert x.shape == (5, per_example, 1, 7, 7)
    assert y.tolist() == [1, 1, 0, 0, 0]
    marked = (x[:, :, 0, 2:7, 2:7] == 255).flatten(2).all(2)
    assert marked[:2].all() and not marked[2:].any()
    # every image is a pool image (stamped or not), drawn with the generator
    gen = torch.Generator().manual_seed(1)
    picks = torch.randint(20, (5, per_example), generator=gen)
    expected = data.x_train[picks.flatten()].view_as(x).clone()
    expected[:2, :, 0, 2:7, 2:7] = 255
    assert torch.equal(x, expected)


def test_views_are_the_first_image_the_groups_mean_or_the_eval_mode_activations():
    data = images(12)
    examples = data.x_train.view(4, 3, 1, 7, 7)
    prepared = data.prepare(data.x_train).view(4, 3, 1, 7, 7)
    raw = context._view(data, "raw", None, None)(examples)
    torch.testing.assert_close(raw, prepared[:, 0].flatten(1))
    average = context._view(data, "average", None, None)(examples)
    torch.testing.assert_close(average, prepared.mean(1).flatten(1))
    model = bn_model(flea_layer=2).train()
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        at_flea = reference.encode(prepared[:, 0], 2).flatten(1)
        at_one = reference.encode(prepared[:, 0], 1).flatten(1)
    torch.testing.assert_close(context._view(data, "features", model, None)(examples), at_flea)
    torch.testing.assert_close(context._view(data, "features", model, 1)(examples), at_one)
    assert model.training  # the frozen model's mode is restored
    with pytest.raises(FedshareError, match="block model with a FLea split"):
        context._view(data, "features", bn_model(flea_layer=None), None)
    with pytest.raises(FedshareError, match="block model with a FLea split"):
        context._view(data, "features", None, 1)


def test_the_attacker_reads_the_marker_off_raw_images_and_scores_in_percent():
    data = images(60)
    result = context_attack(
        data, "raw", sizes=(2, 40), test_size=40, epochs=15, batch_size=8, lr=1e-2, seed=0
    )
    assert list(result.accuracy) == [2, 40]
    assert result.accuracy[40] == 100.0
    again = context_attack(
        data, "raw", sizes=(2, 40), test_size=40, epochs=15, batch_size=8, lr=1e-2, seed=0
    )
    assert again.accuracy == result.accuracy


def test_a_classifier_that_cannot_learn_scores_the_share_it_gets_right():
    # lr = 0: the attacker keeps its initial weights; its accuracy is its initial argmax's
    data = images(30)
    result = context_attack(data, "raw", sizes=(4,), test_size=10, epochs=1, lr=0.0, seed=3)
    gen = torch_generator(3, "attack/context")
    x_test, y_test = context._examples(data.x_test, 10, 10, "raw", data, gen)
    f_test = context._view(data, "raw", None, None)(x_test)
    seed_global_torch(3, "attack/context_classifier", 4)
    net = classifier(49)
    with torch.no_grad():
        expected = 100.0 * float((net(f_test).argmax(1) == y_test).float().mean())
    assert result.accuracy == {4: pytest.approx(expected)}
    assert expected not in (0.0, 100.0)


def test_views_normalise_each_image_by_its_own_channels():
    data = images(6, channels=3)
    data.mean, data.std = (0.1, 0.2, 0.3), (0.5, 0.25, 0.125)
    examples = data.x_train.view(2, 3, 3, 7, 7)  # as many images per group as channels
    prepared = data.prepare(data.x_train).view(2, 3, 3, 7, 7)
    average = context._view(data, "average", None, None)(examples)
    torch.testing.assert_close(average, prepared.mean(1).flatten(1))
    raw = context._view(data, "raw", None, None)(data.x_train.view(6, 1, 3, 7, 7))
    torch.testing.assert_close(raw, data.prepare(data.x_train).flatten(1))


def test_the_features_view_needs_the_model_and_runs_with_it():
    data = images(20)
    with pytest.raises(FedshareError, match="`features` view needs the frozen model"):
        context_attack(data, "features", None, sizes=(4,))
    result = context_attack(data, "features", bn_model(), sizes=(4,), test_size=6, epochs=1)
    assert set(result.accuracy) == {4} and 0.0 <= result.accuracy[4] <= 100.0
    with pytest.raises(FedshareError, match="view 'pixels' is not one of: raw, average, features"):
        context_attack(data, "pixels")


def test_the_attacks_defaults_are_figure_9ds_setting():
    defaults = {k: p.default for k, p in inspect.signature(context_attack).parameters.items()}
    assert defaults["sizes"] == (100, 300, 1000, 3000) and defaults["test_size"] == 1000
    assert defaults["group"] == 10 and defaults["epochs"] == 30
    assert defaults["batch_size"] == 64 and defaults["lr"] == 1e-3 and defaults["seed"] == 0
    assert defaults["view"] == "raw" and defaults["model"] is None and defaults["split"] is None


def test_a_run_attack_needs_a_sharing_strategy_images_and_sizes_of_at_least_two():
    check_run_attack({"view": "raw"}, "feddata", (1, 7, 7), [2, 100])
    with pytest.raises(FedshareError, match="strategy=fedavg shares none"):
        check_run_attack(None, "fedavg", (1, 7, 7), [100])
    with pytest.raises(FedshareError, match="at least 7×7"):
        check_run_attack({"view": "raw"}, "feddata", (1, 6, 7), [100])
    with pytest.raises(
        FedshareError, match=r"\[1, 5, 0\]: every size must be at least 2, not \[1, 0\]"
    ):
        check_run_attack({"view": "raw"}, "feddata", (1, 7, 7), [1, 5, 0])


def test_the_run_summary_rounds_to_two_places_and_reads_off_90_percent(monkeypatch):
    seen = {}

    def fake(dataset, **kwargs):
        seen.update(kwargs, dataset=dataset)
        return ContextAttack({2: 89.996, 4: 90.0, 8: 99.12345})

    monkeypatch.setattr(context, "context_attack", fake)
    data = images(4)
    summary = run_attack_summary({"view": "average", "group": 3}, data, [2, 4, 8], 7)
    assert summary == {
        "context_attack_view": "average",
        "context_attack_accuracy": {"2": 90.0, "4": 90.0, "8": 99.12},
        "context_attack_samples_for_90": 4,
    }
    assert seen == {"dataset": data, "sizes": [2, 4, 8], "seed": 7, "view": "average", "group": 3}


# --- the reconstruction attack (privacy/reconstruction.py) ---


def test_table5_decoder_is_the_papers_stack_and_keeps_the_spatial_size():
    decoder = table5_decoder(16, 3)
    layers = [
        (
            type(m).__name__,
            m.in_channels,
            m.out_channels,
            m.kernel_size,
            m.stride,
            m.padding,
            m.output_padding,
        )
        for m in decoder
    ]
    assert layers == [
        ("Conv2d", 16, 32, (1, 1), (1, 1), (0, 0), (0, 0)),
        ("ConvTranspose2d", 32, 32, (3, 3), (2, 2), (1, 1), (1, 1)),
        ("Conv2d", 32, 32, (3, 3), (2, 2), (1, 1), (0, 0)),
        ("Conv2d", 32, 3, (1, 1), (1, 1), (0, 0), (0, 0)),
    ]
    assert decoder(torch.zeros(2, 16, 8, 8)).shape == (2, 3, 8, 8)
    defaults = inspect.signature(table5_decoder).parameters
    assert defaults["in_channels"].default == 16 and defaults["out_channels"].default == 3


def test_the_dense_decoder_is_one_linear_map_reshaped_to_the_input():
    decoder = DenseDecoder((2, 3), (1, 2, 2))
    assert (decoder.linear.in_features, decoder.linear.out_features) == (6, 4)
    f = torch.randn(5, 2, 3)
    out = decoder(f)
    assert out.shape == (5, 1, 2, 2)
    torch.testing.assert_close(out.flatten(1), decoder.linear(f.flatten(1)))


def test_unnormalised_inputs_are_the_stored_ones_times_the_scale_as_floats():
    stored = torch.tensor([[0, 51, 255]], dtype=torch.uint8)
    data = Dataset("d", stored, torch.zeros(1), stored, torch.zeros(1), 2, scale=1 / 255)
    torch.testing.assert_close(unnormalised(data, stored), torch.tensor([[0.0, 0.2, 1.0]]))
    plain = Dataset("d", stored, torch.zeros(1), stored, torch.zeros(1), 2)
    out = unnormalised(plain, stored)
    assert out.dtype == torch.float32 and torch.equal(out, stored.float())


@pytest.mark.parametrize("was_training", [True, False])
def test_activations_are_the_eval_mode_encoding_in_chunks_and_the_mode_is_restored(was_training):
    model = bn_model().train(was_training)
    reference = copy.deepcopy(model).eval()
    x = torch.randn(5, 1, 7, 7)
    out = activations(model, x, 2, batch=2)
    with torch.no_grad():
        torch.testing.assert_close(out, reference.encode(x, 2))
    assert model.training == was_training
    assert not out.requires_grad
    assert inspect.signature(activations).parameters["batch"].default == 512


def test_the_relative_error_is_the_test_error_over_the_baselines():
    assert AttackResult(1.0, 0.5, [], 2.0).relative_test_mse == 0.25


def test_ridge_is_the_centred_primal_solution_with_the_least_leave_one_out_penalty():
    g = torch.Generator().manual_seed(0)
    f_train, f_test = torch.rand(12, 5, generator=g) + 2.0, torch.rand(7, 5, generator=g)
    t_train, t_test = torch.rand(12, 3, generator=g), torch.rand(7, 3, generator=g) - 1.0
    penalties = (1e-3, 0.3, 30.0)
    result = ridge_decoder(f_train, t_train, f_test, t_test, penalties)
    assert len(result.curve) == 3
    best = min(range(3), key=result.curve.__getitem__)
    assert result.penalty == penalties[best]
    f, t = f_train.double(), t_train.double()
    fm, tm = f.mean(0), t.mean(0)
    fc, tc = f - fm, t - tm
    scale = float(torch.linalg.eigvalsh(fc @ fc.T).clamp_min(0).mean())
    w = torch.linalg.solve(
        fc.T @ fc + penalties[best] * scale * torch.eye(5, dtype=f.dtype), fc.T @ tc
    )
    assert result.train_mse == pytest.approx(float((fc @ w - tc).square().mean()), rel=1e-6)
    test_error = ((f_test.double() - fm) @ w + tm - t_test.double()).square().mean()
    assert result.test_mse == pytest.approx(float(test_error), rel=1e-6)
    assert result.baseline_mse == pytest.approx(float((t_test.double() - tm).square().mean()))
    # each penalty's leave-one-out error, refitted without each sample
    for penalty, loo in zip(penalties, result.curve, strict=True):
        errors = []
        for i in range(12):
            keep = [j for j in range(12) if j != i]
            fk, tk = f[keep], t[keep]
            fkm, tkm = fk.mean(0), tk.mean(0)
            wk = torch.linalg.solve(
                (fk - fkm).T @ (fk - fkm) + penalty * scale * torch.eye(5, dtype=f.dtype),
                (fk - fkm).T @ (tk - tkm),
            )
            errors.append(((f[i] - fkm) @ wk + tkm - t[i]).square().mean())
        assert loo == pytest.approx(float(torch.stack(errors).mean()), rel=1e-6)


def linear_dataset(n: int = 24) -> Dataset:
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 256, (n, 1, 7, 7), generator=g, dtype=torch.uint8)
    xt = torch.randint(0, 256, (n // 2, 1, 7, 7), generator=g, dtype=torch.uint8)
    y = torch.zeros(n, dtype=torch.long)
    return Dataset("lin", x, y, xt, y[: n // 2].clone(), 2, scale=1 / 255, mean=(0.5,), std=(0.2,))


def drawn(data: Dataset, model: BlockModel, split: int, train_size: int, test_size: int, seed: int):
    """The attack's samples, activations (eval mode) and unnormalised targets, drawn as it does."""
    gen = torch_generator(seed, "attack/reconstruction")
    train_idx = torch.randperm(len(data.y_train), generator=gen)[:train_size]
    test_idx = torch.randperm(len(data.y_test), generator=gen)[:test_size]
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        f_train = reference.encode(data.prepare(data.x_train[train_idx]), split)
        f_test = reference.encode(data.prepare(data.x_test[test_idx]), split)
    t_train = data.x_train[train_idx].float() * data.scale
    t_test = data.x_test[test_idx].float() * data.scale
    return f_train, t_train, f_test, t_test, gen


@pytest.mark.parametrize(("flea_layer", "split"), [(2, 2), (None, 1)])
def test_ridge_attack_decodes_the_split_activations_of_the_drawn_samples(flea_layer, split):
    data, model = linear_dataset(), bn_model(flea_layer=flea_layer).train()
    result = reconstruction_attack(model, data, train_size=10, test_size=5, decoder="ridge", seed=1)
    f_train, t_train, f_test, t_test, _ = drawn(data, model, split, 10, 5, seed=1)
    expected = ridge_decoder(f_train, t_train, f_test, t_test)
    assert result == expected and model.training
    explicit = reconstruction_attack(model, data, 1, 10, 5, decoder="ridge", seed=1)
    expected = ridge_decoder(*drawn(data, model, 1, 10, 5, seed=1)[:4])
    assert explicit == expected


def test_sizes_are_capped_at_the_data():
    data, model = linear_dataset(), bn_model()
    result = reconstruction_attack(model, data, train_size=10**6, test_size=10**6, decoder="ridge")
    assert result == ridge_decoder(*drawn(data, model, 2, 24, 12, seed=0)[:4])


@pytest.mark.parametrize("decoder", ["dense", "table5"])
def test_a_frozen_decoder_reports_its_initial_error_every_epoch(decoder):
    data = linear_dataset()
    model = bn_model()
    if decoder == "table5":  # Table 5 reads 16 channels: a 16-channel first block
        model.blocks["conv"] = nn.Conv2d(1, 16, 3, padding=1)
        model.blocks["bn"] = nn.BatchNorm2d(16)
    result = reconstruction_attack(
        model,
        data,
        train_size=10,
        test_size=6,
        epochs=3,
        batch_size=4,
        lr=0.0,
        decoder=decoder,
        seed=2,
    )
    f_train, t_train, f_test, t_test, _ = drawn(data, model, 2, 10, 6, seed=2)
    seed_global_torch(2, "attack/decoder")
    net = DenseDecoder((2, 7, 7), (1, 7, 7)) if decoder == "dense" else table5_decoder(16, 1)
    with torch.no_grad():
        initial_train = float(F.mse_loss(net(f_train), t_train))
        initial_test = float(F.mse_loss(net(f_test), t_test))
    assert result.curve == pytest.approx([initial_train] * 3, rel=1e-5)
    assert result.train_mse == result.curve[-1]
    assert result.test_mse == pytest.approx(initial_test, rel=1e-6)
    baseline = float(F.mse_loss(t_train.mean(0).expand_as(t_test), t_test))
    assert result.baseline_mse == pytest.approx(baseline, rel=1e-6)


def test_the_dense_decoder_learns_and_no_epoch_reports_nan():
    data, model = linear_dataset(), bn_model()
    trained = reconstruction_attack(
        model, data, train_size=20, test_size=6, epochs=4, batch_size=5, lr=1e-2, decoder="dense"
    )
    assert len(trained.curve) == 4 and trained.curve[-1] < 0.5 * trained.curve[0]
    assert trained.train_mse == trained.curve[-1]  # the final epoch's, not the first's
    none = reconstruction_attack(model, data, train_size=20, test_size=6, epochs=0)
    assert none.curve == [] and none.train_mse != none.train_mse  # nan


def test_the_attack_refuses_an_unknown_decoder_and_a_model_without_a_split():
    data = linear_dataset()
    with pytest.raises(
        FedshareError, match=r"unknown decoder 'conv'; valid choices: dense, table5, ridge"
    ):
        reconstruction_attack(bn_model(), data, decoder="conv")
    with pytest.raises(FedshareError, match="needs a block model with a split point"):
        reconstruction_attack(nn.Linear(2, 2), data)


def test_the_reconstruction_defaults_are_figure_9cs_setting():
    defaults = {
        k: p.default for k, p in inspect.signature(reconstruction_attack).parameters.items()
    }
    assert defaults["train_size"] == 2000 and defaults["test_size"] == 500
    assert defaults["epochs"] == 20 and defaults["batch_size"] == 128 and defaults["lr"] == 1e-3
    assert defaults["decoder"] == "dense" and defaults["seed"] == 0 and defaults["split"] is None
    assert tuple(10.0**k for k in range(-7, 4)) == reconstruction.RIDGE_PENALTIES


# --- host-to-device copies (functional/transfer.py) ---


class Recorder:
    """A stand-in tensor that records how it is moved."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def pin_memory(self) -> "Recorder":
        self.calls.append(("pin_memory",))
        return self

    def to(self, *args, **kwargs) -> "Recorder":
        self.calls.append(("to", args, kwargs))
        return self


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu"), "meta"])
def test_a_copy_off_the_gpu_is_a_plain_to(device):
    tensor = Recorder()
    assert to_device(tensor, device) is tensor  # type: ignore[arg-type]
    assert tensor.calls == [("to", (device,), {})]


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0)])
def test_a_copy_to_the_gpu_is_staged_through_pinned_memory_without_waiting(device):
    tensor = Recorder()
    to_device(tensor, device)  # type: ignore[arg-type]
    assert tensor.calls == [("pin_memory",), ("to", (device,), {"non_blocking": True})]
