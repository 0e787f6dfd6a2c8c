"""ReBaFL small-scale checks on Fashion-MNIST (shared/specs/rebafl.md §8): methods × seeds under the
pathological split with client dropout; prints each run's mean accuracy over the last rounds,
its round-to-round fluctuation, and the CPU/wall time.

    FEDSHARE_DATA=../shared/datasets python scripts/rebafl_checks.py test     # the test's setting
    FEDSHARE_DATA=../shared/datasets python scripts/rebafl_checks.py spec8 --rho 0.1
    python scripts/rebafl_checks.py report runs/rebafl_table1/*/   # paper-scale runs vs Table I
"""

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from fedshare import simulate
from fedshare.api import init_model
from fedshare.data import federate, load_dataset
from fedshare.errors import FedshareError
from fedshare.paper.compare import compare
from fedshare.strategies import make_strategy

# The default-tier test's reduced setting (tests/test_rebafl.py) and the spec's §8 protocol.
SETTINGS: dict[str, dict[str, Any]] = {
    "test": {
        "clients": 20,
        "per_class": 50,
        "rounds": 15,
        "last": 5,
        "test_subset": 2000,
        "train": {"local_epochs": 1, "batch_size": 25},
    },
    "spec8": {
        "clients": 20,
        "per_class": 150,
        "rounds": 40,
        "last": 10,
        "test_subset": None,
        "train": {"local_epochs": 1, "batch_size": 50},
    },
}
OPTIM = {"lr": 0.01, "momentum": 0.5, "weight_decay": 5e-4}


def fmnist_run(
    method: str, seed: int, setting: dict[str, Any], rho: float, params: dict[str, Any]
) -> dict[str, float]:
    """One run; returns last-rounds mean accuracy, fluctuation and times."""
    data = load_dataset({"name": "fmnist", "test_subset": setting["test_subset"]}, seed=0)
    partition = {"name": "pathological", "classes_per_client": 2, "per_class": setting["per_class"]}
    fed = federate(data, partition, setting["clients"], seed)
    cpu, wall = time.process_time(), time.perf_counter()
    result = simulate(
        make_strategy(method, params),
        fed,
        init_model("lenet_fmnist", fed, seed, {"width": setting.get("width", 1.0)}),
        setting["rounds"],
        seed=seed,
        clients={"num": setting["clients"], "availability": rho},
        train={**OPTIM, **setting["train"]},
        device="cpu",
    )
    acc = np.array(result.accuracies)
    last = acc[-setting["last"] :]
    return {
        "last_mean": float(last.mean()),
        "abs_delta": float(np.abs(np.diff(acc[-15:])).mean()),
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
    }


def report(run_dirs: list[str]) -> None:
    """Each run directory's last-10 mean / final / best accuracy beside Table I's number
    (finished or not: metrics.jsonl is read, so a run still in progress is shown too)."""
    for folder in map(Path, run_dirs):
        config = OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"))
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").open()]
        acc = np.array([r["accuracy"] for r in rows])
        method, m = config["strategy"]["name"], config["clients"]["num"]
        preset = f"rebafl/{config['data']['name']}_pat2_m{m}"
        last10 = float(acc[-10:].mean())
        minutes = rows[-1]["wall_time_s"] / 60
        line = (
            f"{method:>12} {preset}: rounds {rows[-1]['round']:>3}  last-10 {last10:6.2f}  "
            f"final {acc[-1]:6.2f}  best {acc.max():6.2f}  wall {minutes:6.1f} min"
        )
        try:
            line += f"  | {compare('rebafl_table1', preset, method, last10)}"
        except FedshareError as err:  # a method or preset the table lacks
            line += f"  | no paper number ({err})"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("setting", choices=[*sorted(SETTINGS), "report"])
    parser.add_argument("runs", nargs="*", help="run directories (report)")
    parser.add_argument("--methods", default="fedavg,rebafl")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--set", nargs="*", default=[], help="key=value (train.key=value)")
    args = parser.parse_args()
    if args.setting == "report":
        report(args.runs)
        return
    torch.set_num_threads(1)
    setting = {**SETTINGS[args.setting], "train": dict(SETTINGS[args.setting]["train"])}
    for item in args.set:
        key, value = item.split("=")
        target = setting["train"] if key.startswith("train.") else setting
        target[key.removeprefix("train.")] = float(value) if "." in value else int(value)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: dict[str, list[dict[str, float]]] = {}
    for method in args.methods.split(","):
        name, _, options = method.partition(":")  # e.g. rebafl:mu=0
        params = {k: float(v) for k, v in (o.split("=") for o in options.split(";") if o)}
        for seed in seeds:
            out = fmnist_run(name, seed, setting, args.rho, params)
            rows.setdefault(method, []).append(out)
            print(
                f"{method:>16} seed {seed}: last-{setting['last']} mean {out['last_mean']:6.2f}  "
                f"mean|Δacc| {out['abs_delta']:5.2f}  cpu {out['cpu_s']:6.1f}s  "
                f"wall {out['wall_s']:6.1f}s",
                flush=True,
            )
    print(f"\nsetting {args.setting}, rho {args.rho}, seeds {seeds}")
    for method, outs in rows.items():
        means = [o["last_mean"] for o in outs]
        print(
            f"{method:>16}: last-mean {np.mean(means):6.2f} (per seed {np.round(means, 2)})  "
            f"mean|Δacc| {np.mean([o['abs_delta'] for o in outs]):5.2f}"
        )


if __name__ == "__main__":
    main()
