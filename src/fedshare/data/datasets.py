"""Dataset loaders: each returns a `Dataset` of tensors, registered by name (`data=<name>`)."""

import importlib.metadata
import importlib.util
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedshare.config.params import check_params
from fedshare.data.cache import Payload, cached, dataset_from_payload
from fedshare.data.dataset import Augmentation, Dataset
from fedshare.engine.rng import numpy_rng
from fedshare.errors import FedshareError
from fedshare.registry import Registry


@dataclass(frozen=True)
class LoadRequest:
    """What every loader receives besides its own options."""

    root: str | None = None
    download: bool = False
    cache: bool = True
    """Read/write processed tensors in the cache (`fedshare.data.cache`)."""


Loader = Callable[..., Dataset]
DATASETS: Registry[Loader] = Registry("dataset")
COMMON_KEYS = (
    "name",
    "root",
    "download",
    "cache",
    "class_subset",
    "train_subset",
    "test_subset",
    "normalize",
    "mean",
    "std",
    "augment",
    "features",
    "features_weights",
    "features_options",
    "val_fraction",
)


def register_dataset(name: str) -> Callable[[Loader], Loader]:
    return DATASETS.register(name)


MAX_CLASSES = 100_000
"""The most classes a dataset may have: a file that declares more (or has labels past it) is
refused before anything of that size is allocated."""
GENERATED_BYTES_LIMIT = 2**34
"""The most a generated dataset may allocate (16 GiB): a typo's size is refused, not attempted."""


def check_generated_sizes(
    name: str, dim: int, num_classes: int, train_size: int, test_size: int, extra: int = 0
) -> None:
    """Refuse a generated dataset's sizes below 1, or that would need more than
    `GENERATED_BYTES_LIMIT` (float64 draws; `extra` further values the generator holds)."""
    sizes = {"dim": dim, "num_classes": num_classes, "train_size": train_size}
    sizes["test_size"] = test_size
    small = [f"data.{k}={v}" for k, v in sizes.items() if v < 1]
    if small:
        raise FedshareError(f"{', '.join(small)} is not valid: {name} sizes must be at least 1")
    needed = 8 * (dim * (train_size + test_size + num_classes) + extra)
    if needed > GENERATED_BYTES_LIMIT:
        raise FedshareError(
            f"data.dim={dim} with train_size={train_size} and test_size={test_size} would need "
            f"{needed / 2**30:.0f} GiB for {name}; the limit is "
            f"{GENERATED_BYTES_LIMIT / 2**30:.0f} GiB"
        )


def check_labels(data: Dataset) -> None:
    """Labels must be integers in 0..num_classes-1 and the class count bounded, checked when
    the data is loaded (not as an IndexError in training), naming where the data came from."""
    where = f"dataset {data.name!r}" + (f" ({data.source})" if data.source else "")
    if not 1 <= data.num_classes <= MAX_CLASSES:
        raise FedshareError(
            f"{where} has {data.num_classes} classes; a dataset has 1 to {MAX_CLASSES}"
        )
    for split, labels in (("train", data.y_train), ("test", data.y_test)):
        if labels.is_floating_point() or labels.dtype == torch.bool:
            raise FedshareError(f"{where}: its {split} labels are {labels.dtype}, not integers")
        if len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < data.num_classes:
            raise FedshareError(
                f"{where}: its {split} labels range over {int(labels.min())}..."
                f"{int(labels.max())}, outside the classes 0..{data.num_classes - 1}; the "
                f"files are damaged or not this dataset's"
            )


def load_dataset(cfg: Mapping[str, Any], seed: int = 0) -> Dataset:
    """Load `cfg.name` with its options, then apply the options every dataset honours.

    Common keys: `root`, `download`, `cache` (use the processed-tensor cache), `class_subset`
    (keep that many randomly drawn classes, FedAA's CIFAR-100 "data islands"), `train_subset`
    (a class-balanced subset of the training set), `test_subset`, `normalize` (per-channel
    mean/std), `mean`/`std` (other constants than the loader's, e.g. a paper code's),
    `augment` (batch augmentation).
    """
    cfg = dict(cfg)
    name = cfg.get("name")
    loader = DATASETS.get(str(name))
    options = {k: v for k, v in cfg.items() if k not in COMMON_KEYS}
    options = check_params(loader, options, "dataset", str(name), skip=1)
    request = LoadRequest(
        root=cfg.get("root"),
        download=bool(cfg.get("download", False)),
        cache=bool(cfg.get("cache", True)),
    )
    data = loader(request, **options)
    check_labels(data)
    if cfg.get("class_subset") is not None:
        data = keep_classes(data, int(cfg["class_subset"]), numpy_rng(seed, "class_subset"))
    for split, labels in (("train", data.y_train), ("test", data.y_test)):
        size = cfg.get(f"{split}_subset")
        if size is not None and not 0 < size <= len(labels):
            raise FedshareError(
                f"data.{split}_subset={size} must be between 1 and the {len(labels)} {split} "
                f"samples of {name}"
            )
    if cfg.get("train_subset"):
        keep = balanced_subset(
            data.y_train.numpy(), int(cfg["train_subset"]), numpy_rng(seed, "train_subset")
        )
        data = replace(data, x_train=data.x_train[keep], y_train=data.y_train[keep])
    if cfg.get("test_subset"):
        keep = balanced_subset(
            data.y_test.numpy(), int(cfg["test_subset"]), numpy_rng(seed, "test_subset")
        )
        data = replace(data, x_test=data.x_test[keep], y_test=data.y_test[keep])
    if cfg.get("mean") is not None or cfg.get("std") is not None:
        data = with_statistics(data, cfg.get("mean"), cfg.get("std"))
    if cfg.get("normalize") is False:
        data = replace(data, mean=None, std=None)
    if cfg.get("augment") is False:
        data = replace(data, augmentation=Augmentation())
    if cfg.get("features"):  # a frozen backbone's cached features (FedPFT, its Section 3)
        from fedshare.data.features import extract_features

        data = extract_features(data, cfg, request)
    return data


def with_statistics(data: Dataset, mean: Any, std: Any) -> Dataset:
    """`data` normalised with the given per-channel constants instead of the loader's."""
    channels = len(data.mean) if data.mean is not None else data.input_shape[0]
    if mean is None or std is None:
        raise FedshareError(
            f"data.mean={mean} and data.std={std}: give both (one value per channel) or neither"
        )
    mean, std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
    if len(mean) != channels or len(std) != channels:
        raise FedshareError(
            f"data.mean={list(mean)} and data.std={list(std)} need {channels} value(s) each, "
            f"one per channel of {data.name}"
        )
    if min(std) <= 0:
        raise FedshareError(f"data.std={list(std)} must be positive")
    return replace(data, mean=mean, std=std)


def keep_classes(data: Dataset, count: int, rng: np.random.Generator) -> Dataset:
    """`data` restricted to `count` classes drawn at random, relabelled 0..count-1 in ascending
    order of the original ids; the test set keeps the same classes. `source` records which."""
    if not 1 <= count <= data.num_classes:
        raise FedshareError(
            f"data.class_subset={count} must be between 1 and the {data.num_classes} classes "
            f"of {data.name}"
        )
    kept = np.sort(rng.choice(data.num_classes, size=count, replace=False))
    relabel = torch.full((data.num_classes,), -1, dtype=torch.long)
    relabel[torch.from_numpy(kept)] = torch.arange(count)

    def restrict(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = relabel[y] >= 0
        return x[keep], relabel[y[keep]].to(y.dtype)

    x_train, y_train = restrict(data.x_train, data.y_train)
    x_test, y_test = restrict(data.x_test, data.y_test)
    note = f"classes {kept.tolist()} of {data.num_classes}"
    return replace(
        data,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=count,
        class_names=None if data.class_names is None else [data.class_names[c] for c in kept],
        source=note if data.source is None else f"{data.source}; {note}",
    )


def balanced_subset(labels: np.ndarray, size: int, rng: np.random.Generator) -> torch.Tensor:
    """Indices of a class-balanced random subset of `size` (classes short of their share give
    all they have; the rest is spread over the others), in ascending order."""
    if size <= 0:
        raise FedshareError(f"a subset size must be positive, got {size}")
    classes = np.unique(labels)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    if size >= len(labels):
        return torch.arange(len(labels))
    take = np.zeros(len(classes), dtype=int)
    remaining = size
    while remaining > 0:
        open_classes = [i for i, p in enumerate(pools) if take[i] < len(p)]
        share, extra = divmod(remaining, len(open_classes))
        for rank, i in enumerate(open_classes):
            add = min(share + (rank < extra), len(pools[i]) - take[i])
            take[i] += add
            remaining -= add
    chosen = np.concatenate([p[:t] for p, t in zip(pools, take, strict=True)])
    return torch.from_numpy(np.sort(chosen))


# --------------------------------------------------------------------------- always available
def sklearn_digits_file() -> Path:
    """scikit-learn's bundled digits file, found without importing scikit-learn (~1 s)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise FedshareError("data=digits needs scikit-learn (pip install scikit-learn)")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets/data/digits.csv.gz"


@register_dataset("digits")
def load_digits(request: LoadRequest, *, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's 8×8 handwritten digits (1,797 images), a fixed stratified split; the
    split is cached (`fedshare.data.cache`), so a later run does not import scikit-learn."""

    def build() -> Payload:
        from sklearn.datasets import load_digits as sk_digits
        from sklearn.model_selection import train_test_split

        bunch = sk_digits()
        x = (bunch.data.reshape(-1, 1, 8, 8)).astype(np.float32)
        y = bunch.target.astype(np.int64)
        x_tr, x_te, y_tr, y_te = train_test_split(
            x, y, test_size=test_fraction, stratify=y, random_state=0
        )
        arrays = {"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te}
        return {k: torch.from_numpy(v) for k, v in arrays.items()}

    options = {
        "test_fraction": test_fraction,
        "scikit-learn": importlib.metadata.version("scikit-learn"),
        "version": 1,
    }
    payload = cached("digits", options, [sklearn_digits_file()], build, request.cache)
    return dataset_from_payload(
        "digits",
        payload,
        num_classes=10,
        scale=1 / 16,
        mean=(0.3053,),
        std=(0.3760,),
        default_model="cnn_small",
    )


@register_dataset("synthetic")
def load_synthetic(
    request: LoadRequest,
    *,
    dim: int = 20,
    num_classes: int = 10,
    train_size: int = 2000,
    test_size: int = 1000,
    noise: float = 1.0,
    separation: float = 3.0,
    data_seed: int = 0,
) -> Dataset:
    """Gaussian class clusters: class means ~ N(0, separation²/dim · I), noise ~ N(0, noise² I)."""
    check_generated_sizes("synthetic", dim, num_classes, train_size, test_size)
    if not (math.isfinite(noise) and noise >= 0 and math.isfinite(separation)):
        raise FedshareError(
            f"data.noise={noise} and data.separation={separation} must be finite (noise >= 0)"
        )
    rng = np.random.default_rng(data_seed)
    centres = rng.normal(0.0, separation / np.sqrt(dim), size=(num_classes, dim))

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = np.arange(n) % num_classes
        x = centres[y] + rng.normal(0.0, noise, size=(n, dim))
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))

    x_tr, y_tr = draw(train_size)
    x_te, y_te = draw(test_size)
    return Dataset("synthetic", x_tr, y_tr, x_te, y_te, num_classes=num_classes)
