"""Partitioners: property tests of each scheme's definition, fingerprints, errors, plot, CLI."""

import json
import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedshare.data import PARTITIONERS, federate, load_dataset, make_partition, plot_partition
from fedshare.data.partitioners import Partition
from fedshare.data.shift import transform_inputs
from fedshare.errors import FedshareError

FEW = settings(
    max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def make_labels(counts: list[int], seed: int = 0) -> np.ndarray:
    """Labels with counts[c] samples of class c, in a shuffled order."""
    labels = np.repeat(np.arange(len(counts)), counts)
    return labels[np.random.default_rng(seed).permutation(len(labels))]


@st.composite
def label_arrays(draw, min_classes=2, max_classes=8, min_count=20, max_count=80) -> np.ndarray:
    c = draw(st.integers(min_classes, max_classes))
    counts = draw(st.lists(st.integers(min_count, max_count), min_size=c, max_size=c))
    return make_labels(counts, draw(st.integers(0, 3)))


def uses(p: Partition) -> Counter:
    return Counter(np.concatenate(p.client_indices).tolist())


def assert_at_most_once(p: Partition) -> None:
    assert max(uses(p).values(), default=1) == 1


def assert_exactly_once(p: Partition, n: int) -> None:
    flat = np.sort(np.concatenate(p.client_indices))
    assert np.array_equal(flat, np.arange(n))


def classes_of(p: Partition) -> list[set[int]]:
    return [set(np.flatnonzero(row).tolist()) for row in p.class_counts]


# --------------------------------------------------------------------------- iid / dirichlet
@FEW
@given(labels=label_arrays(), k=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_iid_uses_every_index_once_in_equal_shares(labels, k, seed):
    p = make_partition(labels, k, {"name": "iid"}, rng(seed))
    assert_exactly_once(p, len(labels))
    assert max(p.sizes) - min(p.sizes) <= 1


@FEW
@given(
    labels=label_arrays(min_count=40),
    k=st.integers(2, 8),
    alpha=st.sampled_from([0.3, 0.5, 1.0, 10.0]),
    seed=st.integers(0, 2**16),
)
def test_dirichlet_covers_the_data_with_min_size_and_cap(labels, k, alpha, seed):
    p = make_partition(labels, k, {"name": "dirichlet", "alpha": alpha, "min_size": 5}, rng(seed))
    assert_exactly_once(p, len(labels))
    assert min(p.sizes) >= 5
    # the balancing cap: a client stops receiving once it holds N/K samples
    assert max(p.sizes) < len(labels) / k + np.bincount(labels).max()


def test_dirichlet_min_size_defaults_to_the_number_of_classes():
    labels = make_labels([60] * 6)
    p = make_partition(labels, 10, {"name": "dirichlet", "alpha": 0.5}, rng(1))
    assert min(p.sizes) >= 6
    with pytest.raises(FedshareError, match=re.escape("min_size=6 is infeasible")):
        make_partition(make_labels([5] * 6), 10, {"name": "dirichlet"}, rng())


def test_dirichlet_gives_up_with_a_clear_error():
    labels = make_labels([30] * 10)
    cfg = {"name": "dirichlet", "alpha": 0.01, "min_size": 25, "max_tries": 3}
    with pytest.raises(FedshareError, match=re.escape("fewer than min_size=25 samples in 3 draws")):
        make_partition(labels, 10, cfg, rng())
    with pytest.raises(FedshareError, match=re.escape("alpha=0.0 must be positive")):
        make_partition(labels, 3, {"name": "dirichlet", "alpha": 0.0}, rng())


@FEW
@given(blocks=st.integers(1, 4), per_block=st.integers(2, 5), seed=st.integers(0, 2**16))
def test_dirichlet_blocks_balanced_blocks_stay_inside_their_clients(blocks, per_block, seed):
    labels = make_labels([40 * blocks] * 5, seed)
    k = blocks * per_block
    cfg = {"name": "dirichlet_blocks", "alpha": 0.5, "min_size": 3, "clients_per_block": per_block}
    p = make_partition(labels, k, cfg, rng(seed))
    assert_exactly_once(p, len(labels))
    assert min(p.sizes) >= 3
    assert p.groups is None and p.info["blocks"] == blocks
    block_of = np.repeat(np.arange(blocks), per_block)
    for j in range(blocks):
        block_counts = p.class_counts[block_of == j].sum(axis=0)
        assert block_counts.tolist() == [40] * 5  # class-balanced blocks


def test_dirichlet_blocks_sequential_halves_like_flea_har():
    labels = make_labels([120] * 6)
    cfg = {
        "name": "dirichlet_blocks",
        "alpha": 0.1,
        "min_size": 3,
        "mode": "sequential",
        "blocks": 2,
    }
    p = make_partition(labels, 10, cfg, rng(3))
    half = len(labels) // 2
    for k, ix in enumerate(p.client_indices):
        assert (ix < half).all() if k < 5 else (ix >= half).all()
    assert_exactly_once(p, len(labels))
    with pytest.raises(
        FedshareError, match=re.escape("not a multiple of partition.clients_per_block=4")
    ):
        make_partition(labels, 10, {"name": "dirichlet_blocks", "clients_per_block": 4}, rng())
    with pytest.raises(FedshareError, match=re.escape("mode='halves'")):
        make_partition(labels, 4, {"name": "dirichlet_blocks", "mode": "halves"}, rng())


# --------------------------------------------------------------------------- quantity
@FEW
@given(
    labels=label_arrays(min_count=30),
    k=st.integers(1, 24),
    q=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_quantity_gives_exactly_q_classes_split_evenly(labels, k, q, seed):
    c = int(labels.max()) + 1
    q = min(q, c)
    p = make_partition(labels, k, {"name": "quantity", "classes_per_client": q}, rng(seed))
    assert_at_most_once(p)
    sets = classes_of(p)
    assert all(len(s) == q for s in sets)
    assert all(i % c in s for i, s in enumerate(sets))
    for cls in range(c):
        owned = p.class_counts[:, cls][p.class_counts[:, cls] > 0]
        if owned.size:
            assert owned.sum() == (labels == cls).sum()  # a drawn class is used entirely
            assert owned.max() - owned.min() <= 1  # array-split evenly
    unused = p.info.get("unused_classes", [])
    assert unused == [cls for cls in range(c) if p.class_counts[:, cls].sum() == 0]
    if k >= c:
        assert_exactly_once(p, len(labels))
        assert not unused


def test_quantity_rejects_q_above_the_class_count():
    with pytest.raises(
        FedshareError, match=re.escape("classes_per_client=11 must be between 1 and the 10")
    ):
        make_partition(
            make_labels([20] * 10), 5, {"name": "quantity", "classes_per_client": 11}, rng()
        )


# --------------------------------------------------------------------------- ReBaFL
@FEW
@given(
    k=st.integers(5, 20),
    n=st.integers(1, 3),
    per_class=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_pathological_n_classes_with_the_fixed_count(k, n, per_class, seed):
    labels = make_labels([200] * 5)
    cfg = {"name": "pathological", "classes_per_client": n, "per_class": per_class, "reuse": False}
    p = make_partition(labels, k, cfg, rng(seed))
    assert_at_most_once(p)
    for row in p.class_counts:
        assert sorted(row[row > 0].tolist()) == [per_class] * n
    assert (p.class_counts.sum(axis=0) > 0).all()  # cover_all


@FEW
@given(k=st.integers(4, 30), seed=st.integers(0, 2**16))
def test_pathological_reuse_wraps_only_when_a_class_runs_out(k, seed):
    labels = make_labels([50] * 4)
    cfg = {"name": "pathological", "classes_per_client": 2, "per_class": 20}
    p = make_partition(labels, k, cfg, rng(seed))
    used = uses(p)
    for cls in range(4):
        demand = p.class_counts[:, cls].sum()
        times = [used.get(i, 0) for i in np.flatnonzero(labels == cls)]
        assert max(times) == max(1, -(-demand // 50)) or demand == 0
        assert min(times) >= demand // 50
    assert all(len(set(ix.tolist())) == len(ix) for ix in p.client_indices)


def test_pathological_infeasible_settings_raise():
    labels = make_labels([50] * 4)
    with pytest.raises(FedshareError, match=re.escape("per_class=60")):
        make_partition(labels, 4, {"name": "pathological", "per_class": 60}, rng())
    with pytest.raises(FedshareError, match=re.escape("set partition.reuse=true")):
        cfg = {"name": "pathological", "per_class": 20, "reuse": False}
        make_partition(labels, 10, cfg, rng())
    with pytest.raises(FedshareError, match=re.escape("cannot cover all 4 classes")):
        make_partition(labels, 1, {"name": "pathological", "per_class": 5}, rng())
    with pytest.raises(FedshareError, match=re.escape("5 classes per client")):
        make_partition(labels, 4, {"name": "pathological", "classes_per_client": 5}, rng())


@FEW
@given(k=st.integers(5, 25), seed=st.integers(0, 2**16))
def test_clustered_groups_fix_the_class_count(k, seed):
    labels = make_labels([400] * 10)
    p = make_partition(labels, k, {"name": "clustered", "client_size": 30}, rng(seed))
    assert p.groups.tolist() == [i % 5 for i in range(k)]
    for i, row in enumerate(p.class_counts):
        held = row[row > 0]
        assert len(held) == [2, 2, 3, 3, 5][i % 5]
        assert held.sum() == 30 and held.max() - held.min() <= 1
    assert_at_most_once(p)


def test_clustered_needs_a_client_per_group():
    with pytest.raises(FedshareError, match=re.escape("5 groups but only 3 clients")):
        make_partition(make_labels([100] * 10), 3, {"name": "clustered"}, rng())


@FEW
@given(j=st.integers(1, 8), s=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_shards_give_s_distinct_classes_and_use_everything(j, s, seed):
    c, shard, k = 6, 7, 6 * j  # every class fills exactly j·s shards of 7 samples
    labels = make_labels([j * s * shard] * c, seed)
    p = make_partition(labels, k, {"name": "shards", "shards_per_client": s}, rng(seed))
    assert_exactly_once(p, len(labels))
    assert all(len(cls) == s for cls in classes_of(p))
    assert set(p.sizes) == {s * shard}


def test_shards_infeasible_raises():
    with pytest.raises(
        FedshareError, match=re.escape("shards_per_client=4 must be between 1 and the 3")
    ):
        make_partition(make_labels([30] * 3), 3, {"name": "shards", "shards_per_client": 4}, rng())
    labels = make_labels([90, 10, 10])  # class 0 fills more shards than there are clients
    with pytest.raises(FedshareError, match=re.escape("more than the 3 clients")):
        make_partition(labels, 3, {"name": "shards", "shards_per_client": 2}, rng())


# --------------------------------------------------------------------------- XorMixFL
@FEW
@given(
    k=st.integers(2, 6),
    n=st.integers(0, 5),
    m=st.integers(1, 20),
    targets=st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True),
    seed=st.integers(0, 2**16),
)
def test_xormix_target_labels_are_short_everywhere(k, n, m, targets, seed):
    labels = make_labels([130] * 10)
    cfg = {"name": "xormix", "target_labels": targets, "n": n, "m": m}
    p = make_partition(labels, k, cfg, rng(seed))
    assert_at_most_once(p)
    want = [n if c in targets else m for c in range(10)]
    assert all(row.tolist() == want for row in p.class_counts)
    assert p.info["server"] == 0 and p.info["devices"] == list(range(1, k))
    assert p.info["target_labels"] == targets
    assert p.groups.tolist() == [0] + [1] * (k - 1) and p.group_names == ["server", "device"]


def test_xormix_without_server_and_errors():
    labels = make_labels([130] * 10)
    p = make_partition(labels, 3, {"name": "xormix", "server": False, "m": 5}, rng())
    assert p.info["server"] is None and p.groups.tolist() == [0, 0, 0]
    with pytest.raises(
        FedshareError, match=re.escape("needs 3 participants × 200 = 600 samples of class 0")
    ):
        make_partition(labels, 3, {"name": "xormix"}, rng())
    with pytest.raises(FedshareError, match=re.escape("target_labels=[10]")):
        make_partition(labels, 3, {"name": "xormix", "target_labels": [10], "m": 5}, rng())
    with pytest.raises(FedshareError, match=re.escape("'target_labels' must be of type")):
        make_partition(labels, 3, {"name": "xormix", "target_labels": "9"}, rng())
    with pytest.raises(FedshareError, match=re.escape("at least one device")):
        make_partition(labels, 1, {"name": "xormix", "m": 5}, rng())


# --------------------------------------------------------------------------- FedPFT shifts
@FEW
@given(
    labels=label_arrays(min_classes=4),
    k=st.integers(2, 12),
    t=st.integers(2, 4),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_task_shift_gives_disjoint_label_sets(labels, k, t, shuffle, seed):
    t = min(t, k)
    p = make_partition(labels, k, {"name": "task", "tasks": t, "shuffle": shuffle}, rng(seed))
    assert_exactly_once(p, len(labels))
    assert p.groups.tolist() == [i % t for i in range(k)]
    sets = [set(s) for s in p.info["task_labels"]]
    assert sum(len(s) for s in sets) == len(set().union(*sets))  # disjoint
    for i, held in enumerate(classes_of(p)):
        assert held <= sets[i % t]


def test_task_shift_halves_and_errors():
    labels = make_labels([20] * 10)
    p = make_partition(labels, 2, {"name": "task"}, rng())
    assert classes_of(p) == [{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}]
    p = make_partition(labels, 2, {"name": "task", "label_sets": [[9], [0, 1]]}, rng())
    assert classes_of(p) == [{9}, {0, 1}] and p.info["unused_classes"] == list(range(2, 9))
    with pytest.raises(FedshareError, match=re.escape("disjoint")):
        make_partition(labels, 2, {"name": "task", "label_sets": [[1, 2], [2]]}, rng())
    with pytest.raises(
        FedshareError, match=re.escape("tasks=11 must be between 1 and the 10 classes")
    ):
        make_partition(labels, 20, {"name": "task", "tasks": 11}, rng())
    with pytest.raises(FedshareError, match=re.escape("3 label sets but only 2 clients")):
        make_partition(labels, 2, {"name": "task", "tasks": 3}, rng())


def test_covariate_shift_transforms_each_domain_once():
    data = load_dataset({"name": "digits"})
    fed = federate(data, "covariate", 8, seed=0)
    p = fed.partition
    assert_exactly_once(p, len(data.y_train))
    assert p.groups.tolist() == [0, 1, 2, 3, 0, 1, 2, 3] and len(p.transforms) == 4
    before, after = data.x_train, fed.dataset.x_train
    for k, ix in enumerate(p.client_indices):
        same = torch.equal(before[ix], after[ix])
        assert same == (k % 4 == 0)  # domain 0 is the identity
    rot = p.client_indices[1]
    assert torch.equal(after[rot], torch.rot90(before[rot], 1, (-2, -1)))
    assert torch.equal(after[p.client_indices[3]], 16 - before[p.client_indices[3]])
    assert fed.dataset.x_test[0::4].equal(data.x_test[0::4])  # test: j mod 4 == 0 is clean
    assert not fed.dataset.x_test[1::4].equal(data.x_test[1::4])
    again = federate(data, "covariate", 8, seed=0)
    assert torch.equal(again.dataset.x_train, after)  # noise seeds live in the spec
    json.dumps(p.summary())


def test_covariate_transforms_keep_dtype_and_range():
    x = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    for spec in (
        {"kind": "noise", "std": 0.5, "seed": 1},
        {"kind": "colour", "gains": [2, 1, 0]},
        {"kind": "rotate", "degrees": 30},
        {"kind": "shift", "std": 1.0, "seed": 2},
    ):
        y = transform_inputs(x, spec, scale=1 / 255)
        assert y.dtype == torch.uint8 and y.shape == x.shape
    y = transform_inputs(x, {"kind": "colour", "gains": [1, 1, 0]}, scale=1 / 255)
    assert (y[:, 2] == 0).all() and torch.equal(y[:, :2], x[:, :2])
    with pytest.raises(FedshareError, match=re.escape("rotate needs image inputs")):
        transform_inputs(torch.zeros(4, 20), {"kind": "rotate", "degrees": 90})


def test_covariate_errors_and_fingerprint_covers_the_transforms():
    labels = make_labels([20] * 4)
    with pytest.raises(FedshareError, match=re.escape("kind 'blur'; valid kinds")):
        make_partition(labels, 2, {"name": "covariate", "domains": [{"kind": "blur"}]}, rng())
    with pytest.raises(FedshareError, match=re.escape("4 domains for 2 clients")):
        make_partition(labels, 2, {"name": "covariate"}, rng())
    a = make_partition(
        labels,
        2,
        {"name": "covariate", "domains": [{"kind": "identity"}, {"kind": "rotate", "degrees": 90}]},
        rng(),
    )
    b = make_partition(
        labels,
        2,
        {
            "name": "covariate",
            "domains": [{"kind": "identity"}, {"kind": "rotate", "degrees": 180}],
        },
        rng(),
    )
    assert [x.tolist() for x in a.client_indices] == [x.tolist() for x in b.client_indices]
    assert a.fingerprint != b.fingerprint


# --------------------------------------------------------------------------- every partitioner
SETTINGS = {
    "iid": ({}, 5),
    "dirichlet": ({"alpha": 0.5}, 5),
    "dirichlet_blocks": ({"alpha": 0.5, "min_size": 3, "clients_per_block": 5}, 10),
    "quantity": ({"classes_per_client": 2}, 10),
    "pathological": ({"per_class": 20}, 10),
    "clustered": ({"client_size": 40}, 10),
    "shards": ({}, 10),
    "islands": ({}, 10),
    "xormix": ({"m": 20}, 4),
    "task": ({}, 4),
    "covariate": ({}, 8),
}


def test_every_partitioner_of_the_partition_modules_is_covered_here():
    modules = {"partitioners", "label_skew", "pathological", "label_deficit", "shift"}
    ours = {
        name
        for name in PARTITIONERS.names()
        if PARTITIONERS.get(name).__module__.rsplit(".", 1)[-1] in modules
    }
    assert ours == set(SETTINGS)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_fingerprint_follows_the_seed(name):
    labels = make_labels([100] * 10)
    params, k = SETTINGS[name]
    cfg = {"name": name, **params}
    a, b, c = (make_partition(labels, k, cfg, rng(s)) for s in (7, 7, 8))
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != c.fingerprint
    assert len(a.client_indices) == k
    json.dumps(a.summary())  # partition.json is plain JSON
    assert a.fingerprint in a.describe()


def test_partition_seed_fixes_the_partition_across_run_seeds():
    labels = make_labels([100] * 10)
    cfg = {"name": "dirichlet", "alpha": 0.3, "seed": 1}
    a, b = (make_partition(labels, 5, cfg, rng(s)) for s in (0, 1))
    assert a.fingerprint == b.fingerprint and a.info["partition_seed"] == 1
    with pytest.raises(FedshareError, match=re.escape("partition.seed='x' must be an integer")):
        make_partition(labels, 5, {"name": "iid", "seed": "x"}, rng())


def test_unknown_partition_and_parameter_are_clear_errors():
    labels = make_labels([10] * 3)
    with pytest.raises(FedshareError, match=re.escape("unknown partition 'nosuch'; valid choices")):
        make_partition(labels, 2, {"name": "nosuch"}, rng())
    with pytest.raises(FedshareError, match=re.escape("has no parameter 'q'")):
        make_partition(labels, 2, {"name": "quantity", "q": 2}, rng())


def test_client_count_from_samples_per_client():
    data = load_dataset({"name": "digits"})
    fed = federate(data, "iid", None, seed=0, samples_per_client=100)
    assert fed.num_clients == len(data.y_train) // 100


def test_plot_partition_writes_a_png(tmp_path):
    labels = make_labels([100] * 10)
    p = make_partition(labels, 20, {"name": "clustered", "client_size": 40}, rng())
    path = plot_partition(p, tmp_path / "sub" / "partition.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- command line
def run_module(module: str, *args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_partition_cli_prints_stats_and_writes_the_plot(tmp_path):
    out = tmp_path / "p"
    proc = run_module(
        "fedshare.partition",
        "data=digits",
        "partition=qua2",
        "clients.num=6",
        f"run_dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    stats = json.loads((out / "partition.json").read_text())
    assert f"fingerprint {stats['fingerprint']}" in proc.stdout
    assert "classes per client min 2 / mean 2.00 / max 2" in proc.stdout
    assert (out / "partition.png").read_bytes()[:4] == b"\x89PNG"
    assert stats["classes_per_client"] == [2] * 6


def test_partition_cli_user_error_is_one_line(tmp_path):
    proc = run_module(
        "fedshare.partition",
        "data=digits",
        "partition=qua2",
        "partition.classes_per_client=11",
        f"run_dir={tmp_path / 'e'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "classes_per_client=11 must be between 1 and the 10 classes" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_run_directory_gets_partition_png(tmp_path):
    out = tmp_path / "run"
    proc = run_module(
        "fedshare.run",
        "partition=pat2",
        "partition.per_class=20",
        "rounds=1",
        "clients.num=6",
        "progress=false",
        f"run_dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "partition.png").is_file() and (out / "partition.json").is_file()


def test_pathological_records_which_label_sets_it_drew():
    labels = make_labels([100] * 10)
    part = make_partition(labels, 20, {"name": "pathological", "per_class": 20}, rng(0))
    held = {tuple(sorted(np.flatnonzero(row).tolist())) for row in part.class_counts}
    pairs = {(a, b) for s in held for i, a in enumerate(s) for b in s[i + 1 :]}
    assert part.info["label_sets"] == {
        "distinct": len(held),
        "class_pairs_held": len(pairs),
        "class_pairs": 45,
    }
    assert json.loads(json.dumps(part.summary()))["info"]["label_sets"]["class_pairs"] == 45
