"""Reading dataset files from the data root, with one clear message when a file is corrupt,
is not a file, or declares more data than it holds."""

import gzip
import math
import os
import stat
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


def not_a_file(path: Path) -> str | None:
    """What is at `path` if it is there but no regular file (a FIFO would block the read
    forever; a folder, device or dangling link is no dataset file); None otherwise."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return None if Path(path).is_file() else "a symbolic link that loops or leads nowhere"
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a named pipe", stat.S_ISSOCK: "a socket"}
    found = [name for test, name in kinds.items() if test(mode)]
    return None if stat.S_ISREG(mode) else (found or ["a device"])[0]


def require_regular_file(path: Path) -> None:
    """Refuse what is not a regular file, naming what it is."""
    kind = not_a_file(path)
    if kind:
        raise FedshareError(f"{path} is not a regular file ({kind}); put the dataset's file there")


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


class DeclaredSizeError(ValueError):
    """An npz array declares more data than its archive holds or than memory can take."""


def available_memory() -> int | None:
    """Bytes of memory this process may still take (Linux: MemAvailable, within the cgroup's
    limit), or None where unknown."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def check_npz_sizes(path: Path) -> None:
    """Compare the size every array of an npz archive declares in its header (shape × item
    size) with the bytes its member holds and, all together, with the memory available,
    before numpy allocates them; raise DeclaredSizeError naming the first that does not fit."""
    total = 0
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read_header(member)
                held = info.file_size - member.tell()
            declared = math.prod(shape) * dtype.itemsize
            if declared > held:
                raise DeclaredSizeError(
                    f"array {info.filename[:-4]!r} declares shape {shape} of {dtype} "
                    f"({declared:,} bytes) but holds {held:,} bytes"
                )
            total += declared
    free = available_memory()
    if free is not None and total > free:
        raise DeclaredSizeError(
            f"its arrays take {total:,} bytes, more than the {free:,} bytes of memory available"
        )


def npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of an `.npz` archive, no pickled objects, sizes checked first
    (`check_npz_sizes`); raises numpy's, zipfile's or DeclaredSizeError's error."""
    check_npz_sizes(path)
    with np.load(path, allow_pickle=False) as arrays:
        return {key: arrays[key] for key in arrays.files}


def npz_problem(err: Exception) -> str:
    """Why an npz archive could not be read (never numpy's advice to allow pickles)."""
    if isinstance(err, DeclaredSizeError):
        return str(err)
    if "allow_pickle" in str(err):
        return "an array holds pickled Python objects, which are never loaded"
    if isinstance(err, zipfile.BadZipFile) and "not a zip file" in str(err):
        return "truncated, or not an npz (zip) archive"
    return f"not a readable npz archive: {type(err).__name__}: {err}"


def read_npz(path: Path, fix: str = REDOWNLOAD) -> dict[str, np.ndarray]:
    """Every array of an `.npz` file (no pickled objects), or a FedshareError naming it."""
    require_regular_file(path)
    try:
        return npz_arrays(path)
    except Exception as err:  # numpy and zipfile raise many types for a damaged archive
        raise corrupt_file(path, npz_problem(err), fix) from None
