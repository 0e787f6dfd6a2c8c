"""FedAA and its ablations beside FedAvg, FedProx, FedBN and MOON on real data that fits this CPU
(docs/fedaa.md "Checks on real data"): FedAA's label-skew settings scaled down.

- `cifar10s_islands`: the CIFAR-10 sample (4,000 train / 1,000 test), 10 clients × one class
  (≈ 400 images each), C = 0.5 (Table 1's setting);
- `fmnist_shards`: Fashion-MNIST, a class-balanced 10,000-image training subset, 100 clients ×
  one shard (100 images, one class), C = 0.1 (Table 2's setting).

Both: FedAA's CNN at a quarter width (conv 16/32, FC 128/64), E1 = 10 (baselines E = 10),
20 rounds, SGD lr 0.01 with batch 32 (the paper's batch 256 and lr 0.0025 give clients of a few
hundred images 2 steps an epoch), FedAA's server side at the spec's defaults. Each cell runs
through the command line into `<out>/<setting>/<method>/seed<k>` (checkpointed every 5 rounds,
resumed if interrupted); `--worker i --workers n` splits the cells between processes.

    FEDSHARE_DATA=../shared/datasets python scripts/fedaa_checks.py --out runs/fedaa_checks
    python scripts/fedaa_checks.py --out runs/fedaa_checks --report
"""

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROUNDS = 20
SEEDS = (0, 1, 2)
COMMON = [
    "model=fedaa_cnn",
    "model.channels=[16,32]",
    "model.hidden=[128,64]",
    f"rounds={ROUNDS}",
    "train.local_epochs=10",
    "train.batch_size=32",
    "train.optimizer=sgd",
    "train.lr=0.01",
    "train.momentum=0",
    "train.weight_decay=0",
    "data.augment=false",
    "checkpoint.every=5",
    "progress=false",
]
SETTINGS = {
    "cifar10s_islands": [
        "data=cifar10_sample",
        "partition=islands",
        "clients.num=10",
        "clients.fraction=0.5",
    ],
    "fmnist_shards": [
        "data=fmnist",
        "data.train_subset=10000",
        "partition=shards1",
        "clients.num=100",
        "clients.fraction=0.1",
    ],
}
METHODS = {
    "fedavg": ["strategy=fedavg"],
    "fedprox": ["strategy=fedprox", "strategy.mu=0.01"],
    "fedbn": ["strategy=fedbn", "model.batchnorm=true"],
    "moon": ["strategy=moon"],  # mu per setting below
    "fedaa": ["strategy=fedaa"],
    "fedaa_non_i": ["strategy=fedaa", "strategy.identifier=false"],
    "fedaa_non_f": ["strategy=fedaa", "strategy.finetune=false"],
}
MOON_MU = {"cifar10s_islands": 5, "fmnist_shards": 1}
T_975 = {2: 12.706, 3: 4.303}


def cells(seeds: tuple[int, ...] = SEEDS) -> list[tuple[str, str, int]]:
    """Seed by seed, so that an interrupted sweep has every cell at the first seeds."""
    return [(s, m, seed) for seed in seeds for s in SETTINGS for m in METHODS]


def command(setting: str, method: str, seed: int, out: Path) -> list[str]:
    extra = [f"strategy.mu={MOON_MU[setting]}"] if method == "moon" else []
    run_dir = out / setting / method / f"seed{seed}"
    resume = ["resume=true"] if (run_dir / "config.yaml").exists() else []
    return [
        sys.executable,
        "-m",
        "fedshare.run",
        *SETTINGS[setting],
        *METHODS[method],
        *extra,
        *COMMON,
        f"seed={seed}",
        f"run_dir={run_dir}",
        *resume,
    ]


def completed(folder: Path) -> bool:
    summary = folder / "summary.json"
    return summary.exists() and json.loads(summary.read_text())["status"] == "completed"


def run(out: Path, worker: int, workers: int, seeds: tuple[int, ...]) -> None:
    for i, (setting, method, seed) in enumerate(cells(seeds)):
        if i % workers != worker or completed(out / setting / method / f"seed{seed}"):
            continue
        print(f"{setting} {method} seed {seed}", flush=True)
        subprocess.run(command(setting, method, seed, out), check=True, env=os.environ)


def report(out: Path) -> None:
    for setting in SETTINGS:
        print(f"\n{setting}: best accuracy per seed, mean ± 95 % t-interval; last-5 mean; s/round")
        for method in METHODS:
            best, last5, pace = [], [], []
            for seed in SEEDS:
                folder = out / setting / method / f"seed{seed}"
                if not completed(folder):
                    continue
                summary = json.loads((folder / "summary.json").read_text())
                rows = [json.loads(line) for line in (folder / "metrics.jsonl").open()]
                best.append(summary["best_accuracy"])
                last5.append(sum(r["accuracy"] for r in rows[-5:]) / len(rows[-5:]))
                pace.append(rows[-1]["wall_time_s"] / len(rows))
            if not best:
                continue
            mean = sum(best) / len(best)
            ci = ""
            if len(best) > 1:
                sd = math.sqrt(sum((b - mean) ** 2 for b in best) / (len(best) - 1))
                ci = f" ± {T_975[len(best)] * sd / math.sqrt(len(best)):.2f}"
            seeds = ", ".join(f"{b:.1f}" for b in best)
            print(
                f"  {method:12s} best [{seeds}] {mean:.2f}{ci}; last-5 "
                f"{sum(last5) / len(last5):.2f}; {sum(pace) / len(pace):.1f} s/round"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/fedaa_checks"))
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    if args.report:
        report(args.out)
    else:
        run(args.out, args.worker, args.workers, tuple(args.seeds))


if __name__ == "__main__":
    main()
