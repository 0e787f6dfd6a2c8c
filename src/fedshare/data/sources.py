"""Where dataset files live: the data root, and the one clear message when they are missing."""

import os
from pathlib import Path

from fedshare.errors import FedshareError

DATA_ENV = "FEDSHARE_DATA"
DEFAULT_ROOT = Path.home() / ".cache" / "fedshare" / "data"


def data_roots(root: str | None) -> list[Path]:
    """Candidate roots in order: `data.root`, then $FEDSHARE_DATA, then the default cache."""
    roots = [Path(root).expanduser()] if root else []
    if os.environ.get(DATA_ENV):
        roots.append(Path(os.environ[DATA_ENV]).expanduser())
    roots.append(DEFAULT_ROOT)
    return list(dict.fromkeys(roots))


def find_files(root: str | None, relative: list[str]) -> Path | None:
    """The first root that holds every one of the `relative` paths, or None."""
    for base in data_roots(root):
        if all((base / rel).exists() for rel in relative):
            return base
    return None


def missing_data_error(name: str, root: str | None, relative: list[str], how: str) -> FedshareError:
    searched = ", ".join(str(base / relative[0]) for base in data_roots(root))
    return FedshareError(
        f"dataset {name!r} not found (looked for {searched}); {how}, point data.root or "
        f"${DATA_ENV} at a folder that has it, or set data.download=true to fetch it"
    )


def download_root(root: str | None) -> Path:
    """Where a download goes: `data.root` if given, else $FEDSHARE_DATA, else the cache."""
    return data_roots(root)[0]


def fetch_archive(url: str, root: str | None, extract_to: str = "") -> Path:
    """Download `url` (a .zip or .tar.gz) into the download root and extract it under
    `<root>/<extract_to>`; return the download root. Needs network access."""
    from torchvision.datasets.utils import download_and_extract_archive

    target = download_root(root)
    extract_root = target / extract_to
    extract_root.mkdir(parents=True, exist_ok=True)
    download_and_extract_archive(
        url, str(target), extract_root=str(extract_root), remove_finished=True
    )
    return target
