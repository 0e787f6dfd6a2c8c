"""FedProto: count-weighted prototypes, the pull toward the own class's global prototype,
prediction by the nearest prototype, what travels, and a digits run that learns."""

import pytest
import torch

from fedshare.engine.flat import FlatState
from fedshare.errors import FedshareError
from fedshare.functional.prototype_losses import nearest_prototype, prototype_distance_loss
from fedshare.functional.prototypes import PrototypeAverager, class_means, pack, unpack
from fedshare.strategies.base import Update
from fedshare.strategies.fedproto import prototype_accuracy
from helpers import digits_federation
from hetero_runs import CLIENTS, chance_bound, digits_run, server_side


def test_global_prototype_is_the_count_weighted_mean():
    strategy, _ = server_side("fedproto")
    d = strategy.feature_dim
    a, b = torch.randn(10, d), torch.randn(10, d)
    counts_a = torch.zeros(10)
    counts_b = torch.zeros(10)
    counts_a[[0, 1]] = torch.tensor([3.0, 5.0])
    counts_b[[1, 2]] = torch.tensor([1.0, 4.0])
    updates = [
        Update(0, 8, payload=pack(a, counts_a)),
        Update(1, 5, payload=pack(b, counts_b)),
    ]
    strategy.aggregate(iter(updates), 0)
    assert strategy.mask.tolist() == [True, True, True] + [False] * 7
    torch.testing.assert_close(strategy.prototypes[0], a[0])
    torch.testing.assert_close(strategy.prototypes[1], (5 * a[1] + 1 * b[1]) / 6)
    torch.testing.assert_close(strategy.prototypes[2], b[2])
    assert strategy.broadcast(1).payload["proto_classes"].tolist() == [0, 1, 2]


def test_class_means_divide_by_each_class_count_even_a_single_sample():
    features = torch.tensor([[2.0, 4.0], [6.0, 8.0], [1.0, 3.0]])
    means, counts = class_means(features, torch.tensor([0, 0, 2]), 3)
    assert counts.tolist() == [2.0, 0.0, 1.0]
    torch.testing.assert_close(means, torch.tensor([[4.0, 6.0], [0.0, 0.0], [1.0, 3.0]]))


def test_the_upload_holds_only_the_classes_the_client_has():
    counts = torch.tensor([3.0, 0.0, 1.0])
    sent = pack(torch.randn(3, 4), counts)
    assert sent["proto_classes"].tolist() == [0, 2]
    assert sent["proto_counts"].tolist() == [3.0, 1.0] and sent["prototypes"].shape == (2, 4)


def test_unpack_counts_one_per_class_without_counts_and_nothing_for_an_empty_payload():
    protos = torch.randn(2, 4)
    payload = {"proto_classes": torch.tensor([1, 3]), "prototypes": protos}
    got, counts, mask = unpack(payload, 4, 4, "cpu")
    assert counts.tolist() == [0.0, 1.0, 0.0, 1.0] and mask.tolist() == [False, True, False, True]
    torch.testing.assert_close(got[[1, 3]], protos)
    got, counts, mask = unpack({}, 4, 4, "cpu")  # a client that sent no prototype
    assert not got.any() and not counts.any() and not mask.any()


def test_the_averager_is_a_weighted_mean_for_any_positive_weights():
    averager = PrototypeAverager(2, 3)
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    averager.add(a, torch.tensor([0.25, 0.0]))
    averager.add(b, torch.tensor([0.5, 0.0]))  # weights summing to less than 1
    prototypes, mask = averager.result()
    assert mask.tolist() == [True, False]
    torch.testing.assert_close(prototypes[0], (a[0] + 2 * b[0]) / 3)
    assert not prototypes[1].any()


def test_the_distance_term_pulls_each_feature_toward_its_own_class_prototype():
    torch.manual_seed(0)
    protos = torch.randn(3, 5)
    mask = torch.tensor([True, True, False])
    features = torch.randn(4, 5, requires_grad=True)
    labels = torch.tensor([0, 1, 1, 2])
    prototype_distance_loss(features, labels, protos, mask).backward()
    grad = features.grad
    expected = 2 * (features.detach() - protos[labels]) / features.numel()
    torch.testing.assert_close(grad[:3], expected[:3])
    assert torch.equal(grad[3], torch.zeros(5))  # class 2 has no global prototype
    moved = features.detach() - 0.5 * features.numel() * grad
    assert torch.allclose(moved[:3], protos[labels[:3]])


def test_nearest_prototype_skips_absent_classes():
    protos = torch.tensor([[0.0, 0.0], [10.0, 0.0], [1.0, 0.0]])
    mask = torch.tensor([True, True, False])
    assert nearest_prototype(torch.tensor([[0.9, 0.0], [7.0, 0.0]]), protos, mask).tolist() == [
        0,
        1,
    ]


def test_negative_lambda_is_refused():
    with pytest.raises(FedshareError, match=r"strategy.lam=-1.0 is not valid: .* >= 0"):
        digits_run("fedproto", params={"lam": -1.0})


def test_prototypes_travel_up_and_down_and_no_weights_do():
    """Round 0 downloads nothing; each client uploads, per class it holds, a d-float
    prototype, its class id and its count; round 1 downloads the 10 global prototypes."""
    result = digits_run("fedproto", rounds=2)
    data = digits_federation("iid", CLIENTS)
    held = sum(int((row > 0).sum()) for row in data.partition.class_counts)
    d = 128  # cnn_small's penultimate width
    up = held * (d * 4 + 8 + 4)
    first, second = result.history
    assert first["bytes_up"] == up and first["bytes_down"] == 0
    assert second["bytes_up"] == 2 * up
    assert second["bytes_down"] == CLIENTS * 10 * (d * 4 + 8)
    assert second["bytes_shared"] == second["bytes_up"] + second["bytes_down"]


def test_fedproto_learns_on_digits_by_head_and_by_prototype():
    result = digits_run("fedproto", rounds=3, partition={"name": "dirichlet", "alpha": 0.5})
    bound = chance_bound(digits_federation("iid", CLIENTS))
    assert result.summary["best_accuracy"] > bound
    assert max(r["proto_accuracy"] for r in result.history) > bound


def test_proto_accuracy_is_the_shown_models_nearest_prototype_accuracy():
    result = digits_run("fedproto", rounds=2)
    strategy = result.strategy
    dataset = strategy.data.dataset
    expected = prototype_accuracy(
        strategy.global_model(),
        dataset.prepare(dataset.x_test),
        dataset.y_test,
        strategy.prototypes,
        strategy.mask,
    )
    assert result.history[-1]["proto_accuracy"] == expected


def test_lambda_zero_is_local_training():
    """λ weights the prototype term: at λ = 0 FedProto's clients train as local-only ones (the
    same personal models and losses; a term added with weight 1 would move them)."""
    proto = digits_run("fedproto", rounds=2, params={"lam": 0.0})
    local = digits_run("local_only", rounds=2)
    shown = [r.strategy.global_model() for r in (proto, local)]
    assert proto.summary["shown_client"] == local.summary["shown_client"]
    torch.testing.assert_close(
        FlatState(shown[0]).flatten(shown[0]), FlatState(shown[1]).flatten(shown[1])
    )
    assert proto.history[-1]["train_loss"] == pytest.approx(local.history[-1]["train_loss"])
