"""FedDecorr and FedNTD (FLea's baselines, specs/flea.md §5): their losses exactly, β = 0 is
FedAvg, and the configs carry FLea's values."""

import pytest
import torch
import torch.nn.functional as F

from fedshare import simulate
from fedshare.functional.losses import decorrelation_loss, not_true_distillation
from fedshare.strategies import make_strategy
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


def test_not_true_distillation_ignores_the_true_class():
    gen = torch.Generator().manual_seed(0)
    logits, teacher = torch.randn(8, 5, generator=gen), torch.randn(8, 5, generator=gen)
    y = torch.randint(5, (8,), generator=gen)
    loss = not_true_distillation(logits, teacher, y, 2.0)
    moved = logits.clone()
    moved[torch.arange(8), y] += 7.0  # the true class's logit plays no part
    assert float(not_true_distillation(moved, teacher, y, 2.0)) == pytest.approx(float(loss))
    assert float(not_true_distillation(logits, logits, y, 2.0)) == pytest.approx(0.0, abs=1e-6)
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
