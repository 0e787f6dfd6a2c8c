"""The one training driver and the optimizer factory, pinned exactly (docs/mutation.md,
`engine_training`): batches of a fresh permutation per pass, the last partial batch kept or
dropped; one step per batch with the hook between backward and step and the mean loss
returned; each learning-rate schedule's formula and floor; each optimizer's settings."""

import pytest
import torch

from fedshare.config import TrainConfig
from fedshare.engine.optim import learning_rate, make_optimizer
from fedshare.engine.training import check_finite, fit, shuffled_positions
from fedshare.errors import FedshareError, NonFiniteLossError


@pytest.mark.parametrize(("drop_last", "sizes"), [(False, [3, 3, 1]), (True, [3, 3])])
def test_each_pass_is_a_fresh_permutation_cut_into_batches(drop_last, sizes):
    gen = torch.Generator().manual_seed(4)
    got = list(shuffled_positions(7, 3, gen, "cpu", epochs=2, drop_last=drop_last))
    ref = torch.Generator().manual_seed(4)
    want = []
    for _ in range(2):
        order = torch.randperm(7, generator=ref)
        want += [order[i : i + 3] for i in range(0, sum(sizes), 3)]
    assert [len(b) for b in got] == sizes * 2
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert not torch.equal(torch.cat(got[: len(sizes)]), torch.cat(got[len(sizes) :]))


def test_positions_are_endless_without_epochs_and_drawn_lazily():
    gen = torch.Generator().manual_seed(0)
    stream = shuffled_positions(4, 4, gen, "cpu")
    first = next(stream)
    between = torch.rand(1, generator=gen)  # a draw between passes keeps its place
    ref = torch.Generator().manual_seed(0)
    assert torch.equal(first, torch.randperm(4, generator=ref))
    assert torch.equal(between, torch.rand(1, generator=ref))
    assert torch.equal(next(stream), torch.randperm(4, generator=ref))
    assert len([next(stream) for _ in range(10)]) == 10
    assert list(shuffled_positions(4, 2, gen, "cpu", epochs=0)) == []
    one_pass = shuffled_positions(5, 2, gen, "cpu", epochs=1)
    assert [len(b) for b in one_pass] == [2, 2, 1]  # the partial batch is kept by default


def test_fit_steps_once_per_batch_with_the_hook_between_backward_and_step():
    w = torch.nn.Parameter(torch.tensor([1.0]))
    optimizer = torch.optim.SGD([w], lr=0.1)
    events = []

    def loss_fn(batch):
        events.append(("loss", w.item()))
        return (w * batch).sum()

    def hook():
        events.append(("hook", w.grad.item()))
        w.grad.mul_(2)

    mean = fit(optimizer, [torch.tensor([1.0]), torch.tensor([3.0])], loss_fn, hook)
    # step 1: loss 1, grad 1 -> 2, w = 0.8; step 2: loss 2.4, grad 3 -> 6, w = 0.2
    assert events == [("loss", 1.0), ("hook", 1.0), ("loss", pytest.approx(0.8)), ("hook", 3.0)]
    assert w.item() == pytest.approx(0.2)
    assert mean.item() == pytest.approx((1.0 + 2.4) / 2)
    assert not mean.requires_grad
    assert fit(optimizer, [], loss_fn).item() == 0.0


def test_fit_zeroes_the_gradient_before_every_step():
    w = torch.nn.Parameter(torch.tensor([0.0]))
    fit(torch.optim.SGD([w], lr=1.0), [1.0, 1.0, 1.0], lambda b: w.sum() * b)
    assert w.item() == pytest.approx(-3.0)  # three steps of gradient 1, not 1 + 2 + 3


def test_a_parameter_a_batch_does_not_use_is_left_alone_by_that_step():
    """Gradients are set to None, not zero: momentum SGD skips a parameter without one."""
    w, v = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([w, v], lr=1.0, momentum=0.9)
    fit(optimizer, ["w", "v"], lambda b: (w if b == "w" else v).sum())
    assert (w.item(), v.item()) == (-1.0, -1.0)


def test_fit_under_amp_computes_the_loss_in_bfloat16():
    w = torch.nn.Parameter(torch.ones(2, 2))
    dtypes = []

    def loss_fn(batch):
        out = batch @ w
        dtypes.append(out.dtype)
        return out.float().sum()

    fit(torch.optim.SGD([w], lr=0.1), [torch.ones(1, 2)], loss_fn, amp_device="cpu")
    fit(torch.optim.SGD([w], lr=0.1), [torch.ones(1, 2)], loss_fn)
    assert dtypes == [torch.bfloat16, torch.float32]
    assert w.dtype == torch.float32


def test_check_finite_passes_finite_means_and_names_the_place_of_others():
    mean = torch.tensor(0.5)
    assert check_finite(mean, "client 3") is mean
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(NonFiniteLossError, match="client 3 got a non-finite"):
            check_finite(torch.tensor(bad), "client 3")


@pytest.mark.parametrize(
    ("schedule", "decay", "step", "rates"),
    [
        ("constant", 0.5, 1, [0.8, 0.8, 0.8, 0.8]),
        ("exp", 0.5, 1, [0.8, 0.4, 0.2, 0.1]),
        ("step", 0.5, 2, [0.8, 0.8, 0.4, 0.4]),
        ("step", 0.5, 3, [0.8, 0.8, 0.8, 0.4]),
        ("linear", 0.25, 1, [0.8, 0.6, 0.4, 0.2]),
    ],
)
def test_each_schedule_is_its_formula(schedule, decay, step, rates):
    cfg = TrainConfig(lr=0.8, lr_schedule=schedule, lr_decay=decay, lr_step=step)
    assert [learning_rate(cfg, r) for r in range(4)] == pytest.approx(rates)


def test_the_schedule_never_goes_below_the_floor():
    cfg = TrainConfig(lr=0.8, lr_schedule="linear", lr_decay=0.25, lr_floor=0.3)
    assert [learning_rate(cfg, r) for r in range(5)] == pytest.approx([0.8, 0.6, 0.4, 0.3, 0.3])
    cfg = TrainConfig(lr=0.8, lr_schedule="step", lr_decay=0.5, lr_step=0)
    assert learning_rate(cfg, 2) == pytest.approx(0.2)  # a step of 0 counts as 1
    with pytest.raises(FedshareError, match="cosine"):
        learning_rate(TrainConfig(lr_schedule="cosine"), 0)


def test_the_optimizer_has_the_configured_settings():
    p = [torch.nn.Parameter(torch.zeros(2))]
    sgd = make_optimizer(p, TrainConfig(momentum=0.7, weight_decay=0.01), lr=0.3)
    assert isinstance(sgd, torch.optim.SGD)
    group = sgd.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.3, 0.7, 0.01)
    adam = make_optimizer(
        p, TrainConfig(optimizer="adam", betas=[0.6, 0.8], weight_decay=0.02), lr=0.1
    )
    assert isinstance(adam, torch.optim.Adam)
    group = adam.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (0.1, (0.6, 0.8), 0.02)
    with pytest.raises(FedshareError, match="rmsprop"):
        make_optimizer(p, TrainConfig(optimizer="rmsprop"), lr=0.1)


@pytest.mark.parametrize("reset", [False, True])
def test_reset_each_step_forgets_the_optimizer_state(reset):
    w = torch.nn.Parameter(torch.zeros(1))
    cfg = TrainConfig(optimizer="adam", optimizer_reset_each_step=reset)
    optimizer = make_optimizer([w], cfg, lr=0.1)
    fit(optimizer, [1.0, 1.0], lambda b: w.sum() * b)
    assert (len(optimizer.state) == 0) is reset
