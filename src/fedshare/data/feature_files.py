"""The user's own pre-extracted features (CLIP, DINOv2, ...) as a dataset, and a contiguous split.

FedPFT (Beitollahi et al., 2024) works on such features (Section 5.1) and builds its two-client
covariate and task shifts, such as PACS Photo→Sketch or Pets→Food, from them (Section 5.3,
Table 2).

`data=features_file data.path=<file>` reads a `torch.save`d dict or an `.npz` with the train and
test features and labels. Accepted keys: `x_train` / `train_features` / `features_train`,
`y_train` / `train_labels` / `labels_train`, and the same for `test`; optional `class_names`
and `num_classes`. Features become float32 N×d; the default model is `linear`.

Several files (`data.path=[source, destination]`) are concatenated in order, train and test
alike; with `disjoint_labels=true` each file's labels are offset by the classes of the files
before it (a task shift: the union label space), else the files share one label space
(a covariate shift). `partition=contiguous` with `sizes` = the files' training-set sizes then
gives client k the k-th file.
"""

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedshare.data.dataset import Dataset
from fedshare.data.datasets import MAX_CLASSES, LoadRequest, register_dataset
from fedshare.data.files import npz_arrays, npz_problem, require_regular_file
from fedshare.data.partitioners import register_partition
from fedshare.data.sources import data_roots
from fedshare.engine.checkpoint import torch_load_problem
from fedshare.errors import FedshareError

KEYS = {
    "x_train": ("x_train", "train_features", "features_train"),
    "y_train": ("y_train", "train_labels", "labels_train"),
    "x_test": ("x_test", "test_features", "features_test"),
    "y_test": ("y_test", "test_labels", "labels_test"),
}


def resolve_path(path: str, root: str | None) -> Path:
    """`path` as given if it is a file, else relative to the data roots; where no candidate is
    a file, the first that is something else (a folder, a pipe, a looping link) is named."""
    candidates = [Path(path).expanduser()] + [base / path for base in data_roots(root)]
    candidates = list(dict.fromkeys(candidates))  # an absolute path is the same under every root
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    for candidate in candidates:
        require_regular_file(candidate)
    looked = ", ".join(str(c) for c in candidates)
    raise FedshareError(
        f"features file {path!r} not found (looked for {looked}); save your features with "
        f"torch.save or numpy.savez (keys x_train, y_train, x_test, y_test)"
    )


def read_features_file(path: Path) -> dict[str, Any]:
    """The arrays of one file as a dict (tensors only from .pt files: weights_only loading)."""
    require_regular_file(path)
    try:
        if path.suffix == ".npz":
            return npz_arrays(path)
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch and numpy raise many types
        problem = npz_problem(err) if path.suffix == ".npz" else torch_load_problem(err)
        raise FedshareError(
            f"cannot read features file {path} ({problem}); save the features again with "
            f"torch.save or numpy.savez"
        ) from None
    if not isinstance(obj, Mapping):
        raise FedshareError(f"features file {path} must hold a dict, got {type(obj).__name__}")
    return dict(obj)


def _pick(raw: Mapping[str, Any], key: str, path: Path) -> torch.Tensor:
    for alias in KEYS[key]:
        if alias in raw:
            value = raw[alias]
            if torch.is_tensor(value):
                return value
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                raise FedshareError(
                    f"features file {path}: {alias} holds {array.dtype} values, not numbers"
                )
            return torch.from_numpy(array)
    raise FedshareError(
        f"features file {path} has no {key} (accepted keys: {', '.join(KEYS[key])}); it has "
        f"{', '.join(sorted(raw))}"
    )


def load_one(path: Path) -> tuple[dict[str, torch.Tensor], int, list[str] | None]:
    """Checked tensors of one file, its number of classes and its class names."""
    raw = read_features_file(path)
    out = {key: _pick(raw, key, path) for key in KEYS}
    for split in ("train", "test"):
        x, y = out[f"x_{split}"], out[f"y_{split}"]
        if x.dim() != 2 or y.dim() != 1 or len(x) != len(y):
            raise FedshareError(
                f"features file {path}: x_{split} must be N×d and y_{split} N labels, got "
                f"{tuple(x.shape)} and {tuple(y.shape)}"
            )
        if y.is_floating_point() or (len(y) and int(y.min()) < 0):
            raise FedshareError(f"features file {path}: y_{split} must be non-negative integers")
        if x.is_complex() or not bool(torch.isfinite(x).all()):
            raise FedshareError(
                f"features file {path}: x_{split} holds NaN, infinite or complex values"
            )
        out[f"x_{split}"] = x.float()
        out[f"y_{split}"] = y.long()
    if out["x_train"].shape[1] != out["x_test"].shape[1]:
        raise FedshareError(f"features file {path}: train and test features differ in size")
    names = raw.get("class_names")
    names = [str(n) for n in names] if names is not None else None
    top = max(int(y.max()) if len(y) else -1 for y in (out["y_train"], out["y_test"])) + 1
    declared = raw.get("num_classes")
    classes = declared_classes(declared, path) if declared is not None else len(names or []) or top
    if classes > MAX_CLASSES:
        raise FedshareError(
            f"features file {path} has {classes} classes (labels up to {top - 1}), more than "
            f"the {MAX_CLASSES} a dataset may have; fix its labels or num_classes"
        )
    if classes < top:
        raise FedshareError(
            f"features file {path} has labels up to {top - 1} but declares {classes} classes"
        )
    return out, classes, names


def declared_classes(declared: Any, path: Path) -> int:
    """A file's `num_classes`: one whole positive number."""
    value = np.asarray(declared)
    whole = value.size == 1 and value.dtype.kind in "iuf" and np.isfinite(value).all()
    if not whole or float(value.item()) != int(value.item()) or value.item() < 1:
        raise FedshareError(
            f"features file {path}: num_classes must be one whole number of classes, got "
            f"{value.tolist()!r}"
        )
    return int(value.item())


@register_dataset("features_file")
def load_features_file(
    request: LoadRequest,
    *,
    path: str | list[str] | None = None,
    disjoint_labels: bool = False,
) -> Dataset:
    """Pre-extracted features from one file or several concatenated (see the module docstring)."""
    if not path:
        raise FedshareError(
            "data=features_file needs data.path=<a .pt or .npz file of features> (or a list of "
            "files)"
        )
    paths = [path] if isinstance(path, str) else list(path)
    parts = [load_one(resolve_path(str(p), request.root)) for p in paths]
    dims = {part[0]["x_train"].shape[1] for part in parts}
    if len(dims) != 1:
        raise FedshareError(f"the features files {paths} have different feature sizes {dims}")
    merged: dict[str, list[torch.Tensor]] = {k: [] for k in KEYS}
    offset, union_names = 0, []
    for tensors, classes, class_names in parts:
        shift = offset if disjoint_labels else 0
        for key, value in tensors.items():
            merged[key].append(value + shift if key.startswith("y") else value)
        if disjoint_labels:
            union_names += class_names or [f"class{c}" for c in range(shift, shift + classes)]
            offset += classes
        else:
            offset = max(offset, classes)
    names = union_names if disjoint_labels else parts[0][2]
    if names is not None and len(names) != offset:
        names = None
    stem = "+".join(Path(str(p)).stem for p in paths)
    return Dataset(
        f"features:{stem}",
        torch.cat(merged["x_train"]),
        torch.cat(merged["y_train"]),
        torch.cat(merged["x_test"]),
        torch.cat(merged["y_test"]),
        num_classes=offset,
        class_names=names,
        default_model="linear",
    )


@register_partition("contiguous")
def contiguous(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    sizes: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """Client k gets the k-th contiguous block of the training set, in order: blocks of the
    given `sizes` (e.g. the training-set sizes of concatenated feature files: one file per
    client), or near-equal blocks when `sizes` is null."""
    n = len(labels)
    if sizes is None:
        return [np.asarray(b, dtype=np.int64) for b in np.array_split(np.arange(n), num_clients)]
    sizes = [int(s) for s in sizes]
    if len(sizes) != num_clients or sum(sizes) != n or min(sizes) < 0:
        raise FedshareError(
            f"partition.sizes={sizes} must give {num_clients} non-negative block sizes (one per "
            f"client) summing to the {n} training samples"
        )
    bounds = np.cumsum([0, *sizes])
    return [np.arange(a, b, dtype=np.int64) for a, b in itertools.pairwise(bounds)]
