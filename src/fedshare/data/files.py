"""Reading dataset files from the data root, with one clear message when a file is corrupt."""

import gzip
import zipfile
import zlib
from pathlib import Path

import numpy as np

from fedshare.errors import FedshareError

REDOWNLOAD = "delete it and download it again (data.download=true) or restore it from its archive"


def corrupt_file(path: Path, problem: str, fix: str = REDOWNLOAD) -> FedshareError:
    """The standard sentence for a damaged file: which file, what is wrong, how to fix it."""
    return FedshareError(f"{path} is corrupt ({problem}); {fix}")


def gzip_problem(err: Exception) -> str:
    """A short description of why a gzip stream could not be read."""
    if isinstance(err, EOFError):
        return "truncated gzip stream"
    if isinstance(err, gzip.BadGzipFile):
        return f"not a valid gzip file: {err}"
    return f"damaged gzip data: {err}"


def require_regular_file(path: Path) -> None:
    """Refuse what is not a regular file (a FIFO would block the read forever, a device or a
    folder is no dataset file), naming it."""
    if Path(path).exists() and not Path(path).is_file():
        raise FedshareError(
            f"{path} is not a regular file (a pipe, device or folder); put the dataset's file there"
        )


def read_bytes(path: Path) -> bytes:
    """The contents of `path`, decompressed when its name ends in `.gz`."""
    require_regular_file(path)
    if not str(path).endswith(".gz"):
        return Path(path).read_bytes()
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise corrupt_file(path, gzip_problem(err)) from None


def read_text(path: Path) -> str:
    """The ASCII/UTF-8 text of `path` (plain or `.gz`)."""
    try:
        return read_bytes(path).decode()
    except UnicodeDecodeError:
        raise corrupt_file(path, "not a text file") from None


def npz_problem(err: Exception) -> str:
    """Why an npz archive could not be read (never numpy's advice to allow pickles)."""
    if "allow_pickle" in str(err):
        return "an array holds pickled Python objects, which are never loaded"
    if isinstance(err, zipfile.BadZipFile) and "not a zip file" in str(err):
        return "truncated, or not an npz (zip) archive"
    return f"not a readable npz archive: {type(err).__name__}: {err}"


def read_npz(path: Path, fix: str = REDOWNLOAD) -> dict[str, np.ndarray]:
    """Every array of an `.npz` file (no pickled objects), or a FedshareError naming it."""
    require_regular_file(path)
    try:
        with np.load(path, allow_pickle=False) as arrays:
            return {key: arrays[key] for key in arrays.files}
    except Exception as err:  # numpy and zipfile raise many types for a damaged archive
        raise corrupt_file(path, npz_problem(err), fix) from None
