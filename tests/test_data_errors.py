"""Bad data roots and damaged files: one clear FedshareError naming the file, never a traceback
and never code run from a data file. Damaged files are truncated or garbled copies made in
tmp_path (the shared originals are only read)."""

import gzip
import os
import pickle
import pickletools
import re
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import data_root_or_skip
from fedshare.data import load_dataset
from fedshare.data.pickles import load_cifar_pickle
from fedshare.engine.checkpoint import load_checkpoint, save_checkpoint
from fedshare.errors import FedshareError

CIFAR10_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own processed-tensor cache (never the user's)."""
    monkeypatch.setenv("FEDSHARE_CACHE", str(tmp_path_factory.mktemp("cache")))


def corrupt(path: Path, problem: str) -> str:
    """A pattern for the start of the corrupt-file message."""
    return re.escape(f"{path} is corrupt ({problem}")


def truncate(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def copy_real(relative: str, dest: Path) -> Path:
    """A writable copy of `<FEDSHARE_DATA>/<relative>` at `dest/<relative>`."""
    source = data_root_or_skip(relative) / relative
    target = dest / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


# --------------------------------------------------------------------------- data.root
def test_data_root_must_be_an_existing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_folder"
    with pytest.raises(FedshareError, match="does not exist") as err:
        load_dataset({"name": "mnist", "root": str(missing)})
    assert f"data.root={missing}" in str(err.value)
    afile = tmp_path / "a_file"
    afile.write_text("")
    with pytest.raises(FedshareError, match="is a file, not a directory"):
        load_dataset({"name": "uci_har", "root": str(afile)})


def test_data_root_is_the_only_root_searched(tmp_path: Path) -> None:
    """MNIST is in $FEDSHARE_DATA but not in data.root: no silent fallback."""
    env_root = data_root_or_skip("MNIST/raw/train-images-idx3-ubyte.gz")
    with pytest.raises(FedshareError, match="dataset 'mnist' not found") as err:
        load_dataset({"name": "mnist", "root": str(tmp_path)})
    assert str(tmp_path) in str(err.value) and str(env_root) not in str(err.value)


# --------------------------------------------------------------------------- IDX (MNIST)
MNIST_FILES = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
]


@pytest.fixture
def mnist_copy(tmp_path: Path) -> Path:
    for name in MNIST_FILES:
        copy_real(f"MNIST/raw/{name}.gz", tmp_path)
    return tmp_path


def test_truncated_gzip_idx(mnist_copy: Path) -> None:
    images = mnist_copy / "MNIST/raw/t10k-images-idx3-ubyte.gz"
    truncate(images)
    with pytest.raises(FedshareError) as err:
        load_dataset({"name": "mnist", "root": str(mnist_copy)})
    assert str(err.value) == (
        f"{images} is corrupt (truncated gzip stream); delete it and download it again "
        "(data.download=true) or restore it from its archive"
    )


def test_idx_with_missing_data_or_a_garbled_header(mnist_copy: Path) -> None:
    labels = mnist_copy / "MNIST/raw/t10k-labels-idx1-ubyte.gz"
    raw = gzip.decompress(labels.read_bytes())
    labels.write_bytes(gzip.compress(raw[:-10]))  # a complete gzip stream, short of data
    with pytest.raises(FedshareError, match="header promises 10000 bytes of data, it holds 9990"):
        load_dataset({"name": "mnist", "root": str(mnist_copy)})
    labels.write_bytes(gzip.compress(b"\x12\x34" + raw[2:]))
    with pytest.raises(FedshareError, match=corrupt(labels, "no IDX header")):
        load_dataset({"name": "mnist", "root": str(mnist_copy)})
    labels.write_bytes(b"plain text, not gzip")
    with pytest.raises(FedshareError, match=corrupt(labels, "not a valid gzip file")):
        load_dataset({"name": "mnist", "root": str(mnist_copy)})


# --------------------------------------------------------------------------- npz (CIFAR-10)
@pytest.mark.parametrize("damage", ["truncated", "garbled", "not npz", "pickled", "no y"])
def test_damaged_npz(tmp_path: Path, damage: str) -> None:
    """cifar10_sample: a good test.npz, and train.npz made from a damaged copy of it."""
    good = copy_real("cifar10_sample/test.npz", tmp_path)
    train = good.with_name("train.npz")
    shutil.copyfile(good, train)
    if damage == "truncated":
        truncate(train, 0.7)
    elif damage == "garbled":
        raw = bytearray(train.read_bytes())
        raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)
        train.write_bytes(bytes(raw))
    elif damage == "not npz":
        train.write_text("x,y\n1,2\n")
    elif damage == "pickled":
        np.savez(train, x=np.array([{"a": 1}], dtype=object), y=np.zeros(1))
    else:
        np.savez(train, x=np.zeros((2, 32, 32, 3), np.uint8))
    with pytest.raises(FedshareError) as err:
        load_dataset({"name": "cifar10_sample", "root": str(tmp_path)})
    message = str(err.value)
    assert message.startswith(f"{train} is corrupt (") and "\n" not in message
    assert "allow_pickle" not in message
    if damage == "no y":
        assert "no array 'y'" in message


# --------------------------------------------------------------------------- wav (FSDD)
def test_a_wav_that_is_not_a_wav(tmp_path: Path) -> None:
    folder = tmp_path / "fsdd" / "recordings"
    for take in (0, 5):
        copy_real(f"fsdd/recordings/3_theo_{take}.wav", tmp_path)
    fake = folder / "3_theo_6.wav"
    fake.write_text("ID3 this is an mp3 tag, not a RIFF/WAVE header")
    with pytest.raises(FedshareError) as err:
        load_dataset({"name": "fsdd", "root": str(tmp_path)})
    assert str(err.value).startswith(f"{fake} is corrupt (not a WAV file: no RIFF/WAVE header)")
    fake.write_bytes(b"")
    with pytest.raises(FedshareError, match=corrupt(fake, "empty file")):
        load_dataset({"name": "fsdd", "root": str(tmp_path)})
    fake.write_bytes((folder / "3_theo_5.wav").read_bytes()[:30])  # cut inside the fmt chunk
    with pytest.raises(FedshareError, match=corrupt(fake, "no complete fmt chunk")):
        load_dataset({"name": "fsdd", "root": str(tmp_path)})


# --------------------------------------------------------------------------- text (UCI HAR)
def write_tiny_har(root: Path, n: int = 3, gzipped: bool = False) -> Path:
    """A `UCI HAR Dataset` folder with n windows per split; returns the folder."""
    rng = np.random.default_rng(0)
    folder = root / "UCI HAR Dataset"
    for split in ("train", "test"):
        signals = folder / split / "Inertial Signals"
        signals.mkdir(parents=True)
        (folder / split / f"y_{split}.txt").write_text("".join(f"{k % 6 + 1}\n" for k in range(n)))
        for channel in ("body_acc_x", "body_acc_y", "body_acc_z"):
            rows = rng.normal(size=(n, 128))
            text = "".join(" ".join(f"{v:.7e}" for v in row) + "\n" for row in rows)
            path = signals / f"{channel}_{split}.txt"
            if gzipped:
                path.with_name(path.name + ".gz").write_bytes(gzip.compress(text.encode()))
            else:
                path.write_text(text)
    return folder


def test_text_matrix_with_a_missing_value(tmp_path: Path) -> None:
    folder = write_tiny_har(tmp_path)
    signal = folder / "test/Inertial Signals/body_acc_y_test.txt"
    lines = signal.read_text().splitlines()
    lines[1] = lines[1].rsplit(" ", 1)[0]  # drop one value of the second window
    signal.write_text("\n".join(lines) + "\n")
    with pytest.raises(FedshareError) as err:
        load_dataset({"name": "uci_har", "root": str(tmp_path)})
    assert str(err.value).startswith(
        f"{signal} is corrupt (383 values on 3 lines do not form equal rows)"
    )


def test_text_matrix_with_wrong_rows_bad_numbers_or_bad_labels(tmp_path: Path) -> None:
    folder = write_tiny_har(tmp_path)
    signal = folder / "train/Inertial Signals/body_acc_z_train.txt"
    lines = signal.read_text().splitlines()
    signal.write_text("\n".join(lines[:2]) + "\n")
    with pytest.raises(FedshareError, match=r"holds 2×128 values, expected 3×128"):
        load_dataset({"name": "uci_har", "root": str(tmp_path)})
    signal.write_text("\n".join(lines).replace(lines[0].split()[5], "nan?", 1) + "\n")
    with pytest.raises(FedshareError, match=corrupt(signal, "a value is not a number")):
        load_dataset({"name": "uci_har", "root": str(tmp_path)})
    signal.write_text("\n".join(lines) + "\n")
    labels = folder / "train/y_train.txt"
    labels.write_text("1\n7\n2\n")
    with pytest.raises(FedshareError, match=corrupt(labels, "labels must be")):
        load_dataset({"name": "uci_har", "root": str(tmp_path)})


def test_truncated_gzipped_signal(tmp_path: Path) -> None:
    folder = write_tiny_har(tmp_path, n=40, gzipped=True)
    signal = folder / "test/Inertial Signals/body_acc_x_test.txt.gz"
    truncate(signal)
    with pytest.raises(FedshareError, match=corrupt(signal, "truncated gzip stream")):
        load_dataset({"name": "uci_har", "root": str(tmp_path)})


# --------------------------------------------------------------------------- processed cache
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "foreign"])
def test_corrupt_cache_entry_is_rebuilt(tmp_path: Path, damage: str) -> None:
    write_tiny_har(tmp_path / "data")
    cfg = {"name": "uci_har", "root": str(tmp_path / "data")}
    first = load_dataset(cfg)
    (entry,) = Path(os.environ["FEDSHARE_CACHE"]).glob("uci_har-*.pt")
    if damage == "truncated":
        truncate(entry)
    elif damage == "garbage":
        entry.write_bytes(os.urandom(2000))
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        torch.save({"weights": torch.zeros(3)}, entry)
    with pytest.warns(UserWarning, match=f"rebuilding the corrupt dataset cache entry {entry}"):
        again = load_dataset(cfg)
    assert torch.equal(again.x_train, first.x_train) and torch.equal(again.y_test, first.y_test)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt entry is read back without complaint
        third = load_dataset(cfg)
    assert torch.equal(third.x_test, first.x_test)


# --------------------------------------------------------------------------- checkpoints
CHECKPOINT = {
    "rounds_completed": 2,
    "strategy": {"model": {"w": torch.ones(4)}},
    "history": [{"round": 1}],
    "traffic": {"up": 1, "down": 2},
    "wall_time_s": 1.5,
    "rng": {"torch": torch.get_rng_state()},
    "fingerprint": "abc",
    "config": {"rounds": 4},
}


class RunsCode:
    """Unpickling this calls os.system, creating a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def test_a_good_checkpoint_loads(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "checkpoint.pt", CHECKPOINT)
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    assert state["rounds_completed"] == 2
    assert torch.equal(state["strategy"]["model"]["w"], torch.ones(4))


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("truncated", "the file is truncated, damaged or not written by torch.save"),
        ("empty", "the file is empty or truncated"),
        ("text", "it is damaged or holds objects other than tensors and plain values"),
        ("code", "it is damaged or holds objects other than tensors and plain values"),
        ("tensor", "it holds a Tensor, not a dict"),
        ("weights", "it has no rounds_completed, strategy, history, traffic"),
    ],
)
def test_unreadable_checkpoint(tmp_path: Path, damage: str, problem: str) -> None:
    path, marker = tmp_path / "checkpoint.pt", tmp_path / "marker"
    save_checkpoint(path, CHECKPOINT)
    if damage == "truncated":
        truncate(path)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "text":
        path.write_text("not a checkpoint")
    elif damage == "code":
        torch.save({**CHECKPOINT, "strategy": RunsCode(marker)}, path)
    elif damage == "tensor":
        torch.save(torch.zeros(3), path)
    else:
        torch.save({"model": {"w": torch.zeros(3)}}, path)
    with pytest.raises(FedshareError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert message.startswith(f"{path} cannot be read as a fedshare checkpoint ({problem}")
    assert "weights_only" not in message and "\n" not in message
    assert not marker.exists()


# --------------------------------------------------------------------------- CIFAR pickles
def _tuple(items: list[bytes]) -> bytes:
    return b"".join(items) + {1: pickle.TUPLE1, 2: pickle.TUPLE2, 3: pickle.TUPLE3}[len(items)]


def _py2(obj: object) -> bytes:
    """Python 2 cPickle's protocol-2 opcodes for the values in CIFAR files (without memo
    puts): `str` as SHORT_BINSTRING/BINSTRING, ints, lists, dicts, and uint8 arrays the way
    numpy 1.x reduced them (`numpy.core.multiarray._reconstruct`, `numpy.dtype('u1')`)."""
    if isinstance(obj, bytes):
        if len(obj) < 256:
            return pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj
        return pickle.BINSTRING + struct.pack("<i", len(obj)) + obj
    if isinstance(obj, int):
        if 0 <= obj < 256:
            return pickle.BININT1 + bytes([obj])
        if 0 <= obj < 65536:
            return pickle.BININT2 + struct.pack("<H", obj)
        return pickle.BININT + struct.pack("<i", obj)
    if isinstance(obj, list):
        return pickle.EMPTY_LIST + pickle.MARK + b"".join(map(_py2, obj)) + pickle.APPENDS
    if isinstance(obj, dict):
        items = b"".join(_py2(k) + _py2(v) for k, v in obj.items())
        return pickle.EMPTY_DICT + pickle.MARK + items + pickle.SETITEMS
    assert isinstance(obj, np.ndarray) and obj.dtype == np.uint8
    dtype = b"cnumpy\ndtype\n" + _tuple([_py2(b"u1"), _py2(0), _py2(1)]) + pickle.REDUCE
    dtype_state = [_py2(3), _py2(b"|"), b"NNN", _py2(-1), _py2(-1), _py2(0)]
    dtype += pickle.MARK + b"".join(dtype_state) + pickle.TUPLE + pickle.BUILD
    array = b"cnumpy.core.multiarray\n_reconstruct\n"
    array += _tuple([b"cnumpy\nndarray\n", _tuple([_py2(0)]), _py2(b"b")]) + pickle.REDUCE
    shape = _tuple([_py2(n) for n in obj.shape])
    state = [_py2(1), shape, dtype, pickle.NEWFALSE, _py2(obj.tobytes())]
    return array + pickle.MARK + b"".join(state) + pickle.TUPLE + pickle.BUILD


def py2_pickle(obj: object) -> bytes:
    return pickle.PROTO + b"\x02" + _py2(obj) + pickle.STOP


def cifar_batch(n: int, seed: int, label_key: bytes = b"labels") -> dict[bytes, object]:
    rng = np.random.default_rng(seed)
    return {
        b"batch_label": f"batch {seed}".encode(),
        label_key: rng.integers(0, 10, n).tolist(),
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [f"img_{seed}_{i}.png".encode() for i in range(n)],
    }


def write_py2_cifar10(root: Path, n: int = 3) -> list[dict[bytes, object]]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = [cifar_batch(n, seed) for seed in range(6)]
    for name, batch in zip(CIFAR10_BATCHES, batches, strict=True):
        (folder / name).write_bytes(py2_pickle(batch))
    meta = {b"label_names": [f"class{i}".encode() for i in range(10)], b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(py2_pickle(meta))
    return batches


def test_python2_cifar_pickles_load(tmp_path: Path) -> None:
    batches = write_py2_cifar10(tmp_path)
    raw = (tmp_path / "cifar-10-batches-py/data_batch_1").read_bytes()
    globals_used = {arg for op, arg, _ in pickletools.genops(raw) if op.name == "GLOBAL"}
    assert globals_used == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}
    assert pickle.loads(raw, encoding="bytes")[b"labels"] == batches[0][b"labels"]
    data = load_dataset({"name": "cifar10", "root": str(tmp_path), "source": "pickle"})
    assert data.x_train.shape == (15, 3, 32, 32) and data.x_test.shape == (3, 3, 32, 32)
    assert np.array_equal(data.x_test.reshape(3, -1).numpy(), batches[5][b"data"])
    assert data.y_train.tolist() == [y for b in batches[:5] for y in b[b"labels"]]
    assert data.class_names[4] == "class4" and data.source == "python-version pickles"


def test_python2_cifar100_pickles_load(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    train = cifar_batch(4, 0, b"fine_labels") | {b"coarse_labels": [1, 2, 3, 19]}
    test = cifar_batch(2, 1, b"fine_labels") | {b"coarse_labels": [0, 5]}
    (folder / "train").write_bytes(py2_pickle(train))
    (folder / "test").write_bytes(py2_pickle(test))
    meta = {
        b"fine_label_names": [f"f{i}".encode() for i in range(100)],
        b"coarse_label_names": [f"c{i}".encode() for i in range(20)],
    }
    (folder / "meta").write_bytes(py2_pickle(meta))
    data = load_dataset({"name": "cifar100", "root": str(tmp_path), "labels": "coarse"})
    assert data.y_train.tolist() == [1, 2, 3, 19] and data.class_names[19] == "c19"


def test_python3_protocol2_cifar_pickle_loads(tmp_path: Path) -> None:
    """Python 3 writes bytes in protocol 2 as `_codecs.encode(text, 'latin1')`: allowed."""
    path = tmp_path / "batch"
    batch = cifar_batch(2, 0)
    path.write_bytes(pickle.dumps(batch, protocol=2))
    loaded = load_cifar_pickle(path)
    assert loaded["filenames"] == batch[b"filenames"]
    assert np.array_equal(loaded["data"], batch[b"data"])


class CallsBuiltin:
    """Unpickling this runs `exec`, creating a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize(("payload", "forbidden"), [(RunsCode, "system"), (CallsBuiltin, "exec")])
@pytest.mark.parametrize("target", ["data_batch_1", "test_batch", "batches.meta"])
def test_malicious_cifar_pickle_is_refused(tmp_path, payload, forbidden, target) -> None:
    write_py2_cifar10(tmp_path / "data")
    marker = tmp_path / "marker"
    evil = pickle.dumps({b"data": payload(marker), b"labels": [1]}, protocol=2)
    pickle.loads(evil)  # the exploit is real: plain pickle runs it
    assert marker.exists()
    marker.unlink()
    path = tmp_path / "data" / "cifar-10-batches-py" / target
    path.write_bytes(evil)
    with pytest.raises(FedshareError) as err:
        load_dataset({"name": "cifar10", "root": str(tmp_path / "data"), "cache": False})
    message = str(err.value)
    assert message.startswith(f"{path} is not a CIFAR batch: it asks to load ")
    assert forbidden in message and "\n" not in message
    assert not marker.exists()


def test_other_pickle_tricks_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "batch"
    codec = pickle.PROTO + b"\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x05\x00\x00\x00rot13"
    path.write_bytes(codec + pickle.TUPLE2 + pickle.REDUCE + pickle.STOP)
    with pytest.raises(FedshareError, match="latin1 text only"):
        load_cifar_pickle(path)
    path.write_bytes(pickle.dumps({"a": Path("x")}, protocol=4))
    with pytest.raises(FedshareError, match=r"asks to load pathlib\.PosixPath"):
        load_cifar_pickle(path)
    path.write_bytes(pickle.dumps([1, 2], protocol=2))
    with pytest.raises(FedshareError, match=corrupt(path, "expected a dict, got list")):
        load_cifar_pickle(path)


def test_truncated_cifar_pickle(tmp_path: Path) -> None:
    write_py2_cifar10(tmp_path, n=40)
    batch = tmp_path / "cifar-10-batches-py/data_batch_3"
    truncate(batch)
    with pytest.raises(FedshareError, match=corrupt(batch, "truncated pickle")):
        load_dataset({"name": "cifar10", "root": str(tmp_path), "source": "pickle"})
    batch.write_bytes(py2_pickle({b"data": np.zeros((2, 3072), np.uint8)}))
    with pytest.raises(FedshareError, match=corrupt(batch, "no 'labels' entry")):
        load_dataset({"name": "cifar10", "root": str(tmp_path), "source": "pickle"})


def test_normalisation_constants_can_be_given_and_are_checked():
    own = load_dataset({"name": "digits"})
    code = load_dataset({"name": "digits", "mean": [0.5], "std": [0.25]})
    assert code.mean == (0.5,) and code.std == (0.25,)
    x = own.x_train[:4]
    expected = (x * own.scale - 0.5) / 0.25
    assert torch.allclose(code.prepare(x), expected.to(code.prepare(x).dtype), atol=1e-6)
    with pytest.raises(FedshareError, match="give both"):
        load_dataset({"name": "digits", "mean": [0.5]})
    with pytest.raises(FedshareError, match=r"need 1 value\(s\) each"):
        load_dataset({"name": "digits", "mean": [0.5, 0.5], "std": [0.2, 0.2]})
    with pytest.raises(FedshareError, match="must be positive"):
        load_dataset({"name": "digits", "mean": [0.5], "std": [0.0]})
