"""A cache of processed dataset tensors, so the second load of a dataset is fast.

Entries live under `$FEDSHARE_CACHE` (default `~/.cache/fedshare/processed`), one `.pt` file
per (dataset, loader version, options, source-file signature). The signature is each source
file's path, size and modification time, so replacing a source file rebuilds the entry. An
entry that cannot be read (truncated, damaged, or not a payload) is rebuilt with a warning.
The data root itself is never written to.
"""

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from fedshare.data.dataset import Dataset
from fedshare.engine.checkpoint import torch_load_problem

CACHE_ENV = "FEDSHARE_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "fedshare" / "processed"

Payload = dict[str, Any]
"""Tensors plus small plain values (lists of class names, ints) that `torch.load` accepts."""
PAYLOAD_TENSORS = ("x_train", "x_test")
"""Entries every payload holds (labels too, except for extracted features)."""


def cache_dir() -> Path:
    """`$FEDSHARE_CACHE` if set, else `~/.cache/fedshare/processed`."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else DEFAULT_CACHE


def source_signature(paths: Iterable[Path]) -> list[tuple[str, int, int]]:
    """(resolved path, size, mtime in ns) of every source file, in a stable order."""
    rows = []
    for path in paths:
        stat = path.stat()
        rows.append((str(path.resolve()), stat.st_size, stat.st_mtime_ns))
    return sorted(rows)


def cache_key(name: str, options: Mapping[str, Any], sources: Iterable[Path]) -> str:
    """A hex digest of the dataset name, its loader options and its source signature."""
    blob = json.dumps(
        {"name": name, "options": dict(options), "sources": source_signature(sources)},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def cache_path(name: str, options: Mapping[str, Any], sources: Iterable[Path]) -> Path:
    return cache_dir() / f"{name}-{cache_key(name, options, sources)}.pt"


def read_entry(path: Path) -> Payload | None:
    """The payload in cache entry `path`, or None (with a warning naming the file, which is then
    rebuilt) when it is truncated, damaged or not a payload."""
    try:
        payload = torch.load(path, mmap=True, weights_only=True)
    except Exception as err:  # torch raises many types for a damaged file
        problem = torch_load_problem(err)
    else:
        if isinstance(payload, dict) and all(
            isinstance(payload.get(k), torch.Tensor) for k in PAYLOAD_TENSORS
        ):
            return payload
        problem = "not a dataset payload"
    warnings.warn(f"rebuilding the corrupt dataset cache entry {path} ({problem})", stacklevel=3)
    return None


def cached(
    name: str,
    options: Mapping[str, Any],
    sources: Iterable[Path],
    build: Callable[[], Payload],
    enabled: bool = True,
) -> Payload:
    """`build()`'s payload, read from the cache when an entry for these inputs exists.

    `options` must hold everything besides the source files that changes the result (include
    a loader version string when the processing changes). A cache that cannot be written only
    costs a warning.
    """
    if not enabled:
        return build()
    path = cache_path(name, options, list(sources))
    if path.exists():
        entry = read_entry(path)
        if entry is not None:
            return entry
    payload = build()
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as fh:
            tmp = Path(fh.name)
            torch.save(payload, fh)
        tmp.chmod(0o644)
        os.replace(tmp, path)
    except OSError as err:
        warnings.warn(f"could not write the dataset cache {path} ({err})", stacklevel=2)
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return payload


def dataset_from_payload(name: str, payload: Payload, **fields: Any) -> Dataset:
    """A `Dataset` from a payload with x_train/y_train/x_test/y_test (and class_names)."""
    return Dataset(
        name,
        payload["x_train"],
        payload["y_train"],
        payload["x_test"],
        payload["y_test"],
        class_names=payload.get("class_names"),
        **fields,
    )
