"""Reproduce a column of FedPFT's Table 2 or Table 5 where you have the features, and compare.

Every implemented row of `src/fedshare/paper/tables/fedpft_table{2,5}.json` is run with its
overrides on top of the column's preset, for each seed, through the command line; the script
then prints measured mean ± std beside the paper's, with the ±1.5 pp tolerance of the spec's
paper-tier tests (specs/fedpft.md §8.2, last paragraph).

    python scripts/fedpft_tables.py fedpft/table5_cifar100 \
        data.features_weights=/weights/resnet50-0676ba61.pth
    python scripts/fedpft_tables.py fedpft/table2_pets_food \
        'data.path=[/feats/pets_clip.pt,/feats/food_clip.pt]' 'partition.sizes=[3680,75750]'
    python scripts/fedpft_tables.py fedpft/table5_cifar100 --dry-run   # only print commands
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from fedshare.paper.compare import compare, load_table

TABLES = {"table2": "fedpft_table2", "table5": "fedpft_table5"}


def table_for(preset: str) -> str:
    for key, name in TABLES.items():
        if f"/{key}_" in preset:
            return name
    raise SystemExit(f"{preset!r} is not a Table 2 or Table 5 preset (fedpft/table2_*, table5_*)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", help="e.g. fedpft/table5_cifar100")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (where the data is)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=None, help="rows to run (default: all)")
    parser.add_argument("--out", default="runs/fedpft_tables")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    paper = table_for(args.preset)
    table = load_table(paper)
    rows = {m: spec["overrides"] for m, spec in table["methods"].items() if spec["overrides"]}
    if args.methods:
        rows = {m: rows[m] for m in args.methods}
    measured: dict[str, list[float]] = {}
    for method, overrides in rows.items():
        for seed in args.seeds:
            run_dir = Path(args.out) / args.preset.replace("/", "_") / method / f"seed{seed}"
            cmd = [
                sys.executable,
                "-m",
                "fedshare.run",
                f"experiment={args.preset}",
                *overrides,
                *args.overrides,
                f"seed={seed}",
                "progress=false",
                f"run_dir={run_dir}",
            ]
            print(" ".join(cmd), flush=True)
            if args.dry_run:
                continue
            proc = subprocess.run(cmd, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"run failed ({method}, seed {seed}); see the message above")
            summary = json.loads((run_dir / "summary.json").read_text())
            measured.setdefault(method, []).append(summary[table["metric"]])
    if args.dry_run:
        return
    print(f"\n{table['table']}, {args.preset} (seeds {args.seeds})\n")
    print("| method | measured | paper | Δ | within ±1.5 |\n|---|---|---|---|---|")
    for method, values in measured.items():
        mean = statistics.mean(values)
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        c = compare(paper, args.preset, method, mean, k=0.0, floor=1.5)
        print(
            f"| {method} | {mean:.2f} ± {std:.2f} | {c.entry.mean:.2f} ± {c.entry.std:.2f} | "
            f"{c.delta:+.2f} | {'yes' if c.ok else 'no'} |"
        )


if __name__ == "__main__":
    main()
