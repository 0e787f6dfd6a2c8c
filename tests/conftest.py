"""Shared fixtures. Real datasets come from $FEDSHARE_DATA (CI points it at ../shared/datasets)."""

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def data_root_or_skip(*relative: str) -> Path:
    """The data root holding every `relative` path; skip with the reason if there is none."""
    root = os.environ.get("FEDSHARE_DATA")
    if not root:
        pytest.skip("FEDSHARE_DATA is not set; point it at a folder with the real datasets")
    base = Path(root)
    missing = [rel for rel in relative if not (base / rel).exists()]
    if missing:
        pytest.skip(f"{missing} not found under FEDSHARE_DATA={root}")
    return base


@pytest.fixture
def mnist_root() -> Path:
    return data_root_or_skip("MNIST/raw/train-images-idx3-ubyte.gz")
