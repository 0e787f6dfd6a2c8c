"""FedPFT's task and covariate shift (Sec. 5.3) and XorMixFL's label deficit (Sec. 4), each
compared draw for draw with its definition written out, every parameter moving the split, and
each input transform's arithmetic (docs/mutation.md, `label_deficit_shift`)."""

import numpy as np
import pytest
import torch

from fedshare.data.label_deficit import xormix
from fedshare.data.shift import covariate, task, transform_inputs
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError

LABELS = np.repeat(np.arange(6), 10)[np.random.default_rng(0).permutation(60)]


def reference_task(labels, num_clients, seed, sets, shuffle_classes=None):
    """Client k in task k mod T; each task's samples shuffled and cut in client order."""
    rng = np.random.default_rng(seed)
    if shuffle_classes is not None:
        order = rng.permutation(shuffle_classes)
        sets = [sorted(s.tolist()) for s in np.array_split(order, len(sets))]
    out = [None] * num_clients
    for g, classes in enumerate(sets):
        members = rng.permutation(np.flatnonzero(np.isin(labels, classes)))
        owners = [k for k in range(num_clients) if k % len(sets) == g]
        for k, piece in zip(owners, np.array_split(members, len(owners)), strict=True):
            out[k] = piece
    return out, sets


@pytest.mark.parametrize(("clients", "tasks"), [(5, 2), (3, 3), (4, 1), (6, 6)])
def test_task_cuts_the_classes_into_contiguous_sets_split_over_the_tasks_clients(clients, tasks):
    split = task(LABELS, clients, np.random.default_rng(3), tasks=tasks)
    sets = [s.tolist() for s in np.array_split(np.arange(6), tasks)]
    want, _ = reference_task(LABELS, clients, 3, sets)
    assert split.info["task_labels"] == sets
    for got, ref in zip(split.indices, want, strict=True):
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(split.groups, np.arange(clients) % tasks)
    assert split.group_names == [f"task{g}" for g in range(tasks)]
    assert "unused_classes" not in split.info


def test_task_default_is_two_tasks_and_shuffle_draws_the_sets():
    assert task(LABELS, 4, np.random.default_rng(0)).info["task_labels"] == [[0, 1, 2], [3, 4, 5]]
    split = task(LABELS, 4, np.random.default_rng(1), tasks=2, shuffle=True)
    want, sets = reference_task(LABELS, 4, 1, [[], []], shuffle_classes=6)
    assert split.info["task_labels"] == sets != [[0, 1, 2], [3, 4, 5]]
    for got, ref in zip(split.indices, want, strict=True):
        np.testing.assert_array_equal(got, ref)


def test_task_label_sets_are_used_as_given_and_the_rest_left_unused():
    split = task(LABELS, 3, np.random.default_rng(2), label_sets=[[4, 1], [0]])
    want, _ = reference_task(LABELS, 3, 2, [[1, 4], [0]])
    assert split.info == {"task_labels": [[1, 4], [0]], "unused_classes": [2, 3, 5]}
    for got, ref in zip(split.indices, want, strict=True):
        np.testing.assert_array_equal(got, ref)
    task(LABELS, 2, np.random.default_rng(2), label_sets=[[5], [0]])  # both ends of 0…C−1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"label_sets": []}, "non-empty, disjoint"),
        ({"label_sets": [[1], []]}, "non-empty, disjoint"),
        ({"label_sets": [[1, 2], [2]]}, "non-empty, disjoint"),
        ({"label_sets": [[1], [6]]}, "outside 0…5"),
        ({"label_sets": [[-1], [2]]}, "outside 0…5"),
        ({"tasks": 0}, "tasks=0"),
        ({"tasks": 7}, "tasks=7"),
        ({"tasks": 4}, "4 label sets but only 3 clients"),
    ],
)
def test_task_refuses_bad_sets(options, message):
    with pytest.raises(FedshareError, match=message):
        task(LABELS, 3, np.random.default_rng(0), **options)


def test_covariate_draws_missing_seeds_then_an_iid_split_with_domains_in_turn():
    domains = [{"kind": "noise", "std": 0.1}, {"kind": "shift", "std": 0.2, "seed": 5}]
    split = covariate(LABELS, 5, np.random.default_rng(4), domains=domains)
    rng = np.random.default_rng(4)
    seed = int(rng.integers(2**31 - 1))
    want = np.array_split(rng.permutation(60), 5)
    assert split.transforms == [
        {"kind": "noise", "std": 0.1, "seed": seed},
        {"kind": "shift", "std": 0.2, "seed": 5},
    ]
    for got, ref in zip(split.indices, want, strict=True):
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(split.groups, [0, 1, 0, 1, 0])
    assert split.group_names == ["domain0: noise(0.1)", "domain1: shift(0.2)"]
    assert split.info == {"test": "mixed"}
    assert covariate(LABELS, 4, np.random.default_rng(4), test="clean").info == {"test": "clean"}


def test_covariate_defaults_to_four_domains_and_needs_one_to_k():
    split = covariate(LABELS, 4, np.random.default_rng(0))
    assert [t["kind"] for t in split.transforms] == ["identity", "rotate", "noise", "invert"]
    covariate(LABELS, 1, np.random.default_rng(0), domains=[{"kind": "invert"}])
    with pytest.raises(FedshareError, match="4 domains for 3 clients"):
        covariate(LABELS, 3, np.random.default_rng(0))
    with pytest.raises(FedshareError, match="0 domains"):
        covariate(LABELS, 3, np.random.default_rng(0), domains=[])
    with pytest.raises(FedshareError, match=r"partition\.test='both'"):
        covariate(LABELS, 4, np.random.default_rng(0), test="both")


# ----------------------------------------------------------------------------- transforms

BYTES = torch.tensor([[[[0, 10, 250], [128, 255, 3]]]], dtype=torch.uint8)  # 1×1×2×3
"""Stored images with scale 1/255: model input = stored / 255, range [0, 255]."""


def test_identity_and_empty_inputs_are_returned_as_they_are():
    assert transform_inputs(BYTES, {"kind": "identity"}, 1 / 255) is BYTES
    empty = torch.zeros(0, 1, 2, 3)
    assert transform_inputs(empty, {"kind": "invert"}) is empty


def test_noise_is_seeded_per_split_in_input_units_clipped_and_rounded():
    x = BYTES.repeat(2, 1, 1, 1)
    got = transform_inputs(x, {"kind": "noise", "std": 0.1, "seed": 7}, 1 / 255, "test")
    gen = torch_generator(7, "covariate/noise/test")
    noise = torch.randn(x.shape, generator=gen) * 0.1 * 255
    want = (x.float() + noise).clamp(0, 255).round().to(torch.uint8)
    assert torch.equal(got, want)
    assert not torch.equal(got[0], got[1])  # per sample
    train = transform_inputs(x, {"kind": "noise", "std": 0.1, "seed": 7}, 1 / 255)
    assert not torch.equal(train, got)


def test_shift_adds_one_offset_to_every_sample():
    x = torch.zeros(3, 4)
    got = transform_inputs(x, {"kind": "shift", "std": 2.0, "seed": 1})
    offset = torch.randn(4, generator=torch_generator(1, "covariate/shift")) * 2.0
    assert torch.equal(got, offset.expand(3, 4))  # float inputs: unbounded, not clipped
    halved = transform_inputs(x, {"kind": "shift", "std": 2.0, "seed": 1}, 0.5)
    # in input units (stored value × scale), clipped to the stored range [0, 1 / scale]
    assert torch.equal(halved, (offset * 2.0).clamp(0.0, 2.0).expand(3, 4))


def test_colour_multiplies_each_channel_and_checks_the_gains():
    x = torch.full((2, 3, 2, 2), 0.5)
    got = transform_inputs(x, {"kind": "colour", "gains": [1.0, 0.5, 4.0]}, 0.5)
    assert torch.equal(got[:, 0], x[:, 0]) and torch.equal(got[:, 1], x[:, 1] * 0.5)
    assert torch.equal(got[:, 2], torch.full((2, 2, 2), 2.0))  # clipped at 1/scale = 2
    assert torch.equal(transform_inputs(x, {"kind": "colour", "gains": [3.0]}), x * 3)
    with pytest.raises(FedshareError, match="2 gains for inputs with 3 channels"):
        transform_inputs(x, {"kind": "colour", "gains": [1.0, 2.0]})
    features = torch.ones(2, 3)  # N × d features: a gain per coordinate
    got = transform_inputs(features, {"kind": "colour", "gains": [1.0, 2.0, 3.0]})
    assert torch.equal(got, torch.tensor([[1.0, 2.0, 3.0]] * 2))


def test_invert_mirrors_the_stored_range():
    assert torch.equal(
        transform_inputs(BYTES, {"kind": "invert"}, 1 / 255), (255 - BYTES.int()).to(torch.uint8)
    )
    x = torch.tensor([[0.25, 1.5]])
    assert torch.equal(transform_inputs(x, {"kind": "invert"}), -x)  # unbounded
    assert torch.equal(transform_inputs(x, {"kind": "invert"}, 0.5), torch.tensor([[1.75, 0.5]]))
    ints = torch.tensor([[0, 100]], dtype=torch.int16)
    assert torch.equal(transform_inputs(ints, {"kind": "invert"}), 32767 - ints)


def test_rotate_by_90_degrees_turns_the_image_and_by_0_keeps_it():
    x = torch.arange(16.0).view(1, 1, 4, 4)
    turned = transform_inputs(x, {"kind": "rotate", "degrees": 90})
    assert torch.allclose(turned, torch.rot90(x, 1, dims=(2, 3)), atol=1e-4)
    assert torch.allclose(transform_inputs(x, {"kind": "rotate", "degrees": 0}), x, atol=1e-5)
    with pytest.raises(FedshareError, match=r"rotate needs image inputs .* shape \(3,\)"):
        transform_inputs(torch.ones(2, 3), {"kind": "rotate", "degrees": 90})


def test_rotate_covers_every_chunk_of_4096():
    x = torch.arange(4097 * 4.0).view(4097, 1, 2, 2)
    turned = transform_inputs(x, {"kind": "rotate", "degrees": 180})
    assert torch.allclose(turned, torch.rot90(x, 2, dims=(2, 3)), atol=1e-3)


# ----------------------------------------------------------------------------- label deficit


def reference_xormix(labels, clients, seed, targets, n, m):
    rng = np.random.default_rng(seed)
    parts = [[] for _ in range(clients)]
    for cls in range(int(labels.max()) + 1):
        need = n if cls in targets else m
        chosen = rng.choice(np.flatnonzero(labels == cls), size=need * clients, replace=False)
        for k in range(clients):
            parts[k].append(chosen[k * need : (k + 1) * need])
    return [np.concatenate(p) for p in parts]


@pytest.mark.parametrize(("server", "targets"), [(True, [5]), (False, [0, 3])])
def test_xormix_gives_everyone_n_of_each_target_and_m_of_each_other_label(server, targets):
    split = xormix(LABELS, 3, np.random.default_rng(9), targets, n=1, m=3, server=server)
    want = reference_xormix(LABELS, 3, 9, targets, 1, 3)
    for got, ref in zip(split.indices, want, strict=True):
        np.testing.assert_array_equal(got, ref)
        counts = np.bincount(LABELS[got], minlength=6)
        assert all(counts[c] == (1 if c in targets else 3) for c in range(6))
    if server:
        np.testing.assert_array_equal(split.groups, [0, 1, 1])
        assert split.group_names == ["server", "device"]
        assert split.info == {"server": 0, "devices": [1, 2], "target_labels": targets}
    else:
        np.testing.assert_array_equal(split.groups, [0, 0, 0])
        assert split.group_names == ["device"]
        assert split.info == {"server": None, "devices": [0, 1, 2], "target_labels": targets}


def test_xormix_defaults_are_the_papers():
    labels = np.repeat(np.arange(10), 1000)
    split = xormix(labels, 4, np.random.default_rng(0))
    counts = np.bincount(labels[split.indices[2]], minlength=10)
    assert counts.tolist() == [200] * 9 + [10]
    assert split.info["server"] == 0 and split.info["target_labels"] == [9]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target_labels": []}, "target_labels=\\[\\] must be distinct classes in 0…5"),
        ({"target_labels": [1, 1]}, "target_labels"),
        ({"target_labels": [6]}, "target_labels"),
        ({"target_labels": [-1]}, "target_labels"),
        ({"n": -1}, "n=-1"),
        ({"m": -1}, "m=-1"),
        ({"m": 4}, r"3 participants × 4 = 12 samples of class 0 .* lower partition.m"),
        ({"n": 4, "m": 1}, r"3 participants × 4 = 12 samples of class 5 .* lower partition.n"),
    ],
)
def test_xormix_refuses_bad_settings(options, message):
    with pytest.raises(FedshareError, match=message):
        xormix(LABELS, 3, np.random.default_rng(0), **{"target_labels": [5], **options})


def test_xormix_with_a_server_needs_a_device():
    xormix(LABELS, 1, np.random.default_rng(0), [5], n=1, m=1, server=False)
    xormix(LABELS, 2, np.random.default_rng(0), [5], n=1, m=1)
    with pytest.raises(FedshareError, match="got 1 clients"):
        xormix(LABELS, 1, np.random.default_rng(0), [5], n=1, m=1)
    zero = xormix(LABELS, 2, np.random.default_rng(0), [5], n=0, m=1)
    assert np.bincount(LABELS[zero.indices[1]], minlength=6).tolist() == [1] * 5 + [0]
    none = xormix(LABELS, 2, np.random.default_rng(0), [5], n=1, m=0)
    assert np.bincount(LABELS[none.indices[1]], minlength=6).tolist() == [0] * 5 + [1]
