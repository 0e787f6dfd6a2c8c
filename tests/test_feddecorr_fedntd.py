"""FedDecorr and FedNTD (FLea's baselines, FLea's App. C.3): their losses exactly, β = 0 is
FedAvg, and the configs carry FLea's values."""

import copy

import pytest
import torch
import torch.nn.functional as F

from fedshare import simulate
from fedshare.config import TrainConfig
from fedshare.engine.client_side import ClientSetup
from fedshare.engine.flat import FlatState
from fedshare.errors import FedshareError
from fedshare.functional.losses import decorrelation_loss, not_true_distillation
from fedshare.models import build_model
from fedshare.strategies import make_strategy
from fedshare.strategies.base import Message
from helpers import DIGITS_TRAIN, digits_federation, without_wall_time


def test_decorrelation_loss_is_zero_for_orthogonal_features_and_large_for_collapsed_ones():
    # ±1 columns that are orthogonal over the batch: standardised, K = zᵀz is diagonal
    h = torch.tensor([[1.0, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]])
    assert float(decorrelation_loss(h[:, 1:])) == pytest.approx(0.0, abs=1e-6)
    collapsed = torch.randn(16, 1).repeat(1, 5)  # every dimension the same: correlation 1
    # K's off-diagonal entries are (n − 1) after standardising with the unbiased variance
    assert float(decorrelation_loss(collapsed)) == pytest.approx(15**2 / 16, rel=1e-4)
    assert float(decorrelation_loss(torch.randn(1, 5))) == 0.0  # one sample: no term


def test_decorrelation_loss_matches_its_definition():
    z = torch.randn(32, 6, generator=torch.Generator().manual_seed(0))
    s = (z - z.mean(0)) / torch.sqrt(1e-8 + z.var(0))
    k = s.T @ s
    expected = (k**2).sum() - (k.diagonal() ** 2).sum()
    assert float(decorrelation_loss(z)) == pytest.approx(float(expected / 30 / 32), rel=1e-5)


def test_decorrelation_loss_has_a_term_from_two_samples_and_two_dimensions():
    """FLea's App. C.3 (FedDecorr, its code): the term needs ≥ 2 samples and ≥ 2 dimensions. By hand
    for n = d = 2: the standardised columns are (−1, 1)/√2 and (1, −1)/√2, K's off-diagonal
    entries are −1, mean square 1, divided by n = 2; one dimension has no off-diagonal entry."""
    z = torch.tensor([[1.0, 2.0], [3.0, 1.0]])
    assert float(decorrelation_loss(z)) == pytest.approx(0.5, rel=1e-6)
    assert float(decorrelation_loss(torch.randn(4, 1))) == 0.0
    assert float(decorrelation_loss(torch.randn(2, 1))) == 0.0


def test_not_true_distillation_ignores_the_true_class():
    gen = torch.Generator().manual_seed(0)
    logits, teacher = torch.randn(8, 5, generator=gen), torch.randn(8, 5, generator=gen)
    y = torch.randint(5, (8,), generator=gen)
    loss = not_true_distillation(logits, teacher, y, 2.0)
    moved = logits.clone()
    moved[torch.arange(8), y] += 7.0  # the true class's logit plays no part
    assert float(not_true_distillation(moved, teacher, y, 2.0)) == pytest.approx(float(loss))
    assert float(not_true_distillation(logits, logits, y, 2.0)) == pytest.approx(0.0, abs=1e-6)
    assert float(not_true_distillation(logits, teacher, y)) == pytest.approx(  # default τ = 1
        float(not_true_distillation(logits, teacher, y, 1.0))
    )
    with pytest.raises(FedshareError, match="temperature=0"):
        not_true_distillation(logits, teacher, y, 0.0)
    # by hand for one sample: drop class y, KL(softmax(t/T) ‖ softmax(s/T)) · T²
    keep = [c for c in range(5) if c != int(y[0])]
    p = F.softmax(teacher[0, keep] / 2, 0)
    q = F.log_softmax(logits[0, keep] / 2, 0)
    one = not_true_distillation(logits[:1], teacher[:1], y[:1], 2.0)
    assert float(one) == pytest.approx(float((p * (p.log() - q)).sum() * 4), rel=1e-5)


@pytest.mark.parametrize("name", ["feddecorr", "fedntd"])
def test_beta_zero_is_fedavg(name):
    def run(strategy):
        return simulate(
            strategy, digits_federation("dirichlet", 5), "cnn_small", rounds=2, train=DIGITS_TRAIN
        )

    base = run(make_strategy("fedavg"))
    same = run(make_strategy(name, {"beta": 0.0}))
    assert without_wall_time(same.history) == without_wall_time(base.history)
    other = run(make_strategy(name))  # FLea's value: the loss changes the path
    assert other.history[-1]["train_loss"] != base.history[-1]["train_loss"]


def test_bad_parameters_are_refused():
    with pytest.raises(Exception, match=r"strategy\.beta=-1"):
        make_strategy("feddecorr", {"beta": -1})
    with pytest.raises(Exception, match=r"strategy\.tau=0"):
        make_strategy("fedntd", {"tau": 0})


def _by_hand_decorrelation(z: torch.Tensor) -> torch.Tensor:
    n, d = z.shape
    s = (z - z.mean(0)) / torch.sqrt(1e-8 + z.var(0))
    k = s.T @ s
    return ((k**2).sum() - (k.diagonal() ** 2).sum()) / (d * d - d) / n


def _by_hand_not_true(student, teacher, y, tau):
    keep = torch.ones_like(student, dtype=torch.bool)
    keep[torch.arange(len(y)), y] = False
    s = student[keep].view(len(y), -1) / tau
    t = teacher[keep].view(len(y), -1) / tau
    p = F.softmax(t, 1)
    return (p * (F.log_softmax(t, 1) - F.log_softmax(s, 1))).sum(1).mean() * tau**2


def _local_loss(name: str, params: dict):
    """The client side's loss for one step: the local model starts away from the global one
    (the round's broadcast, FedNTD's teacher)."""
    torch.manual_seed(0)
    global_model = build_model("cnn_small", (1, 8, 8), 10)
    local = copy.deepcopy(global_model)
    with torch.no_grad():
        for p in local.parameters():
            p.add_(0.1 * torch.randn_like(p))
    strategy = make_strategy(name, params)
    setup = ClientSetup(local, TrainConfig(), 0, torch.device("cpu"), 10, (1, 8, 8), 4)
    strategy.client_setup(setup)
    message = Message(weights=FlatState(global_model).flatten(global_model))
    return strategy.local_loss(local, message), local, global_model


@pytest.mark.parametrize(
    ("name", "params"),
    [("feddecorr", {"beta": 0.7}), ("fedntd", {"beta": 0.7, "tau": 2.0})],
)
def test_local_loss_and_its_gradient_are_ce_plus_beta_times_the_term(name, params):
    """Value *and* gradient of the local loss equal CE + β·term written out by hand (a term
    whose gradient were lost, e.g. a detached feature, passes a loss-value check), and one SGD
    step on it lowers the term more than a step on CE alone (the term's direction)."""
    loss_fn, local, global_model = _local_loss(name, params)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 1, 8, 8, generator=g), torch.randint(0, 10, (24,), generator=g)
    global_model.eval()

    def term(net):
        if name == "feddecorr":
            return _by_hand_decorrelation(net.encode(x, net.num_blocks - 1).flatten(1))
        with torch.no_grad():
            teacher = global_model(x)
        return _by_hand_not_true(net(x), teacher, y, params["tau"])

    local.train()
    got = loss_fn(local, x, y)
    expected = F.cross_entropy(local(x), y) + params["beta"] * term(local)
    torch.testing.assert_close(got, expected)
    parameters = list(local.parameters())
    for a, b in zip(
        torch.autograd.grad(got, parameters),
        torch.autograd.grad(expected, parameters),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert all(p.grad is None for p in global_model.parameters())  # the teacher stays frozen
    after = {}
    for label, fn in (("ce", lambda net: F.cross_entropy(net(x), y)), ("full", loss_fn)):
        net = copy.deepcopy(local)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        for _ in range(3):
            optimizer.zero_grad()
            fn(net, x, y).backward() if label == "full" else fn(net).backward()
            optimizer.step()
        after[label] = term(net).item()
    assert after["full"] < after["ce"], after
