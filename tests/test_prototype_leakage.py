"""The prototypes' leakage (`fedshare.metrics.prototype_leakage`): dCor of the shared class
prototypes with the clients' class-mean inputs, beside its shuffled baseline, reported by the
prototype-sharing methods in metrics.jsonl and summary.json."""

import pytest
import torch

from fedshare.metrics.prototype_leakage import PERMUTATIONS, PrototypeLeakage
from fedshare.privacy.dcor import mean_distance_correlation
from fedshare.strategies import make_strategy
from helpers import digits_federation
from hetero_runs import digits_run


def leakage() -> PrototypeLeakage:
    return PrototypeLeakage(digits_federation("iid", 4), 10, seed=0)


def test_class_means_are_each_clients_mean_prepared_input_per_class():
    meter = leakage()
    data = meter.data
    idx = data.client_indices[2]
    x = data.dataset.prepare(data.dataset.x_train[idx]).flatten(1).double()
    y = data.dataset.y_train[idx]
    means = meter.class_means(2)
    for c in range(10):
        if (y == c).any():
            torch.testing.assert_close(means[c], x[y == c].mean(0))
        else:
            assert not means[c].any()


def test_prototypes_that_copy_the_mean_inputs_leak_fully_and_unrelated_ones_do_not():
    meter = leakage()
    classes = torch.arange(10)
    for cid in range(4):  # prototypes an affine copy of the class means: distances kept
        meter.add(cid, 2 * meter.class_means(cid)[classes] + 1, classes)
    copied = meter.measure(round_idx=0)
    assert copied["prototype_dcor"] == pytest.approx(1.0)
    assert copied["prototype_dcor_p"] <= 1 / PERMUTATIONS  # no re-pairing ties it
    assert copied["prototype_dcor_baseline"] < 0.9 and copied["prototype_pairs"] == 40
    assert meter.last == copied
    draws = torch.Generator().manual_seed(1)
    for cid in range(4):
        meter.add(cid, torch.randn(10, 16, generator=draws), classes)
    unrelated = meter.measure(round_idx=1)
    assert unrelated["prototype_dcor"] < 0.9 and unrelated["prototype_dcor_p"] > 0.01
    assert meter.measure(round_idx=2) == {}  # the pairs were used up


def test_the_value_is_mean_distance_correlation_over_the_rounds_pairs():
    meter = leakage()
    draws = torch.Generator().manual_seed(0)
    protos = [torch.randn(3, 8, generator=draws) for _ in range(2)]
    classes = torch.tensor([1, 4, 7])
    for cid in range(2):
        meter.add(cid, protos[cid], classes)
    inputs = torch.cat([meter.class_means(cid)[classes] for cid in range(2)])
    expected = mean_distance_correlation(inputs, torch.cat(protos).double(), chunk=6)
    assert meter.measure(round_idx=0)["prototype_dcor"] == pytest.approx(expected)


@pytest.mark.parametrize("name", ["fedproto", "fedgh"])
def test_prototype_methods_report_the_leakage_of_what_they_received(name, monkeypatch):
    received: list[tuple[int, torch.Tensor, torch.Tensor]] = []
    cls = type(make_strategy(name))
    add = PrototypeLeakage.add

    def spy(self, client_id, prototypes, classes):
        received.append((client_id, prototypes.clone(), classes.clone()))
        add(self, client_id, prototypes, classes)

    monkeypatch.setattr(PrototypeLeakage, "add", spy)
    result = digits_run(name, rounds=1, partition={"name": "dirichlet", "alpha": 0.3})
    assert isinstance(result.strategy, cls)
    assert len({cid for cid, _, _ in received}) == 4  # every upload, each client once
    meter = leakage()
    meter.data = result.strategy.data
    inputs = torch.cat([meter.class_means(cid)[c] for cid, _, c in received])
    protos = torch.cat([p for _, p, _ in received]).double()
    expected = mean_distance_correlation(inputs, protos, chunk=len(inputs))
    assert result.summary["prototype_dcor"] == pytest.approx(expected)
    assert result.history[-1]["prototype_dcor"] == result.summary["prototype_dcor"]
    assert result.summary["prototype_pairs"] == len(inputs)
