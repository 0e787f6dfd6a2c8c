"""Sensor datasets: UCI HAR inertial windows (FLea's HAR setting)."""

import zipfile
from pathlib import Path

import numpy as np
import torch

from fedshare.data.cache import Payload, cached, dataset_from_payload
from fedshare.data.dataset import Dataset
from fedshare.data.datasets import LoadRequest, register_dataset
from fedshare.data.sources import fetch_archive, find_files, missing_data_error
from fedshare.errors import FedshareError

UCI_HAR_DIR = "UCI HAR Dataset"
UCI_HAR_URL = (
    "https://archive.ics.uci.edu/static/public/240/human+activity+recognition+using+smartphones.zip"
)
UCI_HAR_SIGNALS = tuple(
    f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in "xyz"
)
UCI_HAR_ACTIVITIES = [
    "WALKING",
    "WALKING_UPSTAIRS",
    "WALKING_DOWNSTAIRS",
    "SITTING",
    "STANDING",
    "LAYING",
]


def read_matrix(path: Path) -> np.ndarray:
    """A whitespace-separated text matrix (one window or label per line) as float32."""
    text = path.read_text()
    rows = text.count("\n") + (0 if text.endswith("\n") else 1)
    return np.array(text.split(), dtype=np.float32).reshape(rows, -1)


def _signal_files(split: str, channels: tuple[str, ...]) -> list[str]:
    folder = f"{UCI_HAR_DIR}/{split}/Inertial Signals"
    return [f"{folder}/{c}_{split}.txt" for c in channels]


@register_dataset("uci_har")
def load_uci_har(
    request: LoadRequest,
    *,
    channels: tuple[str, ...] = ("body_acc_x", "body_acc_y", "body_acc_z"),
) -> Dataset:
    """UCI HAR (30 subjects, official subject split: 7,352 train / 2,947 test windows, 6
    activities, labels 0..5) from the official `<root>/UCI HAR Dataset/` folder.

    Each window is 128 steps (2.56 s at 50 Hz, 50 % overlap) of the `Inertial Signals`
    channels, stored 1×128×C (time × channel as an image, as HARNet expects). FLea keeps the
    first three channels of the usual order, body_acc x/y/z, without normalisation
    (flea.md §4.1, §8 item 15): the default. `channels` picks any of the 9 signals
    (body_acc_*, body_gyro_*, total_acc_* for x, y, z), in the order given.
    """
    channels = tuple(channels)
    unknown = [c for c in channels if c not in UCI_HAR_SIGNALS]
    if not channels or unknown:
        raise FedshareError(
            f"data.channels must list signals among {', '.join(UCI_HAR_SIGNALS)}; "
            f"got {list(channels)}"
        )
    relative = (
        [f"{UCI_HAR_DIR}/{split}/y_{split}.txt" for split in ("train", "test")]
        + _signal_files("train", channels)
        + _signal_files("test", channels)
    )
    base = find_files(request.root, relative)
    if base is None:
        if not request.download:
            raise missing_data_error(
                "uci_har",
                request.root,
                relative,
                f"get the UCI HAR Dataset zip from {UCI_HAR_URL} and extract it there",
            )
        base = _download_uci_har(request.root)
    paths = [base / rel for rel in relative]

    def build() -> Payload:
        out: Payload = {"class_names": list(UCI_HAR_ACTIVITIES)}
        for split in ("train", "test"):
            labels = read_matrix(base / f"{UCI_HAR_DIR}/{split}/y_{split}.txt").reshape(-1)
            signals = [read_matrix(base / rel) for rel in _signal_files(split, channels)]
            if any(s.shape != (len(labels), 128) for s in signals):
                shapes = sorted({s.shape for s in signals})
                raise FedshareError(
                    f"UCI HAR {split} signals must be {len(labels)}×128 windows, got {shapes}"
                )
            x = np.stack(signals, axis=-1)[:, None]  # N×1×128×C
            out[f"x_{split}"] = torch.from_numpy(np.ascontiguousarray(x))
            out[f"y_{split}"] = torch.from_numpy(labels.astype(np.int64) - 1)
        return out

    payload = cached(
        "uci_har", {"channels": list(channels), "version": 1}, paths, build, request.cache
    )
    return dataset_from_payload("uci_har", payload, num_classes=6, default_model="harnet")


def _download_uci_har(root: str | None) -> Path:
    """The UCI archive holds `UCI HAR Dataset.zip` inside; extract that one too."""
    base = fetch_archive(UCI_HAR_URL, root)
    inner = base / f"{UCI_HAR_DIR}.zip"
    if inner.exists():
        with zipfile.ZipFile(inner) as archive:
            archive.extractall(base)
    return base
