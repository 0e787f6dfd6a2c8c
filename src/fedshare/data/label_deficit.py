"""XorMixFL's target-label skew ("label deficit", Shin et al. 2020, Section 4).

Representation of the server's data: the server is a pseudo-client. With `server=True`,
client 0 holds the server's base samples and clients 1 … K−1 are the devices, so
`clients.num` counts every participant (the paper's defaults, 1 server + 𝒰 = 3 devices, are
`clients.num=4`). The partition marks the roles in `groups` (0 = "server", 1 = "device",
names in `group_names`) and in `info`:

- `info["server"]`: the server's client id (0), or None with `server=False`;
- `info["devices"]`: the device client ids;
- `info["target_labels"]`: the deficient labels.

A one-shot XorMixFL strategy reads `info["server"]` to find its base samples (the server's
index tensor) and encodes on the devices only; Vanilla FL and standalone baselines can treat the
server as an ordinary client (fedshare's reading of XorMixFL §4.1). Per-group
`clients.availability` works through `groups`.
"""

import numpy as np

from fedshare.data.partitioners import Split, register_partition
from fedshare.errors import FedshareError


@register_partition("xormix")
def xormix(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    target_labels: list[int] | tuple[int, ...] = (9,),
    n: int = 10,
    m: int = 200,
    server: bool = True,
) -> Split:
    """Every participant (server and devices) gets `n` samples of each target label and `m` of
    each other label, all disjoint and drawn without replacement (the paper's Section 4: n = 10,
    m = 200, read as m per non-target label). Samples not drawn stay unused."""
    c = int(labels.max()) + 1
    targets = [int(t) for t in target_labels]
    if not targets or len(set(targets)) != len(targets) or not all(0 <= t < c for t in targets):
        raise FedshareError(
            f"partition.target_labels={list(target_labels)} must be distinct classes in 0…{c - 1}"
        )
    if n < 0 or m < 0:
        raise FedshareError(f"partition.n={n} and partition.m={m} must not be negative")
    if server and num_clients < 2:
        raise FedshareError(
            f"partition xormix with server=true needs the server plus at least one device, "
            f"got {num_clients} clients"
        )
    need = np.array([n if cls in targets else m for cls in range(c)])
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for cls in range(c):
        pool = np.flatnonzero(labels == cls)
        if need[cls] * num_clients > len(pool):
            raise FedshareError(
                f"partition xormix needs {num_clients} participants × {need[cls]} = "
                f"{need[cls] * num_clients} samples of class {cls} but the training set has "
                f"{len(pool)}; lower partition.{'n' if cls in targets else 'm'} or clients.num"
            )
        chosen = rng.choice(pool, size=need[cls] * num_clients, replace=False)
        for k, piece in enumerate(np.split(chosen, num_clients)):
            parts[k].append(piece)
    indices = [np.concatenate(p) for p in parts]
    first_device = 1 if server else 0
    groups = np.ones(num_clients, dtype=np.int64) if server else np.zeros(num_clients, np.int64)
    if server:
        groups[0] = 0
    return Split(
        indices,
        groups,
        ["server", "device"] if server else ["device"],
        info={
            "server": 0 if server else None,
            "devices": list(range(first_device, num_clients)),
            "target_labels": targets,
        },
    )
