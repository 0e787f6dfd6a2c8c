"""Label-set partitioners: ReBaFL's pathological, clustered and shards; FedAA's islands.

Reference: ReBaFL (Xu et al., Section 5.1); the shard split follows McMahan et al. (2017) for
ReBaFL's Table III and FedAA's Table 2 (one shard per client); islands: FedAA's Section 4.1.
"""

from collections.abc import Sequence

import numpy as np

from fedshare.data.partitioners import Split, register_partition
from fedshare.errors import FedshareError


def _num_classes(labels: np.ndarray) -> int:
    return int(labels.max()) + 1 if len(labels) else 0


def draw_label_sets(
    rng: np.random.Generator,
    num_classes: int,
    set_sizes: Sequence[int],
    cover_all: bool,
    max_tries: int,
    name: str,
) -> list[np.ndarray]:
    """Each client's label set: `set_sizes[k]` distinct classes uniformly at random,
    independently per client; with `cover_all`, redrawn until every class has a holder."""
    for size in set_sizes:
        if not 1 <= size <= num_classes:
            raise FedshareError(
                f"partition {name}: {size} classes per client is not between 1 and the "
                f"{num_classes} classes of the dataset"
            )
    if cover_all and sum(set_sizes) < num_classes:
        raise FedshareError(
            f"partition {name}: {len(set_sizes)} clients holding {sum(set_sizes)} label slots "
            f"cannot cover all {num_classes} classes; set partition.cover_all=false"
        )
    for _ in range(max(1, max_tries)):
        sets = [np.sort(rng.choice(num_classes, size=s, replace=False)) for s in set_sizes]
        if not cover_all or len(np.unique(np.concatenate(sets))) == num_classes:
            return sets
    raise FedshareError(
        f"partition {name}: no draw of label sets covered all {num_classes} classes in "
        f"{max_tries} tries; set partition.cover_all=false or use more clients"
    )


def take_from_pools(
    labels: np.ndarray,
    rng: np.random.Generator,
    label_sets: list[np.ndarray],
    counts: list[np.ndarray],
    reuse: bool,
    name: str,
    knob: str,
) -> list[np.ndarray]:
    """Client k takes `counts[k][j]` samples of class `label_sets[k][j]`, consuming each class's
    shuffled pool sequentially in client order; with `reuse`, a pool that runs out wraps around
    to its start (ReBaFL's code), else that is an error."""
    c = _num_classes(labels)
    pools = [rng.permutation(np.flatnonzero(labels == cls)) for cls in range(c)]
    demand = np.zeros(c, dtype=np.int64)
    for classes, amounts in zip(label_sets, counts, strict=True):
        for cls, amount in zip(classes, amounts, strict=True):
            if amount > len(pools[cls]):
                raise FedshareError(
                    f"partition {name}: a client needs {amount} samples of class {cls} but the "
                    f"training set has only {len(pools[cls])}; lower {knob}"
                )
            demand[cls] += amount
    short = [cls for cls in range(c) if demand[cls] > len(pools[cls])]
    if short and not reuse:
        cls = short[0]
        raise FedshareError(
            f"partition {name}: class {cls} is requested {demand[cls]} times but has only "
            f"{len(pools[cls])} samples; lower {knob} or the number of clients, or set "
            f"partition.reuse=true (ReBaFL's code shares samples then)"
        )
    cursor = np.zeros(c, dtype=np.int64)
    out = []
    for classes, amounts in zip(label_sets, counts, strict=True):
        taken = []
        for cls, amount in zip(classes, amounts, strict=True):
            pos = (cursor[cls] + np.arange(amount)) % len(pools[cls])
            taken.append(pools[cls][pos])
            cursor[cls] += amount
        out.append(np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64))
    return out


@register_partition("pathological")
def pathological(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    classes_per_client: int = 2,
    per_class: int = 500,
    reuse: bool = True,
    cover_all: bool = True,
    max_tries: int = 1000,
) -> Split:
    """ReBaFL's pathological split (its Section 5.1): each client draws
    `classes_per_client` distinct classes uniformly at random and gets exactly `per_class`
    samples of each (ReBaFL: 2 × 500, n_i = 1000).

    Samples come without replacement from each class's shuffled pool; when a pool runs out
    (more demand than samples, e.g. m = 50 on CIFAR-10) it wraps around if `reuse` (ReBaFL's
    code; counted as `reused` in partition.json), else that is an error. `cover_all` redraws
    the label sets until every class has a holder (a deviation: the paper does not say).
    partition.json's `info.label_sets` records which label sets were drawn (`label_set_coverage`):
    Table I's calibration baselines depend on them (issue 18, docs/rebafl.md).
    """
    if per_class < 1:
        raise FedshareError(f"partition.per_class={per_class} must be at least 1")
    c = _num_classes(labels)
    sets = draw_label_sets(
        rng, c, [classes_per_client] * num_clients, cover_all, max_tries, "pathological"
    )
    counts = [np.full(classes_per_client, per_class)] * num_clients
    knob = f"partition.per_class={per_class}"
    indices = take_from_pools(labels, rng, sets, counts, reuse, "pathological", knob)
    return Split(indices, info={"label_sets": label_set_coverage(sets, c)})


def label_set_coverage(label_sets: Sequence[np.ndarray], num_classes: int) -> dict[str, int]:
    """How many distinct label sets the clients hold, and how many of the C·(C−1)/2 class pairs
    some client holds together."""
    distinct = {tuple(sorted(int(c) for c in s)) for s in label_sets}
    pairs = {(a, b) for s in distinct for i, a in enumerate(s) for b in s[i + 1 :]}
    return {
        "distinct": len(distinct),
        "class_pairs_held": len(pairs),
        "class_pairs": num_classes * (num_classes - 1) // 2,
    }


@register_partition("clustered")
def clustered(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    group_classes: list[int] | tuple[int, ...] = (2, 2, 3, 3, 5),
    client_size: int = 1000,
    reuse: bool = True,
    cover_all: bool = True,
    max_tries: int = 1000,
) -> Split:
    """ReBaFL's clustered setting (its Sections 5.1 and 5.3): client i is in group i mod G and
    holds `group_classes[g]` random classes with `client_size` samples split evenly over them
    (1000 → 500, 334/333/333 or 200 per class). Sampling as in `pathological`.

    Pair it with one availability per group, e.g. ReBaFL's
    `clients.availability=[0.5,0.5,0.3,0.3,0.2]` (the engine maps it through `groups`).
    """
    sizes = [int(s) for s in group_classes]
    if not sizes:
        raise FedshareError("partition.group_classes must list at least one group")
    if num_clients < len(sizes):
        raise FedshareError(
            f"partition clustered has {len(sizes)} groups but only {num_clients} clients"
        )
    groups = np.arange(num_clients) % len(sizes)
    per_client = [sizes[g] for g in groups]
    if client_size < max(per_client):
        raise FedshareError(
            f"partition.client_size={client_size} is smaller than {max(per_client)} classes"
        )
    c = _num_classes(labels)
    sets = draw_label_sets(rng, c, per_client, cover_all, max_tries, "clustered")
    counts = [
        np.array([len(p) for p in np.array_split(np.arange(client_size), s)]) for s in per_client
    ]
    knob = f"partition.client_size={client_size}"
    indices = take_from_pools(labels, rng, sets, counts, reuse, "clustered", knob)
    return Split(indices, groups, [f"cluster{g} ({s} classes)" for g, s in enumerate(sizes)])


@register_partition("islands")
def islands(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """FedAA's "data islands" (its Section 4.1): one client per class, holding every sample of
    its class; the class-to-client assignment is a random permutation."""
    present = np.unique(labels)
    if num_clients != len(present):
        raise FedshareError(
            f"partition islands gives each of the {len(present)} classes to one client, so it "
            f"needs clients.num={len(present)}, got {num_clients}"
        )
    return [np.flatnonzero(labels == c) for c in rng.permutation(present)]


@register_partition("shards")
def shards(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    shards_per_client: int = 2,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Shard split (McMahan et al. 2017), as ReBaFL's Table III reads (Section 5.5.4): sort the
    indices by label, cut them into K·s equal contiguous shards, give each client s shards whose
    (majority) classes are distinct. Every index is used exactly once; each client gets N/K
    samples (±1) of s classes when class sizes are multiples of the shard size.

    The random assignment is repaired by swapping shards between clients (a plain redraw would
    almost never succeed for K = 500), at most `max_tries`·K swaps.
    """
    s, k = shards_per_client, num_clients
    c = _num_classes(labels)
    if not 1 <= s <= c:
        raise FedshareError(
            f"partition.shards_per_client={s} must be between 1 and the {c} classes"
        )
    if k * s > len(labels):
        raise FedshareError(f"{k} clients × {s} shards exceeds the {len(labels)} training samples")
    pieces = np.array_split(np.argsort(labels, kind="stable"), k * s)
    shard_class = np.array([np.bincount(labels[p], minlength=c).argmax() for p in pieces])
    per_class = np.bincount(shard_class, minlength=c)
    if s > 1 and per_class.max() > k:
        raise FedshareError(
            f"class {per_class.argmax()} fills {per_class.max()} of the {k * s} shards, more than "
            f"the {k} clients, so some client would get two shards of it; use fewer shards per "
            f"client or more clients"
        )
    assign = rng.permutation(k * s).reshape(k, s)
    cls = shard_class[assign]

    def ok(row: np.ndarray) -> bool:
        return len(np.unique(row)) == s

    bad = {i for i in range(k) if not ok(cls[i])}
    for _ in range(max_tries * k):
        if not bad:
            break
        a = min(bad)
        row = cls[a]
        j = next(t for t in range(1, s) if row[t] in row[:t])
        b, t = int(rng.integers(k)), int(rng.integers(s))
        if b == a or cls[b, t] in np.delete(row, j) or row[j] in np.delete(cls[b], t):
            continue
        assign[a, j], assign[b, t] = assign[b, t], assign[a, j]
        cls[a, j], cls[b, t] = cls[b, t], cls[a, j]
        for i in (a, b):
            if ok(cls[i]):
                bad.discard(i)
            else:
                bad.add(i)
    if bad:
        raise FedshareError(
            f"partition shards could not give every client {s} shards of distinct classes in "
            f"{max_tries * k} swaps; use fewer shards per client"
        )
    return [np.concatenate([pieces[p] for p in row]) for row in assign]
