"""Dataset loaders: real files under $FEDSHARE_DATA, and small files written in the official
formats (CIFAR pickles, UCI HAR text files, UrbanSound8K/FSDD wav folders) into tmp_path."""

import gzip
import os
import pickle
import struct
import time
import warnings
import wave
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torchaudio.transforms as T
import yaml

from conftest import data_root_or_skip
from fedshare.config.params import accepted_params, check_params
from fedshare.data import DATASETS, audio, images, load_dataset, sensors
from fedshare.data.audio import SpectrogramConfig, spectrograms
from fedshare.data.datasets import COMMON_KEYS
from fedshare.data.wav import IMA_INDEX_STEPS, IMA_STEPS, read_wav
from fedshare.errors import FedshareError
from helpers import write_urbansound_metadata

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "data"


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own processed-tensor cache (never the user's)."""
    monkeypatch.setenv("FEDSHARE_CACHE", str(tmp_path_factory.mktemp("cache")))


# --------------------------------------------------------------------------- real files
def test_mnist_real(mnist_root: Path) -> None:
    data = load_dataset({"name": "mnist", "root": str(mnist_root)})
    assert data.x_train.shape == (60000, 1, 28, 28) and data.x_train.dtype == torch.uint8
    assert data.x_test.shape == (10000, 1, 28, 28)
    assert torch.bincount(data.y_train).tolist() == [
        5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949,
    ]  # fmt: skip
    assert torch.bincount(data.y_test).tolist() == [
        980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009,
    ]  # fmt: skip
    assert data.default_model == "cnn_small"


def test_fmnist_real() -> None:
    root = data_root_or_skip("FashionMNIST/raw/train-images-idx3-ubyte.gz")
    data = load_dataset({"name": "fmnist", "root": str(root)})
    assert len(data.y_train) == 60000 and len(data.y_test) == 10000
    assert data.x_train.shape[1:] == (1, 28, 28) and data.x_train.dtype == torch.uint8
    assert data.y_train[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    assert data.y_test[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]
    assert torch.bincount(data.y_train).tolist() == [6000] * 10
    assert abs(data.x_train.float().mean().item() / 255 - 0.2860) < 1e-3
    assert data.default_model == "lenet_fmnist" and data.class_names[0] == "T-shirt/top"


@pytest.fixture(scope="module")
def cifar_sample_root() -> Path:
    return data_root_or_skip("cifar10_sample/train.npz", "cifar10_sample/test.npz")


def test_cifar10_sample_npz(cifar_sample_root: Path) -> None:
    data = load_dataset({"name": "cifar10_sample", "root": str(cifar_sample_root)})
    assert data.name == "cifar10_sample"
    assert data.x_train.shape == (4000, 3, 32, 32) and data.x_train.dtype == torch.uint8
    assert data.x_test.shape == (1000, 3, 32, 32)
    assert torch.bincount(data.y_train).tolist() == [
        396, 366, 420, 384, 422, 393, 414, 385, 407, 413,
    ]  # fmt: skip
    assert torch.bincount(data.y_test).tolist() == [
        103, 89, 100, 103, 90, 86, 112, 102, 106, 109,
    ]  # fmt: skip
    # put back in the official order: first labels and first pixels of the official batches
    assert data.y_train[:10].tolist() == [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]
    assert data.y_test[:10].tolist() == [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]
    assert data.x_train[0, :, 0, 0].tolist() == [59, 62, 63]
    assert data.x_test[0, :, 0, 0].tolist() == [158, 112, 49]
    assert data.scale == 1 / 255 and data.mean == images.CIFAR10_MEAN
    assert data.augmentation == images.CIFAR_AUGMENTATION
    assert data.default_model == "mobilenetv2_cifar" and data.class_names[9] == "truck"
    assert data.source == "npz cifar10_sample (4000/1000)"


def test_train_subset_is_class_balanced(cifar_sample_root: Path) -> None:
    cfg = {"name": "cifar10_sample", "root": str(cifar_sample_root), "train_subset": 1000}
    data = load_dataset(cfg | {"test_subset": 500}, seed=3)
    assert torch.bincount(data.y_train).tolist() == [100] * 10
    assert torch.bincount(data.y_test).tolist() == [50] * 10
    assert torch.equal(load_dataset(cfg, seed=3).y_train, data.y_train)


def test_cache_serves_second_load(cifar_sample_root: Path, monkeypatch) -> None:
    cfg = {"name": "cifar10_sample", "root": str(cifar_sample_root)}
    first = load_dataset(cfg)
    entries = list(Path(os.environ["FEDSHARE_CACHE"]).glob("cifar10_sample-*.pt"))
    assert len(entries) == 1

    def fail(*args):
        raise AssertionError("the cache should have served this load")

    monkeypatch.setattr(images, "read_cifar_npz", fail)
    start = time.perf_counter()
    second = load_dataset(cfg)
    assert time.perf_counter() - start < 1.0
    assert torch.equal(first.x_train, second.x_train) and torch.equal(first.y_test, second.y_test)
    with pytest.raises(AssertionError, match="cache"):
        load_dataset(cfg | {"cache": False})


def test_static_augment(cifar_sample_root: Path) -> None:
    cfg = {"name": "cifar10_sample", "root": str(cifar_sample_root), "train_subset": 200}
    clean = load_dataset(cfg)
    aug = load_dataset(cfg | {"static_augment": "train"})
    assert not aug.augmentation.active and torch.equal(aug.x_test, clean.x_test)
    assert not torch.equal(aug.x_train, clean.x_train)
    assert torch.equal(aug.x_train, load_dataset(cfg | {"static_augment": "train"}).x_train)
    other = load_dataset(cfg | {"static_augment": "train", "static_augment_seed": 2})
    assert not torch.equal(aug.x_train, other.x_train)
    for i in range(5):  # each image is a crop (padding 4) of the original, maybe flipped
        padded = torch.nn.functional.pad(clean.x_train[i], (4, 4, 4, 4))
        crops = [padded[:, r : r + 32, c : c + 32] for r in range(9) for c in range(9)]
        crops += [c.flip(-1) for c in crops]
        assert any(torch.equal(aug.x_train[i], c) for c in crops)
    everything = load_dataset(cfg | {"static_augment": "all"})
    assert not torch.equal(everything.x_test, clean.x_test)
    with pytest.raises(FedshareError, match="static_augment"):
        load_dataset(cfg | {"static_augment": "sometimes"})


@pytest.fixture(scope="module")
def fsdd(tmp_path_factory: pytest.TempPathFactory):
    """The real FSDD, loaded once for the module (the first load takes a few seconds)."""
    root = data_root_or_skip("fsdd/recordings/0_jackson_0.wav")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEDSHARE_CACHE", str(tmp_path_factory.mktemp("fsdd_cache")))
        start = time.perf_counter()
        data = load_dataset({"name": "fsdd", "root": str(root)})
        first = time.perf_counter() - start
        start = time.perf_counter()
        again = load_dataset({"name": "fsdd", "root": str(root)})
        return data, again, first, time.perf_counter() - start


def test_fsdd_real(fsdd) -> None:
    data, again, first_s, cached_s = fsdd
    assert data.x_train.shape == (2700, 2, 64, 63) and data.x_test.shape == (300, 2, 64, 63)
    assert torch.bincount(data.y_train).tolist() == [270] * 10
    assert torch.bincount(data.y_test).tolist() == [30] * 10
    assert torch.isfinite(data.x_train).all() and data.default_model == "audionet"
    assert torch.equal(data.x_train, again.x_train) and cached_s < first_s


# --------------------------------------------------------------------------- CIFAR pickles
def _pickle(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=2)


def _cifar_images(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)


def write_cifar10(root: Path, per_batch: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    """The python-version layout: data_batch_1..5, test_batch, batches.meta (bytes keys)."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    xs, ys = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x, y = _cifar_images(rng, per_batch), rng.integers(0, 10, per_batch).tolist()
        _pickle(folder / name, {b"batch_label": name.encode(), b"labels": y, b"data": x})
        xs.append(x), ys.append(y)
    _pickle(folder / "batches.meta", {b"label_names": [n.encode() for n in "abcdefghij"]})
    return {
        "x_train": np.concatenate(xs[:5]),
        "y_train": np.concatenate(ys[:5]),
        "x_test": xs[5],
        "y_test": np.array(ys[5]),
    }


def test_cifar10_pickles(tmp_path: Path) -> None:
    truth = write_cifar10(tmp_path)
    data = load_dataset({"name": "cifar10", "root": str(tmp_path), "source": "pickle"})
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    assert np.array_equal(data.x_train.reshape(20, -1).numpy(), truth["x_train"])
    assert data.x_train[0, 1, 0, 0] == truth["x_train"][0, 1024]  # planes R, G, B
    assert data.y_train.tolist() == truth["y_train"].tolist()
    assert data.y_test.tolist() == truth["y_test"].tolist()
    assert data.class_names == list("abcdefghij")
    assert data.source == "python-version pickles"


def test_cifar10_reads_an_npz_pair_and_cache_follows_sources(tmp_path: Path) -> None:
    write_cifar10(tmp_path, seed=0)
    full = tmp_path / "cifar10_npz"
    full.mkdir()
    for split in ("train", "test"):
        x = np.zeros((3, 32, 32, 3), np.uint8)
        np.savez(full / f"{split}.npz", x=x, y=np.arange(3))
    assert len(load_dataset({"name": "cifar10", "root": str(tmp_path)}).y_train) == 20
    cfg = {"name": "cifar10", "root": str(tmp_path), "source": "npz", "npz_dir": "cifar10_npz"}
    npz = load_dataset(cfg)
    assert npz.y_train.tolist() == [0, 1, 2] and npz.source == "npz cifar10_npz (3/3)"
    truth = write_cifar10(tmp_path, seed=1)  # new files: the cache entry must not be reused
    os.utime(tmp_path / "cifar-10-batches-py" / "test_batch", ns=(1, 1))
    data = load_dataset({"name": "cifar10", "root": str(tmp_path)})
    assert data.y_test.tolist() == truth["y_test"].tolist()


def write_sample(root: Path) -> None:
    sample = root / "cifar10_sample"
    sample.mkdir()
    for split in ("train", "test"):
        np.savez(sample / f"{split}.npz", x=np.zeros((3, 32, 32, 3), np.uint8), y=np.arange(3))


def test_cifar10_never_falls_back_to_the_sample(tmp_path: Path) -> None:
    """data=cifar10 is the full set: with only the sample there, it is an error that names
    data=cifar10_sample; the sample loads under its own name."""
    write_sample(tmp_path)
    with pytest.raises(FedshareError, match=r"dataset 'cifar10' not found.*data=cifar10_sample"):
        load_dataset({"name": "cifar10", "root": str(tmp_path)})
    with pytest.raises(FedshareError, match="not CIFAR-10; use data=cifar10_sample"):
        load_dataset(
            {"name": "cifar10", "root": str(tmp_path), "source": "npz", "npz_dir": "cifar10_sample"}
        )
    sample = load_dataset({"name": "cifar10_sample", "root": str(tmp_path)})
    assert sample.name == "cifar10_sample" and sample.source == "npz cifar10_sample (3/3)"


def test_cifar100_pickles(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-100-python"
    truth = {}
    for split, n in (("train", 12), ("test", 5)):
        x, fine, coarse = _cifar_images(rng, n), rng.integers(0, 100, n), rng.integers(0, 20, n)
        _pickle(folder / split, {b"data": x, b"fine_labels": fine, b"coarse_labels": coarse})
        truth[split] = (x, fine, coarse)
    meta = {
        b"fine_label_names": [f"f{i}".encode() for i in range(100)],
        b"coarse_label_names": [f"c{i}".encode() for i in range(20)],
    }
    _pickle(folder / "meta", meta)
    data = load_dataset({"name": "cifar100", "root": str(tmp_path)})
    assert data.num_classes == 100 and data.x_train.shape == (12, 3, 32, 32)
    assert np.array_equal(data.x_test.reshape(5, -1).numpy(), truth["test"][0])
    assert data.y_train.tolist() == truth["train"][1].tolist()
    assert data.class_names[7] == "f7" and data.default_model == "mobilenetv2_cifar"
    coarse = load_dataset({"name": "cifar100", "root": str(tmp_path), "labels": "coarse"})
    assert coarse.num_classes == 20 and coarse.y_test.tolist() == truth["test"][2].tolist()
    assert coarse.class_names[3] == "c3"


# --------------------------------------------------------------------------- UCI HAR
def official_float(v: float) -> str:
    """The UCI HAR text style: 16 characters, 3-digit exponent (e.g. ` -1.0138560e-002`)."""
    mantissa, exponent = f"{v:.7e}".split("e")
    return f"{mantissa}e{int(exponent):+04d}".rjust(16)


def write_uci_har(root: Path, sizes=(("train", 7), ("test", 4)), gzipped: bool = False) -> dict:
    """A tiny `UCI HAR Dataset` folder in the official text format (signals as `.txt.gz` when
    `gzipped`, as in the HAPT rebuild)."""
    rng = np.random.default_rng(0)
    truth = {}
    for split, n in sizes:
        folder = root / "UCI HAR Dataset" / split
        (folder / "Inertial Signals").mkdir(parents=True)
        y = rng.integers(1, 7, n)
        (folder / f"y_{split}.txt").write_text("".join(f"{v}\n" for v in y))
        for signal in sensors.UCI_HAR_SIGNALS:
            x = rng.normal(0, 0.5, size=(n, 128)).astype(np.float32)
            text = "\n".join("".join(official_float(v) for v in row) for row in x) + "\n"
            path = folder / "Inertial Signals" / f"{signal}_{split}.txt"
            if gzipped:
                path.with_name(path.name + ".gz").write_bytes(gzip.compress(text.encode()))
            else:
                path.write_text(text)
            truth[split, signal] = x
        truth[split] = y - 1
    return truth


def test_uci_har(tmp_path: Path) -> None:
    truth = write_uci_har(tmp_path)
    data = load_dataset({"name": "uci_har", "root": str(tmp_path)})
    assert data.x_train.shape == (7, 1, 128, 3) and data.x_test.shape == (4, 1, 128, 3)
    for k, axis in enumerate("xyz"):
        assert np.allclose(data.x_train[:, 0, :, k].numpy(), truth["train", f"body_acc_{axis}"])
    assert data.y_train.tolist() == truth["train"].tolist()
    assert data.y_test.tolist() == truth["test"].tolist()
    assert data.num_classes == 6 and data.default_model == "harnet" and data.mean is None
    assert data.source == "official"
    picked = ["total_acc_z", "body_gyro_x"]
    other = load_dataset({"name": "uci_har", "root": str(tmp_path), "channels": picked})
    assert other.x_test.shape == (4, 1, 128, 2)
    assert np.allclose(other.x_test[:, 0, :, 1].numpy(), truth["test", "body_gyro_x"])
    nine = load_dataset(
        {"name": "uci_har", "root": str(tmp_path), "channels": list(sensors.UCI_HAR_SIGNALS)}
    )
    assert nine.x_train.shape == (7, 1, 128, 9)
    with pytest.raises(FedshareError, match="body_acc_x"):
        load_dataset({"name": "uci_har", "root": str(tmp_path), "channels": ["acc_x"]})


def test_uci_har_gzipped_rebuild_and_its_cache_entry(tmp_path: Path) -> None:
    """`.txt.gz` signals under `<root>/uci_har_hapt/` are found from the root; the README
    beside the folder marks them as rebuilt, and that source gets its own cache entry."""
    folder = tmp_path / "uci_har_hapt"
    truth = write_uci_har(folder, gzipped=True)
    plain = load_dataset({"name": "uci_har", "root": str(tmp_path)})
    assert plain.source == "official" and plain.x_train.shape == (7, 1, 128, 3)
    assert np.allclose(plain.x_test[:, 0, :, 2].numpy(), truth["test", "body_acc_z"])
    (folder / "README.md").write_text('# UCI-HAR "Inertial Signals", rebuilt from the HAPT data\n')
    rebuilt = load_dataset({"name": "uci_har", "root": str(folder)})
    assert rebuilt.source == "rebuilt from HAPT"
    assert torch.equal(rebuilt.x_train, plain.x_train)
    assert len(list(Path(os.environ["FEDSHARE_CACHE"]).glob("uci_har-*.pt"))) == 2
    # one file plain, the others gzipped: each file is read in whichever form exists
    signal = folder / "UCI HAR Dataset/train/Inertial Signals/body_acc_y_train.txt"
    signal.write_bytes(gzip.decompress(signal.with_name(signal.name + ".gz").read_bytes()))
    signal.with_name(signal.name + ".gz").unlink()
    mixed = load_dataset({"name": "uci_har", "root": str(folder), "cache": False})
    assert torch.equal(mixed.x_train, plain.x_train)


@pytest.fixture(scope="module")
def uci_har_hapt(tmp_path_factory: pytest.TempPathFactory):
    """The HAPT rebuild in the shared data folder, found via FEDSHARE_DATA (no data.root)."""
    root = data_root_or_skip("uci_har_hapt/UCI HAR Dataset/train/y_train.txt")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEDSHARE_DATA", str(root))
        mp.setenv("FEDSHARE_CACHE", str(tmp_path_factory.mktemp("har_cache")))
        found = load_dataset({"name": "uci_har"})
        direct = load_dataset({"name": "uci_har", "root": str(root / "uci_har_hapt")})
    return found, direct


def test_uci_har_rebuilt_from_hapt(uci_har_hapt) -> None:
    data, direct = uci_har_hapt
    assert data.x_train.shape == (7352, 1, 128, 3) and data.x_test.shape == (2947, 1, 128, 3)
    assert data.num_classes == 6 and data.x_train.dtype == torch.float32
    assert torch.bincount(data.y_train).tolist() == [1226, 1073, 986, 1286, 1374, 1407]
    assert torch.bincount(data.y_test).tolist() == [496, 471, 420, 491, 532, 537]
    assert data.source == direct.source == "rebuilt from HAPT"
    assert torch.equal(data.x_test, direct.x_test)
    assert abs(data.x_train[..., 0].std().item() - 0.1949) < 1e-3  # body_acc_x (its README)


# --------------------------------------------------------------------------- wav files
def write_pcm(path: Path, samples: np.ndarray, rate: int, width: int) -> None:
    """Integer PCM with the standard library (samples: frames×channels floats in [-1, 1])."""
    frames = samples if samples.ndim == 2 else samples[:, None]
    if width == 1:
        raw = np.clip(np.round(frames * 127 + 128), 0, 255).astype(np.uint8).tobytes()
    else:
        ints = np.round(frames * (2 ** (8 * width - 1) - 1)).astype("<i4")
        raw = ints.view(np.uint8).reshape(-1, 4)[:, :width].tobytes()
    with wave.open(str(path), "wb") as fh:
        fh.setnchannels(frames.shape[1])
        fh.setsampwidth(width)
        fh.setframerate(rate)
        fh.writeframes(raw)


def ima_encode(samples: np.ndarray, block_align: int = 256) -> tuple[bytes, int]:
    """Mono IMA ADPCM in WAV block layout (an encoder for tests only)."""
    per_block = (block_align - 4) * 2 + 1
    out, index = bytearray(), 0
    for lo in range(0, len(samples), per_block):
        block = samples[lo : lo + per_block]
        pred = int(block[0])
        out += struct.pack("<hBx", pred, index)
        nibbles = []
        for s in block[1:]:
            step, delta = IMA_STEPS[index], int(s) - pred
            nib = 8 if delta < 0 else 0
            delta, diff = abs(delta), step >> 3
            for bit, part in ((4, step), (2, step >> 1), (1, step >> 2)):
                if delta >= part:
                    nib |= bit
                    delta -= part
                    diff += part
            pred = max(-32768, min(32767, pred - diff if nib & 8 else pred + diff))
            index = max(0, min(88, index + IMA_INDEX_STEPS[nib]))
            nibbles.append(nib)
        nibbles += [0] * (-len(nibbles) % 8)
        out += bytes(a | (b << 4) for a, b in zip(nibbles[::2], nibbles[1::2], strict=True))
    return bytes(out), per_block


def write_ima(path: Path, samples: np.ndarray, rate: int) -> bytes:
    ints = np.round(samples * 32767).astype(np.int16)
    data, per_block = ima_encode(ints)
    fmt = struct.pack("<HHIIHHHH", 0x11, 1, rate, rate * 256 // per_block, 256, 4, 2, per_block)
    fact = struct.pack("<I", len(ints))
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"fact" + struct.pack("<I", 4) + fact + b"data" + struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return data


def tone(rate: int, seconds: float, freq: float = 440.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    x = 0.5 * np.sin(2 * np.pi * freq * t) * np.linspace(1, 0.2, len(t))
    return np.stack([x * (0.5 + 0.5 * c) for c in range(channels)], 1) if channels > 1 else x


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_read_pcm_wav(tmp_path: Path, width: int) -> None:
    x = tone(16000, 0.1, channels=2)
    write_pcm(tmp_path / "a.wav", x, 16000, width)
    samples, rate = read_wav(tmp_path / "a.wav")
    assert rate == 16000 and samples.shape == (2, 1600) and samples.dtype == np.float32
    assert np.abs(samples - x.T).max() < (0.02 if width == 1 else 1e-4)


def test_read_float_wav(tmp_path: Path) -> None:
    from scipy.io import wavfile

    x = tone(22050, 0.1).astype(np.float32)
    wavfile.write(tmp_path / "f.wav", 22050, x)
    samples, rate = read_wav(tmp_path / "f.wav")
    assert rate == 22050 and np.array_equal(samples[0], x)


def test_read_ima_adpcm_wav(tmp_path: Path) -> None:
    x = tone(11025, 0.2)
    data = write_ima(tmp_path / "ima.wav", x, 11025)
    samples, rate = read_wav(tmp_path / "ima.wav")
    assert rate == 11025 and samples.shape == (1, len(x))
    assert np.corrcoef(samples[0], x)[0, 1] > 0.99  # ADPCM's step size adapts at the start
    assert np.abs(samples[0, 1000:] - x[1000:]).max() < 0.02
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")  # CPython's own IMA decoder (Python < 3.13)
    first = data[:256]  # one block: header, then nibbles low-first (audioop: high-first)
    swapped = bytes(((b & 0x0F) << 4) | (b >> 4) for b in first[4:])
    pred, index = struct.unpack("<hB", first[:3])
    ref, _ = audioop.adpcm2lin(swapped, 2, (pred, index))
    expected = np.frombuffer(ref, dtype=np.int16) / 32768
    assert np.allclose(samples[0, 1:505], expected)


# --------------------------------------------------------------------------- audio pipeline
CLEAN = {"random_pad": False, "time_shift": 0.0, "freq_masks": 0, "time_masks": 0}


def rng_clip(n: int) -> np.ndarray:
    return np.random.default_rng(n).normal(0, 0.1, (1, n)).astype(np.float32)


def test_spectrograms_do_not_depend_on_chunking() -> None:
    clips = [(lambda n=n: (rng_clip(n), 8000)) for n in (800, 3000, 9000, 4000, 100)]
    cfg = replace(audio.FSDD_SPECTROGRAM, seed=5)
    augment = np.array([True, False, True, True, True])
    a = spectrograms(clips, augment, cfg, chunk=2)
    b = spectrograms(clips, augment, cfg, chunk=64)
    assert a.shape == (5, 2, 64, 63) and torch.equal(a, b)
    assert not torch.equal(a, spectrograms(clips, augment, replace(cfg, seed=6)))
    clean = spectrograms(clips, np.zeros(5, bool), cfg)
    assert torch.equal(a[1], clean[1]) and not torch.equal(a[0], clean[0])


def test_masks_fill_with_the_clip_mean() -> None:
    clips = [lambda: (rng_clip(8000), 8000)]
    cfg = replace(audio.FSDD_SPECTROGRAM, random_pad=False, time_shift=0.0, mask_fraction=0.3)
    masked = spectrograms(clips, np.ones(1, bool), cfg)[0]
    clean = spectrograms(clips, np.zeros(1, bool), cfg)[0]
    changed = masked != clean
    rows, cols = changed.all(dim=(0, 2)), changed.all(dim=(0, 1))  # masked mels, frames
    assert rows.any() and cols.any()
    assert torch.equal(changed, (rows[:, None] | cols[None, :]).expand_as(changed))
    assert torch.allclose(masked[:, rows, :], clean.mean().expand_as(masked[:, rows, :]))


def write_urbansound(root: Path) -> list[dict]:
    """A tiny UrbanSound8K: metadata CSV and one short clip per fold, in assorted formats."""
    audio_dir = root / "UrbanSound8K" / "audio"
    rows = []
    kinds = [("pcm16", 44100, 1), ("pcm24", 48000, 2), ("pcm8", 11025, 1), ("float", 22050, 1)]
    kinds += [("ima", 22050, 1)]
    for k in range(10):
        kind, rate, channels = kinds[k % len(kinds)]
        fold, cls = k + 1, (3 * k) % 10
        name = f"{1000 + k}-{cls}-0-{k}.wav"
        path = audio_dir / f"fold{fold}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        x = tone(rate, 0.25 + 0.05 * k, freq=200 + 100 * k, channels=channels)
        if kind == "float":
            from scipy.io import wavfile

            wavfile.write(path, rate, x.astype(np.float32))
        elif kind == "ima":
            write_ima(path, x, rate)
        else:
            write_pcm(path, x, rate, {"pcm8": 1, "pcm16": 2, "pcm24": 3}[kind])
        rows.append(
            {"slice_file_name": name, "fsID": 1000 + k, "start": 0.0, "end": 0.3,
             "salience": 1, "fold": fold, "classID": cls, "class": f"class{cls}"}
        )  # fmt: skip
    write_urbansound_metadata(root, rows)
    return rows


def test_urbansound8k(tmp_path: Path) -> None:
    rows = write_urbansound(tmp_path)
    cfg = {"name": "urbansound8k", "root": str(tmp_path)}
    data = load_dataset(cfg)
    assert data.x_train.shape == (8, 2, 64, 344) and data.x_test.shape == (2, 2, 64, 344)
    assert data.default_model == "audionet" and data.num_classes == 10
    assert data.class_names[3] == "class3" and torch.isfinite(data.x_train).all()
    assert sorted(data.y_train.tolist() + data.y_test.tolist()) == sorted(
        r["classID"] for r in rows
    )
    by_folds = cfg | {"split": "folds", "test_folds": [9, 10]}
    folds = load_dataset(by_folds)
    assert folds.y_test.tolist() == [rows[8]["classID"], rows[9]["classID"]]
    # with the random parts off, clip 0 (16-bit mono 44.1 kHz) is plain torchaudio
    clean = load_dataset(by_folds | {"spectrogram": CLEAN})
    first = tmp_path / "UrbanSound8K/audio/fold1" / rows[0]["slice_file_name"]
    x = torch.from_numpy(read_wav(first)[0])
    x = torch.nn.functional.pad(x.repeat(2, 1), (0, 176000 - x.shape[1]))
    mel = T.MelSpectrogram(44100, n_fft=1024, n_mels=64)
    expected = T.AmplitudeToDB("power", top_db=80)(mel(x))
    assert torch.allclose(clean.x_train[0], expected, atol=1e-4)
    assert not torch.equal(folds.x_train[0], clean.x_train[0])  # FLea's random parts
    test_clean = load_dataset(by_folds | {"spectrogram": {"augment_test": False}})
    assert torch.equal(test_clean.x_test, clean.x_test)
    assert torch.equal(test_clean.x_train, folds.x_train)
    half = load_dataset(cfg | {"spectrogram": {"dtype": "float16", "n_mels": 32}})
    assert half.x_train.dtype == torch.float16 and half.x_train.shape[1:] == (2, 32, 344)


def test_fsdd_split_convention(tmp_path: Path) -> None:
    folder = tmp_path / "fsdd" / "recordings"
    folder.mkdir(parents=True)
    for digit, speaker, take in [(3, "theo", 0), (3, "theo", 4), (3, "theo", 5), (7, "lucas", 49)]:
        write_pcm(folder / f"{digit}_{speaker}_{take}.wav", tone(8000, 0.3), 8000, 2)
    data = load_dataset({"name": "fsdd", "root": str(tmp_path)})
    assert data.y_train.tolist() == [3, 7] and data.y_test.tolist() == [3, 3]
    assert data.x_train.shape == (2, 2, 64, 63)
    (folder / "notes.wav").write_bytes(b"")
    with pytest.raises(FedshareError, match="digit"):
        load_dataset({"name": "fsdd", "root": str(tmp_path)})


# --------------------------------------------------------------------------- errors, configs
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mnist", "MNIST/raw"),
        ("fmnist", "FashionMNIST/raw"),
        ("cifar10", "cifar-10-batches-py"),
        ("cifar100", "cifar-100-python"),
        ("urbansound8k", "UrbanSound8K/metadata/UrbanSound8K.csv"),
        ("fsdd", "fsdd/recordings"),
        ("uci_har", "UCI HAR Dataset"),
    ],
)
def test_missing_data_message(tmp_path: Path, monkeypatch, name: str, expected: str) -> None:
    monkeypatch.setenv("FEDSHARE_DATA", str(tmp_path / "env"))
    monkeypatch.setattr("fedshare.data.sources.DEFAULT_ROOT", tmp_path / "default")
    (tmp_path / "mine").mkdir()
    with pytest.raises(FedshareError) as err:
        load_dataset({"name": name, "root": str(tmp_path / "mine")})
    message = str(err.value)
    assert f"dataset {name!r} not found" in message and expected in message
    assert str(tmp_path / "mine") in message and "data.download=true" in message
    # data.root is the only root searched when given
    assert str(tmp_path / "env") not in message and str(tmp_path / "default") not in message
    with pytest.raises(FedshareError) as err:
        load_dataset({"name": name})
    assert str(tmp_path / "env") in str(err.value) and str(tmp_path / "default") in str(err.value)


def test_every_data_config_matches_its_loader() -> None:
    for path in sorted(CONFIGS.glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        assert cfg["name"] in DATASETS, path
        loader = DATASETS.get(cfg["name"])
        options = {k: v for k, v in cfg.items() if k not in COMMON_KEYS}
        check_params(loader, options, "dataset", cfg["name"], skip=1)
        defaults = accepted_params(loader, skip=1)
        for key, value in options.items():
            default = defaults[key].default
            if key == "spectrogram":
                base = audio.FSDD_SPECTROGRAM if cfg["name"] == "fsdd" else SpectrogramConfig()
                assert audio.spectrogram_config(base, value) == base, path
            elif isinstance(default, tuple):
                assert list(default) == value, (path, key)
            else:
                assert default == value, (path, key)
