"""Small builders shared by the tests."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from fedshare.data import federate, load_dataset
from fedshare.data.federated import FederatedData

DIGITS_TRAIN = {"local_epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9}


def digits_federation(
    partition: object = "iid", num_clients: int = 10, seed: int = 0, **data_options: object
) -> FederatedData:
    return federate(
        load_dataset({"name": "digits", **data_options}, seed=seed), partition, num_clients, seed
    )


def without_wall_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in records]


def run_preset(overrides: list[str], out: Path, timeout_h: float = 24) -> dict:
    """One command-line run (`python -m fedshare.run <overrides>` into `out`, no progress bar)
    that must succeed; its summary.json. The paper-scale tests run their cells this way."""
    command = [sys.executable, "-m", "fedshare.run", *overrides, "progress=false", f"run_dir={out}"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_h * 3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((Path(out) / "summary.json").read_text())


def load_script(name: str) -> ModuleType:
    """A module of the repository's `scripts/` folder (not a package), by file name."""
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
