"""The golden set: record the results of fixed command lines, and compare two records bit for bit.

A refactor that "changes no result" must give the same numbers for the same commands on the
same machine. This script runs a fixed list of `python -m fedshare.run` command lines (the
cells) with the code of the repository it sits in, keeps each run's folder, and compares two
such records.

    FEDSHARE_DATA=/path/to/datasets python scripts/golden.py record OUT_DIR [--jobs 2]
    python scripts/golden.py compare OUT_A OUT_B
    python scripts/golden.py list

The cells:
- `matrix-<strategy>-<data>`: every strategy (`configs/strategy/*.yaml`) on the default tier's
  cells of tests/test_every_strategy.py, as command lines: each strategy on digits and on the
  synthetic set, FedAvg, FedPFT and SCAFFOLD on every dataset (4 clients, 2 local epochs, 2
  rounds, the matrix's subsets, short server-side budgets, heads on random-ReLU features);
- `preset-<paper>`: the five `experiment=<paper>/cpu` presets, seed 0;
- `workers2`: FedMix on digits with `workers=2` (two processes share each round's clients);
- `batched`: FedAvg with `train.batched=4` (the clients of a round stacked under vmap);
- `resumed`: a 2-round run with checkpoints, then the same command with `rounds=4
  resume=true` (the run continued from its checkpoint).

`record` runs each cell in its own process with one torch/OpenMP/MKL thread (so `--jobs`, the
number of cells run at once, cannot change a result), `PYTHONHASHSEED=0`, and this
repository's `src` first on `PYTHONPATH`. Cells that need real datasets are skipped (and listed)
without `FEDSHARE_DATA`. OUT_DIR gets `golden.json` (the cells, their commands, exit codes and
seconds) and `cells/<cell>/`, each run's folder plus `log.txt`.

`compare` checks, for every cell of OUT_A, the exit codes, every key of `summary.json` and of
every line of `metrics.jsonl` (accuracy, loss, every byte counter, ...) for exact equality of
the stored JSON values; keys that measure time, memory or the machine, and paths, are ignored
(`IGNORED`). It prints one line per cell and a verdict, and exits 1 on any difference: a cell
of OUT_A missing from OUT_B, a key of OUT_A missing from OUT_B, or a different value. Cells
and keys found in OUT_B only (a new strategy, a new result key) are listed, not failures.

Results are bit-for-bit reproducible on one machine and one torch build, not across CPUs:
compare records made on the same machine.
"""

import argparse
import contextlib
import ctypes
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# The cells' settings below are a frozen copy of tests/test_every_strategy.py's default cells at
# the time the golden set was first recorded, kept apart on purpose: a record compares only
# with a record of the same commands, so the test matrix may change (it gave SCAFFOLD on FSDD
# 5 rounds since) without moving the golden cells. `test_golden_script.py` checks that every
# registered strategy still has its cells.
QUICK_DATASETS = ("digits", "synthetic")
EVERY_DATASET = ("fedavg", "fedpft", "scaffold")
OTHER_DATASETS = ("cifar10_sample", "fmnist", "fsdd", "mnist", "synthetic_mixture", "uci_har")
ALWAYS_THERE = ("digits", "synthetic", "synthetic_mixture")
DATA_OPTIONS = {
    "digits": [],
    "synthetic": ["data.train_size=800", "data.test_size=300"],
    "synthetic_mixture": ["data.train_size=2000", "data.test_size=300"],
}
SUBSET = ["data.train_subset=800", "data.test_subset=300"]
MODEL = {"cifar10_sample": ["model=lenet_cifar"], "uci_har": ["model=harnet", "model.width=0.25"]}
ROUNDS = {"uci_har": 5}
PAIR_ROUNDS = {("scaffold", "cifar10_sample"): 5}
ONE_SHOT = (
    "dp_fedpft",
    "ensemble",
    "fedbe",
    "fedkt",
    "fedpft",
    "fedpft_chain",
    "kd",
    "mixfl",
    "oneshot_avg",
    "standalone",
    "xormixfl",
)
NEEDS_SERVER = ("xormixfl", "mixfl", "standalone")
PER_LABEL = {"digits": 34, "synthetic": 20}
"""XorMixFL's split of the matrix: the smallest class of the training set over 4 participants."""
ON_FEATURES = (
    "fedpft",
    "dp_fedpft",
    "fedpft_chain",
    "oneshot_avg",
    "ensemble",
    "kd",
    "fedbe",
    "fedkt",
)
NEEDS_SERVER_DATA = ("fedavg_ft", "fedbe", "fedkt")
SERVER_SIZE = {"digits": 143}
"""A tenth of the training set (1,437 digits; 800 samples elsewhere)."""
SHORT_BUDGET = {
    "fedaa": [
        "strategy.adv_per_label=4",
        "strategy.adv_max_iter=10",
        "strategy.finetune_epochs=1",
        "strategy.identifier_epochs=2",
        "strategy.identifier_hidden=64",
    ],
    "fedgen_input": ["strategy.warmup_rounds=1", "strategy.generator_steps=10"],
}
PRESETS = ("fedaa", "fedpft", "flea", "rebafl", "xormixfl")
PRESET_DATA = {"fedaa": True, "fedpft": False, "flea": False, "rebafl": True, "xormixfl": True}
"""Whether the preset reads a real dataset (FEDSHARE_DATA)."""
COMMON = ["seed=0", "device=cpu", "progress=false"]

IGNORED = re.compile(r"time|_s$|_mb$|rss|memory|machine|host|path|dir$|version|torch")
"""Keys that measure time, memory or the machine, or name files: not results."""


@dataclass
class Cell:
    name: str
    commands: list[list[str]]
    """Override lists, run one after another in the cell's run folder."""
    needs_data: bool = False


@dataclass
class Outcome:
    name: str
    commands: list[list[str]]
    returncodes: list[int] = field(default_factory=list)
    seconds: float = 0.0
    skipped: str = ""


def strategy_names() -> list[str]:
    return sorted(p.stem for p in (REPO / "configs" / "strategy").glob("*.yaml"))


def matrix_overrides(strategy: str, data: str) -> list[str]:
    """tests/test_every_strategy.py's `quick_simulation(strategy, data)` as a command line."""
    args = [f"strategy={strategy}", f"data={data}", *DATA_OPTIONS.get(data, SUBSET)]
    args += ["clients.num=4", "checkpoint.every=0"]
    if strategy in NEEDS_SERVER:
        per_label = PER_LABEL[data]
        args += ["partition=xormix", "partition.target_labels=[1]", "partition.n=2"]
        args += [f"partition.m={per_label}"]
    else:
        args.append("partition=iid")
    if strategy in NEEDS_SERVER_DATA:
        args.append(f"server_data.size={SERVER_SIZE.get(data, 80)}")
    if strategy in ON_FEATURES:
        args += ["model=linear", "data.features=random_relu", "+data.features_options.dim=128"]
        args += ["++data.cache=false", "train.lr=0.01"]
    else:
        args += MODEL.get(data, [])
    if strategy not in ONE_SHOT:
        rounds = PAIR_ROUNDS.get((strategy, data), ROUNDS.get(data, 2))
        args += ["train.local_epochs=2", f"rounds={rounds}"]
    elif strategy in ON_FEATURES:
        args.append("train.local_epochs=10")
    return args + SHORT_BUDGET.get(strategy, [])


def cells() -> list[Cell]:
    """Every cell, the slowest first (so that `--jobs` packs them well)."""
    found = [
        Cell(f"preset-{paper}", [[f"experiment={paper}/cpu"]], PRESET_DATA[paper])
        for paper in PRESETS
    ]
    digits = ["data=digits", "clients.num=4", "train.local_epochs=2"]
    found.append(
        Cell(
            "workers2", [["strategy=fedmix", *digits, "partition=dir0.3", "rounds=3", "workers=2"]]
        )
    )
    found.append(Cell("batched", [["strategy=fedavg", *digits, "rounds=2", "train.batched=4"]]))
    first = ["strategy=fedavg", *digits, "partition=dir0.3", "checkpoint.every=1"]
    found.append(Cell("resumed", [[*first, "rounds=2"], [*first, "rounds=4", "resume=true"]]))
    pairs = [(s, d) for s in strategy_names() for d in QUICK_DATASETS]
    pairs += [(s, d) for s in EVERY_DATASET for d in OTHER_DATASETS]
    found += [
        Cell(f"matrix-{s}-{d}", [matrix_overrides(s, d)], d not in ALWAYS_THERE)
        for s, d in sorted(pairs, key=lambda p: (p[1] in QUICK_DATASETS, p))
    ]
    return found


def cell_environment() -> dict[str, str]:
    env = dict(os.environ)
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    env.update(threads, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return env


def die_with_parent() -> None:
    """In a cell's process: SIGKILL when the recording process dies (Linux's PR_SET_PDEATHSIG;
    elsewhere nothing), so that a stopped recording leaves no cell running."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)


def run_cell(cell: Cell, out: Path, env: dict[str, str]) -> Outcome:
    outcome = Outcome(cell.name, cell.commands)
    if cell.needs_data and not env.get("FEDSHARE_DATA"):
        outcome.skipped = "needs FEDSHARE_DATA"
        return outcome
    folder = out / "cells" / cell.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    start = time.perf_counter()
    with open(folder / "log.txt", "w") as log:
        for overrides in cell.commands:
            command = [sys.executable, "-m", "fedshare.run", *overrides, *COMMON]
            command.append(f"run_dir={folder / 'run'}")
            log.write(f"$ {' '.join(command[1:])}\n")
            log.flush()
            done = subprocess.run(
                command,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
            outcome.returncodes.append(done.returncode)
            if done.returncode:
                break
    outcome.seconds = round(time.perf_counter() - start, 1)
    return outcome


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "python": platform.python_version(), "cores": os.cpu_count()}


def record(out: Path, jobs: int, only: str | None) -> int:
    chosen = [c for c in cells() if only is None or re.search(only, c.name)]
    out.mkdir(parents=True, exist_ok=True)
    env = cell_environment()
    start = time.perf_counter()

    def one(cell: Cell) -> Outcome:
        outcome = run_cell(cell, out, env)
        state = outcome.skipped or f"exit {outcome.returncodes} in {outcome.seconds:.0f} s"
        print(f"{cell.name:45s} {state}", flush=True)
        return outcome

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(one, chosen))
    except KeyboardInterrupt:
        print("interrupted: the cells that ran are kept, golden.json is not written")
        os._exit(130)  # the cells' processes die with this one (die_with_parent)
    total = round(time.perf_counter() - start, 1)
    index = out / "golden.json"
    previous = json.loads(index.read_text())["cells"] if index.exists() and only else {}
    previous.update({o.name: asdict(o) for o in outcomes})
    index.write_text(
        json.dumps({"machine": machine(), "seconds": total, "cells": previous}, indent=1) + "\n"
    )
    failed = [o.name for o in outcomes if any(o.returncodes)]
    skipped = [o.name for o in outcomes if o.skipped]
    print(f"recorded {len(outcomes) - len(skipped)} cells in {total:.0f} s into {out}", end="")
    print(f"; skipped {skipped}" if skipped else "", end="")
    print(f"; FAILED (non-zero exit) {failed}" if failed else "")
    return 1 if failed else 0


def results(value: Any) -> Any:
    """`value` without the keys in `IGNORED`, at any depth."""
    if isinstance(value, dict):
        return {k: results(v) for k, v in value.items() if not IGNORED.search(k)}
    if isinstance(value, list):
        return [results(v) for v in value]
    return value


def same(a: Any, b: Any) -> bool:
    """Exact equality of JSON values (a NaN equals a NaN; 1 and 1.0 differ)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def differences(a: Any, b: Any, where: str, new: list[str]) -> list[str]:
    """Where `b` differs from `a`: keys of `a` missing in `b` or different values; keys in `b`
    only are appended to `new`."""
    if isinstance(a, dict) and isinstance(b, dict):
        new += [f"{where}.{k}" for k in b if k not in a]
        found = []
        for key, value in a.items():
            if key not in b:
                found.append(f"{where}.{key} missing")
            else:
                found += differences(value, b[key], f"{where}.{key}", new)
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{where}[{i}]", new)
        ]
    return [] if same(a, b) else [f"{where}: {a!r} != {b!r}"]


def read_run(folder: Path) -> dict[str, Any]:
    """The results of one run folder: its summary and its metrics lines."""
    found: dict[str, Any] = {}
    summary = folder / "summary.json"
    found["summary"] = json.loads(summary.read_text()) if summary.exists() else None
    metrics = folder / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    found["metrics"] = [json.loads(line) for line in lines if line.strip()]
    return results(found)


def compare(a: Path, b: Path) -> int:
    cells_a = json.loads((a / "golden.json").read_text())["cells"]
    cells_b = json.loads((b / "golden.json").read_text())["cells"]
    differing, compared = [], 0
    for name, cell in cells_a.items():
        if cell["skipped"]:
            print(f"skipped  {name}: {cell['skipped']} in {a}")
            continue
        other = cells_b.get(name)
        if other is None or other["skipped"]:
            found = [f"not recorded in {b}" + (f" ({other['skipped']})" if other else "")]
            new: list[str] = []
        else:
            new = []
            found = differences(cell["returncodes"], other["returncodes"], "exit", new)
            found += differences(
                read_run(a / "cells" / name / "run"), read_run(b / "cells" / name / "run"), "", new
            )
        compared += 1
        if found:
            differing.append(name)
            more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
            print(f"DIFFERS  {name}: {'; '.join(found[:3])}{more}")
        else:
            print(f"same     {name}" + (f" (new in {b}: {', '.join(new)})" if new else ""))
    for name in sorted(set(cells_b) - set(cells_a)):
        print(f"new      {name}: recorded in {b} only")
    if differing:
        print(f"VERDICT: {len(differing)} of {compared} cells differ: {', '.join(differing)}")
        return 1
    print(f"VERDICT: identical ({compared} cells, bit for bit)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run every cell into OUT_DIR")
    rec.add_argument("out", type=Path, metavar="OUT_DIR")
    rec.add_argument("--jobs", type=int, default=2, help="cells run at once (default 2)")
    rec.add_argument("--only", help="a regular expression: record the matching cells only")
    cmp = sub.add_parser("compare", help="compare two records bit for bit")
    cmp.add_argument("a", type=Path, metavar="OUT_A")
    cmp.add_argument("b", type=Path, metavar="OUT_B")
    sub.add_parser("list", help="print every cell's command lines")
    args = parser.parse_args(argv)
    if args.command == "record":
        return record(args.out.resolve(), args.jobs, args.only)
    if args.command == "compare":
        return compare(args.a, args.b)
    for cell in cells():
        for overrides in cell.commands:
            print(f"{cell.name}: {' '.join(overrides + COMMON)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
