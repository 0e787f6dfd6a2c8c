"""Where dataset files live: the data root, and the one clear message when they are missing.

`data.root`, when given, is the only root searched (and where downloads go); it must be an
existing directory. Without it the loaders search $FEDSHARE_DATA, then ~/.cache/fedshare/data.
"""

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from fedshare.errors import FedshareError

DATA_ENV = "FEDSHARE_DATA"
DEFAULT_ROOT = Path.home() / ".cache" / "fedshare" / "data"


def checked_root(root: str) -> Path:
    """`data.root` as a path; a FedshareError unless it is an existing directory."""
    path = Path(root).expanduser()
    if not path.is_dir():
        what = "is a file, not a directory" if path.exists() else "does not exist"
        raise FedshareError(
            f"data.root={root} {what}; point it at an existing folder (create it first for "
            f"data.download=true), or leave it unset to search ${DATA_ENV} and {DEFAULT_ROOT}"
        )
    return path


def data_roots(root: str | None) -> list[Path]:
    """The roots to search: only `data.root` when it is given (it must be an existing
    directory), else $FEDSHARE_DATA, then the default cache."""
    if root:
        return [checked_root(root)]
    roots = [Path(os.environ[DATA_ENV]).expanduser()] if os.environ.get(DATA_ENV) else []
    roots.append(DEFAULT_ROOT)
    return list(dict.fromkeys(roots))


def find_files(root: str | None, relative: list[str]) -> Path | None:
    """The first root that holds every one of the `relative` paths, or None."""
    for base in data_roots(root):
        if all((base / rel).exists() for rel in relative):
            return base
    return None


def missing_data_error(name: str, root: str | None, relative: list[str], how: str) -> FedshareError:
    """The one message for a dataset absent from every searched root."""
    searched = ", ".join(str(base / relative[0]) for base in data_roots(root))
    return FedshareError(
        f"dataset {name!r} not found (looked for {searched}); {how}, point data.root or "
        f"${DATA_ENV} at a folder that has it, or set data.download=true to fetch it"
    )


def download_root(root: str | None) -> Path:
    """Where a download goes: `data.root` if given (it must exist), else $FEDSHARE_DATA, else
    the default cache."""
    return data_roots(root)[0]


@contextlib.contextmanager
def downloading(name: str, target: Path) -> Iterator[None]:
    """A download of dataset `name` into `target`: if it fails (no network, a refused or cut
    connection, a full disk), whatever it left there is removed and a FedshareError says why."""
    before = set(target.rglob("*")) if target.is_dir() else set()
    try:
        yield
    except FedshareError:
        raise
    except Exception as err:  # urllib, http and torchvision raise many types for one cause
        left = set(target.rglob("*")) - before if target.is_dir() else set()
        for path in sorted(left, key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise FedshareError(
            f"cannot download dataset {name!r} into {target} ({reason}); check the network "
            f"connection, or fetch the files elsewhere and point data.root at them"
        ) from None


def fetch_archive(url: str, root: str | None, extract_to: str = "") -> Path:
    """Download `url` (a .zip or .tar.gz) into the download root and extract it under
    `<root>/<extract_to>`; return the download root. Needs network access."""
    from torchvision.datasets.utils import download_and_extract_archive

    target = download_root(root)
    extract_root = target / extract_to
    with downloading(url.rsplit("/", 1)[-1], target):
        extract_root.mkdir(parents=True, exist_ok=True)
        download_and_extract_archive(
            url, str(target), extract_root=str(extract_root), remove_finished=True
        )
    return target
