"""Sensor datasets: UCI HAR inertial windows (FLea's HAR setting)."""

import re
import zipfile
from pathlib import Path

import numpy as np
import torch

from fedshare.data.cache import Payload, cached, dataset_from_payload
from fedshare.data.dataset import Dataset
from fedshare.data.datasets import LoadRequest, register_dataset
from fedshare.data.files import corrupt_file, read_text
from fedshare.data.sources import data_roots, fetch_archive, missing_data_error
from fedshare.errors import FedshareError

UCI_HAR_DIR = "UCI HAR Dataset"
UCI_HAR_HAPT_DIR = "uci_har_hapt"
"""A folder under the root searched when `<root>/UCI HAR Dataset` is absent (the rebuild)."""
HAPT_SOURCE = "rebuilt from HAPT"
HAPT_MARKER = re.compile(r"rebuilt from (the )?HAPT", re.IGNORECASE)
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
    """A whitespace-separated text matrix (one window or label per line, plain or `.gz`) as
    float32; a FedshareError naming the file when it is not a full numeric matrix."""
    text = read_text(path)
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        values = np.array(text.split(), dtype=np.float32)
    except ValueError as err:
        raise corrupt_file(path, f"a value is not a number: {err}") from None
    width = len(lines[0].split()) if lines else 0
    if not lines or width * len(lines) != values.size:
        problem = f"{values.size} values on {len(lines)} lines do not form equal rows"
        raise corrupt_file(path, problem)
    return values.reshape(len(lines), width)


def existing_text_file(path: Path) -> Path | None:
    """`path` itself, else its gzipped twin `<path>.gz`, whichever exists (None if neither)."""
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def _split_files(split: str, channels: tuple[str, ...]) -> list[str]:
    """The labels file, then the channels' signal files, relative to the `UCI HAR Dataset`
    folder's parent."""
    folder = f"{UCI_HAR_DIR}/{split}"
    return [f"{folder}/y_{split}.txt"] + [
        f"{folder}/Inertial Signals/{c}_{split}.txt" for c in channels
    ]


def find_uci_har(root: str | None, relative: list[str]) -> tuple[Path, list[Path]] | None:
    """(the folder holding `UCI HAR Dataset`, the resolved files) from the first root with
    every file, each as `.txt` or `.txt.gz`; `<root>/uci_har_hapt/` counts as a root too."""
    for base in data_roots(root):
        for parent in (base, base / UCI_HAR_HAPT_DIR):
            found = [existing_text_file(parent / rel) for rel in relative]
            if all(found):
                return parent, [f for f in found if f is not None]
    return None


def uci_har_source(parent: Path) -> str:
    """The data's origin: HAPT_SOURCE when the README.md beside `UCI HAR Dataset` says it
    was rebuilt from HAPT, else "official"."""
    readme = parent / "README.md"
    head = readme.read_text(errors="replace")[:2000] if readme.is_file() else ""
    return HAPT_SOURCE if HAPT_MARKER.search(head) else "official"


def read_uci_har_split(label_file: Path, signal_files: list[Path]) -> tuple[np.ndarray, ...]:
    """(N×1×128×C float32 windows, N labels 0..5) of one split."""
    labels = read_matrix(label_file).reshape(-1)
    if labels.size == 0 or not np.isin(labels, np.arange(1, 7)).all():
        raise corrupt_file(label_file, "labels must be the activity ids 1..6, one per line")
    signals = [read_matrix(path) for path in signal_files]
    for path, signal in zip(signal_files, signals, strict=True):
        if signal.shape != (len(labels), 128):
            problem = (
                f"it holds {signal.shape[0]}×{signal.shape[1]} values, expected "
                f"{len(labels)}×128 (one 128-step window per line of {label_file.name})"
            )
            raise corrupt_file(path, problem)
    x = np.stack(signals, axis=-1)[:, None]  # N×1×128×C
    return np.ascontiguousarray(x), labels.astype(np.int64) - 1


@register_dataset("uci_har")
def load_uci_har(
    request: LoadRequest,
    *,
    channels: tuple[str, ...] = ("body_acc_x", "body_acc_y", "body_acc_z"),
) -> Dataset:
    """UCI HAR (30 subjects, official subject split: 7,352 train / 2,947 test windows, 6
    activities, labels 0..5) from `<root>/UCI HAR Dataset/`, else from
    `<root>/uci_har_hapt/UCI HAR Dataset/` (the signals rebuilt from HAPT).

    Each file may be plain (`.txt`) or gzipped (`.txt.gz`). `Dataset.source` says which data
    was read: "rebuilt from HAPT" when a README.md beside `UCI HAR Dataset` says so, else
    "official". Each window is 128 steps (2.56 s at 50 Hz, 50 % overlap) of the `Inertial
    Signals` channels, stored 1×128×C (time × channel as an image, as HARNet expects). FLea
    keeps the first three channels of the usual order, body_acc x/y/z, without normalisation
    (FLea's code; its Section 4.1.1 names the data): the default. `channels` picks any of the 9
    signals (body_acc_*, body_gyro_*, total_acc_* for x, y, z), in the order given.
    """
    channels = tuple(channels)
    unknown = [c for c in channels if c not in UCI_HAR_SIGNALS]
    if not channels or unknown:
        raise FedshareError(
            f"data.channels must list signals among {', '.join(UCI_HAR_SIGNALS)}; "
            f"got {list(channels)}"
        )
    relative = _split_files("train", channels) + _split_files("test", channels)
    found = find_uci_har(request.root, relative)
    if found is None:
        if not request.download:
            raise missing_data_error(
                "uci_har",
                request.root,
                relative,
                f"get the UCI HAR Dataset zip from {UCI_HAR_URL} and extract it there (signal "
                f"files may be gzipped; {UCI_HAR_HAPT_DIR}/{UCI_HAR_DIR} is found too)",
            )
        found = find_uci_har(str(_download_uci_har(request.root)), relative)
        if found is None:
            raise missing_data_error(
                "uci_har", request.root, relative, "the downloaded archive lacks them"
            )
    parent, paths = found
    source = uci_har_source(parent)
    cut = len(relative) // 2

    def build() -> Payload:
        out: Payload = {"class_names": list(UCI_HAR_ACTIVITIES)}
        for split, files in (("train", paths[:cut]), ("test", paths[cut:])):
            x, y = read_uci_har_split(files[0], files[1:])
            out[f"x_{split}"], out[f"y_{split}"] = torch.from_numpy(x), torch.from_numpy(y)
        return out

    options = {"channels": list(channels), "source": source, "version": 1}
    payload = cached("uci_har", options, paths, build, request.cache)
    return dataset_from_payload(
        "uci_har", payload, num_classes=6, default_model="harnet", source=source
    )


def _download_uci_har(root: str | None) -> Path:
    """The UCI archive holds `UCI HAR Dataset.zip` inside; extract that one too."""
    base = fetch_archive(UCI_HAR_URL, root)
    inner = base / f"{UCI_HAR_DIR}.zip"
    if inner.exists():
        with zipfile.ZipFile(inner) as archive:
            archive.extractall(base)
    return base
