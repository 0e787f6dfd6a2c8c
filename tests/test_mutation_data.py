"""Fast exact tests of data/ for mutation testing (docs/mutation.md, tenth session).

Tiny synthetic tensors, no files and no simulation: each expected value is computed here
from the definition (the streams `numpy_rng(seed, purpose)` replayed by hand), so a changed
sign, bound, count or flag in federated.py, validation.py, dataset.py or datasets.py fails.
"""

import gzip
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from fedshare.data import cache, features, files, sources
from fedshare.data.dataset import Augmentation, Dataset, augment_batch, channel_constant
from fedshare.data.datasets import (
    GENERATED_BYTES_LIMIT,
    MAX_CLASSES,
    balanced_subset,
    check_generated_sizes,
    check_labels,
    keep_classes,
    load_dataset,
    with_statistics,
)
from fedshare.data.federated import (
    FederatedData,
    carve_server_data,
    federate,
    resolve_num_clients,
    with_server_data,
)
from fedshare.data.partitioners import Partition, fingerprint, make_partition
from fedshare.data.validation import carve_validation, check_val_fraction, held_out
from fedshare.engine.rng import numpy_rng
from fedshare.errors import FedshareError

# ---------------------------------------------------------------------- helpers


def tiny_dataset(n: int = 24, classes: int = 3, test: int = 6) -> Dataset:
    """`n` training samples whose input is their own index (labels i mod classes)."""
    x = torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 2)
    y = torch.arange(n) % classes
    x_test = torch.arange(test, dtype=torch.float32)[:, None].repeat(1, 2)
    return Dataset("tiny", x, y, x_test, torch.arange(test) % classes, num_classes=classes)


def partition_of(indices: list[list[int]], labels: np.ndarray, classes: int) -> Partition:
    ix = [np.asarray(i, dtype=np.int64) for i in indices]
    counts = np.stack([np.bincount(labels[i], minlength=classes) for i in ix])
    return Partition("hand", {}, ix, classes, counts, fingerprint=fingerprint(ix))


# ---------------------------------------------------------------------- validation.py


def test_check_val_fraction_accepts_fractions_in_zero_one_and_refuses_the_rest():
    assert check_val_fraction(0) == 0.0 and isinstance(check_val_fraction(0), float)
    assert check_val_fraction(0.5) == 0.5
    assert check_val_fraction(0.999) == 0.999
    for bad in (True, "0.1", None):
        with pytest.raises(FedshareError, match="is not a number"):
            check_val_fraction(bad)
    for bad in (1, 1.0, -0.1, 2):
        with pytest.raises(FedshareError, match=r"must be in \[0, 1\)"):
            check_val_fraction(bad)


def test_held_out_rounds_half_up():
    assert held_out(10, 0.25) == 3  # 2.5 + 0.5
    assert held_out(10, 0.24) == 2
    assert held_out(3, 0.5) == 2
    assert held_out(7, 0.0) == 0
    assert held_out(1, 0.49) == 0
    assert held_out(100, 0.1) == 10


def replayed_split(clients: list[list[int]], fraction: float, seed: int, server=None):
    """The split by its definition: the stream (seed, "validation"), client after client."""
    rng = numpy_rng(seed, "validation")
    kept, held = [], []
    for ix in clients:
        ix = np.asarray(ix)
        count = int(np.floor(fraction * len(ix) + 0.5))
        order = rng.permutation(len(ix))
        held += ix[order[:count]].tolist()
        kept.append(sorted(ix[order[count:]].tolist()))
    if server is not None:
        order = rng.permutation(len(server))
        count = min(int(np.floor(fraction * len(server) + 0.5)), len(server) - 1)
        held += server[order[:count]].tolist()
        server = sorted(server[order[count:]].tolist())
    return kept, sorted(held), server


def test_carve_validation_holds_out_each_clients_share_from_the_validation_stream():
    labels = np.arange(30) % 3
    clients = [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [10, 11, 12, 13, 14, 15], [20, 22, 24, 26, 28]]
    part = partition_of(clients, labels, 3)
    split = carve_validation(part, labels, 0.3, seed=5)
    kept, held, _ = replayed_split(clients, 0.3, 5)
    assert [ix.tolist() for ix in split.partition.client_indices] == kept
    assert [len(k) for k in kept] == [7, 4, 3]  # 3, 2 (1.8 + .5) and 2 (1.5 + .5) held out
    assert split.indices.tolist() == held
    assert split.server is None
    expected_counts = [np.bincount(labels[k], minlength=3).tolist() for k in kept]
    assert split.partition.class_counts.tolist() == expected_counts
    assert split.partition.info["validation"] == {
        "fraction": 0.3,
        "size": 7,
        "class_counts": np.bincount(labels[held], minlength=3).tolist(),
    }
    extra = {"partition": part.fingerprint, "validation": held}
    assert split.partition.fingerprint == fingerprint(split.partition.client_indices, extra)
    assert split.partition.fingerprint != part.fingerprint
    other = carve_validation(part, labels, 0.3, seed=6)
    assert other.partition.fingerprint != split.partition.fingerprint


def test_carve_validation_takes_the_servers_share_and_leaves_it_one_sample():
    labels = np.arange(40) % 4
    clients = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11, 12]]
    part = partition_of(clients, labels, 4)
    part.info["server_data"] = {"size": 8, "labelled": True, "class_counts": [2, 2, 2, 2]}
    server = np.arange(30, 38)
    split = carve_validation(part, labels, 0.25, seed=1, server=server)
    kept, held, rest = replayed_split(clients, 0.25, 1, server)
    assert [ix.tolist() for ix in split.partition.client_indices] == kept
    assert split.indices.tolist() == held
    assert split.server.tolist() == rest and len(rest) == 6
    assert split.partition.info["server_data"] == {
        "size": 6,
        "labelled": True,
        "class_counts": np.bincount(labels[rest], minlength=4).tolist(),
    }
    # a one-sample server keeps its sample (⌊0.5 + ½⌋ = 1 would leave it none)
    single = carve_validation(part, labels, 0.5, seed=1, server=np.array([39]))
    assert single.server.tolist() == [39]
    assert 39 not in single.indices.tolist()
    # at 0.9 four server samples would all go (⌊3.6 + ½⌋ = 4): three go, one stays
    most = carve_validation(partition_of([list(range(10))], labels, 4), labels, 0.9, 2, server[:4])
    assert len(most.server) == 1 and len(most.indices) == 9 + 3
    # without "server_data" in the info the server's record is not made up
    bare = partition_of(clients, labels, 4)
    assert "server_data" not in carve_validation(bare, labels, 0.25, 1, server).partition.info


def test_carve_validation_refuses_a_client_left_without_training_samples():
    labels = np.arange(10) % 2
    part = partition_of([[0, 1, 2], [3]], labels, 2)
    with pytest.raises(FedshareError, match=r"leaves client 1 \(1 sample\) no training"):
        carve_validation(part, labels, 0.5, 0)
    part = partition_of([[0, 1, 2], [3, 4]], labels, 2)
    with pytest.raises(FedshareError, match=r"leaves client 1 \(2 samples\) no training"):
        carve_validation(part, labels, 0.75, 0)  # ⌊1.5 + ½⌋ = 2 of 2
    # three samples at 0.5: two held out, one kept
    split = carve_validation(partition_of([[0, 1, 2]], labels, 2), labels, 0.5, 0)
    assert len(split.partition.client_indices[0]) == 1 and len(split.indices) == 2


# ---------------------------------------------------------------------- federated.py


def test_resolve_num_clients_from_the_count_or_the_samples_per_client():
    assert resolve_num_clients(100, 7, None) == 7
    assert resolve_num_clients(100, 1, None) == 1
    assert resolve_num_clients(100, None, 30) == 3
    assert resolve_num_clients(100, 5, 1) == 100
    assert resolve_num_clients(100, None, 100) == 1
    for bad in (0, 101, -3):
        with pytest.raises(FedshareError, match=f"samples_per_client={bad} must be between"):
            resolve_num_clients(100, 5, bad)
    for bad in (None, 0, -1):
        with pytest.raises(FedshareError, match=f"clients.num={bad} must be a positive"):
            resolve_num_clients(100, bad, None)


def test_carve_server_data_is_balanced_from_its_stream_and_leaves_the_rest():
    labels = np.arange(20) % 4
    assert carve_server_data(labels, 0, 3)[0] is None
    assert carve_server_data(labels, 0, 3)[1].tolist() == list(range(20))
    server, kept = carve_server_data(labels, 8, 3)
    expected = balanced_subset(labels, 8, numpy_rng(3, "server_data")).numpy()
    assert server.tolist() == expected.tolist()
    assert np.bincount(labels[server], minlength=4).tolist() == [2, 2, 2, 2]
    assert sorted(server.tolist() + kept.tolist()) == list(range(20))
    assert carve_server_data(labels, 19, 3)[1].size == 1
    assert carve_server_data(labels, 1, 3)[0].size == 1
    for bad in (20, 21, -1):
        with pytest.raises(FedshareError, match=f"server_data.size={bad} must be between 1 and"):
            carve_server_data(labels, bad, 3)
    with pytest.raises(FedshareError, match="and the 19 training samples that would leave"):
        carve_server_data(labels, 20, 3)


def test_with_server_data_maps_the_clients_back_and_records_the_server():
    labels = np.arange(12) % 3
    kept = np.array([1, 2, 4, 5, 7, 8, 10, 11])
    part = partition_of([[0, 3, 5], [1, 2, 4, 6, 7]], labels[kept], 3)
    server = np.array([9, 0, 6, 3])
    out = with_server_data(part, kept, server, labels, labelled=False)
    assert [ix.tolist() for ix in out.client_indices] == [[1, 5, 8], [2, 4, 7, 10, 11]]
    assert out.info["server_data"] == {"size": 4, "labelled": False, "class_counts": [4, 0, 0]}
    extra = {"server": [0, 3, 6, 9], "transforms": None}
    assert out.fingerprint == fingerprint(out.client_indices, extra)


def test_federate_splits_with_the_partition_stream_and_carves_server_and_validation():
    data = tiny_dataset(24, 3)
    labels = data.y_train.numpy()
    fed = federate(data, "iid", 3, seed=4, server_size=6, val_fraction=0.2)
    server, kept = carve_server_data(labels, 6, 4)
    part = make_partition(labels[kept], 3, {"name": "iid"}, numpy_rng(4, "partition"), 3)
    part = with_server_data(part, kept, server, labels, True)
    split = carve_validation(part, labels, 0.2, 4, server)
    assert [ix.tolist() for ix in fed.client_indices] == [
        ix.tolist() for ix in split.partition.client_indices
    ]
    assert fed.server_indices.tolist() == split.server.tolist()
    assert fed.val_indices.tolist() == split.indices.tolist()
    assert fed.partition.fingerprint == split.partition.fingerprint
    assert fed.server_labelled and fed.num_clients == 3
    assert fed.client_sizes == [len(ix) for ix in split.partition.client_indices]
    plain = federate(data, {"name": "iid"}, 4, seed=4)
    assert plain.server_indices is None and plain.val_indices is None
    expected = make_partition(labels, 4, {"name": "iid"}, numpy_rng(4, "partition"), 3)
    assert [ix.tolist() for ix in plain.client_indices] == [
        ix.tolist() for ix in expected.client_indices
    ]
    assert federate(data, "iid", None, seed=4, samples_per_client=8).num_clients == 3
    default = federate(data)  # iid over 10 clients from seed 0
    expected = make_partition(labels, 10, {"name": "iid"}, numpy_rng(0, "partition"), 3)
    assert [ix.tolist() for ix in default.client_indices] == [
        ix.tolist() for ix in expected.client_indices
    ]
    assert default.server_indices is None and default.server_labelled


def test_federate_refuses_a_partition_that_leaves_clients_empty():
    data = tiny_dataset(4, 2)
    with pytest.raises(
        FedshareError, match=r"leaves 2 of 6 clients with no samples \(clients \[4, 5\]\);"
    ):
        federate(data, "iid", 6)
    with pytest.raises(FedshareError, match=r"leaves 6 of 10 clients .*\[4, 5, 6, 7, 8\] …\)"):
        federate(data, "iid", 10)
    with pytest.raises(FedshareError, match=r"leaves 5 of 9 clients .*\[4, 5, 6, 7, 8\]\); use"):
        federate(data, "iid", 9)  # five empty clients: all named, no ellipsis
    assert federate(data, "iid", 4).client_sizes == [1, 1, 1, 1]


def test_federated_data_repr_server_batch_and_validation_batches():
    data = tiny_dataset(24, 3)
    fed = federate(data, "iid", 3, seed=0, server_size=6, server_labelled=False, val_fraction=0.25)
    assert repr(fed) == (
        "FederatedData(tiny: 24 train / 6 test, 3 classes, input 2; partition iid() over 3 "
        f"clients, {min(fed.client_sizes)}–{max(fed.client_sizes)} samples each; server data: "
        f"{len(fed.server_indices)} samples; validation: {len(fed.val_indices)} samples)"
    )
    x, y = fed.server_batch()
    assert y is None and x[:, 0].tolist() == fed.server_indices.float().tolist()
    labelled = federate(data, "iid", 3, seed=0, server_size=6)
    x, y = labelled.server_batch()
    assert y.tolist() == (labelled.server_indices % 3).tolist()
    batches = fed.validation_batches(2)
    ix = fed.val_indices
    assert [len(b[0]) for b in batches] == [2] * (len(ix) // 2) + [1] * (len(ix) % 2)
    assert torch.cat([b[0][:, 0] for b in batches]).tolist() == ix.float().tolist()
    assert torch.cat([b[1] for b in batches]).tolist() == (ix % 3).tolist()
    bare = federate(data, "iid", 2, seed=0)
    assert bare.validation_batches(4) == []
    assert "server data: none)" in repr(bare)
    with pytest.raises(FedshareError, match=r"needs data on the server; set server_data\.size"):
        bare.server_batch()
    moved = fed.to("cpu")
    assert moved.server_labelled is False
    assert moved.server_indices.tolist() == fed.server_indices.tolist()
    assert moved.val_indices.tolist() == fed.val_indices.tolist()
    assert [i.tolist() for i in moved.client_indices] == [i.tolist() for i in fed.client_indices]
    assert moved.to("cpu").val_indices is not None
    assert bare.to("cpu").server_indices is None and bare.to("cpu").val_indices is None


def test_federated_data_repr_of_no_clients_reads_zero_samples():
    empty = Partition("none", {"alpha": None, "k": 2}, [], 3, np.zeros((0, 3)))
    fed = FederatedData(tiny_dataset(3, 3), empty, [])
    assert "partition none(k=2) over 0 clients, 0–0 samples each" in repr(fed)


# ---------------------------------------------------------------------- dataset.py


def image_dataset(scale: float = 1.0, mean=None, std=None, aug=None) -> Dataset:
    x = torch.arange(2 * 2 * 3 * 4, dtype=torch.uint8).view(2, 2, 3, 4)
    y = torch.tensor([0, 1])
    return Dataset("img", x, y, x[:1], y[:1], 2, scale, mean, std, aug or Augmentation())


def test_augmentation_is_active_with_a_crop_or_a_flip():
    assert not Augmentation().active
    assert Augmentation(crop_padding=1).active
    assert Augmentation(horizontal_flip=True).active
    assert Augmentation(crop_padding=2, horizontal_flip=True).active


def test_dataset_prepare_scales_then_normalises_per_channel():
    raw = image_dataset().x_train
    for scale in (2.0, 0.5, 0.0):
        assert torch.equal(image_dataset(scale).prepare(raw), raw.float() * scale)
    assert torch.equal(image_dataset().prepare(raw), raw.float())
    data = image_dataset(0.5, mean=(1.0, 3.0), std=(2.0, 4.0))
    expected = raw.float() * 0.5
    expected[:, 0] = (expected[:, 0] - 1.0) / 2.0
    expected[:, 1] = (expected[:, 1] - 3.0) / 4.0
    assert torch.allclose(data.prepare(raw), expected)
    for half in (image_dataset(mean=(1.0, 3.0)), image_dataset(std=(2.0, 4.0))):
        assert torch.equal(half.prepare(raw), raw.float())  # one constant alone: not normalised
    x, y = data.train_batch(torch.tensor([1]))
    assert torch.allclose(x, expected[1:]) and y.tolist() == [1]
    assert data.input_shape == (2, 3, 4) and data.device == torch.device("cpu")
    moved = data.to("cpu")
    assert torch.equal(moved.x_test, data.x_test) and torch.equal(moved.y_test, data.y_test)


def test_channel_constant_broadcasts_over_the_channels():
    four = channel_constant((1.0, 2.0), torch.device("cpu"), torch.float32, 4)
    assert four.shape == (1, 2, 1, 1) and four.flatten().tolist() == [1.0, 2.0]
    assert channel_constant((1.0, 2.0), torch.device("cpu"), torch.float32, 2).shape == (1, 2)
    assert channel_constant((1.0,), torch.device("cpu"), torch.float64, 3).dtype == torch.float64


def test_prepare_augments_only_when_asked_and_active():
    flip = Augmentation(horizontal_flip=True)
    raw = image_dataset().x_train
    data = image_dataset(aug=flip)
    assert torch.equal(data.prepare(raw, augment=False), raw.float())
    g = torch.Generator().manual_seed(0)
    expected = augment_batch(raw.float(), flip, torch.Generator().manual_seed(0))
    assert torch.equal(data.prepare(raw, augment=True, generator=g), expected)
    assert torch.equal(image_dataset().prepare(raw, augment=True), raw.float())
    x, y = data.train_batch(torch.tensor([0, 1]))  # no augmentation unless asked
    assert torch.equal(x, raw.float()) and y.tolist() == [0, 1]
    assert torch.equal(data.prepare(raw), raw.float())
    g = torch.Generator().manual_seed(0)
    x, _ = data.train_batch(torch.tensor([0, 1]), True, g)
    assert torch.equal(x, expected)


def test_augment_batch_crops_the_padded_batch_at_drawn_offsets_and_flips_half():
    x = torch.arange(1, 5 * 2 * 3 * 4 + 1, dtype=torch.float32).view(5, 2, 3, 4)
    for seed in range(4):
        aug = Augmentation(crop_padding=2, horizontal_flip=True)
        out = augment_batch(x, aug, torch.Generator().manual_seed(seed))
        g = torch.Generator().manual_seed(seed)
        offsets = torch.randint(0, 5, (2, 5), generator=g)
        flips = torch.rand(5, generator=g) < 0.5
        padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
        for i in range(5):
            r, c = int(offsets[0, i]), int(offsets[1, i])
            crop = padded[i, :, r : r + 3, c : c + 4]
            assert torch.equal(out[i], crop.flip(-1) if flips[i] else crop)
    only_crop = augment_batch(x, Augmentation(crop_padding=1), torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    offsets = torch.randint(0, 3, (2, 5), generator=g)
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1))
    for i in range(5):
        r, c = int(offsets[0, i]), int(offsets[1, i])
        assert torch.equal(only_crop[i], padded[i, :, r : r + 3, c : c + 4])
    only_flip = augment_batch(
        x, Augmentation(horizontal_flip=True), torch.Generator().manual_seed(2)
    )
    flips = torch.rand(5, generator=torch.Generator().manual_seed(2)) < 0.5
    assert 0 < int(flips.sum()) < 5
    for i in range(5):
        assert torch.equal(only_flip[i], x[i].flip(-1) if flips[i] else x[i])
    assert torch.equal(augment_batch(x, Augmentation(), None), x)


# ---------------------------------------------------------------------- datasets.py


def test_check_generated_sizes_names_each_size_below_one_and_the_memory_limit():
    check_generated_sizes("g", 1, 1, 1, 1)
    for i, key in enumerate(("dim", "num_classes", "train_size", "test_size")):
        sizes = [3, 3, 3, 3]
        sizes[i] = 0
        with pytest.raises(FedshareError, match=rf"^data\.{key}=0 is not valid: g sizes"):
            check_generated_sizes("g", *sizes)
    with pytest.raises(FedshareError, match=r"data\.dim=0, data\.num_classes=-1 is not"):
        check_generated_sizes("g", 0, -1, 2, 2)
    values = GENERATED_BYTES_LIMIT // 8  # dim 1: exactly the limit is allowed
    check_generated_sizes("g", 1, 1, values - 2, 1)
    check_generated_sizes("g", 1, 1, values - 3, 1, extra=1)
    with pytest.raises(FedshareError, match=r"would need 16 GiB for g; the limit is 16 GiB"):
        check_generated_sizes("g", 1, 1, values - 2, 1, extra=1)
    with pytest.raises(FedshareError, match=r"would need 32 GiB"):
        check_generated_sizes("g", 2, 1, values - 2, 1)
    with pytest.raises(FedshareError, match=r"would need 16 GiB"):  # one value past, no extra
        check_generated_sizes("g", 1, 1, values - 1, 1)


def labelled(y_train, y_test, classes: int, source=None) -> Dataset:
    x = torch.zeros(len(y_train), 1)
    return Dataset("d", x, y_train, torch.zeros(len(y_test), 1), y_test, classes, source=source)


def test_check_labels_refuses_non_integer_or_out_of_range_labels():
    check_labels(labelled(torch.tensor([0, 2]), torch.tensor([1]), 3))
    check_labels(labelled(torch.tensor([0, 0]), torch.tensor([], dtype=torch.long), 1))
    check_labels(labelled(torch.tensor([0]), torch.tensor([0]), MAX_CLASSES))
    for classes in (0, MAX_CLASSES + 1):
        with pytest.raises(FedshareError, match=rf"has {classes} classes; a dataset has 1 to"):
            check_labels(labelled(torch.tensor([0]), torch.tensor([0]), classes))
    with pytest.raises(FedshareError, match=r"'d' \(files\): its test labels are torch.float32"):
        check_labels(labelled(torch.tensor([0]), torch.tensor([0.0]), 2, source="files"))
    with pytest.raises(FedshareError, match=r"its train labels are torch.bool, not integers"):
        check_labels(labelled(torch.tensor([True]), torch.tensor([0]), 2))
    with pytest.raises(FedshareError, match=r"its train labels range over -1\.\.\.1, outside"):
        check_labels(labelled(torch.tensor([-1, 1]), torch.tensor([0]), 2))
    with pytest.raises(
        FedshareError, match=r"its test labels range over 0\.\.\.2, outside the classes 0\.\.1; the"
    ):
        check_labels(labelled(torch.tensor([0, 1]), torch.tensor([0, 2]), 2))


def test_with_statistics_needs_both_constants_one_per_channel_and_positive_std():
    data = image_dataset()
    out = with_statistics(data, [1, 2], [3, 4])
    assert out.mean == (1.0, 2.0) and out.std == (3.0, 4.0)
    one = with_statistics(image_dataset(mean=(0.0,), std=(1.0,)), [5], [6])
    assert one.mean == (5.0,)  # the loader's constants count the channels
    for mean, std in ((None, [1, 1]), ([1, 1], None)):
        with pytest.raises(FedshareError, match="give both"):
            with_statistics(data, mean, std)
    for mean, std in (([1], [1, 1]), ([1, 1], [1, 1, 1])):
        with pytest.raises(FedshareError, match=r"need 2 value\(s\) each"):
            with_statistics(data, mean, std)
    for std in ([1, 0], [-1, 1]):
        with pytest.raises(FedshareError, match="must be positive"):
            with_statistics(data, [0, 0], std)
    assert with_statistics(data, [0, 0], [1e-9, 1]).std == (1e-9, 1.0)


def test_keep_classes_draws_classes_and_relabels_them_in_order():
    y = torch.arange(20) % 5
    data = Dataset(
        "d",
        y[:, None].float(),
        y,
        y[:5, None].float(),
        y[:5],
        5,
        class_names=list("abcde"),
        source="src",
    )
    kept = np.sort(np.random.default_rng(7).choice(5, size=3, replace=False))
    out = keep_classes(data, 3, np.random.default_rng(7))
    mask = np.isin(y.numpy(), kept)
    assert out.x_train[:, 0].tolist() == y.numpy()[mask].astype(float).tolist()
    assert out.y_train.tolist() == np.searchsorted(kept, y.numpy()[mask]).tolist()
    assert (
        out.y_test.tolist() == np.searchsorted(kept, y[:5].numpy()[np.isin(y[:5], kept)]).tolist()
    )
    assert out.num_classes == 3 and out.class_names == [list("abcde")[c] for c in kept]
    assert out.source == f"src; classes {kept.tolist()} of 5"
    assert keep_classes(labelled(y, y, 5), 5, np.random.default_rng(0)).source == (
        "classes [0, 1, 2, 3, 4] of 5"
    )
    assert keep_classes(labelled(y, y, 5), 1, np.random.default_rng(0)).num_classes == 1
    for bad in (0, 6):
        with pytest.raises(FedshareError, match=f"class_subset={bad} must be between 1 and"):
            keep_classes(data, bad, np.random.default_rng(0))


def test_balanced_subset_shares_the_size_over_classes_and_spreads_the_shortfall():
    labels = np.array([0] * 10 + [1] * 2 + [2] * 6)
    chosen = balanced_subset(labels, 9, np.random.default_rng(3)).numpy()
    assert np.bincount(labels[chosen], minlength=3).tolist() == [4, 2, 3]
    rng = np.random.default_rng(3)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(3)]
    assert chosen.tolist() == sorted([*pools[0][:4], *pools[1][:2], *pools[2][:3]])
    counts = np.bincount(labels[balanced_subset(labels, 7, np.random.default_rng(0))])
    assert counts.tolist() == [3, 2, 2]  # 7 = 3 + 2 + 2: the first classes get the extra
    counts = np.bincount(labels[balanced_subset(labels, 14, np.random.default_rng(0))])
    assert counts.tolist() == [7, 2, 5]  # 5+2+4, then 3 left: 2 and 1 over the open classes
    assert balanced_subset(labels, 18, np.random.default_rng(0)).tolist() == list(range(18))
    assert balanced_subset(labels, 40, np.random.default_rng(0)).tolist() == list(range(18))
    assert balanced_subset(labels, 1, np.random.default_rng(0)).numel() == 1
    # a class capped in a later pass: 4 + 1 + 4 first, then 1 (not 2) more of class 0's five
    capped = np.array([0] * 5 + [1] * 1 + [2] * 100)
    counts = np.bincount(capped[balanced_subset(capped, 12, np.random.default_rng(0))])
    assert counts.tolist() == [5, 1, 6]
    for bad in (0, -2):
        with pytest.raises(FedshareError, match=f"must be positive, got {bad}"):
            balanced_subset(labels, bad, np.random.default_rng(0))


SYNTHETIC = {"name": "synthetic", "dim": 3, "num_classes": 4, "train_size": 12, "test_size": 8}


def test_load_synthetic_draws_class_clusters_from_its_data_seed():
    cfg = {**SYNTHETIC, "noise": 0.5, "separation": 2.0, "data_seed": 9, "cache": False}
    data = load_dataset(cfg)
    rng = np.random.default_rng(9)
    centres = rng.normal(0.0, 2.0 / np.sqrt(3), size=(4, 3))
    x_train = centres[np.arange(12) % 4] + rng.normal(0.0, 0.5, size=(12, 3))
    x_test = centres[np.arange(8) % 4] + rng.normal(0.0, 0.5, size=(8, 3))
    assert np.allclose(data.x_train.numpy(), x_train, atol=1e-6)
    assert np.allclose(data.x_test.numpy(), x_test, atol=1e-6)
    assert data.y_train.tolist() == (np.arange(12) % 4).tolist()
    assert data.y_test.tolist() == (np.arange(8) % 4).tolist()
    assert data.num_classes == 4 and data.name == "synthetic"
    zero = load_dataset({**cfg, "noise": 0.0})
    assert np.allclose(zero.x_train.numpy(), centres[np.arange(12) % 4], atol=1e-6)
    for bad in ({"noise": -0.1}, {"noise": float("inf")}, {"separation": float("nan")}):
        with pytest.raises(FedshareError, match="must be finite"):
            load_dataset({**cfg, **bad})
    with pytest.raises(FedshareError, match=r"data\.dim=0 is not valid"):
        load_dataset({**cfg, "dim": 0})


def test_load_dataset_subsets_and_overrides_from_their_own_streams():
    base = load_dataset(SYNTHETIC, seed=2)
    out = load_dataset({**SYNTHETIC, "train_subset": 8, "test_subset": 4}, seed=2)
    keep = balanced_subset(base.y_train.numpy(), 8, numpy_rng(2, "train_subset"))
    assert torch.equal(out.x_train, base.x_train[keep])
    keep = balanced_subset(base.y_test.numpy(), 4, numpy_rng(2, "test_subset"))
    assert torch.equal(out.x_test, base.x_test[keep]) and torch.equal(out.y_test, base.y_test[keep])
    full = load_dataset({**SYNTHETIC, "train_subset": 12, "test_subset": 8}, seed=2)
    assert torch.equal(full.x_train, base.x_train) and torch.equal(full.x_test, base.x_test)
    one = load_dataset({**SYNTHETIC, "train_subset": 1, "test_subset": 1}, seed=2)
    assert len(one.y_train) == 1 and len(one.y_test) == 1
    for split, size in (("train", 13), ("test", 9), ("train", 0), ("test", -1)):
        with pytest.raises(FedshareError, match=rf"data\.{split}_subset={size} must be between"):
            load_dataset({**SYNTHETIC, f"{split}_subset": size})
    two = load_dataset({**SYNTHETIC, "class_subset": 2}, seed=2)
    assert two.source == keep_classes(base, 2, numpy_rng(2, "class_subset")).source
    assert two.num_classes == 2
    stats = load_dataset({**SYNTHETIC, "mean": [1, 2, 3], "std": [1, 1, 2]})
    assert stats.mean == (1.0, 2.0, 3.0) and stats.std == (1.0, 1.0, 2.0)
    with pytest.raises(FedshareError, match="give both"):
        load_dataset({**SYNTHETIC, "std": [1, 1, 1]})
    with pytest.raises(FedshareError, match="give both"):
        load_dataset({**SYNTHETIC, "mean": [1, 1, 1]})
    plain = load_dataset({**SYNTHETIC, "mean": [1, 2, 3], "std": [1, 1, 2], "normalize": False})
    assert plain.mean is None and plain.std is None
    kept = load_dataset({**SYNTHETIC, "mean": [1, 2, 3], "std": [1, 1, 2], "normalize": True})
    assert kept.mean == (1.0, 2.0, 3.0)
    assert load_dataset({**SYNTHETIC, "augment": False}).augmentation == Augmentation()


# ---------------------------------------------------------------------- cache.py


def payload(value: float = 1.0) -> dict:
    x = torch.full((2, 1), value)
    return {"x_train": x, "y_train": torch.tensor([0, 1]), "x_test": x, "y_test": torch.tensor([1])}


def test_cache_dir_is_the_environments_or_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "c"))
    assert cache.cache_dir() == tmp_path / "c"
    monkeypatch.setenv(cache.CACHE_ENV, "")
    assert cache.cache_dir() == cache.DEFAULT_CACHE
    monkeypatch.delenv(cache.CACHE_ENV)
    assert cache.cache_dir() == cache.DEFAULT_CACHE


def test_cache_key_covers_name_options_and_each_source_files_size(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"12")
    b.write_bytes(b"3")
    rows = cache.source_signature([b, a])
    assert [r[:2] for r in rows] == [(str(a.resolve()), 2), (str(b.resolve()), 1)]
    assert rows[0][2] == a.stat().st_mtime_ns
    key = cache.cache_key("d", {"v": 1}, [a, b])
    assert len(key) == 24 and key == cache.cache_key("d", {"v": 1}, [b, a])
    assert key != cache.cache_key("e", {"v": 1}, [a, b])
    assert key != cache.cache_key("d", {"v": 2}, [a, b])
    assert key != cache.cache_key("d", {"v": 1}, [a])
    assert cache.cache_key("d", {"v": 1, "w": 2}, []) == cache.cache_key("d", {"w": 2, "v": 1}, [])
    b.write_bytes(b"34")
    assert key != cache.cache_key("d", {"v": 1}, [a, b])


def test_cached_builds_once_then_reads_and_rebuilds_a_damaged_entry(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "deep" / "cache"))  # parents made too
    built = []

    def build():
        built.append(1)
        return payload(float(len(built)))

    assert cache.cached("d", {}, [], build, enabled=False)["x_train"][0, 0] == 1.0
    assert not (tmp_path / "deep").exists()
    first = cache.cached("d", {}, [], build)
    assert first["x_train"][0, 0] == 2.0 and len(built) == 2
    path = cache.cache_path("d", {}, [])
    assert path.parent == tmp_path / "deep" / "cache" and path.name.startswith("d-")
    assert path.stat().st_mode & 0o777 == 0o644
    assert list(path.parent.iterdir()) == [path]
    again = cache.cached("d", {}, [], build)
    assert again["x_train"][0, 0] == 2.0 and len(built) == 2
    path.write_bytes(b"")
    with pytest.warns(UserWarning, match="rebuilding the corrupt dataset cache entry .*truncated"):
        assert cache.cached("d", {}, [], build)["x_train"][0, 0] == 3.0
    assert cache.cached("d", {}, [], build)["x_train"][0, 0] == 3.0 and len(built) == 3
    torch.save({"x_train": torch.zeros(1)}, path)
    with pytest.warns(UserWarning, match=r"\(not a dataset payload\)"):
        assert cache.read_entry(path) is None
    torch.save([1], path)
    with pytest.warns(UserWarning, match=r"\(not a dataset payload\)"):
        assert cache.read_entry(path) is None


def test_cached_warns_when_it_cannot_write_and_leaves_no_temporary_file(monkeypatch, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocked / "cache"))
    with pytest.warns(UserWarning, match="could not write the dataset cache"):
        assert cache.cached("d", {}, [], payload)["x_train"][0, 0] == 1.0

    def failing_save(obj, fh):
        raise OSError("disk full")

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "c2"))
    monkeypatch.setattr(cache.torch, "save", failing_save)
    with pytest.warns(UserWarning, match=r"could not write .*\(disk full\)"):
        cache.cached("d", {}, [], payload)
    assert list((tmp_path / "c2").iterdir()) == []


class NotATensor:
    """An object that only an unsafe (pickle) load accepts, for `read_entry`'s safe load."""


def test_a_cache_entry_is_read_weights_only_refusing_any_other_object(tmp_path):
    path = tmp_path / "entry.pt"
    torch.save({**payload(), "extra": NotATensor()}, path)
    with pytest.warns(UserWarning, match="rebuilding the corrupt dataset cache entry"):
        assert cache.read_entry(path) is None


def test_cache_warnings_point_at_the_caller_of_cached(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "c"))
    cache.cached("d", {}, [], payload)
    cache.cache_path("d", {}, []).write_bytes(b"")
    with pytest.warns(UserWarning, match="rebuilding") as caught:
        cache.cached("d", {}, [], payload)
    assert [w.filename for w in caught] == [__file__]
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocked / "cache"))
    with pytest.warns(UserWarning, match="could not write") as caught:
        cache.cached("d", {}, [], payload)
    assert [w.filename for w in caught] == [__file__]


def test_dataset_from_payload_takes_the_four_tensors_and_class_names():
    data = cache.dataset_from_payload("n", {**payload(), "class_names": ["a", "b"]}, num_classes=2)
    assert data.name == "n" and data.class_names == ["a", "b"] and data.num_classes == 2
    assert data.y_train.tolist() == [0, 1] and data.y_test.tolist() == [1]
    assert cache.dataset_from_payload("n", payload(), num_classes=2).class_names is None


# ---------------------------------------------------------------------- files.py, sources.py


def test_gzip_problem_and_corrupt_file_name_what_is_wrong(tmp_path):
    assert files.gzip_problem(EOFError()) == "truncated gzip stream"
    assert files.gzip_problem(gzip.BadGzipFile("x")) == "not a valid gzip file: x"
    assert files.gzip_problem(ValueError("y")) == "damaged gzip data: y"
    err = files.corrupt_file(Path("f"), "bad", "fix it")
    assert str(err) == "f is corrupt (bad); fix it"


def test_not_a_file_names_folders_pipes_and_dangling_links(tmp_path):
    regular = tmp_path / "r"
    regular.write_text("x")
    assert files.not_a_file(regular) is None
    assert files.not_a_file(tmp_path / "absent") is None
    assert files.not_a_file(tmp_path) == "a folder"
    os.mkfifo(tmp_path / "p")
    assert files.not_a_file(tmp_path / "p") == "a named pipe"
    (tmp_path / "good").symlink_to(regular)
    assert files.not_a_file(tmp_path / "good") is None
    (tmp_path / "bad").symlink_to(tmp_path / "nowhere")
    assert files.not_a_file(tmp_path / "bad") == "a symbolic link that loops or leads nowhere"
    assert files.not_a_file(Path("/dev/null")) == "a device"
    with pytest.raises(FedshareError, match=r"is not a regular file \(a folder\); put the"):
        files.require_regular_file(tmp_path)
    files.require_regular_file(regular)


def test_read_bytes_and_text_decompress_gz_and_refuse_damage(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_bytes(b"abc")
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(b"xyz"))
    assert files.read_bytes(plain) == b"abc" and files.read_bytes(packed) == b"xyz"
    assert files.read_text(packed) == "xyz"
    cut = tmp_path / "c.gz"
    cut.write_bytes(gzip.compress(b"xyz" * 100)[:-8])
    with pytest.raises(FedshareError, match=r"c\.gz is corrupt \(truncated gzip stream\)"):
        files.read_bytes(cut)
    binary = tmp_path / "b"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(FedshareError, match=r"is corrupt \(not a text file\)"):
        files.read_text(binary)


def test_npz_sizes_are_checked_against_the_archive_and_memory(tmp_path, monkeypatch):
    path = tmp_path / "a.npz"
    np.savez(path, a=np.arange(6, dtype=np.int64), b=np.zeros((2, 3), dtype=np.float32))
    arrays = files.read_npz(path)
    assert arrays["a"].tolist() == list(range(6)) and arrays["b"].shape == (2, 3)
    monkeypatch.setattr(files, "available_memory", lambda: 48 + 24)
    files.check_npz_sizes(path)  # exactly the memory available fits
    monkeypatch.setattr(files, "available_memory", lambda: 48 + 23)
    with pytest.raises(files.DeclaredSizeError, match="take 72 bytes, more than the 71 bytes"):
        files.check_npz_sizes(path)
    monkeypatch.setattr(files, "available_memory", lambda: None)
    raw = tmp_path / "big.npy"
    np.save(raw, np.arange(4, dtype=np.int64))
    blob = raw.read_bytes().replace(b"(4,)", b"(9,)")
    with zipfile.ZipFile(tmp_path / "lie.npz", "w") as archive:
        archive.writestr("x.npy", blob)
        archive.writestr("notes.txt", b"ignored")
    with pytest.raises(FedshareError, match=r"array 'x' declares shape \(9,\) of int64 \(72 "):
        files.read_npz(tmp_path / "lie.npz")
    exact = raw.read_bytes()
    with zipfile.ZipFile(tmp_path / "ok.npz", "w") as archive:
        archive.writestr("x.npy", exact)
    files.check_npz_sizes(tmp_path / "ok.npz")


def test_read_npz_refuses_an_array_of_pickled_objects(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, x=np.array([{"a": "b" * 64}], dtype=object))
    with pytest.raises(FedshareError, match="pickled Python objects, which are never loaded"):
        files.read_npz(path)


def test_npz_problem_never_advises_pickles():
    assert files.npz_problem(files.DeclaredSizeError("d")) == "d"
    assert files.npz_problem(ValueError("use allow_pickle=True")).startswith("an array holds")
    bad_zip = zipfile.BadZipFile("File is not a zip file")
    assert files.npz_problem(bad_zip) == "truncated, or not an npz (zip) archive"
    other_zip = zipfile.BadZipFile("Bad CRC")
    assert files.npz_problem(other_zip) == "not a readable npz archive: BadZipFile: Bad CRC"
    assert files.npz_problem(ValueError("not a zip file")).startswith("not a readable")


def test_data_roots_and_find_files(tmp_path, monkeypatch):
    with pytest.raises(FedshareError, match="does not exist; point it"):
        sources.checked_root(str(tmp_path / "none"))
    (tmp_path / "f").write_text("")
    with pytest.raises(FedshareError, match="is a file, not a directory"):
        sources.checked_root(str(tmp_path / "f"))
    assert sources.data_roots(str(tmp_path)) == [tmp_path]
    monkeypatch.setenv(sources.DATA_ENV, str(tmp_path))
    assert sources.data_roots(None) == [tmp_path, sources.DEFAULT_ROOT]
    monkeypatch.setenv(sources.DATA_ENV, str(sources.DEFAULT_ROOT))
    assert sources.data_roots(None) == [sources.DEFAULT_ROOT]
    monkeypatch.delenv(sources.DATA_ENV)
    assert sources.data_roots(None) == [sources.DEFAULT_ROOT]
    (tmp_path / "a").write_text("")
    assert sources.find_files(str(tmp_path), ["a", "f"]) == tmp_path
    assert sources.find_files(str(tmp_path), ["a", "b"]) is None
    err = sources.missing_data_error("d", str(tmp_path), ["x", "y"], "get it")
    assert str(err).startswith(f"dataset 'd' not found (looked for {tmp_path / 'x'}); get it,")


# ---------------------------------------------------------------------- features.py


def test_extractor_prepare_scales_repeats_grey_resizes_and_normalises():
    x = torch.arange(2 * 1 * 2 * 2, dtype=torch.uint8).view(2, 1, 2, 2)
    plain = features.Extractor(torch.nn.Identity())
    assert torch.equal(plain.prepare(x, 0.5), x.float() * 0.5)
    rgb = features.Extractor(torch.nn.Identity(), (1.0, 2.0, 3.0), (2.0, 4.0, 8.0), channels=3)
    out = rgb.prepare(x, 2.0)
    assert out.shape == (2, 3, 2, 2)
    for c, (m, s) in enumerate(((1.0, 2.0), (2.0, 4.0), (3.0, 8.0))):
        assert torch.allclose(out[:, c], (x[:, 0].float() * 2.0 - m) / s)
    half = features.Extractor(torch.nn.Identity(), (1.0,), None, channels=1)
    assert torch.equal(half.prepare(x, 1.0), x.float())
    same = features.Extractor(torch.nn.Identity(), channels=1)
    assert torch.equal(same.prepare(x, 1.0), x.float())
    flat = torch.ones(2, 5)
    assert torch.equal(
        rgb.prepare(flat[:, :3], 1.0),
        (flat[:, :3] - torch.tensor([1.0, 2, 3])) / torch.tensor([2.0, 4, 8]),
    )
    with pytest.raises(FedshareError, match="needs 3-channel images, got 2 channels"):
        rgb.prepare(torch.zeros(1, 2, 4, 5), 1.0)
    repeat = features.Extractor(torch.nn.Identity(), channels=3)  # channels are dim 1 only
    assert repeat.prepare(torch.ones(3, 1, 3, 3), 1.0).shape == (3, 3, 3, 3)
    assert repeat.prepare(torch.ones(2, 1, 3, 3), 1.0).shape == (2, 3, 3, 3)
    big = features.Extractor(torch.nn.Identity(), resize=4).prepare(x, 1.0)
    expected = torch.nn.functional.interpolate(x.float(), size=(4, 4), mode="bilinear")
    assert torch.equal(big, expected)
    assert features.Extractor(torch.nn.Identity(), resize=4).prepare(flat, 1.0).shape == (2, 5)


def test_random_relu_is_relu_of_a_seeded_projection():
    ex = features.random_relu_backbone((2, 3), None, None, dim=4, seed=7)
    w = torch.randn(4, 6, generator=torch.Generator().manual_seed(7)) / 6**0.5
    x = torch.randn(5, 2, 3)
    assert torch.allclose(ex.module(x), torch.relu(x.flatten(1) @ w.T), atol=1e-6)
    assert features.random_relu_backbone((3,), None, None, dim=1).module(
        torch.ones(1, 3)
    ).shape == (1, 1)
    with pytest.raises(FedshareError, match=r"features_options\.dim=0 must be at least 1"):
        features.random_relu_backbone((3,), None, None, dim=0)
    default = features.random_relu_backbone((2,), None, None).module[1].weight  # 128, seed 1234
    w = torch.randn(128, 2, generator=torch.Generator().manual_seed(1234)) / 2**0.5
    assert torch.equal(default, w)


def test_tensor_digest_covers_dtype_shape_and_bytes():
    a = torch.arange(4)
    d = features.tensor_digest(a)
    assert len(d) == 24 and d == features.tensor_digest(torch.arange(4))
    assert d != features.tensor_digest(a.int())
    assert d != features.tensor_digest(a.view(2, 2))
    assert d != features.tensor_digest(torch.tensor([0, 1, 2, 4]))
    assert d != features.tensor_digest(a, a)
    assert features.resolve_device("cpu") == torch.device("cpu")
    assert features.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_run_backbone_goes_batch_by_batch_in_order():
    seen = []

    class Spy(torch.nn.Module):
        def forward(self, x):
            seen.append(len(x))
            assert not self.training
            return x.double() * 2

    ex = features.Extractor(Spy())
    x = torch.arange(10, dtype=torch.uint8).view(5, 2)
    out = features.run_backbone(ex, x, 0.5, 2, torch.device("cpu"))
    assert seen == [2, 2, 1] and out.dtype == torch.float32
    assert torch.equal(out, x.float())
    assert features.run_backbone(ex, x[:0], 1.0, 2, torch.device("cpu")).shape == (0, 0)


def test_backbone_options_checks_batch_size_and_device():
    assert features.backbone_options("random_relu", None) == (256, "auto", {})
    assert features.backbone_options(
        "random_relu", {"batch_size": 1, "device": "cpu", "dim": 3}
    ) == (1, "cpu", {"dim": 3})
    for bad in (0, True, 2.0, "8"):
        with pytest.raises(FedshareError, match=r"batch_size=.* is not valid: it must be a whole"):
            features.backbone_options("random_relu", {"batch_size": bad})
    with pytest.raises(FedshareError, match=r"device=0 is not valid: it must be a device name"):
        features.backbone_options("random_relu", {"device": 0})
    for taken in ("input_shape", "weights", "root"):  # the factory's own arguments
        with pytest.raises(FedshareError, match=taken):
            features.backbone_options("random_relu", {taken: "x"})


def test_load_dataset_with_features_replaces_the_inputs_by_the_backbones():
    base = load_dataset(SYNTHETIC)
    cfg = {**SYNTHETIC, "cache": False, "features": "random_relu"}
    out = load_dataset({**cfg, "features_options": {"dim": 5, "seed": 3, "batch_size": 4}})
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(3)) / 3**0.5
    assert torch.allclose(out.x_train, torch.relu(base.x_train @ w.T), atol=1e-6)
    assert torch.allclose(out.x_test, torch.relu(base.x_test @ w.T), atol=1e-6)
    assert torch.equal(out.y_train, base.y_train) and torch.equal(out.y_test, base.y_test)
    assert out.name == "synthetic+random_relu" and out.default_model == "linear"
    assert out.num_classes == 4 and out.scale == 1.0


def test_load_synthetic_defaults_and_the_request_is_no_option():
    data = load_dataset({"name": "synthetic", "cache": False})
    rng = np.random.default_rng(0)
    centres = rng.normal(0.0, 3.0 / np.sqrt(20), size=(10, 20))
    x_train = centres[np.arange(2000) % 10] + rng.normal(0.0, 1.0, size=(2000, 20))
    assert np.allclose(data.x_train.numpy(), x_train, atol=1e-5)
    assert data.num_classes == 10 and len(data.y_test) == 1000
    with pytest.raises(FedshareError, match="request"):
        load_dataset({"name": "synthetic", "request": None})


def test_load_dataset_turns_a_loaders_augmentation_off_only_when_asked(monkeypatch):
    from fedshare.data.datasets import DATASETS

    flip = Augmentation(horizontal_flip=True)

    def augmented(request):
        return replace(load_dataset(SYNTHETIC), name="augmented", augmentation=flip)

    monkeypatch.setitem(DATASETS._items, "augmented", augmented)
    assert load_dataset({"name": "augmented"}).augmentation == flip
    assert load_dataset({"name": "augmented", "augment": True}).augmentation == flip
    assert load_dataset({"name": "augmented", "augment": False}).augmentation == Augmentation()


def test_load_dataset_draws_subsets_from_seed_zero_by_default():
    cfg = {**SYNTHETIC, "train_subset": 8, "class_subset": 3}
    assert torch.equal(load_dataset(cfg).x_train, load_dataset(cfg, seed=0).x_train)
    assert not torch.equal(load_dataset(cfg).x_train, load_dataset(cfg, seed=1).x_train)


def test_load_dataset_asks_its_loader_for_the_cache_and_no_download_by_default(monkeypatch):
    from fedshare.data.datasets import DATASETS

    requests = []

    def recording(request):
        requests.append(request)
        return load_dataset(SYNTHETIC)

    monkeypatch.setitem(DATASETS._items, "recording", recording)
    load_dataset({"name": "recording"})
    load_dataset({"name": "recording", "root": "r", "download": True, "cache": False})
    assert [(r.root, r.download, r.cache) for r in requests] == [
        (None, False, True),
        ("r", True, False),
    ]


def test_extract_features_hands_the_weights_on_and_logs_the_seconds_taken(monkeypatch, caplog):
    given = []

    def recording(input_shape, weights, root, **options):
        given.append(weights)
        return features.random_relu_backbone(input_shape, weights, root, dim=2)

    monkeypatch.setitem(features.BACKBONES._items, "recording", recording)
    clock = iter([10.0, 12.5, 0.0, 0.0])
    monkeypatch.setattr(features.time, "perf_counter", lambda: next(clock))
    cfg = {**SYNTHETIC, "cache": False, "features": "recording"}
    with caplog.at_level("INFO", logger=features.log.name):
        load_dataset(cfg)
    assert "features of synthetic by recording: (12, 2) in 2.5s" in caplog.text
    load_dataset({**cfg, "features_weights": Path("w.pt")})
    assert given == [None, "w.pt"]
