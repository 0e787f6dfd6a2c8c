"""Image datasets in torchvision's on-disk formats: MNIST and Fashion-MNIST (IDX), CIFAR-10,
CIFAR-100.

Images are stored N×C×H×W uint8 (`scale = 1/255`); normalisation and batch augmentation
happen per batch on the device (`Dataset.prepare`).
"""

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedshare.data.cache import Payload, cached, dataset_from_payload
from fedshare.data.dataset import Augmentation, Dataset, augment_batch
from fedshare.data.datasets import LoadRequest, register_dataset
from fedshare.data.files import corrupt_file, read_bytes, read_npz
from fedshare.data.pickles import load_cifar_pickle
from fedshare.data.sources import download_root, downloading, find_files, missing_data_error
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError, choices_message

FMNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
CIFAR10_CLASSES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
CIFAR_AUGMENTATION = Augmentation(crop_padding=4, horizontal_flip=True)
STATIC_AUGMENT = ("none", "train", "all")
STATIC_CHUNK = 4096  # images per augmentation call (bounds the index tensors' memory)


# --------------------------------------------------------------------------- MNIST formats (IDX)
def idx_dims(raw: bytes) -> list[int]:
    """The dimensions in an IDX header (unsigned bytes only); ValueError when it is not one."""
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08" or not 1 <= raw[3] <= 4:
        raise ValueError("no IDX header of unsigned bytes")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise ValueError("the IDX header is cut short")
    return [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (MNIST format), gzipped or not; a corrupt file is a FedshareError."""
    raw = read_bytes(path)
    try:
        dims = idx_dims(raw)
    except ValueError as err:
        raise corrupt_file(path, str(err)) from None
    offset = 4 + 4 * len(dims)
    if len(raw) - offset != math.prod(dims):
        shape = "×".join(map(str, dims))
        problem = f"its header promises {shape} bytes of data, it holds {len(raw) - offset}"
        raise corrupt_file(path, problem)
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims)


_IDX_FILES = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
]


def read_idx_split(images: Path, labels: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """N×1×H×W uint8 images and N int64 labels from a pair of IDX files."""
    x, y = read_idx(images), read_idx(labels)
    if x.ndim != 3:
        raise corrupt_file(images, f"expected N×H×W images, got shape {x.shape}")
    if y.shape != (len(x),):
        raise corrupt_file(labels, f"expected {len(x)} labels (one per image), got {y.shape}")
    return torch.from_numpy(x.copy()).unsqueeze(1), torch.from_numpy(y.astype(np.int64))


def load_idx_dataset(
    request: LoadRequest, folder: str, torchvision_name: str, name: str | None = None
) -> tuple[torch.Tensor, ...]:
    """Train/test tensors of an MNIST-format dataset under `<root>/<folder>/raw/` (cached)."""
    name = name or folder.lower()
    for suffix in (".gz", ""):
        relative = [f"{folder}/raw/{f}{suffix}" for f in _IDX_FILES]
        base = find_files(request.root, relative)
        if base is not None:
            break
    else:
        relative = [f"{folder}/raw/{f}.gz" for f in _IDX_FILES]
        if not request.download:
            raise missing_data_error(
                name, request.root, relative, f"get the four {folder} IDX files"
            )
        import torchvision

        target = download_root(request.root)
        with downloading(name, target):
            getattr(torchvision.datasets, torchvision_name)(str(target), download=True)
        base = target
    paths = [base / rel for rel in relative]

    def build() -> dict[str, torch.Tensor]:
        x_tr, y_tr = read_idx_split(paths[0], paths[1])
        x_te, y_te = read_idx_split(paths[2], paths[3])
        return {"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te}

    payload = cached(name, {"format": "idx", "version": 1}, paths, build, request.cache)
    return payload["x_train"], payload["y_train"], payload["x_test"], payload["y_test"]


@register_dataset("mnist")
def load_mnist(request: LoadRequest) -> Dataset:
    """MNIST from `<root>/MNIST/raw/` (torchvision layout), 60,000 train / 10,000 test."""
    x_tr, y_tr, x_te, y_te = load_idx_dataset(request, "MNIST", "MNIST")
    return Dataset(
        "mnist",
        x_tr,
        y_tr,
        x_te,
        y_te,
        num_classes=10,
        scale=1 / 255,
        mean=(0.1307,),
        std=(0.3081,),
        default_model="cnn_small",
    )


@register_dataset("fmnist")
def load_fmnist(request: LoadRequest) -> Dataset:
    """Fashion-MNIST from `<root>/FashionMNIST/raw/` (torchvision layout), 60,000 / 10,000.

    Normalised with Fashion-MNIST's own statistics (mean 0.2860, std 0.3530); ReBaFL's code
    uses MNIST's. No augmentation (none of the papers uses any here).
    """
    x_tr, y_tr, x_te, y_te = load_idx_dataset(request, "FashionMNIST", "FashionMNIST", "fmnist")
    return Dataset(
        "fmnist",
        x_tr,
        y_tr,
        x_te,
        y_te,
        num_classes=10,
        scale=1 / 255,
        mean=(0.2860,),
        std=(0.3530,),
        class_names=list(FMNIST_CLASSES),
        default_model="lenet_fmnist",
    )


# --------------------------------------------------------------------------- CIFAR parsing
def _entry(batch: dict[str, Any], key: str, path: Path) -> Any:
    """`batch[key]`, or a FedshareError naming the file when the entry is missing."""
    if key not in batch:
        raise corrupt_file(path, f"no {key!r} entry; it has {sorted(map(str, batch))}")
    return batch[key]


def _names(values: list[Any]) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def read_cifar_batches(paths: list[Path], label_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate CIFAR batches: images N×3×32×32 uint8 (rows are R, G, B planes) and labels."""
    images, labels = [], []
    for path in paths:
        batch = load_cifar_pickle(path)
        data = np.asarray(_entry(batch, "data", path))
        label = np.asarray(_entry(batch, label_key, path))
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise corrupt_file(path, f"data must be N×3072 uint8, got {data.shape} {data.dtype}")
        if label.shape != (len(data),):
            raise corrupt_file(path, f"expected {len(data)} {label_key}, got {label.shape}")
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(label.astype(np.int64))
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def read_cifar_npz(folder: Path) -> Payload:
    """CIFAR-10 from `train.npz`/`test.npz` with `x` (N×32×32×3 uint8, HWC) and `y`.

    When an `idx` array (position in the official order) is present, samples are put back in
    the official order, so the cifar10_sample files are an exact prefix of the official sets.
    """
    out: Payload = {"class_names": list(CIFAR10_CLASSES)}
    for split in ("train", "test"):
        path = folder / f"{split}.npz"
        x, y, order = _read_npz_split(path)
        if x.ndim != 4 or x.shape[1:] != (32, 32, 3):
            raise FedshareError(f"{path}: x must be N×32×32×3, got {x.shape}")
        if y.shape != (len(x),):
            raise corrupt_file(path, f"expected {len(x)} labels y (one per image), got {y.shape}")
        if order is not None:
            x, y = x[order], y[order]
        out[f"x_{split}"] = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        out[f"y_{split}"] = torch.from_numpy(y.astype(np.int64))
    return out


def _read_npz_split(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(x, y, the permutation back to the official order or None) of one npz file."""
    arrays = read_npz(path)
    missing = [k for k in ("x", "y") if k not in arrays]
    if missing:
        raise corrupt_file(path, f"no array {missing[0]!r}; it has {sorted(arrays)}")
    order = np.argsort(arrays["idx"], kind="stable") if "idx" in arrays else None
    return arrays["x"], arrays["y"], order


def apply_static_augment(
    data: Dataset,
    mode: str,
    seed: int,
    augmentation: Augmentation = CIFAR_AUGMENTATION,
    augment_test: bool = False,
) -> Dataset:
    """FLea's one-off random crop/flip at load time (its code; Section 4.1.1 names the data).

    `mode`: "none"; "train" (a fixed seeded crop/flip of the training set); "all" (an alias
    of "train" with `augment_test`). `augment_test` crops/flips the test set too, as FLea's
    code does (default off: clean test images). The augmented copy
    replaces per-batch augmentation, which is then switched off.
    """
    if mode not in STATIC_AUGMENT:
        raise FedshareError(
            choices_message("data.static_augment value", mode, list(STATIC_AUGMENT))
        )
    if mode == "none":
        if augment_test:
            raise FedshareError(
                "data.augment_test=true needs data.static_augment=train: only FLea's one-off "
                "crop/flip is applied to the test set (batch augmentation never is)"
            )
        return data

    def crop_flip(x: torch.Tensor, key: int) -> torch.Tensor:
        gen = torch_generator(seed, "static_augment", key)
        chunks = [augment_batch(c, augmentation, gen) for c in x.split(STATIC_CHUNK)]
        return torch.cat(chunks) if chunks else x

    x_test = crop_flip(data.x_test, 1) if mode == "all" or augment_test else data.x_test
    return replace(
        data, x_train=crop_flip(data.x_train, 0), x_test=x_test, augmentation=Augmentation()
    )


# --------------------------------------------------------------------------- CIFAR loaders
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
CIFAR10_SOURCES = ("pickle", "npz")


def _cifar10_pickles(base: Path, request: LoadRequest) -> Payload:
    folder = base / CIFAR10_DIR
    paths = [folder / f for f in CIFAR10_FILES]

    def build() -> Payload:
        x_tr, y_tr = read_cifar_batches(paths[:5], "labels")
        x_te, y_te = read_cifar_batches(paths[5:], "labels")
        meta = folder / "batches.meta"
        names = (
            _names(_entry(load_cifar_pickle(meta), "label_names", meta))
            if meta.exists()
            else CIFAR10_CLASSES
        )
        return {
            "x_train": x_tr,
            "y_train": y_tr,
            "x_test": x_te,
            "y_test": y_te,
            "class_names": list(names),
        }

    return cached("cifar10", {"format": "pickle", "version": 1}, paths, build, request.cache)


SAMPLE_DIR = "cifar10_sample"
"""The 4,000 / 1,000-image prefix of CIFAR-10 under the data root: its own dataset,
`data=cifar10_sample`, never a stand-in for `data=cifar10`."""


def _cifar10_npz(name: str, folder: Path, request: LoadRequest) -> tuple[Payload, str]:
    """The payload of an npz pair `folder/{train,test}.npz` and its source description."""
    payload = cached(
        name,
        {"format": "npz", "version": 1},
        [folder / "train.npz", folder / "test.npz"],
        lambda: read_cifar_npz(folder),
        request.cache,
    )
    return payload, f"npz {folder.name} ({len(payload['y_train'])}/{len(payload['y_test'])})"


def _cifar10_dataset(name: str, payload: Payload, source: str) -> Dataset:
    return dataset_from_payload(
        name,
        payload,
        num_classes=10,
        scale=1 / 255,
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        augmentation=CIFAR_AUGMENTATION,
        default_model="mobilenetv2_cifar",
        source=source,
    )


@register_dataset("cifar10")
def load_cifar10(
    request: LoadRequest,
    *,
    source: str = "pickle",
    npz_dir: str | None = None,
    static_augment: str = "none",
    static_augment_seed: int = 1,
    augment_test: bool = False,
) -> Dataset:
    """CIFAR-10, 32×32×3, 10 classes, 50,000 / 10,000 (FLea's Section 4.1.1, Table 2).

    `source`: "pickle" reads torchvision's `<root>/cifar-10-batches-py/`; "npz" reads the full
    set as an npz pair `<root>/<npz_dir>/{train,test}.npz` (`x` N×32×32×3 uint8, `y`). A
    missing set is an error, never a fallback to the 4,000 / 1,000 sample, which is its own
    dataset (`cifar10_sample`). Normalisation is FLea's; batch augmentation is random crop
    (padding 4) and horizontal flip. `static_augment` ("none" | "train" | "all") replaces it
    with FLea's one-off seeded crop/flip at load time; `augment_test` applies it to the test
    set too (see `apply_static_augment`).
    """
    if source not in CIFAR10_SOURCES:
        raise FedshareError(choices_message("data.source value", source, list(CIFAR10_SOURCES)))
    if source == "npz" and not npz_dir:
        raise FedshareError("data.source=npz needs data.npz_dir=<the folder of the npz pair>")
    if source == "npz" and Path(str(npz_dir)).name == SAMPLE_DIR:
        raise FedshareError(
            f"data.npz_dir={npz_dir} is the 4,000 / 1,000-image sample, not CIFAR-10; use "
            f"data=cifar10_sample"
        )
    if source == "npz":
        assert npz_dir is not None
        relative = [f"{npz_dir}/train.npz", f"{npz_dir}/test.npz"]
    else:
        relative = [f"{CIFAR10_DIR}/{f}" for f in CIFAR10_FILES]
    base = find_files(request.root, relative)
    if base is None and request.download and source == "pickle":
        import torchvision

        with downloading("cifar10", download_root(request.root)):
            torchvision.datasets.CIFAR10(str(download_root(request.root)), download=True)
        base = download_root(request.root)
    if base is None:
        how = "get CIFAR-10's python version from https://www.cs.toronto.edu/~kriz/cifar.html"
        sample = find_files(request.root, [f"{SAMPLE_DIR}/train.npz", f"{SAMPLE_DIR}/test.npz"])
        if sample is not None:
            how = (
                f"{sample / SAMPLE_DIR} holds only the 4,000 / 1,000-image sample, which loads as "
                f"data=cifar10_sample; for the full set {how}"
            )
        else:
            how += (
                " (a 4,000 / 1,000-image sample of it, in <root>/cifar10_sample, loads as "
                "data=cifar10_sample)"
            )
        raise missing_data_error("cifar10", request.root, relative, how)
    if source == "npz":
        assert npz_dir is not None
        payload, origin = _cifar10_npz("cifar10", base / npz_dir, request)
    else:
        payload, origin = _cifar10_pickles(base, request), "python-version pickles"
    data = _cifar10_dataset("cifar10", payload, origin)
    return apply_static_augment(
        data, static_augment, static_augment_seed, augment_test=augment_test
    )


@register_dataset("cifar10_sample")
def load_cifar10_sample(
    request: LoadRequest,
    *,
    static_augment: str = "none",
    static_augment_seed: int = 1,
    augment_test: bool = False,
) -> Dataset:
    """The CIFAR-10 sample: the first 4,000 training and 1,000 test images of CIFAR-10 in the
    official order, from `<root>/cifar10_sample/{train,test}.npz`. Same classes, model,
    normalisation and augmentation options as `cifar10`; its results are not CIFAR-10's."""
    relative = [f"{SAMPLE_DIR}/train.npz", f"{SAMPLE_DIR}/test.npz"]
    base = find_files(request.root, relative)
    if base is None:
        raise missing_data_error(
            "cifar10_sample",
            request.root,
            relative,
            "it is an npz pair train.npz, test.npz with x (N×32×32×3 uint8) and y",
        )
    payload, origin = _cifar10_npz("cifar10_sample", base / SAMPLE_DIR, request)
    data = _cifar10_dataset("cifar10_sample", payload, origin)
    return apply_static_augment(
        data, static_augment, static_augment_seed, augment_test=augment_test
    )


CIFAR100_DIR = "cifar-100-python"
CIFAR100_LABELS = ("fine", "coarse")


@register_dataset("cifar100")
def load_cifar100(
    request: LoadRequest,
    *,
    labels: str = "fine",
    static_augment: str = "none",
    static_augment_seed: int = 1,
    augment_test: bool = False,
) -> Dataset:
    """CIFAR-100 from torchvision's `<root>/cifar-100-python/` (50,000 / 10,000).

    `labels`: "fine" (100 classes) or "coarse" (20 superclasses). Normalisation with
    CIFAR-100's statistics; augmentation, `static_augment` and `augment_test` as for `cifar10`.
    """
    if labels not in CIFAR100_LABELS:
        raise FedshareError(choices_message("data.labels value", labels, list(CIFAR100_LABELS)))
    relative = [f"{CIFAR100_DIR}/train", f"{CIFAR100_DIR}/test"]
    base = find_files(request.root, relative)
    if base is None:
        if not request.download:
            raise missing_data_error(
                "cifar100",
                request.root,
                relative,
                "get CIFAR-100's python version from https://www.cs.toronto.edu/~kriz/cifar.html",
            )
        import torchvision

        base = download_root(request.root)
        with downloading("cifar100", base):
            torchvision.datasets.CIFAR100(str(base), download=True)
    folder = base / CIFAR100_DIR
    paths = [folder / "train", folder / "test"]

    def build() -> Payload:
        x_tr, y_tr = read_cifar_batches(paths[:1], f"{labels}_labels")
        x_te, y_te = read_cifar_batches(paths[1:], f"{labels}_labels")
        payload: Payload = {"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te}
        if (folder / "meta").exists():
            meta = load_cifar_pickle(folder / "meta")
            payload["class_names"] = _names(_entry(meta, f"{labels}_label_names", folder / "meta"))
        return payload

    options = {"format": "pickle", "labels": labels, "version": 1}
    payload = cached("cifar100", options, paths, build, request.cache)
    data = dataset_from_payload(
        "cifar100",
        payload,
        num_classes=100 if labels == "fine" else 20,
        scale=1 / 255,
        mean=CIFAR100_MEAN,
        std=CIFAR100_STD,
        augmentation=CIFAR_AUGMENTATION,
        default_model="mobilenetv2_cifar",
    )
    return apply_static_augment(
        data, static_augment, static_augment_seed, augment_test=augment_test
    )
