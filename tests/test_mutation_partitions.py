"""The label-skew partitioners against their definitions (docs/mutation.md, `label_skew`):
NIID-Bench's Dir(α) and #C=q splits written out independently here and compared draw for draw,
FLea's block-wise Dir(α) (App. C.1) block by block, and each parameter moving the split's
statistics the way its definition says (α: label entropy; min_size: the smallest client;
classes_per_client: classes per client)."""

import numpy as np
import pytest

from fedshare.data import make_partition
from fedshare.data.label_skew import hetero_dirichlet
from fedshare.errors import FedshareError


def make_labels(counts: list[int], seed: int = 0) -> np.ndarray:
    labels = np.repeat(np.arange(len(counts)), counts)
    return labels[np.random.default_rng(seed).permutation(len(labels))]


def reference_dirichlet(
    labels: np.ndarray, pool: np.ndarray, k: int, rng: np.random.Generator, alpha: float, least: int
) -> list[np.ndarray]:
    """NIID-Bench's `noniid-labeldir` loop: per class, shuffle, p ~ Dir(α), zero p for a client
    holding ≥ N/K already, cut at the cumulative proportions; redraw until min size ≥ least,
    or at once when every open client's p underflowed to 0 (NIID-Bench would divide by 0)."""
    while True:
        batch: list[list[int]] = [[] for _ in range(k)]
        for c in np.unique(labels[pool]):
            members = rng.permutation(pool[labels[pool] == c])
            p = rng.dirichlet(np.repeat(alpha, k))
            p = np.array([pj * (len(b) < len(pool) / k) for pj, b in zip(p, batch, strict=True)])
            if p.sum() == 0:
                break
            cuts = (np.cumsum(p / p.sum()) * len(members)).astype(int)[:-1]
            for b, piece in zip(batch, np.split(members, cuts), strict=True):
                b.extend(piece.tolist())
        else:
            if min(len(b) for b in batch) >= least:
                return [np.array(b, dtype=np.int64) for b in batch]


def split(labels: np.ndarray, k: int, cfg: dict, seed: int) -> list[np.ndarray]:
    return make_partition(labels, k, cfg, np.random.default_rng(seed)).client_indices


def label_entropy(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean over clients of the entropy (nats) of the client's label distribution."""
    values = []
    for part in parts:
        q = np.bincount(labels[part]) / len(part)
        q = q[q > 0]
        values.append(float(-(q * np.log(q)).sum()))
    return float(np.mean(values))


@pytest.mark.parametrize(
    ("counts", "k", "alpha", "least", "seed"),
    [([40] * 5, 4, 0.5, 5, 0), ([30, 70, 50], 6, 0.1, 3, 1), ([25] * 8, 5, 2.0, 8, 2)],
)
def test_dirichlet_is_niid_benchs_draw_for_draw(counts, k, alpha, least, seed):
    labels = make_labels(counts, seed)
    cfg = {"name": "dirichlet", "alpha": alpha, "min_size": least}
    expected = reference_dirichlet(
        labels, np.arange(len(labels)), k, np.random.default_rng(seed), alpha, least
    )
    for got, want in zip(split(labels, k, cfg, seed), expected, strict=True):
        assert np.array_equal(got, want)


def test_dirichlet_redraws_until_every_client_has_min_size_and_counts_its_tries():
    labels = make_labels([20] * 4)
    pool = np.arange(len(labels))
    # α = 0.05 leaves some client below 12 samples in most draws: the split redraws
    parts = hetero_dirichlet(labels, pool, 4, np.random.default_rng(3), 0.05, 12, 1000)
    assert min(len(p) for p in parts) >= 12
    expected = reference_dirichlet(labels, pool, 4, np.random.default_rng(3), 0.05, 12)
    assert all(np.array_equal(a, b) for a, b in zip(parts, expected, strict=True))
    with pytest.raises(FedshareError, match=r"in 1 draws"):
        hetero_dirichlet(labels, pool, 4, np.random.default_rng(0), 0.05, 19, 1)
    # exactly feasible (4 × 20 = 80 samples) is not refused up front
    with pytest.raises(FedshareError, match="in 2 draws"):
        hetero_dirichlet(labels, pool, 4, np.random.default_rng(0), 0.05, 20, 2)
    with pytest.raises(FedshareError, match="min_size=21 is infeasible"):
        hetero_dirichlet(labels, pool, 4, np.random.default_rng(0), 0.05, 21, 1)


def test_dirichlet_alpha_moves_the_clients_label_entropy():
    """Dir(α): small α concentrates each client on few labels, large α approaches the global
    label mix (entropy log C); the mean entropy over clients rises with α."""
    labels = make_labels([200] * 10)
    entropy = {
        a: np.mean(
            [
                label_entropy(labels, split(labels, 10, {"name": "dirichlet", "alpha": a}, s))
                for s in range(3)
            ]
        )
        for a in (0.05, 0.5, 100.0)
    }
    assert entropy[0.05] < 0.45 * np.log(10)
    assert entropy[0.05] < entropy[0.5] - 0.3 < entropy[100.0] - 0.6
    assert entropy[100.0] > 0.97 * np.log(10)


@pytest.mark.parametrize("mode", ["balanced", "sequential"])
def test_dirichlet_blocks_split_each_block_by_niid_bench_over_its_own_clients(mode):
    labels = make_labels([36, 24, 30])
    cfg = {"name": "dirichlet_blocks", "alpha": 0.3, "blocks": 3, "mode": mode, "min_size": 2}
    got = split(labels, 6, cfg, 4)
    if mode == "sequential":
        pools = np.array_split(np.arange(len(labels)), 3)
    else:
        pieces = [np.array_split(np.flatnonzero(labels == c), 3) for c in range(3)]
        pools = [np.concatenate([p[j] for p in pieces]) for j in range(3)]
    rng = np.random.default_rng(4)
    expected = [
        part for pool in pools for part in reference_dirichlet(labels, pool, 2, rng, 0.3, 2)
    ]
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_dirichlet_blocks_count_blocks_from_clients_per_block():
    labels = make_labels([60] * 4)
    base = {"name": "dirichlet_blocks", "alpha": 1.0, "min_size": 1}
    info = make_partition(labels, 8, base | {"clients_per_block": 4}, np.random.default_rng(0))
    assert info.info["blocks"] == 2 and info.info["clients_per_block"] == 4
    one = make_partition(labels, 8, base | {"clients_per_block": 8}, np.random.default_rng(0))
    assert one.info["blocks"] == 1
    fewer = make_partition(labels, 3, base | {"clients_per_block": 4}, np.random.default_rng(0))
    assert fewer.info["blocks"] == 1  # K ≤ clients_per_block: one block, not zero
    with pytest.raises(FedshareError, match=r"not a multiple of partition\.clients_per_block=4"):
        make_partition(labels, 10, base | {"clients_per_block": 4}, np.random.default_rng(0))
    with pytest.raises(FedshareError, match="clients_per_block=0 must be ≥ 1"):
        make_partition(labels, 4, base | {"clients_per_block": 0}, np.random.default_rng(0))
    with pytest.raises(FedshareError, match="blocks=3 must be a positive divisor"):
        make_partition(labels, 8, base | {"blocks": 3}, np.random.default_rng(0))
    with pytest.raises(FedshareError, match="blocks=0 must be a positive divisor"):
        make_partition(labels, 8, base | {"blocks": 0}, np.random.default_rng(0))
    with pytest.raises(FedshareError, match=r"alpha=0\.0 must be positive"):
        make_partition(labels, 8, base | {"alpha": 0}, np.random.default_rng(0))
    with pytest.raises(FedshareError, match="mode='cyclic' must be"):
        make_partition(labels, 8, base | {"mode": "cyclic"}, np.random.default_rng(0))


def reference_quantity(labels: np.ndarray, k: int, q: int, rng: np.random.Generator) -> list:
    """#C=q: client i owns class i mod C and q − 1 others drawn without replacement; each
    class's shuffled indices are split evenly among its owners in client order."""
    c = labels.max() + 1
    owners: list[list[int]] = [[] for _ in range(c)]
    for i in range(k):
        rest = [x for x in range(c) if x != i % c]
        for cls in [i % c, *rng.choice(rest, size=q - 1, replace=False).tolist()]:
            owners[cls].append(i)
    parts: list[list[int]] = [[] for _ in range(k)]
    for cls in range(c):
        members = rng.permutation(np.flatnonzero(labels == cls))
        if owners[cls]:
            pieces = np.array_split(members, len(owners[cls]))
            for i, piece in zip(owners[cls], pieces, strict=True):
                parts[i].extend(piece.tolist())
    return parts


@pytest.mark.parametrize(("k", "q", "seed"), [(6, 2, 0), (4, 3, 1), (3, 1, 2), (2, 2, 3)])
def test_quantity_is_niid_benchs_draw_for_draw(k, q, seed):
    labels = make_labels([12, 18, 15, 9], seed)
    got = make_partition(
        labels, k, {"name": "quantity", "classes_per_client": q}, np.random.default_rng(seed)
    )
    expected = reference_quantity(labels, k, q, np.random.default_rng(seed))
    assert [p.tolist() for p in got.client_indices] == expected
    assert (np.count_nonzero(got.class_counts, axis=1) == q).all()
    unused = [c for c in range(4) if not got.class_counts[:, c].any()]
    assert got.info.get("unused_classes", []) == unused


def test_quantity_bounds_on_classes_per_client():
    labels = make_labels([10] * 4)
    for q in (0, 5):
        with pytest.raises(FedshareError, match=f"classes_per_client={q} must be between 1"):
            split(labels, 4, {"name": "quantity", "classes_per_client": q}, 0)
    full = make_partition(
        labels, 4, {"name": "quantity", "classes_per_client": 4}, np.random.default_rng(0)
    )
    # q = C: every client owns every class; 10 per class split 3, 3, 2, 2 in client order
    assert full.class_counts.tolist() == [[3] * 4, [3] * 4, [2] * 4, [2] * 4]


def test_iid_is_a_seeded_permutation_in_equal_shares():
    labels = make_labels([7] * 3)
    got = split(labels, 4, {"name": "iid"}, 5)
    want = np.array_split(np.random.default_rng(5).permutation(21), 4)
    assert [p.tolist() for p in got] == [p.tolist() for p in want]


def test_the_partitioners_defaults_are_their_documented_values():
    """dirichlet: α = 0.5, min_size = C, 1000 draws; dirichlet_blocks: balanced blocks of 100
    clients; quantity: q = 2."""
    labels = make_labels([30] * 4)
    expected = reference_dirichlet(
        labels, np.arange(120), 5, np.random.default_rng(7), alpha=0.5, least=4
    )
    got = split(labels, 5, {"name": "dirichlet"}, 7)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    one_class = np.zeros(10, dtype=np.int64)  # α → 0 almost never cuts 10 samples at 5 | 5
    with pytest.raises(FedshareError, match="in 1000 draws"):
        split(one_class, 2, {"name": "dirichlet", "alpha": 1e-3, "min_size": 5}, 0)
    cfg = {"name": "dirichlet_blocks", "alpha": 5.0, "min_size": 1}
    blocks = make_partition(make_labels([1000] * 4), 200, cfg, np.random.default_rng(0))
    assert blocks.info == {"blocks": 2, "clients_per_block": 100, "mode": "balanced"}
    q = split(labels, 4, {"name": "quantity"}, 0)
    assert all(len(np.unique(labels[p])) == 2 for p in q)


def test_one_client_per_block_is_allowed():
    labels = make_labels([20] * 2)
    cfg = {"name": "dirichlet_blocks", "clients_per_block": 1, "min_size": 1}
    p = make_partition(labels, 2, cfg, np.random.default_rng(0))
    assert p.info["blocks"] == 2 and [len(ix) for ix in p.client_indices] == [20, 20]


def test_dirichlet_blocks_min_size_defaults_to_the_classes_and_is_checked_per_block():
    labels = make_labels([30] * 4)
    cfg = {"name": "dirichlet_blocks", "alpha": 2.0, "blocks": 2}
    p = make_partition(labels, 4, cfg, np.random.default_rng(0))
    assert min(p.sizes) >= 4
    with pytest.raises(FedshareError, match=r"min_size=31 is infeasible: 2 clients × 31"):
        make_partition(labels, 4, cfg | {"min_size": 31}, np.random.default_rng(0))


def test_dirichlet_redraws_when_every_open_client_drew_zero():
    """α = 1e-3: a class's mass lands on one client, and often on the client the cap closed,
    leaving no open client with p > 0; that draw is redrawn (never divided by zero)."""
    labels = np.repeat(np.arange(2), 10)
    rng = np.random.default_rng(0)
    closed = 0
    for _ in range(200):  # the reference's own draws: how often does it happen?
        p = rng.dirichlet(np.full(2, 1e-3))
        closed += int(p.max() == 1.0)
    assert closed > 100  # so the seeds below meet it
    for seed in range(5):
        got = split(labels, 2, {"name": "dirichlet", "alpha": 1e-3, "min_size": 1}, seed)
        want = reference_dirichlet(labels, np.arange(20), 2, np.random.default_rng(seed), 1e-3, 1)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
        assert sorted(np.concatenate(got).tolist()) == list(range(20))


def test_one_explicit_block_is_allowed():
    labels = make_labels([20] * 3)
    cfg = {"name": "dirichlet_blocks", "blocks": 1, "min_size": 1}
    p = make_partition(labels, 3, cfg, np.random.default_rng(0))
    want = reference_dirichlet(labels, np.arange(60), 3, np.random.default_rng(0), 0.5, 1)
    assert p.info["blocks"] == 1
    assert all(np.array_equal(a, b) for a, b in zip(p.client_indices, want, strict=True))


# ------------------------------------------- ReBaFL's label-set splits (Sec. 5.1), FedAA's islands
def reference_label_sets(
    labels: np.ndarray, sizes: list[int], amounts: list[list[int]], rng: np.random.Generator
) -> list[list[int]]:
    """Each client draws its classes uniformly without replacement, redrawn until every class
    has a holder; then takes its amounts from each class's shuffled pool in client order,
    wrapping around a pool that runs out."""
    c = labels.max() + 1
    while True:
        sets = [sorted(rng.choice(c, size=s, replace=False).tolist()) for s in sizes]
        if len({x for s in sets for x in s}) == c:
            break
    pools = [rng.permutation(np.flatnonzero(labels == cls)) for cls in range(c)]
    used = [0] * c
    out = []
    for classes, counts in zip(sets, amounts, strict=True):
        mine = []
        for cls, amount in zip(classes, counts, strict=True):
            mine += [int(pools[cls][(used[cls] + i) % len(pools[cls])]) for i in range(amount)]
            used[cls] += amount
        out.append(mine)
    return out


@pytest.mark.parametrize(
    ("k", "q", "per_class", "seed"), [(5, 2, 4, 0), (4, 3, 7, 1), (6, 1, 3, 2)]
)
def test_pathological_is_the_label_set_draw_then_the_pools_in_client_order(k, q, per_class, seed):
    labels = make_labels([10, 12, 8, 11], seed)
    cfg = {"name": "pathological", "classes_per_client": q, "per_class": per_class}
    got = split(labels, k, cfg, seed)
    want = reference_label_sets(labels, [q] * k, [[per_class] * q] * k, np.random.default_rng(seed))
    assert [p.tolist() for p in got] == want


def test_clustered_splits_the_client_size_evenly_over_its_groups_classes():
    labels = make_labels([30] * 5, 3)
    cfg = {"name": "clustered", "group_classes": [1, 2, 3], "client_size": 7}
    p = make_partition(labels, 6, cfg, np.random.default_rng(3))
    amounts = [[7], [4, 3], [3, 2, 2]] * 2
    want = reference_label_sets(labels, [1, 2, 3] * 2, amounts, np.random.default_rng(3))
    assert [ix.tolist() for ix in p.client_indices] == want
    assert p.groups.tolist() == [0, 1, 2, 0, 1, 2]
    assert sorted(np.count_nonzero(p.class_counts, axis=1).tolist()) == [1, 1, 2, 2, 3, 3]


def test_islands_give_each_client_one_whole_class_in_a_random_order():
    labels = make_labels([3, 5, 4], 1)
    got = split(labels, 3, {"name": "islands"}, 8)
    order = np.random.default_rng(8).permutation(3)
    assert [p.tolist() for p in got] == [np.flatnonzero(labels == c).tolist() for c in order]


def test_dirichlet_blocks_try_a_thousand_draws_per_block():
    one_class = np.zeros(10, dtype=np.int64)
    cfg = {"name": "dirichlet_blocks", "alpha": 1e-3, "min_size": 5, "blocks": 1}
    with pytest.raises(FedshareError, match="in 1000 draws of block 0"):
        split(one_class, 2, cfg, 0)


def test_pathological_defaults_are_reBaFLs_two_classes_of_500():
    labels = np.repeat(np.arange(4), 1000)
    got = split(labels, 3, {"name": "pathological"}, 0)
    for part in got:
        counts = np.bincount(labels[part], minlength=4)
        assert sorted(counts.tolist()) == [0, 0, 500, 500]


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"classes_per_client": 0}, "0 classes per client is not between 1 and the 4"),
        ({"classes_per_client": 5}, "5 classes per client"),
        ({"per_class": 0}, "per_class=0 must be at least 1"),
    ],
)
def test_pathological_refuses_empty_label_sets_and_amounts(cfg, message):
    with pytest.raises(FedshareError, match=message):
        split(np.repeat(np.arange(4), 10), 4, {"name": "pathological", **cfg}, 0)


def test_a_short_pool_without_reuse_names_the_first_short_class():
    labels = np.array([0, 1, 2, 2, 2, 2])
    cfg = {"name": "pathological", "classes_per_client": 3, "per_class": 1, "reuse": False}
    with pytest.raises(FedshareError, match="class 0 is requested 2 times but has only 1"):
        split(labels, 2, cfg, 0)


def test_clustered_covers_every_class_by_default():
    labels = np.repeat(np.arange(4), 5)
    cfg = {"name": "clustered", "group_classes": [1], "client_size": 1}
    with pytest.raises(FedshareError, match="cannot cover all 4 classes"):
        split(labels, 2, cfg, 0)
    split(labels, 2, {**cfg, "cover_all": False}, 0)


class NoSwapRng:
    """Shards in label order (every client's two shards of one class) and swap partners that
    are always the client itself, so no swap is ever made; counts the draws."""

    def __init__(self) -> None:
        self.draws = 0

    def permutation(self, n: int) -> np.ndarray:
        return np.arange(n)

    def integers(self, high: int) -> int:
        self.draws += 1
        return 0


@pytest.mark.parametrize(("max_tries", "swaps"), [(3, 12), (None, 400)])
def test_shards_try_max_tries_times_the_clients_swaps(max_tries, swaps):
    from fedshare.data.pathological import shards

    labels = np.repeat(np.arange(4), 2)
    rng = NoSwapRng()
    options = {} if max_tries is None else {"max_tries": max_tries}
    with pytest.raises(FedshareError, match=f"in {swaps} swaps"):
        shards(labels, 4, rng, **options)
    assert rng.draws == 2 * swaps  # a partner client and a partner shard per try


def test_shards_name_the_class_that_fills_more_shards_than_clients():
    labels = np.array([0, 0, 0, 0, 1, 2])
    with pytest.raises(FedshareError, match="class 0 fills 4 of the 6 shards, more than the 3"):
        split(labels, 3, {"name": "shards"}, 0)


def test_clustered_defaults_are_rebafls_five_groups_of_1000_samples():
    labels = np.repeat(np.arange(5), 1000)
    p = make_partition(labels, 5, {"name": "clustered"}, np.random.default_rng(0))
    assert [len(ix) for ix in p.client_indices] == [1000] * 5
    assert np.count_nonzero(p.class_counts, axis=1).tolist() == [2, 2, 3, 3, 5]


def test_shards_need_a_sample_per_shard_and_default_to_two_per_client():
    labels = np.repeat(np.arange(4), 2)
    with pytest.raises(FedshareError, match="4 clients × 2 shards exceeds the 6 training"):
        split(labels[:6], 4, {"name": "shards"}, 0)
    for part in split(labels, 4, {"name": "shards"}, 0):
        assert len(part) == 2 and len(set(labels[part].tolist())) == 2


class OneClassRng:
    """Every label set is class 0 (so two classes are never covered); counts the draws."""

    def __init__(self) -> None:
        self.draws = 0

    def choice(self, n: int, size: int, replace: bool) -> np.ndarray:
        self.draws += 1
        return np.zeros(size, dtype=np.int64)


def test_label_sets_are_drawn_a_thousand_times_by_default_and_at_least_once():
    from fedshare.data.pathological import clustered, pathological

    labels = np.repeat(np.arange(2), 5)
    rng = OneClassRng()
    with pytest.raises(FedshareError, match="in 1000 tries"):
        clustered(labels, 2, rng, group_classes=[1], client_size=1)
    assert rng.draws == 2 * 1000
    rng = OneClassRng()
    with pytest.raises(FedshareError, match="in 1000 tries"):
        pathological(labels, 2, rng, classes_per_client=1, per_class=1)
    assert rng.draws == 2 * 1000
    got = pathological(labels, 2, np.random.default_rng(0), per_class=1, max_tries=0)
    assert [len(ix) for ix in got.indices] == [2, 2]  # max_tries=0 still draws once


def test_clustered_reuses_a_short_pool_by_default_and_tries_once_at_max_tries_one():
    from fedshare.data.pathological import clustered

    labels = np.repeat(np.arange(2), 3)
    cfg = {"name": "clustered", "group_classes": [2], "client_size": 4}
    assert [len(ix) for ix in split(labels, 2, cfg, 0)] == [4, 4]  # 4 of each class, 3 held
    with pytest.raises(FedshareError, match="requested 4 times but has only 3"):
        split(labels, 2, {**cfg, "reuse": False}, 0)
    rng = OneClassRng()
    with pytest.raises(FedshareError, match="in 1 tries"):
        clustered(labels, 2, rng, group_classes=[1], client_size=1, max_tries=1)
    assert rng.draws == 2


def reference_shards(labels: np.ndarray, k: int, s: int, rng: np.random.Generator) -> list:
    """McMahan et al.'s shards, repaired by swaps: shards of the label-sorted indices, a random
    assignment, then, while some client holds two shards of one class, the lowest such client
    offers its first repeated shard to a random (client, shard); the swap is made only when it
    brings neither client a class it already holds elsewhere."""
    order = np.argsort(labels, kind="stable")
    pieces = np.array_split(order, k * s)
    owner_class = [int(np.bincount(labels[p]).argmax()) for p in pieces]
    rows = rng.permutation(k * s).reshape(k, s).tolist()

    def classes(row):
        return [owner_class[p] for p in row]

    for _ in range(100 * k):
        bad = [i for i in range(k) if len(set(classes(rows[i]))) < s]
        if not bad:
            break
        a = bad[0]
        mine = classes(rows[a])
        j = next(t for t in range(1, s) if mine[t] in mine[:t])
        b, t = int(rng.integers(k)), int(rng.integers(s))
        theirs = classes(rows[b])
        if b == a or theirs[t] in mine[:j] + mine[j + 1 :]:
            continue
        if mine[j] in theirs[:t] + theirs[t + 1 :]:
            continue
        rows[a][j], rows[b][t] = rows[b][t], rows[a][j]
    return [np.concatenate([pieces[p] for p in row]).tolist() for row in rows]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shards_are_the_repaired_random_assignment_draw_for_draw(seed):
    labels = make_labels([12] * 6, seed)
    got = split(labels, 12, {"name": "shards", "shards_per_client": 3}, seed)
    assert [p.tolist() for p in got] == reference_shards(labels, 12, 3, np.random.default_rng(seed))
    assert all(len(set(labels[p].tolist())) == 3 for p in got)


def test_shards_refuse_zero_shards_per_client():
    with pytest.raises(FedshareError, match="shards_per_client=0 must be between 1 and the 4"):
        split(np.repeat(np.arange(4), 2), 4, {"name": "shards", "shards_per_client": 0}, 0)
