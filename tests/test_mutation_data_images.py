"""Fast exact tests of the image loaders for mutation testing (docs/mutation.md, eleventh
session): data/images.py, data/pickles.py, data/synthetic_features.py and the digits loader.

Tiny files written to tmp_path in the official layouts (IDX, CIFAR's python pickles, npz
pairs), a stand-in torchvision for the downloads, and every expected value computed here from
the format's or the generator's definition, so a changed offset, check, constant or flag fails.
"""

import codecs
import gzip
import importlib.metadata
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from fedshare.data import cache, images, pickles, synthetic_features
from fedshare.data.dataset import Augmentation, Dataset, augment_batch
from fedshare.data.datasets import GENERATED_BYTES_LIMIT, LoadRequest, check_generated_sizes
from fedshare.data.synthetic_features import load_synthetic_mixture
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError

IDX_NAMES = images._IDX_FILES


# ---------------------------------------------------------------------- helpers


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file by its definition: 0, 0, type 8 (ubyte), ndim, big-endian dims, data."""
    dims = b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return bytes([0, 0, 8, array.ndim]) + dims + array.astype(np.uint8).tobytes()


def write(path: Path, raw: bytes, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def write_idx_set(root: Path, folder: str, gz: bool, seed: int = 0) -> list[np.ndarray]:
    """A tiny MNIST-format set (3 train, 2 test images of 2×3) under `root/folder/raw`."""
    rng = np.random.default_rng(seed)
    arrays = [
        rng.integers(0, 256, (3, 2, 3)),
        rng.integers(0, 10, 3),
        rng.integers(0, 256, (2, 2, 3)),
        rng.integers(0, 10, 2),
    ]
    suffix = ".gz" if gz else ""
    for name, array in zip(IDX_NAMES, arrays, strict=True):
        write(root / folder / "raw" / f"{name}{suffix}", idx_bytes(array), gz)
    return arrays


def cifar_pickle(path: Path, entries: dict) -> Path:
    """A CIFAR python-version batch: a protocol-2 pickle of a dict with byte-string keys."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump({k.encode(): v for k, v in entries.items()}, fh, protocol=2)
    return path


def cifar_rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 3072)).astype(np.uint8)


def write_cifar10_pickles(root: Path, meta: bool) -> list[tuple[np.ndarray, list[int]]]:
    """data_batch_1..5 of 1..5 images and a test batch of 6, labels (i + j) mod 10."""
    folder = root / images.CIFAR10_DIR
    batches = []
    for i, name in enumerate(images.CIFAR10_FILES):
        data = cifar_rows(i + 1, seed=i)
        labels = [(i + j) % 10 for j in range(i + 1)]
        cifar_pickle(folder / name, {"data": data, "labels": labels})
        batches.append((data, labels))
    if meta:
        names = [f"class{c}".encode() for c in range(10)]
        cifar_pickle(folder / "batches.meta", {"label_names": names})
    return batches


def npz_pair(folder: Path, n_train: int, n_test: int, idx: bool = False) -> dict:
    """train.npz and test.npz with x N×32×32×3 uint8 and y (and `idx` reversed when asked)."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = np.random.default_rng(n).integers(0, 256, (n, 32, 32, 3)).astype(np.uint8)
        y = np.arange(n) % 10
        extra = {"idx": np.arange(n)[::-1].copy()} if idx else {}
        np.savez(folder / f"{split}.npz", x=x, y=y, **extra)
        arrays[split] = (x, y)
    return arrays


def chw(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def stand_in_torchvision(monkeypatch, name: str, make) -> list:
    """Install a torchvision whose `datasets.<name>(root, download)` calls `make(root)`."""
    calls = []

    def dataset(root: str, download: bool) -> None:
        calls.append((root, download))
        make(Path(root))

    module = types.SimpleNamespace(datasets=types.SimpleNamespace(**{name: dataset}))
    monkeypatch.setitem(sys.modules, "torchvision", module)
    return calls


def no_torchvision(monkeypatch) -> None:
    """A torchvision whose every dataset fails the test when asked to download."""

    class Refuse:
        def __getattr__(self, name):
            raise AssertionError(f"torchvision.datasets.{name} used")

    monkeypatch.setitem(sys.modules, "torchvision", types.SimpleNamespace(datasets=Refuse()))


def request(root: Path, **kw) -> LoadRequest:
    return LoadRequest(root=str(root), **{"cache": False, **kw})


def missing(name: str, root: Path, first: str, how: str) -> str:
    """missing_data_error's sentence for one root."""
    return (
        f"dataset {name!r} not found (looked for {root / first}); {how}, point data.root or "
        f"$FEDSHARE_DATA at a folder that has it, or set data.download=true to fetch it"
    )


def raises_exactly(message: str):
    import re

    return pytest.raises(FedshareError, match=f"^{re.escape(message)}$")


def image_dataset(n_train: int = 5, n_test: int = 3) -> Dataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n_train, 3, 6, 6), generator=gen, dtype=torch.uint8)
    x_test = torch.randint(0, 256, (n_test, 3, 6, 6), generator=gen, dtype=torch.uint8)
    return Dataset(
        "img",
        x,
        torch.arange(n_train) % 2,
        x_test,
        torch.arange(n_test) % 2,
        num_classes=2,
        augmentation=images.CIFAR_AUGMENTATION,
    )


# ---------------------------------------------------------------------- pickles.py


def test_latin1_bytes_encodes_latin1_text_only():
    assert pickles._latin1_bytes("a\xe9\xff", "latin1") == b"a\xe9\xff"
    for text, encoding in (("abc", "utf-8"), (b"abc", "latin1"), (3, "latin1")):
        with pytest.raises(pickle.UnpicklingError, match="latin1 text only"):
            pickles._latin1_bytes(text, encoding)
    with pytest.raises(pickle.UnpicklingError, match="latin1 text only"):
        pickles._latin1_bytes("abc")  # the default encoding is utf-8
    assert pickles.ALLOWED_GLOBALS["_codecs", "encode"] is pickles._latin1_bytes
    assert codecs.encode("\xe9", "latin1") == b"\xe9"


def test_pickle_problem_names_truncation_else_the_error():
    assert pickles.pickle_problem(EOFError()) == "truncated pickle"
    assert pickles.pickle_problem(ValueError("data truncated here")) == "truncated pickle"
    assert pickles.pickle_problem(ValueError("bad")) == "unreadable pickle: ValueError: bad"


def test_load_cifar_pickle_gives_str_keys_and_arrays(tmp_path):
    data = cifar_rows(2, seed=1)
    path = tmp_path / "b"
    with open(path, "wb") as fh:
        pickle.dump({b"data": data, "plain": [1, 2], 7: b"x"}, fh, protocol=2)
    loaded = pickles.load_cifar_pickle(path)
    assert sorted(map(str, loaded)) == ["7", "data", "plain"]
    np.testing.assert_array_equal(loaded["data"], data)
    assert loaded["plain"] == [1, 2] and loaded[7] == b"x"


def test_load_cifar_pickle_refuses_other_globals_non_dicts_and_garbage(tmp_path):
    evil = tmp_path / "evil"
    evil.write_bytes(pickle.dumps({b"x": Path("a")}, protocol=2))
    with raises_exactly(
        f"{evil} is not a CIFAR batch: it asks to load pathlib.PosixPath, which a CIFAR pickle "
        f"never uses, so it was not unpickled; replace it with the official file"
    ):
        pickles.load_cifar_pickle(evil)
    listed = write(tmp_path / "list", pickle.dumps([1, 2], protocol=2))
    with pytest.raises(FedshareError, match=r"is corrupt \(expected a dict, got list\)"):
        pickles.load_cifar_pickle(listed)
    cut = write(tmp_path / "cut", pickle.dumps({b"a": 1}, protocol=2)[:-3])
    with pytest.raises(FedshareError, match=r"is corrupt \(truncated pickle\)"):
        pickles.load_cifar_pickle(cut)


# ---------------------------------------------------------------------- IDX


def test_idx_dims_reads_one_to_four_big_endian_dimensions():
    dims = [0x01020304, 0x05060708, 0x090A0B0C, 0x0D0E0F10]
    for ndim in range(1, 5):
        header = bytes([0, 0, 8, ndim]) + b"".join(d.to_bytes(4, "big") for d in dims[:ndim])
        assert images.idx_dims(header) == dims[:ndim]
        assert images.idx_dims(header + b"\x07") == dims[:ndim]


@pytest.mark.parametrize(
    "raw, problem",
    [
        (b"", "no IDX header of unsigned bytes"),
        (b"\x00\x00\x08", "no IDX header of unsigned bytes"),
        (b"\x01\x00\x08\x01" + bytes(4), "no IDX header of unsigned bytes"),
        (b"\x00\x01\x08\x01" + bytes(4), "no IDX header of unsigned bytes"),
        (b"\x00\x00\x09\x01" + bytes(4), "no IDX header of unsigned bytes"),
        (b"\x00\x00\x08\x00" + bytes(4), "no IDX header of unsigned bytes"),
        (b"\x00\x00\x08\x05" + bytes(20), "no IDX header of unsigned bytes"),
        (b"\x00\x00\x08\x02" + bytes(7), "the IDX header is cut short"),
        (b"\x00\x00\x08\x01", "the IDX header is cut short"),
    ],
)
def test_idx_dims_refuses_what_is_no_ubyte_idx_header(raw, problem):
    with pytest.raises(ValueError, match=f"^{problem}$"):
        images.idx_dims(raw)


def test_read_idx_reads_plain_and_gzipped_files_and_checks_the_data_size(tmp_path):
    array = np.arange(24).reshape(2, 3, 4)
    for gz in (False, True):
        path = write(tmp_path / ("a.gz" if gz else "a"), idx_bytes(array), gz)
        out = images.read_idx(path)
        assert out.dtype == np.uint8 and out.shape == (2, 3, 4)
        np.testing.assert_array_equal(out, array)
    raw = idx_bytes(array)
    for cut, held in ((raw[:-1], 23), (raw + b"\x00", 25)):
        path = write(tmp_path / "bad", cut)
        with pytest.raises(FedshareError) as err:
            images.read_idx(path)
        assert str(err.value).startswith(
            f"{path} is corrupt (its header promises 2×3×4 bytes of data, it holds {held});"
        )
    path = write(tmp_path / "nohead", b"\x00\x00\x0d\x01" + bytes(5))
    with pytest.raises(FedshareError, match=r"is corrupt \(no IDX header of unsigned bytes\)"):
        images.read_idx(path)


def test_read_idx_split_gives_images_with_a_channel_and_int64_labels(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (3, 2, 5))
    y = np.array([4, 0, 9])
    xs, ys = write(tmp_path / "x", idx_bytes(x)), write(tmp_path / "y", idx_bytes(y))
    images_, labels = images.read_idx_split(xs, ys)
    assert images_.dtype == torch.uint8 and images_.shape == (3, 1, 2, 5)
    assert torch.equal(images_[:, 0], torch.from_numpy(x.astype(np.uint8)))
    assert labels.dtype == torch.int64 and labels.tolist() == [4, 0, 9]
    flat = write(tmp_path / "flat", idx_bytes(x.reshape(3, 10)))
    with pytest.raises(FedshareError) as err:
        images.read_idx_split(flat, ys)
    assert str(err.value).startswith(
        f"{flat} is corrupt (expected N×H×W images, got shape (3, 10))"
    )
    for bad in (np.array([1, 2]), np.zeros((3, 1))):
        wrong = write(tmp_path / "wrong", idx_bytes(bad))
        with pytest.raises(FedshareError) as err:
            images.read_idx_split(xs, wrong)
        assert str(err.value).startswith(
            f"{wrong} is corrupt (expected 3 labels (one per image), got {bad.shape})"
        )


def assert_idx_loaded(data: Dataset, arrays: list[np.ndarray]) -> None:
    assert torch.equal(data.x_train[:, 0], torch.from_numpy(arrays[0].astype(np.uint8)))
    assert data.y_train.tolist() == arrays[1].tolist()
    assert torch.equal(data.x_test[:, 0], torch.from_numpy(arrays[2].astype(np.uint8)))
    assert data.y_test.tolist() == arrays[3].tolist()


def test_mnist_and_fmnist_load_their_idx_files_with_their_constants(tmp_path, monkeypatch):
    no_torchvision(monkeypatch)  # never downloads when the files exist
    arrays = write_idx_set(tmp_path, "MNIST", gz=False)
    data = images.load_mnist(request(tmp_path, download=True))
    assert_idx_loaded(data, arrays)
    assert (data.name, data.num_classes, data.scale) == ("mnist", 10, 1 / 255)
    assert (data.mean, data.std, data.default_model) == ((0.1307,), (0.3081,), "cnn_small")
    assert data.class_names is None and not data.augmentation.active
    arrays = write_idx_set(tmp_path, "FashionMNIST", gz=True, seed=1)
    data = images.load_fmnist(request(tmp_path))
    assert_idx_loaded(data, arrays)
    assert (data.name, data.num_classes, data.scale) == ("fmnist", 10, 1 / 255)
    assert (data.mean, data.std, data.default_model) == ((0.2860,), (0.3530,), "lenet_fmnist")
    assert data.class_names == images.FMNIST_CLASSES and not data.augmentation.active
    assert data.class_names is not images.FMNIST_CLASSES


def test_idx_loader_prefers_the_gzipped_files(tmp_path):
    write_idx_set(tmp_path, "MNIST", gz=False, seed=2)
    arrays = write_idx_set(tmp_path, "MNIST", gz=True, seed=3)
    assert_idx_loaded(images.load_mnist(request(tmp_path)), arrays)


def test_idx_loader_caches_under_its_name_and_options(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    arrays = write_idx_set(tmp_path, "FashionMNIST", gz=True)
    paths = [tmp_path / "FashionMNIST" / "raw" / f"{n}.gz" for n in IDX_NAMES]
    entry = cache.cache_path("fmnist", {"format": "idx", "version": 1}, paths)
    assert not entry.exists()
    assert_idx_loaded(images.load_fmnist(request(tmp_path, cache=True)), arrays)
    assert entry.exists()
    plain = write_idx_set(tmp_path, "MNIST", gz=False)
    paths = [tmp_path / "MNIST" / "raw" / n for n in IDX_NAMES]
    assert_idx_loaded(images.load_mnist(request(tmp_path, cache=True)), plain)
    assert cache.cache_path("mnist", {"format": "idx", "version": 1}, paths).exists()


def test_idx_loader_without_files_names_them_or_downloads_them(tmp_path, monkeypatch):
    no_torchvision(monkeypatch)
    how = "get the four MNIST IDX files"
    first = "MNIST/raw/train-images-idx3-ubyte.gz"
    with raises_exactly(missing("mnist", tmp_path, first, how)):
        images.load_mnist(request(tmp_path))
    first = "FashionMNIST/raw/train-images-idx3-ubyte.gz"
    how = "get the four FashionMNIST IDX files"
    with raises_exactly(missing("fmnist", tmp_path, first, how)):
        images.load_fmnist(request(tmp_path))
    made = {}
    calls = stand_in_torchvision(
        monkeypatch,
        "FashionMNIST",
        lambda root: made.update(a=write_idx_set(root, "FashionMNIST", True)),
    )
    data = images.load_fmnist(request(tmp_path, download=True))
    assert calls == [(str(tmp_path), True)]
    assert_idx_loaded(data, made["a"])


# ---------------------------------------------------------------------- CIFAR pickles


def test_read_cifar_batches_concatenates_rgb_planes_and_labels(tmp_path):
    a, b = cifar_rows(2, 0), cifar_rows(3, 1)
    paths = [
        cifar_pickle(tmp_path / "a", {"data": a, "labels": [1, 2]}),
        cifar_pickle(tmp_path / "b", {"data": b, "labels": np.array([3, 4, 5], np.uint8)}),
    ]
    x, y = images.read_cifar_batches(paths, "labels")
    assert x.dtype == torch.uint8 and x.shape == (5, 3, 32, 32)
    rows = np.concatenate([a, b])
    for c in range(3):  # rows hold the R, G and B planes, 1024 values each
        plane = rows[:, 1024 * c : 1024 * (c + 1)].reshape(5, 32, 32)
        assert torch.equal(x[:, c], torch.from_numpy(plane))
    assert y.dtype == torch.int64 and y.tolist() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    "entries, problem",
    [
        ({"labels": [1]}, "no 'data' entry; it has ['labels']"),
        ({"data": cifar_rows(1, 0)}, "no 'labels' entry; it has ['data']"),
        ({"data": cifar_rows(1, 0).astype(np.int16), "labels": [1]}, "data must be N×3072 uint8"),
        ({"data": cifar_rows(1, 0)[:, :, None], "labels": [1]}, "data must be N×3072 uint8"),
        ({"data": cifar_rows(1, 0)[:, :3071], "labels": [1]}, "data must be N×3072 uint8"),
        ({"data": cifar_rows(2, 0), "labels": [1]}, "expected 2 labels, got (1,)"),
    ],
)
def test_read_cifar_batches_refuses_a_damaged_batch_naming_it(tmp_path, entries, problem):
    path = cifar_pickle(tmp_path / "batch", entries)
    with pytest.raises(FedshareError) as err:
        images.read_cifar_batches([path], "labels")
    assert str(err.value).startswith(f"{path} is corrupt ({problem}")


def test_names_decodes_bytes_and_keeps_the_rest_as_text():
    assert images._names([b"cat", "dog", 3]) == ["cat", "dog", "3"]


def assert_cifar10_pickles(data: Dataset, batches) -> None:
    train = np.concatenate([d for d, _ in batches[:5]]).reshape(-1, 3, 32, 32)
    assert torch.equal(data.x_train, torch.from_numpy(train))
    assert data.y_train.tolist() == [label for _, ls in batches[:5] for label in ls]
    assert torch.equal(data.x_test, torch.from_numpy(batches[5][0].reshape(-1, 3, 32, 32)))
    assert data.y_test.tolist() == batches[5][1]


def assert_cifar10_constants(data: Dataset, name: str, source: str) -> None:
    assert (data.name, data.num_classes, data.scale, data.source) == (name, 10, 1 / 255, source)
    assert data.mean == (0.4914, 0.4822, 0.4465) and data.std == (0.2470, 0.2435, 0.2616)
    assert data.augmentation == Augmentation(crop_padding=4, horizontal_flip=True)
    assert data.default_model == "mobilenetv2_cifar"


def test_cifar10_reads_five_training_batches_and_the_test_batch(tmp_path, monkeypatch):
    no_torchvision(monkeypatch)
    batches = write_cifar10_pickles(tmp_path, meta=False)
    data = images.load_cifar10(request(tmp_path, download=True))
    assert_cifar10_pickles(data, batches)
    assert_cifar10_constants(data, "cifar10", "python-version pickles")
    assert data.class_names == images.CIFAR10_CLASSES
    assert data.class_names is not images.CIFAR10_CLASSES


def test_cifar10_takes_its_class_names_from_the_meta_file_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    batches = write_cifar10_pickles(tmp_path, meta=True)
    paths = [tmp_path / images.CIFAR10_DIR / f for f in images.CIFAR10_FILES]
    entry = cache.cache_path("cifar10", {"format": "pickle", "version": 1}, paths)
    data = images.load_cifar10(request(tmp_path, cache=True))
    assert entry.exists()
    assert_cifar10_pickles(data, batches)
    assert data.class_names == [f"class{c}" for c in range(10)]


def test_cifar10_downloads_the_pickles_only_when_asked_and_missing(tmp_path, monkeypatch):
    made = []
    calls = stand_in_torchvision(
        monkeypatch, "CIFAR10", lambda root: made.append(write_cifar10_pickles(root, False))
    )
    data = images.load_cifar10(request(tmp_path, download=True))
    assert calls == [(str(tmp_path), True)]
    assert_cifar10_pickles(data, made[0])


def test_cifar10_without_its_files_names_them_and_points_at_the_sample(tmp_path, monkeypatch):
    no_torchvision(monkeypatch)
    how = "get CIFAR-10's python version from https://www.cs.toronto.edu/~kriz/cifar.html"
    first = f"{images.CIFAR10_DIR}/data_batch_1"
    hint = (
        " (a 4,000 / 1,000-image sample of it, in <root>/cifar10_sample, loads as "
        "data=cifar10_sample)"
    )
    with raises_exactly(missing("cifar10", tmp_path, first, how + hint)):
        images.load_cifar10(request(tmp_path))
    with raises_exactly(missing("cifar10", tmp_path, "full/train.npz", how + hint)):
        images.load_cifar10(request(tmp_path, download=True), source="npz", npz_dir="full")
    npz_pair(tmp_path / images.SAMPLE_DIR, 2, 1)
    sample = (
        f"{tmp_path / images.SAMPLE_DIR} holds only the 4,000 / 1,000-image sample, which loads "
        f"as data=cifar10_sample; for the full set {how}"
    )
    with raises_exactly(missing("cifar10", tmp_path, first, sample)):
        images.load_cifar10(request(tmp_path))


def test_cifar10_refuses_a_bad_source_or_npz_folder(tmp_path):
    with raises_exactly("unknown data.source value 'tar'; valid choices: npz, pickle"):
        images.load_cifar10(request(tmp_path), source="tar")
    message = "data.source=npz needs data.npz_dir=<the folder of the npz pair>"
    for empty in (None, ""):
        with raises_exactly(message):
            images.load_cifar10(request(tmp_path), source="npz", npz_dir=empty)
    npz_pair(tmp_path / "x" / images.SAMPLE_DIR, 2, 1)
    with raises_exactly(
        "data.npz_dir=x/cifar10_sample is the 4,000 / 1,000-image sample, not CIFAR-10; use "
        "data=cifar10_sample"
    ):
        images.load_cifar10(request(tmp_path), source="npz", npz_dir="x/cifar10_sample")


# ---------------------------------------------------------------------- CIFAR npz


def test_read_cifar_npz_gives_chw_images_and_int64_labels(tmp_path):
    arrays = npz_pair(tmp_path, 3, 2)
    payload = images.read_cifar_npz(tmp_path)
    for split in ("train", "test"):
        x, y = arrays[split]
        assert torch.equal(payload[f"x_{split}"], chw(x))
        assert payload[f"x_{split}"].is_contiguous()
        assert payload[f"y_{split}"].dtype == torch.int64
        assert payload[f"y_{split}"].tolist() == y.tolist()
    assert payload["class_names"] == images.CIFAR10_CLASSES
    assert payload["class_names"] is not images.CIFAR10_CLASSES


def test_read_cifar_npz_puts_samples_back_in_the_official_order(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3)).astype(np.uint8)
    y = np.array([0, 1, 2, 3])
    order = np.array([2, 0, 3, 1])  # sample i is official sample order[i]
    for split in ("train", "test"):
        np.savez(tmp_path / f"{split}.npz", x=x, y=y, idx=order)
    payload = images.read_cifar_npz(tmp_path)
    assert payload["y_train"].tolist() == [1, 3, 0, 2]
    assert torch.equal(payload["x_test"], chw(x[[1, 3, 0, 2]]))


@pytest.mark.parametrize(
    "arrays, problem",
    [
        ({"y": np.zeros(1)}, " is corrupt (no array 'x'; it has ['y'])"),
        ({"z": np.zeros(1)}, " is corrupt (no array 'x'; it has ['z'])"),  # the first missing
        ({"x": np.zeros((1, 32, 32, 3), np.uint8)}, " is corrupt (no array 'y'; it has ['x'])"),
        ({"x": np.zeros((1, 32, 32), np.uint8), "y": np.zeros(1)}, ": x must be N×32×32×3"),
        ({"x": np.zeros((1, 32, 32, 4), np.uint8), "y": np.zeros(1)}, ": x must be N×32×32×3"),
        ({"x": np.zeros((1, 31, 32, 3), np.uint8), "y": np.zeros(1)}, ": x must be N×32×32×3"),
        ({"x": np.zeros((2, 32, 32, 3), np.uint8), "y": np.zeros(1)}, " is corrupt (expected 2"),
    ],
)
def test_read_cifar_npz_refuses_a_damaged_pair_naming_the_file(tmp_path, arrays, problem):
    np.savez(tmp_path / "train.npz", **arrays)
    with pytest.raises(FedshareError) as err:
        images.read_cifar_npz(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'train.npz'}{problem}")


def test_cifar10_from_an_npz_pair_names_its_folder_and_sizes(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    arrays = npz_pair(tmp_path / "full", 3, 2)
    folder = tmp_path / "full"
    entry = cache.cache_path(
        "cifar10", {"format": "npz", "version": 1}, [folder / "train.npz", folder / "test.npz"]
    )
    data = images.load_cifar10(request(tmp_path, cache=True), source="npz", npz_dir="full")
    assert entry.exists()
    assert_cifar10_constants(data, "cifar10", "npz full (3/2)")
    assert torch.equal(data.x_train, chw(arrays["train"][0]))
    assert torch.equal(data.x_test, chw(arrays["test"][0]))


def test_cifar10_sample_loads_its_own_npz_pair(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    with raises_exactly(
        missing(
            "cifar10_sample",
            tmp_path,
            "cifar10_sample/train.npz",
            "it is an npz pair train.npz, test.npz with x (N×32×32×3 uint8) and y",
        )
    ):
        images.load_cifar10_sample(request(tmp_path))
    folder = tmp_path / images.SAMPLE_DIR
    arrays = npz_pair(folder, 4, 1)
    data = images.load_cifar10_sample(request(tmp_path, cache=True))
    entry = cache.cache_path(
        "cifar10_sample",
        {"format": "npz", "version": 1},
        [folder / "train.npz", folder / "test.npz"],
    )
    assert entry.exists()
    assert_cifar10_constants(data, "cifar10_sample", "npz cifar10_sample (4/1)")
    assert torch.equal(data.x_train, chw(arrays["train"][0]))
    assert data.class_names == images.CIFAR10_CLASSES


# ---------------------------------------------------------------------- static augmentation


def replayed_crop_flip(x: torch.Tensor, seed: int, key: int, aug: Augmentation, chunk: int):
    gen = torch_generator(seed, "static_augment", key)
    return torch.cat([augment_batch(c, aug, gen) for c in x.split(chunk)])


def test_static_augment_train_crops_and_flips_the_training_set_once(monkeypatch):
    monkeypatch.setattr(images, "STATIC_CHUNK", 2)  # three chunks, one stream
    data = image_dataset()
    out = images.apply_static_augment(data, "train", 7)
    aug = images.CIFAR_AUGMENTATION
    assert torch.equal(out.x_train, replayed_crop_flip(data.x_train, 7, 0, aug, 2))
    assert not torch.equal(out.x_train, data.x_train)
    assert out.x_test is data.x_test
    assert out.augmentation == Augmentation() and not out.augmentation.active
    assert out.y_train is data.y_train


def test_static_augment_all_or_augment_test_crops_the_test_set_from_its_own_stream():
    data = image_dataset(n_test=6)
    flip = Augmentation(horizontal_flip=True)
    expected_train = replayed_crop_flip(data.x_train, 3, 0, flip, 4096)
    expected_test = replayed_crop_flip(data.x_test, 3, 1, flip, 4096)
    for other in (0, 2):  # key 1's flips are neither the training stream's nor key 2's
        assert not torch.equal(expected_test, replayed_crop_flip(data.x_test, 3, other, flip, 4096))
    for mode, test in (("all", False), ("train", True), ("all", True)):
        out = images.apply_static_augment(data, mode, 3, flip, augment_test=test)
        assert torch.equal(out.x_train, expected_train)
        assert torch.equal(out.x_test, expected_test)
    empty = image_dataset(n_test=0)
    assert images.apply_static_augment(empty, "all", 3).x_test.shape == (0, 3, 6, 6)


def test_static_augment_none_keeps_the_data_and_bad_values_are_refused():
    data = image_dataset()
    assert images.apply_static_augment(data, "none", 3) is data
    with raises_exactly(
        "unknown data.static_augment value 'some'; valid choices: all, none, train"
    ):
        images.apply_static_augment(data, "some", 3)
    with raises_exactly(
        "data.augment_test=true needs data.static_augment=train: only FLea's one-off "
        "crop/flip is applied to the test set (batch augmentation never is)"
    ):
        images.apply_static_augment(data, "none", 3, augment_test=True)


def test_cifar_loaders_apply_static_augment_with_seed_one_by_default(tmp_path):
    write_cifar10_pickles(tmp_path, meta=False)
    npz_pair(tmp_path / images.SAMPLE_DIR, 3, 2)
    write_cifar100(tmp_path, meta=False)
    loaders = (
        lambda **kw: images.load_cifar10(request(tmp_path), **kw),
        lambda **kw: images.load_cifar10_sample(request(tmp_path), **kw),
        lambda **kw: images.load_cifar100(request(tmp_path), **kw),
    )
    for load in loaders:
        plain = load()
        assert plain.augmentation == images.CIFAR_AUGMENTATION
        out = load(static_augment="train")
        assert torch.equal(out.x_train, images.apply_static_augment(plain, "train", 1).x_train)
        assert torch.equal(out.x_test, plain.x_test) and not out.augmentation.active
        out = load(static_augment="train", static_augment_seed=4, augment_test=True)
        expected = images.apply_static_augment(plain, "train", 4, augment_test=True)
        assert torch.equal(out.x_test, expected.x_test)
        assert torch.equal(out.x_train, expected.x_train)


# ---------------------------------------------------------------------- CIFAR-100


def write_cifar100(root: Path, meta: bool) -> dict:
    folder = root / images.CIFAR100_DIR
    sets = {}
    for split, n in (("train", 3), ("test", 2)):
        data = cifar_rows(n, seed=n)
        fine, coarse = [99 - i for i in range(n)], [19 - i for i in range(n)]
        cifar_pickle(folder / split, {"data": data, "fine_labels": fine, "coarse_labels": coarse})
        sets[split] = (data, fine, coarse)
    if meta:
        cifar_pickle(
            folder / "meta",
            {
                "fine_label_names": [f"f{c}".encode() for c in range(100)],
                "coarse_label_names": [f"c{c}".encode() for c in range(20)],
            },
        )
    return sets


def test_cifar100_reads_fine_or_coarse_labels_with_its_constants(tmp_path, monkeypatch):
    no_torchvision(monkeypatch)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    sets = write_cifar100(tmp_path, meta=True)
    folder = tmp_path / images.CIFAR100_DIR
    for labels, column, classes in (("fine", 1, 100), ("coarse", 2, 20)):
        options = {"format": "pickle", "labels": labels, "version": 1}
        entry = cache.cache_path("cifar100", options, [folder / "train", folder / "test"])
        data = images.load_cifar100(request(tmp_path, cache=True, download=True), labels=labels)
        assert entry.exists()
        assert (data.name, data.num_classes, data.scale) == ("cifar100", classes, 1 / 255)
        assert data.mean == (0.5071, 0.4865, 0.4409) and data.std == (0.2673, 0.2564, 0.2762)
        assert data.augmentation == Augmentation(crop_padding=4, horizontal_flip=True)
        assert data.default_model == "mobilenetv2_cifar"
        assert data.class_names == [f"{labels[0]}{c}" for c in range(classes)]
        for split in ("train", "test"):
            rows = sets[split][0].reshape(-1, 3, 32, 32)
            assert torch.equal(getattr(data, f"x_{split}"), torch.from_numpy(rows))
            assert getattr(data, f"y_{split}").tolist() == sets[split][column]
    assert images.load_cifar100(request(tmp_path)).num_classes == 100  # fine by default


def test_cifar100_without_meta_has_no_class_names(tmp_path):
    write_cifar100(tmp_path, meta=False)
    assert images.load_cifar100(request(tmp_path)).class_names is None


def test_cifar100_refuses_bad_labels_names_missing_files_and_downloads(tmp_path, monkeypatch):
    with raises_exactly("unknown data.labels value 'all'; valid choices: coarse, fine"):
        images.load_cifar100(request(tmp_path), labels="all")
    no_torchvision(monkeypatch)
    how = "get CIFAR-100's python version from https://www.cs.toronto.edu/~kriz/cifar.html"
    with raises_exactly(missing("cifar100", tmp_path, "cifar-100-python/train", how)):
        images.load_cifar100(request(tmp_path))
    made = []
    calls = stand_in_torchvision(
        monkeypatch, "CIFAR100", lambda root: made.append(write_cifar100(root, meta=False))
    )
    data = images.load_cifar100(request(tmp_path, download=True))
    assert calls == [(str(tmp_path), True)]
    assert data.y_train.tolist() == made[0]["train"][1]


# ---------------------------------------------------------------------- synthetic_features.py


def replayed_mixture(dim, classes, modes, centre, spread, n_train, n_test, seed):
    """The module docstring's generator, written out: centres, mode means, Q·diag(√λ)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, centre, size=(classes, 1, dim))
    means = centres + rng.normal(0.0, spread, size=(classes, modes, dim))
    factors = np.zeros((classes, modes, dim, dim))
    for c in range(classes):
        for m in range(modes):
            q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
            factors[c, m] = q @ np.diag(np.sqrt(rng.uniform(0.25, 1.75, size=dim)))
    out = []
    for n in (n_train, n_test):
        y = np.arange(n) % classes
        mode = rng.integers(modes, size=n)
        z = rng.normal(size=(n, dim))
        x = means[y, mode] + np.einsum("nij,nj->ni", factors[y, mode], z)
        out += [x.astype(np.float32), y]
    return out


def assert_mixture(data: Dataset, expected) -> None:
    x_tr, y_tr, x_te, y_te = expected
    np.testing.assert_allclose(data.x_train.numpy(), x_tr, rtol=0, atol=1e-5)
    np.testing.assert_allclose(data.x_test.numpy(), x_te, rtol=0, atol=1e-5)
    assert data.x_train.dtype == torch.float32
    assert data.y_train.dtype == torch.int64 and data.y_train.tolist() == y_tr.tolist()
    assert data.y_test.tolist() == y_te.tolist()


def test_synthetic_mixture_defaults_are_the_documented_generator():
    data = load_synthetic_mixture(LoadRequest())
    assert data.x_train.shape == (4500, 32) and data.x_test.shape == (1500, 32)
    assert_mixture(data, replayed_mixture(32, 10, 3, 0.45, 0.3, 4500, 1500, 0))
    assert (data.name, data.num_classes, data.default_model) == ("synthetic_mixture", 10, "linear")
    assert data.scale == 1.0 and data.mean is None


def test_synthetic_mixture_follows_each_option():
    data = load_synthetic_mixture(
        LoadRequest(),
        dim=3,
        num_classes=4,
        modes=2,
        centre_scale=1.5,
        mode_scale=0.7,
        train_size=9,
        test_size=5,
        data_seed=5,
    )
    assert_mixture(data, replayed_mixture(3, 4, 2, 1.5, 0.7, 9, 5, 5))
    assert data.num_classes == 4
    one = load_synthetic_mixture(LoadRequest(), dim=2, modes=1, train_size=4, test_size=2)
    assert_mixture(one, replayed_mixture(2, 10, 1, 0.45, 0.3, 4, 2, 0))


def test_synthetic_mixture_refuses_no_modes_and_counts_its_covariances_in_the_memory_limit(
    monkeypatch,
):
    with raises_exactly("data.modes=0 is not valid: it must be at least 1"):
        load_synthetic_mixture(LoadRequest(), modes=0)
    checked = []

    def check(*args) -> None:  # the sizes checked, then stop before anything is drawn
        checked.append(args)
        raise FedshareError("checked")

    monkeypatch.setattr(synthetic_features, "check_generated_sizes", check)
    with raises_exactly("checked"):
        load_synthetic_mixture(
            LoadRequest(), dim=5, num_classes=3, modes=7, train_size=11, test_size=13
        )
    assert checked == [("synthetic_mixture", 5, 3, 11, 13, 3 * 7 * 5 * 5)]
    modes = GENERATED_BYTES_LIMIT // (8 * 3 * 2 * 2) + 1  # the covariance factors alone exceed it
    with pytest.raises(FedshareError, match="would need"):
        check_generated_sizes("synthetic_mixture", 2, 3, 1, 1, 3 * modes * 2 * 2)


# ---------------------------------------------------------------------- digits


def test_sklearn_digits_file_is_found_without_importing_scikit_learn(monkeypatch):
    from fedshare.data import datasets

    spec = importlib.util.find_spec("sklearn")
    expected = Path(spec.submodule_search_locations[0]) / "datasets/data/digits.csv.gz"
    assert datasets.sklearn_digits_file() == expected and expected.is_file()
    for found in (None, types.SimpleNamespace(submodule_search_locations=[])):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, found=found: found)
        with raises_exactly("data=digits needs scikit-learn (pip install scikit-learn)"):
            datasets.sklearn_digits_file()


def test_digits_is_scikit_learns_stratified_split_cached_with_its_version(tmp_path, monkeypatch):
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    from fedshare.data import datasets

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    bunch = sk_digits()
    for fraction, kw in ((0.2, {}), (0.5, {"test_fraction": 0.5})):
        options = {
            "test_fraction": fraction,
            "scikit-learn": importlib.metadata.version("scikit-learn"),
            "version": 1,
        }
        entry = cache.cache_path("digits", options, [datasets.sklearn_digits_file()])
        data = datasets.load_digits(LoadRequest(), **kw)
        assert entry.exists()
        x_tr, x_te, y_tr, y_te = train_test_split(
            bunch.images, bunch.target, test_size=fraction, stratify=bunch.target, random_state=0
        )
        assert data.x_train.dtype == torch.float32 and data.x_train.shape == (len(x_tr), 1, 8, 8)
        assert torch.equal(data.x_train[:, 0], torch.from_numpy(x_tr.astype(np.float32)))
        assert torch.equal(data.x_test[:, 0], torch.from_numpy(x_te.astype(np.float32)))
        assert data.y_train.dtype == torch.int64 and data.y_train.tolist() == y_tr.tolist()
        assert data.y_test.tolist() == y_te.tolist()
    assert (data.name, data.num_classes, data.scale) == ("digits", 10, 1 / 16)
    assert (data.mean, data.std, data.default_model) == ((0.3053,), (0.3760,), "cnn_small")


def test_the_loaders_options_are_keyword_only(tmp_path):
    write_cifar10_pickles(tmp_path, meta=False)
    npz_pair(tmp_path / images.SAMPLE_DIR, 3, 2)
    write_cifar100(tmp_path, meta=False)
    from fedshare.data.datasets import load_digits

    calls = (
        lambda: images.load_cifar10(request(tmp_path), "pickle"),
        lambda: images.load_cifar10_sample(request(tmp_path), "none"),
        lambda: images.load_cifar100(request(tmp_path), "fine"),
        lambda: load_synthetic_mixture(LoadRequest(), 2),
        lambda: load_digits(LoadRequest(cache=False), 0.2),
    )
    for call in calls:
        with pytest.raises(TypeError, match="positional argument"):
            call()
