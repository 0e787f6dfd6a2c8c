"""Hostile or broken data files are refused when loaded, naming the file: no allocation a
header asks for, no pipe read forever, no label outside the classes reaching training; a
download without a network leaves nothing behind."""

import os
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedshare.data import load_dataset
from fedshare.data.datasets import MAX_CLASSES, check_labels
from fedshare.errors import FedshareError
from test_cli import FAST, fedshare_run


def features_file(path: Path, y_train, num_classes=None) -> Path:
    arrays = {
        "x_train": np.zeros((len(y_train), 3), np.float32),
        "y_train": np.asarray(y_train, np.int64),
        "x_test": np.zeros((2, 3), np.float32),
        "y_test": np.zeros(2, np.int64),
    }
    if num_classes is not None:
        arrays["num_classes"] = np.asarray(num_classes)
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    ("labels", "declared", "message"),
    [
        ([0, 1], 10**9, "has 1000000000 classes"),
        ([0, 2**40], None, "more than the 100000"),
        ([0, 5], 3, "labels up to 5 but declares 3"),
        ([0, -1], None, "non-negative"),
    ],
)
def test_a_features_file_with_absurd_classes_or_labels_is_refused_naming_it(
    tmp_path, labels, declared, message
):
    path = features_file(tmp_path / "f.npz", labels, declared)
    with pytest.raises(FedshareError, match=message) as caught:
        load_dataset({"name": "features_file", "path": str(path)})
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("label", [255, 99, -1, 2**40])
def test_labels_outside_the_classes_are_refused_at_load_time(label):
    data = load_dataset({"name": "digits"})
    bad = data.y_train.clone()
    bad[3] = label
    with pytest.raises(FedshareError, match=r"outside the classes 0\.\.9"):
        check_labels(replace(data, y_train=bad))
    with pytest.raises(FedshareError, match="not integers"):
        check_labels(replace(data, y_test=data.y_test.float()))
    assert MAX_CLASSES >= 1000


def test_a_fifo_in_place_of_a_data_file_is_refused_not_read_forever(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"]
    names += ["t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    for name in names:
        os.mkfifo(raw / name)
    outcome: list[BaseException] = []

    def load() -> None:
        try:
            load_dataset({"name": "mnist", "root": str(tmp_path), "cache": False})
        except BaseException as err:
            outcome.append(err)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():  # unblock the reader: open the pipe's other end once
        with open(raw / names[0], "wb"):
            pass
        pytest.fail("loading blocked on a FIFO")
    assert outcome and isinstance(outcome[0], FedshareError)
    assert "is not a regular file" in str(outcome[0]) and str(raw) in str(outcome[0])


def test_a_download_without_network_is_one_sentence_and_leaves_nothing(tmp_path):
    """An unreachable proxy stands for a missing network (deterministic, no traffic)."""
    root = tmp_path / "data"
    root.mkdir()
    no_network = {"https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    proc = fedshare_run(
        *FAST,
        "data=mnist",
        f"data.root={root}",
        "data.download=true",
        f"run_dir={tmp_path / 'run'}",
        cwd=tmp_path,
        env=no_network,
    )
    assert proc.returncode == 2, proc.stderr
    assert "cannot download dataset 'mnist'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(root.iterdir()) == [] and not (tmp_path / "run").exists()
