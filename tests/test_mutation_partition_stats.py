"""A partition's statistics as partition.json records them, its fingerprint, and what
`make_partition` adds to a partitioner's split (docs/mutation.md, `partition_stats`)."""

import hashlib
import json

import numpy as np
import pytest

from fedshare.data.partitioners import PARTITIONERS, Partition, Split, fingerprint, make_partition
from fedshare.errors import FedshareError

LABELS = np.array([0, 0, 1, 1, 2, 2, 2, 0, 1, 3])


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """`fixed` as the partitioner `mutation_fixed`, for this file's tests only."""
    monkeypatch.setitem(PARTITIONERS._items, "mutation_fixed", fixed)


def fixed(labels, num_clients, rng, reuse=False, groups=False, count=None):
    """A fixed split for these tests: [[0, 1, 2], [2, 3, 9]…] with or without reuse."""
    indices = [np.array([0, 1, 2]), np.array([3, 4] + ([2] if reuse else [9])), np.array([])]
    indices = indices[: num_clients if count is None else count]
    return (indices, np.array([1, 0, 1])) if groups else indices


def test_coverage_counts_assigned_distinct_unused_and_reused_indices():
    part = make_partition(LABELS, 3, {"name": "mutation_fixed", "reuse": True}, None)
    assert part.coverage() == {
        "train_size": 10,
        "assigned": 6,
        "distinct": 5,
        "unused": 5,
        "reused": 1,
    }
    empty = Partition("x", {}, [np.zeros(0, np.int64)] * 2, 2, np.zeros((2, 2)), num_samples=4)
    assert empty.coverage() == {
        "train_size": 4,
        "assigned": 0,
        "distinct": 0,
        "unused": 4,
        "reused": 0,
    }


def test_summary_has_the_sizes_classes_and_groups_statistics():
    part = make_partition(LABELS, 3, {"name": "mutation_fixed", "groups": True}, None)
    summary = part.summary()
    assert summary["num_clients"] == 3 and summary["num_classes"] == 4
    assert summary["sizes"] == [3, 3, 0]
    assert summary["size_stats"] == {
        "min": 0,
        "max": 3,
        "mean": 2.0,
        "median": 3.0,
        "std": pytest.approx(2**0.5),  # population std
        "total": 6,
    }
    assert summary["class_counts"] == [[2, 1, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0]]
    assert summary["classes_per_client"] == [2, 3, 0]
    assert summary["classes_per_client_stats"] == {"min": 0, "max": 3, "mean": 5 / 3}
    assert summary["class_totals"] == [2, 2, 1, 1]
    assert summary["clients_per_class"] == [1, 2, 1, 1]
    assert summary["groups"] == [1, 0, 1]
    assert summary["params"] == {"groups": True}
    assert summary["fingerprint"] == part.fingerprint
    assert make_partition(LABELS, 2, {"name": "mutation_fixed"}, None).summary()["groups"] is None


def test_the_fingerprint_hashes_each_clients_sorted_indices_in_client_order():
    indices = [np.array([3, 1]), np.array([2])]
    digest = hashlib.sha256()
    for ix in ([1, 3], [2]):
        digest.update(np.array(ix, dtype=np.int64).tobytes() + b"|")
    assert fingerprint(indices) == digest.hexdigest()[:16]
    assert fingerprint([np.array([1, 3]), np.array([2])]) == fingerprint(indices)
    assert fingerprint([np.array([2]), np.array([1, 3])]) != fingerprint(indices)
    assert fingerprint([np.array([1]), np.array([3, 2])]) != fingerprint(indices)
    extra = {"b": 1, "a": [2]}
    digest.update(json.dumps(extra, sort_keys=True).encode())
    assert fingerprint(indices, extra) == digest.hexdigest()[:16]


def test_make_partition_counts_classes_and_hashes_transforms_with_the_indices():
    part = make_partition(LABELS, 2, {"name": "mutation_fixed"}, None, num_classes=6)
    assert part.class_counts.shape == (2, 6) and part.num_classes == 6
    assert part.fingerprint == fingerprint(part.client_indices)
    assert [ix.dtype for ix in part.client_indices] == [np.int64, np.int64]
    cfg = {"name": "covariate", "domains": [{"kind": "invert"}]}
    shifted = make_partition(LABELS, 2, cfg, np.random.default_rng(0))
    extra = {"transforms": shifted.transforms, "info": shifted.info}
    assert shifted.fingerprint == fingerprint(shifted.client_indices, extra)
    assert shifted.fingerprint != fingerprint(shifted.client_indices)


def test_a_partition_seed_fixes_the_split_whatever_the_run_seed():
    cfg = {"name": "iid", "seed": 3}
    a = make_partition(LABELS, 3, cfg, np.random.default_rng(0))
    b = make_partition(LABELS, 3, cfg, np.random.default_rng(1))
    assert a.fingerprint == b.fingerprint and a.info == {"partition_seed": 3}
    c = make_partition(LABELS, 3, {"name": "iid"}, np.random.default_rng(0))
    d = make_partition(LABELS, 3, {"name": "iid"}, np.random.default_rng(1))
    assert c.fingerprint != d.fingerprint and c.info == {}
    for bad in (True, 1.5, "3"):
        with pytest.raises(FedshareError, match="must be an integer or null"):
            make_partition(LABELS, 3, {"name": "iid", "seed": bad}, None)


def test_make_partition_needs_a_client_and_the_partitioners_count():
    make_partition(LABELS, 1, {"name": "iid"}, np.random.default_rng(0))
    with pytest.raises(FedshareError, match="at least 1, got 0"):
        make_partition(LABELS, 0, {"name": "iid"}, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="returned 1 clients, not 2"):
        make_partition(LABELS, 2, {"name": "mutation_fixed", "count": 1}, None)


def test_a_split_keeps_its_groups_names_and_info():
    cfg = {"name": "xormix", "n": 0, "m": 0, "target_labels": [3]}
    part = make_partition(LABELS, 4, cfg, np.random.default_rng(0))
    assert part.groups.tolist() == [0, 1, 1, 1] and part.groups.dtype == np.int64
    assert part.group_names == ["server", "device"]
    assert part.info["devices"] == [1, 2, 3]
    assert isinstance(Split([np.zeros(1)]).info, dict)


def test_the_partitioners_three_positional_arguments_are_not_parameters():
    """labels, num_clients and rng come from the run: a config key of those names is refused,
    and the parameters listed are the partitioner's own."""
    for key in ("labels", "num_clients", "rng"):
        with pytest.raises(
            FedshareError,
            match=f"no parameter '{key}'.*count, groups, reuse",
        ):
            make_partition(LABELS, 3, {"name": "mutation_fixed", key: 1}, None)
