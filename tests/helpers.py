"""Small builders shared by the tests."""

import csv
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.data.federated import FederatedData
from fedshare.strategies.base import Strategy, Update

if TYPE_CHECKING:
    from fedshare.engine.simulation import RunResult
    from fedshare.reproduce import Measured

DIGITS_TRAIN = {"local_epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9}


def digits_federation(
    partition: object = "iid", num_clients: int = 10, seed: int = 0, **data_options: object
) -> FederatedData:
    return federate(
        load_dataset({"name": "digits", **data_options}, seed=seed), partition, num_clients, seed
    )


MACHINE_KEYS = ("wall_time_s", "cpu_time_s", "peak_rss_mb", "cuda_max_allocated_mb", "machine")
"""Measurements of the machine, not results: two identical runs differ in them."""


def snapshot(folder: Path) -> dict[str, bytes]:
    """The bytes of each file in `folder` (not its subfolders), by name."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def is_machine_measurement(key: str) -> bool:
    """Wall and CPU time, peak memory, and a strategy's timings (`time_..._s`)."""
    return key in MACHINE_KEYS or (key.startswith("time_") and key.endswith("_s"))


def results_only(record: dict) -> dict:
    """A history record or summary without the machine's measurements: what a comparison of
    two runs may compare."""
    return {k: v for k, v in record.items() if not is_machine_measurement(k)}


def without_wall_time(records: list[dict]) -> list[dict]:
    """History records without the machine's measurements (`results_only`)."""
    return [results_only(r) for r in records]


def run_preset(overrides: list[str], out: Path, timeout_h: float = 24) -> dict:
    """One command-line run (`python -m fedshare.run <overrides>` into `out`, no progress bar)
    that must succeed; its summary.json. The paper-scale tests run their cells this way."""
    command = [sys.executable, "-m", "fedshare.run", *overrides, "progress=false", f"run_dir={out}"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_h * 3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((Path(out) / "summary.json").read_text())


def run_table_cell(
    table: str,
    column: str,
    method: str,
    out: Path,
    seeds: Sequence[int] | None = None,
    extra: Sequence[str] = (),
) -> "Measured":
    """One cell of a paper table, run and measured as `python -m fedshare.reproduce` does
    (the same job list, run folders and comparison), over `seeds` (default: the table's).
    The `paper`-marked tests run their cells this way, so the suite and the command agree."""
    found = run_table_cells(table, "paper", out, [column], [method], seeds, extra)
    (cell,) = [m for m in found if m.column == column and m.method == method]
    return cell


def run_table_cells(
    table: str,
    scale: str,
    out: Path,
    columns: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    extra: Sequence[str] = (),
) -> list["Measured"]:
    """The cells of a table's scale (`columns`, `methods`: exact names; default all of the
    scale's), run into `out` as `reproduce run` runs them and measured as `report` reads them."""
    from fedshare.reproduce import cells, load_job, measure, run_cells

    chosen = [
        c
        for c in cells(table, scale, columns, methods, seeds)
        if (not columns or c.column in columns) and (not methods or c.method in methods)
    ]
    assert chosen, f"{table} at scale {scale} has no cell of {columns} x {methods}"
    states = run_cells(chosen, out, extra=extra)
    unfinished = [p.cell.folder for p in states if p.state != "done"]
    assert not unfinished, f"cells did not finish: {unfinished} (see the output above)"
    return measure(chosen, load_job(table).numbers[:1], out)


def load_script(name: str) -> ModuleType:
    """A module of the repository's `scripts/` folder (not a package), by file name."""
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


# ---------------------------------------------------------------- exact math on a tiny model
FULL_BATCH = {"local_epochs": 3, "batch_size": 10_000, "lr": 0.1, "momentum": 0.0}
"""One full batch per epoch, plain SGD: K = 3 steps of θ ← θ − η·(corrected gradient)."""
UNEQUAL = {"name": "dirichlet", "alpha": 1.0}
"""Five clients of unequal sizes, two of them a round: n_i/n ≠ 1/N and |S| ≠ N, so the exact
tests tell Σ_S (n_i/n)·Δc_i from (|S|/N)·mean_S or mean_S, and α/m from α/|S|."""
ROUNDS = 3


def tiny_run(
    strategy: Strategy, train: dict = FULL_BATCH
) -> tuple[FederatedData, list[torch.Tensor], "RunResult", list[list[int]]]:
    """A linear model on digits, five unequal clients, two a round, three rounds: the
    federation, the initial parameters, the result and the clients of each round, in order
    (the exact-equation tests of SCAFFOLD, FedDyn, FedProx and FedAvg write the rounds out
    by hand)."""
    fed = digits_federation(UNEQUAL, 5)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    start = [p.detach().clone() for p in model.parameters()]
    cohorts: list[list[int]] = []
    own_aggregate = strategy.aggregate

    def recording(updates: Iterable[Update], round_idx: int) -> None:
        updates = list(updates)
        cohorts.append([u.client_id for u in updates])
        own_aggregate(updates, round_idx)

    strategy.aggregate = recording
    result = simulate(strategy, fed, model, rounds=ROUNDS, train=train, clients={"per_round": 2})
    sizes = fed.client_sizes
    assert len(set(sizes)) == len(sizes) and all(len(c) == 2 for c in cohorts)
    assert len({k for c in cohorts for k in c}) > 2  # clients return with their state
    return fed, start, result, cohorts


def flat(params: Iterable[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.reshape(-1) for p in params])


def full_gradient(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """∇ of the mean cross-entropy of `tiny_run`'s linear model at the flat parameters θ."""
    w = theta[:640].view(10, 64).requires_grad_(True)
    b = theta[640:].clone().requires_grad_(True)
    F.cross_entropy(x.flatten(1) @ w.T + b, y).backward()
    return torch.cat([w.grad.reshape(-1), b.grad])


def client_data(fed: FederatedData) -> list[tuple[tuple[torch.Tensor, torch.Tensor], int]]:
    """Each client's whole training set, as one batch, and its size."""
    return [(fed.dataset.train_batch(ix), int(ix.numel())) for ix in fed.client_indices]


def write_urbansound_metadata(root: Path, rows: list[dict]) -> None:
    """UrbanSound8K's metadata/UrbanSound8K.csv under `root`, in the official layout."""
    meta = root / "UrbanSound8K" / "metadata"
    meta.mkdir(parents=True)
    with open(meta / "UrbanSound8K.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
