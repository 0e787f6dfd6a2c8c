"""FedAA's Eq. 7 weight λ (`strategy.adv_loss_weight`) over a range, on two one-class-per-client
Fashion-MNIST settings small enough for this CPU (docs/fedaa.md "The weight of Eq. 7"):

- `fmnist_islands`: a class-balanced 2,000-image training subset, 10 clients × one whole class
  (200 images), C = 1.0 (Table 1's "data islands");
- `fmnist_shards`: `scripts/fedaa_checks.py`'s setting, 10,000 images, 100 clients × one
  100-image shard, C = 0.1 (Table 2's "mobile terminals").

Both use `fedaa_checks.py`'s model and training (FedAA's CNN at a quarter width, E1 = 10, SGD
lr 0.01, batch 32) for 5 rounds; λ = 0 runs as Non-I (`identifier=false`, equal to λ = 0 with
identifiers, a test). Each cell runs through the command line into
`<out>/<setting>/lambda<λ>/seed<k>`; `--worker i --workers n` splits the cells.

    FEDSHARE_DATA=../shared/datasets python scripts/fedaa_weight_sweep.py --out runs/fedaa_lambda
    python scripts/fedaa_weight_sweep.py --out runs/fedaa_lambda --report
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROUNDS = 5
SEEDS = (0, 1)
WEIGHTS = {  # λ = 0 is Non-I; the second setting gets fewer values (CPU time)
    "fmnist_islands": (0.0, 0.03, 0.3, 1.0),
    "fmnist_shards": (0.0, 0.03, 1.0),
}
SETTINGS = {
    "fmnist_islands": [
        "data=fmnist",
        "data.train_subset=2000",
        "partition=islands",
        "clients.num=10",
        "clients.fraction=1.0",
    ],
    "fmnist_shards": [
        "data=fmnist",
        "data.train_subset=10000",
        "partition=shards1",
        "clients.num=100",
        "clients.fraction=0.1",
    ],
}
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
    "checkpoint.every=0",
    "progress=false",
    "strategy=fedaa",
]


def cell_dir(out: Path, setting: str, weight: float, seed: int) -> Path:
    return out / setting / f"lambda{weight:g}" / f"seed{seed}"


def command(setting: str, weight: float, seed: int, out: Path) -> list[str]:
    method = (
        ["strategy.identifier=false"] if weight == 0 else [f"strategy.adv_loss_weight={weight}"]
    )
    return [
        sys.executable,
        "-m",
        "fedshare.run",
        *SETTINGS[setting],
        *COMMON,
        *method,
        f"seed={seed}",
        f"run_dir={cell_dir(out, setting, weight, seed)}",
    ]


def summary(folder: Path) -> dict | None:
    path = folder / "summary.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return data if data["status"] == "completed" else None


def run(out: Path, worker: int, workers: int) -> None:
    cells = [(s, w, seed) for seed in SEEDS for s in SETTINGS for w in WEIGHTS[s]]
    for i, (setting, weight, seed) in enumerate(cells):
        if i % workers != worker or summary(cell_dir(out, setting, weight, seed)):
            continue
        print(f"{setting} λ={weight:g} seed {seed}", flush=True)
        subprocess.run(command(setting, weight, seed, out), check=True, env=os.environ)


def report(out: Path) -> None:
    print("| setting | λ | best acc. per seed | mean | final-round mean | s/round |")
    print("|---|---|---|---|---|---|")
    for setting in SETTINGS:
        for weight in WEIGHTS[setting]:
            best, final, pace = [], [], []
            for seed in SEEDS:
                folder = cell_dir(out, setting, weight, seed)
                if not (done := summary(folder)):
                    continue
                rows = [json.loads(line) for line in (folder / "metrics.jsonl").open()]
                best.append(done["best_accuracy"])
                final.append(rows[-1]["accuracy"])
                pace.append(rows[-1]["wall_time_s"] / len(rows))
            if best:
                label = "0 (Non-I)" if weight == 0 else f"{weight:g}"
                print(
                    f"| {setting} | {label} | {' / '.join(f'{b:.1f}' for b in best)} | "
                    f"{sum(best) / len(best):.2f} | {sum(final) / len(final):.2f} | "
                    f"{sum(pace) / len(pace):.0f} |"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/fedaa_lambda"))
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    if args.report:
        report(args.out)
    else:
        run(args.out, args.worker, args.workers)


if __name__ == "__main__":
    main()
