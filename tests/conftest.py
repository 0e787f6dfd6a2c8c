"""Shared fixtures. Real datasets come from $FEDSHARE_DATA (CI points it at ../shared/datasets).

Where the data is absent a test downloads it if $FEDSHARE_DOWNLOAD=1, else it skips with the
reason — except under CI (CI=true), where a missing dataset is a failure, never a skip.
"""

import os

# One thread everywhere, subprocesses (the CLI tests) included: the tests' models are small and
# run fastest on one, and on a loaded machine two threads wait on each other at every
# operation (10–40× slower measured). Set before torch starts its thread pool.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings

from fedshare.data import Dataset, load_dataset
from fedshare.errors import FedshareError

torch.set_num_threads(1)

settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
"""The default and CI profile: every property test draws the same examples every run (seeded
from the test itself) and keeps no failure database, so the verdict cannot depend on the draw
or on an earlier run. The randomized searches are `slow` tests that set `derandomize=False`."""
settings.register_profile("randomized", derandomize=False, database=None, print_blob=True)
"""New random examples every run for every property test: FEDSHARE_HYPOTHESIS=randomized."""
settings.load_profile(os.environ.get("FEDSHARE_HYPOTHESIS", "deterministic"))


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI must run every data test)")
    pytest.skip(reason)


def data_root_or_skip(*relative: str) -> Path:
    """The data root holding every `relative` path; skip with the reason if there is none."""
    root = os.environ.get("FEDSHARE_DATA")
    if not root:
        _skip_or_fail("FEDSHARE_DATA is not set; point it at a folder with the real datasets")
    base = Path(str(root))
    missing = [rel for rel in relative if not (base / rel).exists()]
    if missing:
        _skip_or_fail(f"{missing} not found under FEDSHARE_DATA={root}")
    return base


def load_real(name: str, **options: Any) -> Dataset:
    """Load a real dataset from the data root; download it if $FEDSHARE_DOWNLOAD=1, else skip."""
    try:
        return load_dataset({"name": name, **options})
    except FedshareError as err:
        if "not found" not in str(err):
            raise
        if os.environ.get("FEDSHARE_DOWNLOAD") == "1":
            return load_dataset({"name": name, "download": True, **options})
        _skip_or_fail(str(err))
        raise


@pytest.fixture
def mnist_root() -> Path:
    return data_root_or_skip("MNIST/raw/train-images-idx3-ubyte.gz")
