"""Atomic file writes: a file is either its old version or its complete new one, never cut
off (a kill, a full disk); a temporary that a killed process left is removed by the next run."""

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

TMP_MARK = ".tmp"


def temp_path(path: Path) -> Path:
    """The temporary beside `path`, keeping its extension for writers that read it
    (`curves.png` -> `curves.tmp.png`)."""
    return path.with_name(f"{path.stem}{TMP_MARK}{path.suffix}")


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """`write(temporary)`, then rename it over `path` in one step; on any failure the
    temporary is removed and `path` keeps its previous content."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def clean_temporaries(folder: Path) -> list[str]:
    """Remove the temporaries an interrupted writer left in `folder`; their names."""
    removed = []
    for path in folder.glob(f"*{TMP_MARK}*"):
        name = path.name
        if path.is_file() and (name.endswith(TMP_MARK) or f"{TMP_MARK}." in name):
            path.unlink(missing_ok=True)
            removed.append(name)
    return removed


PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


def png_complete(path: Path) -> bool:
    """Whether `path` is a PNG file written to its end (its last chunk is IEND)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            fh.seek(max(path.stat().st_size - len(PNG_END), 0))
            return head == b"\x89PNG\r\n\x1a\n" and fh.read() == PNG_END
    except OSError:
        return False
