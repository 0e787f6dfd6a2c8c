"""FedGH (a header trained on prototypes by the server) and FedTGP (trainable global
prototypes with an adaptive margin): the server steps, what travels, and digits runs."""

import copy

import pytest
import torch
import torch.nn.functional as F

from fedshare.config import TrainConfig
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.errors import FedshareError
from fedshare.functional.prototype_losses import class_gap, margin_prototype_loss
from fedshare.strategies._personal import PERSONAL
from fedshare.strategies._server_training import prototype_batches
from fedshare.strategies.base import Update
from fedshare.strategies.fedproto import prototype_message
from helpers import DIGITS_TRAIN, digits_federation
from hetero_runs import CLIENTS, chance_bound, digits_run, server_side

BOUND = chance_bound(digits_federation("iid", CLIENTS))


def held_labels() -> int:
    counts = digits_federation("iid", CLIENTS).partition.class_counts
    return sum(int((row > 0).sum()) for row in counts)


def separated_uploads(d: int, clients: int = 3, classes: int = 10) -> list[Update]:
    """Each client's prototypes: class c near 5·e_c (class 0 near 10·e_0; d >= classes), plus
    small noise: class 0's gap is √125, every other class's √50."""
    gen = torch.Generator().manual_seed(0)
    centers = torch.zeros(classes, d)
    centers[torch.arange(classes), torch.arange(classes)] = 5.0
    centers[0, 0] = 10.0
    held = torch.ones(classes, dtype=torch.bool)
    return [
        Update(
            k,
            10,
            payload=prototype_message(
                centers + 0.1 * torch.randn(classes, d, generator=gen), held
            ).payload,
        )
        for k in range(clients)
    ]


def one_and_nine_client(strategy, data) -> Client:
    """A client holding one sample of class 0 and nine of class 3, nothing else."""
    y = data.dataset.y_train
    indices = torch.cat([torch.nonzero(y == 0).flatten()[:1], torch.nonzero(y == 3).flatten()[:9]])
    worker = copy.deepcopy(strategy.model)
    return Client(0, 1, indices, data.dataset, worker, TrainConfig(**DIGITS_TRAIN), 0)


@pytest.mark.parametrize("name", ["fedgh", "fedtgp"])
def test_the_upload_holds_the_feature_mean_of_each_held_class_and_no_other(name):
    """A class of a single sample is sent too; a class the client lacks is not."""
    strategy, data = server_side(name)
    client = one_and_nine_client(strategy, data)
    net, _ = strategy.local_step(client, strategy.broadcast(0))
    sent = strategy.uploaded(client, net, torch.tensor(0.0), strategy.broadcast(0)).payload
    assert sent["proto_classes"].tolist() == [0, 3]
    x, y = client.data()
    net.eval()
    with torch.no_grad():
        features = net.features(x).flatten(1)
    means = torch.stack([features[y == 0].mean(0), features[y == 3].mean(0)])
    torch.testing.assert_close(sent["prototypes"], means)


def test_server_batches_are_shuffled_passes_each_holding_every_upload_once():
    prototypes = torch.arange(25.0).unsqueeze(1).repeat(1, 3)
    labels = torch.arange(25)
    batches = list(prototype_batches(prototypes, labels, 10, 2, 0, "fedgh", 4))
    assert [len(y) for _, y in batches] == [10, 10, 5, 10, 10, 5]
    for p, y in batches:
        assert torch.equal(p, prototypes[y])  # each prototype keeps its label
    first = torch.cat([y for _, y in batches[:3]])
    second = torch.cat([y for _, y in batches[3:]])
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(25))
    assert not torch.equal(first, labels) and not torch.equal(first, second)
    again = list(prototype_batches(prototypes, labels, 10, 2, 0, "fedgh", 4))
    assert all(torch.equal(a[1], b[1]) for a, b in zip(batches, again, strict=True))


# ---------------------------------------------------------------- FedGH
def test_fedgh_header_trains_on_the_uploaded_prototypes_alone():
    strategy, _ = server_side("fedgh", {"server_epochs": 30, "server_lr": 0.1})
    strategy.data = None  # the server step reads no data, only the uploads
    uploads = separated_uploads(strategy.feature_dim)
    protos = torch.cat([u.payload["prototypes"] for u in uploads])
    labels = torch.cat([u.payload["proto_classes"] for u in uploads])
    before = F.cross_entropy(strategy.header(protos), labels).item()
    strategy.aggregate(iter(uploads), 0)
    with torch.no_grad():
        logits = strategy.header(protos)
    assert F.cross_entropy(logits, labels).item() < before / 2
    assert torch.equal(logits.argmax(dim=1), labels)


def test_fedgh_header_replaces_the_heads_of_personal_models():
    strategy, _ = server_side("fedgh")
    flat = FlatState(strategy.model)
    model = strategy.personal_model(1, {PERSONAL: torch.randn(flat.numel)})
    assert torch.equal(model.head.weight, strategy.header.weight)
    assert torch.equal(
        strategy.broadcast(0).weights, FlatState(strategy.header).flatten(strategy.header)
    )


def test_fedgh_sends_prototypes_up_and_the_header_down_and_learns():
    result = digits_run("fedgh", rounds=2)
    first = result.history[0]
    assert first["bytes_up"] == held_labels() * (128 * 4 + 8)  # prototypes and class ids
    assert first["bytes_down"] == CLIENTS * (128 * 10 + 10) * 4  # the header's weights
    assert result.summary["best_accuracy"] > BOUND


def test_fedgh_refuses_a_zero_server_epochs():
    refusal = r"strategy.server_epochs=0 is not valid: .* in \[1, 10000\]"
    with pytest.raises(FedshareError, match=refusal):
        digits_run("fedgh", params={"server_epochs": 0})


# ---------------------------------------------------------------- FedTGP
def test_class_gap_is_the_distance_to_the_nearest_other_center():
    centers = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 10.0], [9.0, 9.0]])
    mask = torch.tensor([True, True, True, False])
    torch.testing.assert_close(class_gap(centers, mask), torch.tensor([3.0, 3.0, 10.0, 3.0]))


def test_margin_loss_enlarges_the_own_class_distance():
    torch.manual_seed(0)
    p, protos = torch.randn(6, 4), torch.randn(3, 4)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    dist = torch.cdist(p, protos)
    expected = F.cross_entropy(-(dist + 2.0 * F.one_hot(y, 3)), y)
    torch.testing.assert_close(margin_prototype_loss(p, y, protos, 2.0), expected)
    assert margin_prototype_loss(p, y, protos, 2.0) > margin_prototype_loss(p, y, protos, 0.0)


def test_fedtgp_server_trains_prototypes_that_separate_the_uploads():
    strategy, _ = server_side("fedtgp", {"server_epochs": 30, "server_lr": 0.1})
    uploads = separated_uploads(strategy.feature_dim)
    protos = torch.cat([u.payload["prototypes"] for u in uploads])
    labels = torch.cat([u.payload["proto_classes"] for u in uploads])
    strategy.aggregate(iter(uploads), 0)
    assert strategy.mask.all()  # every class gets a trainable prototype
    assert strategy.margin == pytest.approx(125**0.5, rel=0.02)  # the largest gap, under τ
    nearest = torch.cdist(protos, strategy.prototypes).argmin(dim=1)
    assert torch.equal(nearest, labels)


def test_fedtgp_margin_is_capped_by_the_threshold():
    strategy, _ = server_side("fedtgp", {"server_epochs": 1, "margin_threshold": 1.5})
    strategy.aggregate(iter(separated_uploads(strategy.feature_dim)), 0)
    assert strategy.margin == 1.5


def test_fedtgp_margin_is_zero_while_a_single_class_has_been_uploaded():
    """No other class center, no gap: the margin is 0 (the TGP still trains)."""
    strategy, _ = server_side("fedtgp", {"server_epochs": 1})
    held = torch.zeros(10, dtype=torch.bool)
    held[2] = True
    upload = prototype_message(torch.randn(10, strategy.feature_dim), held).payload
    before = strategy.tgp.fc.weight.clone()
    strategy.aggregate(iter([Update(0, 10, payload=upload)]), 0)
    assert strategy.margin == 0.0
    assert not torch.equal(strategy.tgp.fc.weight, before)


def test_fedtgp_sends_prototypes_without_counts_and_learns():
    result = digits_run("fedtgp", rounds=3, params={"server_epochs": 10})
    first, second = result.history[:2]
    assert first["bytes_up"] == held_labels() * (128 * 4 + 8)
    assert second["bytes_down"] == CLIENTS * 10 * (128 * 4 + 8)
    assert result.summary["best_accuracy"] > BOUND
