"""FedMRL: matryoshka representations of a shared small model and a personal one."""

import torch
import torch.nn.functional as F

from fedshare.engine.flat import FlatState
from fedshare.models import build_model
from fedshare.strategies._personal import PERSONAL
from fedshare.strategies.fedmrl import MRLNet, MRLPersonal, matryoshka_loss
from helpers import digits_federation
from hetero_runs import CLIENTS, chance_bound, digits_run, server_side

BOUND = chance_bound(digits_federation("iid", CLIENTS))


def small_net(d1: int = 4, d: int = 6) -> MRLNet:
    torch.manual_seed(0)
    shared = build_model("mlp", (5,), 3, {"hidden": [d1]})
    local = build_model("mlp", (5,), 3, {"hidden": [d]})
    return MRLNet(shared, MRLPersonal(local, torch.nn.Linear(d1 + d, d)))


def test_the_shared_header_reads_only_the_first_d1_dimensions():
    net = small_net()
    x = torch.randn(7, 5)
    out_g, out_l = net.both(x)
    with torch.no_grad():
        net.personal.proj.weight[4:] += 1.0  # the rows of dimensions d1..d
    new_g, new_l = net.both(x)
    torch.testing.assert_close(new_g, out_g)
    assert not torch.allclose(new_l, out_l)
    assert torch.equal(net(x), new_l)  # inference is the local header on all d dimensions


def test_matryoshka_loss_is_the_sum_of_both_headers_cross_entropies():
    net = small_net()
    x, y = torch.randn(7, 5), torch.tensor([0, 1, 2, 0, 1, 2, 0])
    out_g, out_l = net.both(x)
    expected = F.cross_entropy(out_g, y) + F.cross_entropy(out_l, y)
    torch.testing.assert_close(matryoshka_loss(net, x, y), expected)


def test_personal_models_are_evaluated_with_the_current_shared_model():
    strategy, _ = server_side("fedmrl")
    numel = FlatState(strategy.shown).numel
    net = strategy.personal_model(2, {PERSONAL: torch.randn(numel)})
    assert net.shared is strategy.model
    assert isinstance(strategy.global_model(), MRLNet)


def test_fedmrl_sends_only_the_shared_model_and_learns():
    result = digits_run("fedmrl", rounds=2, eval={"personal": True})
    weights = FlatState(result.strategy.model).numel * 4
    first = result.history[0]
    assert first["bytes_up"] == first["bytes_down"] == CLIENTS * weights
    assert result.summary["best_accuracy"] > BOUND
    assert result.history[-1]["personal_accuracy"] > BOUND
