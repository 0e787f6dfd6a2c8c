"""Finding run directories and reading them back: summary.json, config.yaml, metrics.jsonl."""

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from fedshare.errors import FedshareError


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """The run directories in `paths`: a path is a run directory (it holds summary.json), a
    summary.json file, or a folder searched recursively (a sweep's `multirun/...` folder).
    Raises FedshareError for a path that does not exist or holds no run."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FedshareError(f"no such run directory or folder: {str(raw)!r}")
        if path.is_file():
            if path.name != "summary.json":
                raise FedshareError(
                    f"{str(raw)!r} is a file, not a run directory or a folder of runs"
                )
            runs = [path.parent]
        elif (path / "summary.json").is_file():
            runs = [path]
        else:
            runs = sorted(p.parent for p in path.rglob("summary.json"))
        if not runs:
            raise FedshareError(f"no runs under {str(raw)!r}: it holds no summary.json")
        found.update(dict.fromkeys(runs))
    return list(found)


def read_json(path: Path) -> Any:
    """A JSON file's content; FedshareError naming the file if it cannot be read."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise FedshareError(f"cannot read {path}: {err}") from None


def _read_history(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's records; a line cut short (a process killed while writing) is skipped."""
    if not path.is_file():
        return []
    history = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            history.append(record)
    return history


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    from omegaconf import OmegaConf

    try:
        config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as err:  # omegaconf raises several types for a malformed file
        raise FedshareError(f"cannot read {path}: {err}") from None
    # a run's config.yaml has string keys at every level
    return cast(dict[str, Any], config) if isinstance(config, dict) else {}


def load_run(path: str | Path) -> dict[str, Any]:
    """One run directory as `{"path", "summary", "config", "history"}`: summary.json, the
    resolved config.yaml (empty if absent) and metrics.jsonl's records (empty if absent)."""
    path = Path(path)
    summary = read_json(path / "summary.json")
    if not isinstance(summary, dict):
        raise FedshareError(f"{path / 'summary.json'} is not a JSON object")
    return {
        "path": path,
        "summary": summary,
        "config": _read_config(path / "config.yaml"),
        "history": _read_history(path / "metrics.jsonl"),
    }
