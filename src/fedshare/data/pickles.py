"""Reading CIFAR's python-version files without letting a pickle run code.

The official batches are Python 2 pickles (protocol 2) of dicts with byte-string keys whose
`data` is a numpy uint8 array and whose labels and names are lists of ints and byte strings.
Apart from those plain values they reference only three globals: numpy's array
reconstructor (`numpy.core.multiarray._reconstruct`, `numpy._core.multiarray` in numpy 2),
`numpy.ndarray` and `numpy.dtype`. Python 3 writes byte strings in protocol ≤ 2 pickles as
`_codecs.encode(text, "latin1")`, so that call is allowed too, for latin-1 text only. Every
other global is refused, so a tampered file cannot import modules or call functions.
"""

import codecs
import importlib
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedshare.data.files import corrupt_file
from fedshare.errors import FedshareError


def _reconstruct() -> Callable[..., Any]:
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")
    except ImportError:  # numpy < 2
        multiarray = importlib.import_module("numpy.core.multiarray")
    return multiarray._reconstruct


def _latin1_bytes(text: str, encoding: str = "utf-8") -> bytes:
    """`_codecs.encode` as Python 3 uses it to pickle bytes, and nothing else."""
    if not isinstance(text, str) or encoding != "latin1":
        raise pickle.UnpicklingError("_codecs.encode is allowed for latin1 text only")
    return codecs.encode(text, "latin1")


ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct(),
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct(),
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_bytes,
}


class ForbiddenGlobal(pickle.UnpicklingError):
    """The pickle references a global outside `ALLOWED_GLOBALS`."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals CIFAR batches use."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED_GLOBALS[module, name]
        except KeyError:
            raise ForbiddenGlobal(f"{module}.{name}") from None


def pickle_problem(err: Exception) -> str:
    """Why unpickling failed, in a few words."""
    if isinstance(err, EOFError) or "truncated" in str(err):
        return "truncated pickle"
    return f"unreadable pickle: {type(err).__name__}: {err}"


def load_cifar_pickle(path: Path) -> dict[str, Any]:
    """One CIFAR python-version file as a dict with str keys; FedshareError when the file is
    corrupt or references anything but numpy arrays and plain values."""
    try:
        with open(path, "rb") as fh:
            raw = CifarUnpickler(fh, encoding="bytes").load()
    except ForbiddenGlobal as err:
        raise FedshareError(
            f"{path} is not a CIFAR batch: it asks to load {err.name}, which a CIFAR pickle "
            f"never uses, so it was not unpickled; replace it with the official file"
        ) from None
    except Exception as err:  # garbage makes the unpickler raise many types; none runs code
        raise corrupt_file(path, pickle_problem(err)) from None
    if not isinstance(raw, dict):
        raise corrupt_file(path, f"expected a dict, got {type(raw).__name__}")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in raw.items()}
