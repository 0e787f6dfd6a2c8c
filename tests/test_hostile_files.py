"""Hostile dataset files get one sentence each, before anything is allocated or blocks: an npz
whose header declares more than the file holds or than memory can take, a features file with
a broken `num_classes` or with features that are no numbers, and a features path that is a
pipe, a looping link or a folder (`fedshare.data.files`, `fedshare.data.feature_files`)."""

import io
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from fedshare.data import files, load_dataset
from fedshare.data.files import read_npz
from fedshare.errors import FedshareError


def features(path: Path) -> None:
    load_dataset({"name": "features_file", "path": str(path)})


def small_arrays(**extra) -> dict:
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.normal(size=(6, 3)), "y_train": np.arange(6) % 2}
    arrays.update(x_test=rng.normal(size=(4, 3)), y_test=np.arange(4) % 2)
    return {**arrays, **extra}


def npy_declaring(shape: tuple[int, ...], data: bytes = b"\0" * 64) -> bytes:
    """An .npy member whose header declares `shape` of float64 but holds `data` only."""
    out = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + data


def test_an_npz_declaring_terabytes_is_refused_before_allocating(tmp_path):
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for key, value in small_arrays().items():
            member = npy_declaring((10**12, 8)) if key == "x_train" else None
            if member is None:
                buffer = io.BytesIO()
                np.save(buffer, value)
                member = buffer.getvalue()
            archive.writestr(f"{key}.npy", member)
    declared = "declares shape (1000000000000, 8) of float64 (64,000,000,000,000 bytes)"
    with pytest.raises(FedshareError, match=re.escape(f"'x_train' {declared} but holds 64 bytes")):
        features(path)
    with pytest.raises(FedshareError) as err:
        read_npz(path)
    message = str(err.value)
    assert (
        message.startswith(f"{path} is corrupt (array 'x_train' {declared}") and "\n" not in message
    )


def test_an_npz_larger_than_the_memory_available_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "ok.npz"
    np.savez(path, **small_arrays())
    assert set(read_npz(path)) == {"x_train", "y_train", "x_test", "y_test"}
    monkeypatch.setattr(files, "available_memory", lambda: 100)
    with pytest.raises(FedshareError, match=r"more than the 100 bytes of memory available"):
        read_npz(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"num_classes": np.nan}, r"num_classes must be one whole number of classes, got nan"),
        ({"num_classes": "ten"}, r"num_classes must be one whole number of classes, got 'ten'"),
        ({"num_classes": 2.5}, r"num_classes must be one whole number of classes, got 2.5"),
        ({"x_train": np.array([["a", "b", "c"]] * 6)}, r"x_train holds <U1 values, not numbers"),
        ({"x_test": np.full((4, 3), np.inf)}, r"x_test holds NaN, infinite or complex values"),
    ],
)
def test_a_features_file_with_bad_values_is_one_sentence(tmp_path, extra, message):
    for suffix in (".npz", ".pt"):
        path = tmp_path / f"feats{suffix}"
        arrays = small_arrays(**extra)
        if suffix == ".npz":
            np.savez(path, **arrays)
        elif all(np.asarray(v).dtype.kind in "biuf" for v in extra.values()):
            saved = {
                k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in arrays.items()
            }
            torch.save(saved, path)
        else:
            continue  # a .pt file of weights only holds no strings
        with pytest.raises(FedshareError, match=message) as err:
            features(path)
        assert "\n" not in str(err.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("kind", ["a named pipe", "a symbolic link that loops", "a folder"])
def test_a_features_path_that_is_no_file_is_named_once(tmp_path, kind, monkeypatch):
    monkeypatch.setenv("FEDSHARE_DATA", str(tmp_path))
    path = tmp_path / "feats.npz"
    if kind == "a named pipe":
        os.mkfifo(path)
    elif kind == "a folder":
        path.mkdir()
    else:
        path.symlink_to(path)
    for given in (str(path), path.name):
        with pytest.raises(FedshareError) as err:
            features(Path(given))
        assert str(err.value).startswith(f"{path} is not a regular file ({kind}"), err.value


def test_a_missing_features_file_lists_each_place_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSHARE_DATA", str(tmp_path / "root"))
    (tmp_path / "root").mkdir()
    missing = tmp_path / "nowhere.npz"
    with pytest.raises(FedshareError, match="not found") as err:
        features(missing)
    looked = str(err.value).split("(looked for ", 1)[1].split(");", 1)[0]
    assert looked == str(missing), err.value
