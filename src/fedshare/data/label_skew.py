"""Label-skew partitioners after NIID-Bench: Dirichlet (plain and FLea's block-wise) and quantity.

References: NIID-Bench (Li et al., "Federated Learning on Non-IID Data Silos: An Experimental
Study", ICDE 2022) for `dirichlet` and `quantity`; FLea (Xia et al., App. C.1 and its code) for
`dirichlet_blocks` and the min_size defaults. ReBaFL's schemes are in `pathological.py`.
"""

import numpy as np

from fedshare.data.partitioners import Split, register_partition
from fedshare.errors import FedshareError


def _num_classes(labels: np.ndarray) -> int:
    return int(labels.max()) + 1 if len(labels) else 0


# --------------------------------------------------------------------------- Dirichlet
def hetero_dirichlet(
    labels: np.ndarray,
    pool: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    alpha: float,
    min_size: int,
    max_tries: int,
    where: str = "",
) -> list[np.ndarray]:
    """NIID-Bench's Dir(α) split of the training indices `pool` over `num_clients` clients.

    Per class (its indices shuffled): p ~ Dir(α·1); a client already holding ≥ len(pool)/K
    samples gets p = 0 (the balancing cap); split by the renormalised cumulative proportions.
    The whole draw is repeated until every client has `min_size` samples, at most `max_tries`.
    """
    n = len(pool)
    if min_size * num_clients > n:
        raise FedshareError(
            f"partition.min_size={min_size} is infeasible: {num_clients} clients × {min_size} "
            f"exceeds the {n} training samples{where}; lower min_size or the number of clients"
        )
    cap = n / num_clients
    pool_labels = labels[pool]
    classes = np.unique(pool_labels)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, dtype=np.int64)
        for c in classes:
            members = rng.permutation(pool[pool_labels == c])
            props = rng.dirichlet(np.full(num_clients, alpha)) * (sizes < cap)
            if props.sum() <= 0:  # every open client drew an underflowed 0: redraw
                break
            cuts = (np.cumsum(props / props.sum()) * len(members)).astype(np.int64)[:-1]
            for k, chunk in enumerate(np.split(members, cuts)):
                parts[k].append(chunk)
                sizes[k] += len(chunk)
        else:
            if sizes.min() >= min_size:
                return [np.concatenate(p) for p in parts]
    raise FedshareError(
        f"partition dirichlet(alpha={alpha}) gave some client fewer than min_size={min_size} "
        f"samples in {max_tries} draws{where}; raise alpha, lower min_size or use fewer clients"
    )


def _check_alpha(alpha: float) -> None:
    if alpha <= 0:
        raise FedshareError(f"partition.alpha={alpha} must be positive")


@register_partition("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_size: int | None = None,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """NIID-Bench's "noniid-labeldir" Dir(α) label skew with the N/K balancing cap (FedLab's
    "hetero-dir"), as FLea, ReBaFL and FedPFT use it (FLea's App. C.1).

    `min_size` defaults to the number of classes C (FLea's code: 10 for CIFAR-10, 6 for
    UCI-HAR); NIID-Bench itself uses 10. Every index is used exactly once.
    """
    _check_alpha(alpha)
    size = _num_classes(labels) if min_size is None else min_size
    pool = np.arange(len(labels))
    return hetero_dirichlet(labels, pool, num_clients, rng, alpha, size, max_tries)


@register_partition("dirichlet_blocks")
def dirichlet_blocks(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_size: int | None = None,
    mode: str = "balanced",
    clients_per_block: int = 100,
    blocks: int | None = None,
    max_tries: int = 1000,
) -> Split:
    """FLea's block-wise Dir(α) (App. C.1 and FLea's code): cut the training set into blocks and
    split each block by `dirichlet` over its own clients (so the cap is block size / clients).

    `mode="balanced"` (CIFAR-10, K > 100): class-balanced blocks — block j takes the j-th
    array-split piece of every class's indices in dataset order. `mode="sequential"` (UCI-HAR
    K=150, μ ≤ 0.1): contiguous index ranges (two halves for `blocks=2`). The number of blocks
    is `blocks`, else K / `clients_per_block` (one block when K ≤ clients_per_block). Clients
    of block j are numbered j·K/B … (j+1)·K/B − 1 (no `groups`, so a per-client
    `clients.availability` list still works).
    """
    _check_alpha(alpha)
    if mode not in ("balanced", "sequential"):
        raise FedshareError(f"partition.mode={mode!r} must be 'balanced' or 'sequential'")
    if blocks is None:
        if clients_per_block < 1:
            raise FedshareError(f"partition.clients_per_block={clients_per_block} must be ≥ 1")
        blocks = max(1, num_clients // clients_per_block)
        if num_clients > clients_per_block and num_clients % clients_per_block:
            raise FedshareError(
                f"{num_clients} clients is not a multiple of partition.clients_per_block="
                f"{clients_per_block}; use a multiple or set partition.blocks"
            )
    if blocks < 1 or num_clients % blocks:
        raise FedshareError(
            f"partition.blocks={blocks} must be a positive divisor of the {num_clients} clients"
        )
    size = _num_classes(labels) if min_size is None else min_size
    per_block = num_clients // blocks
    if mode == "sequential":
        pools = np.array_split(np.arange(len(labels)), blocks)
    else:
        pieces = [np.array_split(np.flatnonzero(labels == c), blocks) for c in np.unique(labels)]
        pools = [np.concatenate([p[j] for p in pieces]) for j in range(blocks)]
    indices: list[np.ndarray] = []
    for j, pool in enumerate(pools):
        where = f" of block {j} ({len(pool)} samples, {per_block} clients)"
        indices += hetero_dirichlet(labels, pool, per_block, rng, alpha, size, max_tries, where)
    return Split(indices, info={"blocks": blocks, "clients_per_block": per_block, "mode": mode})


# --------------------------------------------------------------------------- quantity (#C=k)
@register_partition("quantity")
def quantity(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, classes_per_client: int = 2
) -> Split:
    """NIID-Bench's quantity-based label skew #C=q ("noniid-#label<q>"; FLea's Qua(q),
    Section 4.1.1 and App. C.1).

    Client i gets class i mod C, then q − 1 other distinct classes uniformly at random. Each
    class's shuffled indices are array-split evenly among the clients that own it (in client
    order). With K ≥ C every class has an owner and every index is used exactly once. With
    K < C a class nobody drew stays unused (listed in `info["unused_classes"]`); NIID-Bench
    itself crashes there (`np.array_split(..., 0)`).
    """
    c = _num_classes(labels)
    q = classes_per_client
    if not 1 <= q <= c:
        raise FedshareError(
            f"partition.classes_per_client={q} must be between 1 and the {c} classes of the dataset"
        )
    owners: list[list[int]] = [[] for _ in range(c)]
    for i in range(num_clients):
        first = i % c
        others = np.delete(np.arange(c), first)
        for cls in [first, *rng.choice(others, size=q - 1, replace=False).tolist()]:
            owners[cls].append(i)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for cls in range(c):
        members = rng.permutation(np.flatnonzero(labels == cls))
        if owners[cls]:
            for i, piece in zip(
                owners[cls], np.array_split(members, len(owners[cls])), strict=True
            ):
                parts[i].append(piece)
    unused = [cls for cls in range(c) if not owners[cls]]
    indices = [np.concatenate(p) for p in parts]
    return Split(indices, info={"unused_classes": unused} if unused else {})
