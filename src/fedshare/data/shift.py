"""FedPFT's task shift and covariate shift (Beitollahi et al., 2024, Sections 5.1 and 5.3).

- `task`: disjoint label sets per client group (FedPFT's "disjoint label shift": source holds
  classes 0…C/2−1, destination the rest; its "task shift" is disjoint label spaces from
  different datasets, which on one dataset is the same label partition).
- `covariate`: the same label space everywhere but each client's inputs transformed
  differently (FedPFT pairs domains such as Photo→Sketch; here a domain is an input transform).

Covariate shift is *data the Partition carries*: the partitioner assigns indices (i.i.d.) and
a domain per client (`groups`), and puts one JSON-safe transform spec per domain in
`Partition.transforms`, e.g. `{"kind": "rotate", "degrees": 90}`. `apply_domain_shift` (called
by `federate`) returns a new Dataset whose training inputs are transformed per domain once, up
front — batches stay plain gathers — and, with `test: mixed`, test sample j transformed by
domain j mod D so the global test set covers every domain equally. Random transforms (noise,
shift) carry their own seed in the spec, so partition.json says exactly what was applied.
"""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedshare.data.dataset import Dataset
from fedshare.data.partitioners import Partition, Split, register_partition
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError


# --------------------------------------------------------------------------- task shift
@register_partition("task")
def task(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    tasks: int = 2,
    label_sets: list[list[int]] | None = None,
    shuffle: bool = False,
) -> Split:
    """Disjoint label sets (FedPFT's Section 5.3): the classes are cut into `tasks` contiguous
    near-equal sets (or random ones with `shuffle`, or the explicit `label_sets`); client k
    belongs to task k mod T and the task's samples are split i.i.d. over its clients. Every
    index of a class in some set is used exactly once; classes in no set stay unused."""
    c = int(labels.max()) + 1
    if label_sets is not None:
        sets = [sorted(int(x) for x in s) for s in label_sets]
        flat = [x for s in sets for x in s]
        if not sets or not all(sets) or len(set(flat)) != len(flat):
            raise FedshareError(
                f"partition.label_sets={label_sets} must be non-empty, disjoint sets of classes"
            )
        if not all(0 <= x < c for x in flat):
            raise FedshareError(f"partition.label_sets={label_sets} has classes outside 0…{c - 1}")
    else:
        if not 1 <= tasks <= c:
            raise FedshareError(f"partition.tasks={tasks} must be between 1 and the {c} classes")
        order = rng.permutation(c) if shuffle else np.arange(c)
        sets = [sorted(s.tolist()) for s in np.array_split(order, tasks)]
    t = len(sets)
    if num_clients < t:
        raise FedshareError(f"partition task has {t} label sets but only {num_clients} clients")
    groups = np.arange(num_clients) % t
    indices: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * num_clients
    for g, classes in enumerate(sets):
        members = rng.permutation(np.flatnonzero(np.isin(labels, classes)))
        owners = np.flatnonzero(groups == g)
        for k, piece in zip(owners, np.array_split(members, len(owners)), strict=True):
            indices[k] = piece
    unused = sorted(set(range(c)) - {x for s in sets for x in s})
    info: dict[str, Any] = {"task_labels": sets}
    if unused:
        info["unused_classes"] = unused
    return Split(indices, groups, [f"task{g}" for g in range(t)], info=info)


# --------------------------------------------------------------------------- covariate shift
TRANSFORM_KEYS: dict[str, set[str]] = {
    "identity": set(),
    "rotate": {"degrees"},
    "noise": {"std", "seed"},
    "colour": {"gains"},
    "invert": set(),
    "shift": {"std", "seed"},
}
DEFAULT_DOMAINS: tuple[dict[str, Any], ...] = (
    {"kind": "identity"},
    {"kind": "rotate", "degrees": 90},
    {"kind": "noise", "std": 0.3},
    {"kind": "invert"},
)


def check_transform(spec: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A validated plain-dict copy of one transform spec."""
    if not isinstance(spec, Mapping):
        raise FedshareError(f"{where}={spec!r} must be a mapping such as {{kind: rotate, ...}}")
    spec = dict(spec)
    kind = spec.get("kind")
    if kind not in TRANSFORM_KEYS:
        raise FedshareError(
            f"{where} has kind {kind!r}; valid kinds: {', '.join(sorted(TRANSFORM_KEYS))}"
        )
    extra = set(spec) - {"kind"} - TRANSFORM_KEYS[kind]
    if extra:
        raise FedshareError(
            f"{where} ({kind}) has unknown key(s) {sorted(extra)}; its keys are "
            f"{sorted(TRANSFORM_KEYS[kind]) or 'none'}"
        )
    required = TRANSFORM_KEYS[kind] - {"seed"}
    missing = required - set(spec)
    if missing:
        raise FedshareError(f"{where} ({kind}) needs {sorted(missing)}")
    if kind in ("noise", "shift") and float(spec["std"]) < 0:
        raise FedshareError(f"{where} ({kind}) std={spec['std']} must not be negative")
    if kind == "colour":
        spec["gains"] = [float(g) for g in spec["gains"]]
    return spec


def transform_name(spec: Mapping[str, Any]) -> str:
    args = ",".join(f"{v}" for k, v in spec.items() if k not in ("kind", "seed"))
    return f"{spec['kind']}({args})" if args else str(spec["kind"])


@register_partition("covariate")
def covariate(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    domains: list[dict[str, Any]] | None = None,
    test: str = "mixed",
) -> Split:
    """Covariate shift (FedPFT's Section 5.3): an i.i.d. index split (every index used
    once), client k in domain k mod D, one input transform per domain (see module docstring).
    Kinds: identity; rotate (degrees); noise (per-sample Gaussian, std in [0, 1]-scaled input
    units); colour (per-channel gains); invert; shift (one fixed random offset vector of
    per-coordinate std, a "domain offset"). `test`: "mixed" | "clean"."""
    if test not in ("mixed", "clean"):
        raise FedshareError(f"partition.test={test!r} must be 'mixed' or 'clean'")
    specs = [
        check_transform(d, f"partition.domains[{i}]")
        for i, d in enumerate(DEFAULT_DOMAINS if domains is None else domains)
    ]
    if not specs or len(specs) > num_clients:
        raise FedshareError(
            f"partition covariate has {len(specs)} domains for {num_clients} clients; give "
            f"between 1 and {num_clients} domains"
        )
    for spec in specs:
        if spec["kind"] in ("noise", "shift") and "seed" not in spec:
            spec["seed"] = int(rng.integers(2**31 - 1))
    indices = np.array_split(rng.permutation(len(labels)), num_clients)
    groups = np.arange(num_clients) % len(specs)
    names = [f"domain{d}: {transform_name(s)}" for d, s in enumerate(specs)]
    return Split(list(indices), groups, names, specs, {"test": test})


def _bounds(dtype: torch.dtype, scale: float) -> float | None:
    """Upper end of the stored value range (lower end 0), or None for unbounded features."""
    if scale != 1.0:
        return 1.0 / scale
    if not dtype.is_floating_point:
        return float(torch.iinfo(dtype).max)
    return None


def _rotate(x: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotate N×C×H×W images about their centre (bilinear, zero fill), in chunks."""
    a = np.deg2rad(degrees)
    theta = torch.tensor(
        [[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0]], dtype=x.dtype
    ).to(x.device)
    out = torch.empty_like(x)
    for start in range(0, len(x), 4096):
        chunk = x[start : start + 4096]
        grid = F.affine_grid(theta.expand(len(chunk), 2, 3), list(chunk.shape), False)
        out[start : start + 4096] = F.grid_sample(chunk, grid, align_corners=False)
    return out


def transform_inputs(
    x: torch.Tensor, spec: Mapping[str, Any], scale: float = 1.0, split: str = "train"
) -> torch.Tensor:
    """Apply one transform spec to stored inputs `x` (N × input shape), keeping their dtype.

    Amounts are in model-input units before normalisation (stored value × `scale`, i.e. [0, 1]
    for images); bounded inputs are clipped to their range and integer ones rounded.
    """
    kind = spec["kind"]
    if kind == "identity" or len(x) == 0:
        return x
    hi = _bounds(x.dtype, scale)
    unit = 1.0 / scale
    y = x.float()
    if kind == "rotate":
        if y.dim() != 4:
            raise FedshareError(
                f"covariate transform rotate needs image inputs (N×C×H×W), got inputs of shape "
                f"{tuple(x.shape[1:])}; use noise, colour, invert or shift"
            )
        y = _rotate(y, float(spec["degrees"]))
    elif kind == "noise":
        gen = torch_generator(int(spec["seed"]), f"covariate/noise/{split}")
        y = y + torch.randn(y.shape, generator=gen).to(y.device) * float(spec["std"]) * unit
    elif kind == "shift":
        gen = torch_generator(int(spec["seed"]), "covariate/shift")
        offset = torch.randn(y.shape[1:], generator=gen).to(y.device)
        y = y + offset * float(spec["std"]) * unit
    elif kind == "colour":
        gains = torch.tensor(spec["gains"], dtype=y.dtype, device=y.device)
        channels = y.shape[1] if y.dim() > 1 else 1
        if len(gains) not in (1, channels):
            raise FedshareError(
                f"covariate transform colour has {len(gains)} gains for inputs with {channels} "
                f"channels; give 1 or {channels}"
            )
        y = y * gains.view((1, -1) + (1,) * (y.dim() - 2))
    elif kind == "invert":
        y = hi - y if hi is not None else -y
    if hi is not None:
        y = y.clamp(0.0, hi)
    if not x.dtype.is_floating_point:
        y = y.round()
    return y.to(x.dtype)


def apply_domain_shift(dataset: Dataset, partition: Partition) -> Dataset:
    """The dataset with each client's training inputs transformed by its domain's spec (and the
    test set mixed over domains if `partition.info["test"] == "mixed"`); unchanged when the
    partition carries no transforms."""
    if partition.transforms is None:
        return dataset
    if partition.groups is None:
        raise ValueError("a partition with transforms needs groups (client -> domain)")
    x_train = dataset.x_train.clone()
    x_test = dataset.x_test
    mixed = partition.info.get("test") == "mixed"
    if mixed:
        x_test = x_test.clone()
    domains = len(partition.transforms)
    for d, spec in enumerate(partition.transforms):
        members = np.flatnonzero(partition.groups == d)
        idx = np.concatenate([partition.client_indices[k] for k in members])
        if idx.size:
            ix = torch.from_numpy(idx).to(x_train.device)
            x_train[ix] = transform_inputs(x_train[ix], spec, dataset.scale, "train")
        if mixed:
            ix = torch.arange(d, len(x_test), domains, device=x_test.device)
            x_test[ix] = transform_inputs(x_test[ix], spec, dataset.scale, "test")
    return replace(dataset, x_train=x_train, x_test=x_test)
