"""Reproduce XorMixFL's Table 2 (accuracy), Table 3 (MDS) and Table 4 (test and label-9
accuracy by M, α and p) with the experiment presets.

    python scripts/xormixfl_tables.py run --table 2 --seeds 0 1 2 --out results/xormixfl
    python scripts/xormixfl_tables.py run --table 2 ...   # more workers share the queue
    python scripts/xormixfl_tables.py report --out results/xormixfl   # markdown beside the paper

Each run is `python -m fedshare.run experiment=xormixfl/table<k> <overrides>` (composed here
in-process); one JSON line per finished run is appended to `<out>/table<k>.jsonl`, and runs
already there are skipped, so a killed sweep resumes (delete `<out>/claims` first).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

METHODS = ("xormixfl", "mixfl", "standalone", "fedavg")
NAMES = {
    "xormixfl": "XorMixFL",
    "mixfl": "MixFL",
    "fedavg": "Vanilla FL",
    "standalone": "Standalone",
}
COLUMNS = [[k] for k in range(10)] + [[0, 2], [0, 8], [2, 4], [4, 8], [0, 2, 4, 8]]  # Table 2's
TARGETS = [[9], [0, 2, 4, 8], [0, 2], [2, 4]] + [[k] for k in range(9)] + [[0, 8], [4, 8]]
"""The sweep's order: the columns the paper discusses first, so a partial sweep is useful."""


ALPHAS = (0.25, 0.5, 0.95)


def label(targets: list[int]) -> str:
    return "[" + ",".join(map(str, targets)) + "]"


def mix_option(method: str, mix_order: str | None) -> list[str]:
    """MixFL's `mix_order` override when one is asked for (`--mix-order equal`)."""
    return [f"strategy.mix_order={mix_order}"] if method == "mixfl" and mix_order else []


def jobs(
    table: int, seeds: list[int], methods: list[str] | None = None, mix_order: str | None = None
) -> list[dict[str, Any]]:
    out = []
    if table == 2:
        for targets in TARGETS:
            for seed in seeds:
                for method in METHODS:
                    overrides = [f"strategy={method}", f"partition.target_labels={label(targets)}"]
                    out.append(
                        {
                            "key": f"{method} {label(targets)} {seed}",
                            "seed": seed,
                            "overrides": overrides,
                        }
                    )
    elif table == 4:
        for seed in seeds:
            for p in (1, 5):
                for method in methods or ("xormixfl", "mixfl"):
                    for m in (1, 2, 3):
                        for alpha in ALPHAS:
                            overrides = [
                                f"strategy={method}",
                                *mix_option(method, mix_order),
                                f"strategy.M={m}",
                                f"strategy.alpha={alpha}",
                                f"strategy.p={p}",
                            ]
                            key = f"{method} M={m} alpha={alpha} p={p} {seed}"
                            out.append({"key": key, "seed": seed, "overrides": overrides})
    else:
        for seed in seeds:
            for method in methods or ("xormixfl", "mixfl"):
                for m in (1, 2, 3):
                    for p in (1, 2, 3, 4, 5):
                        overrides = [
                            f"strategy={method}",
                            *mix_option(method, mix_order),
                            f"strategy.M={m}",
                            f"strategy.p={p}",
                            "strategy.server_epochs=0",
                            "data.test_subset=100",
                        ]
                        out.append(
                            {
                                "key": f"{method} M={m} p={p} {seed}",
                                "seed": seed,
                                "overrides": overrides,
                            }
                        )
    return out


def run_one(table: int, job: dict[str, Any], out: Path) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir

    from fedshare.run import config_dir, execute

    name = "".join(c if c.isalnum() else "_" for c in job["key"])
    run_dir = out / "runs" / f"table{table}" / name
    overrides = [
        f"experiment=xormixfl/table{table}",
        *job["overrides"],
        f"seed={job['seed']}",
        "progress=false",
        f"run_dir={run_dir}",
    ]
    if (run_dir / "config.yaml").exists():  # a run killed before it finished: start it again
        overrides.append("overwrite=true")
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    start = time.perf_counter()
    summary = execute(cfg, run_dir, {"partition": "xormix"})
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    per_class = metrics[-1].get("per_class_accuracy")
    targets = [int(t) for t in cfg.partition.target_labels]
    return {
        "key": job["key"],
        "overrides": [o for o in overrides if not o.startswith(("run_dir=", "overwrite="))],
        **{
            k: v
            for k, v in summary.items()
            if not isinstance(v, dict | list) or k == "target_labels"
        },
        "per_class_accuracy": per_class,
        "target_accuracy": None
        if per_class is None
        else statistics.mean(per_class[t] for t in targets),
        "process_wall_s": round(time.perf_counter() - start, 1),
    }


def cmd_run(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"table{args.table}.jsonl"
    done = set()
    if path.exists():
        done = {json.loads(line)["key"] for line in path.read_text().splitlines() if line.strip()}
    claims = out / "claims" / f"table{args.table}"
    claims.mkdir(parents=True, exist_ok=True)
    for job in jobs(args.table, args.seeds, args.methods, args.mix_order):
        if job["key"] in done:
            continue
        try:  # several workers share the queue: the first to claim a job runs it
            (claims / job["key"].replace(" ", "_")).open("x").close()
        except FileExistsError:
            continue
        record = run_one(args.table, job, out)
        with path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        print(
            f"{job['key']}: {record['final_accuracy']:.2f}% ({record['wall_time_s']:.0f}s)",
            flush=True,
        )


def load(path: Path) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    if not path.exists():
        return groups
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            cell = record["key"].rsplit(" ", 1)[0]
            groups.setdefault(cell, []).append(record)
    return groups


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {std:.2f}"


def fmt(values: list[float]) -> str:
    """mean ± std (runs)."""
    return f"{mean_std(values)} ({len(values)})" if values else "–"


def report_table2(t2: dict[str, list[dict[str, Any]]], lookup: Any) -> None:
    """Test accuracy beside the paper's (in parentheses), target-label accuracy, and the gaps."""
    header = "| Target labels | " + " | ".join(NAMES[m] for m in METHODS) + " |"
    rule = "|---" * (len(METHODS) + 1) + "|"
    paper: dict[tuple[str, str], float] = {}
    for method in METHODS:
        for targets in COLUMNS:
            preset = f"xormixfl/table2 partition.target_labels={label(targets)}"
            paper[method, label(targets)] = lookup("xormixfl_table2", preset, method).mean
    runs = {(m, label(t)): t2.get(f"{m} {label(t)}", []) for m in METHODS for t in COLUMNS}
    counts = sorted({len(r) for r in runs.values()})
    print(
        f"Test accuracy (%), mean ± std over seeds ({'/'.join(map(str, counts))} a cell), "
        "paper in parentheses:\n"
    )
    print(header + "\n" + rule)
    for targets in COLUMNS:
        col = label(targets)
        cells = [
            f"{mean_std([r['final_accuracy'] for r in runs[m, col]])} ({paper[m, col]:.2f})"
            for m in METHODS
        ]
        print(f"| {col} | " + " | ".join(cells) + " |")
    print("\nAccuracy on the target labels (%), mean ± std over seeds (not in the paper):\n")
    print(header + "\n" + rule)
    for targets in COLUMNS:
        col = label(targets)
        cells = [mean_std([r["target_accuracy"] for r in runs[m, col]]) for m in METHODS]
        print(f"| {col} | " + " | ".join(cells) + " |")
    print("\n| | " + " | ".join(NAMES[m] for m in METHODS) + " |\n" + rule)
    means = {k: statistics.mean(r["final_accuracy"] for r in v) for k, v in runs.items() if v}
    names = (
        "mean over them, measured",
        "mean over them, paper",
        "largest \\|measured − paper\\|",
        "wall time a run (s)",
    )
    columns = {m: [label(t) for t in COLUMNS if (m, label(t)) in means] for m in METHODS}
    stats = {
        m: (
            statistics.mean(means[m, c] for c in cols),
            statistics.mean(paper[m, c] for c in cols),
            max(abs(means[m, c] - paper[m, c]) for c in cols),
            statistics.mean(r["wall_time_s"] for c in cols for r in runs[m, c]),
        )
        for m, cols in columns.items()
        if cols
    }
    print("| columns measured | " + " | ".join(str(len(columns[m])) for m in METHODS) + " |")
    for i, name in enumerate(names):
        cells = [f"{stats[m][i]:.2f}" if m in stats else "–" for m in METHODS]
        print(f"| {name} | " + " | ".join(cells) + " |")


def cmd_report(args: argparse.Namespace) -> None:
    from fedshare.paper.compare import lookup

    out = Path(args.out)
    t2 = load(out / "table2.jsonl")
    if t2:
        report_table2(t2, lookup)
    t4 = load(out / "table4.jsonl")
    if t4:
        report_table4(t4, lookup)
    t3 = load(out / "table3.jsonl")
    if t3:
        print(
            "\n| Scheme | M | p | MDS mean (measured) | MDS std (measured) | Paper mean / std "
            "| Upload MDS | Upload target pixels exposed |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for method in ("xormixfl", "mixfl"):
            for m in (1, 2, 3):
                for p in (1, 2, 3, 4, 5):
                    runs = t3.get(f"{method} M={m} p={p}", [])
                    entry = lookup(
                        "xormixfl_table3", f"xormixfl/table3 strategy.M={m} strategy.p={p}", method
                    )
                    print(
                        f"| {NAMES[method]} | {m} | {p} | {fmt([r['mds_mean'] for r in runs])} | "
                        f"{fmt([r['mds_std'] for r in runs])} | "
                        f"{entry.mean:.2f} / {entry.std:.2f} | "
                        f"{fmt([r['mds_upload_mean'] for r in runs])} | "
                        f"{fmt([100 * r['upload_target_exposed'] for r in runs])} |"
                    )


def report_table4(t4: dict[str, list[dict[str, Any]]], lookup: Any) -> None:
    """Test and label-9 accuracy per (scheme, p, M, α), measured beside the paper's."""
    print("\n| Scheme | p | M | α | test (measured) | paper | label 9 (measured) | paper |")
    print("|---|---|---|---|---|---|---|---|")
    for method in ("xormixfl", "mixfl"):
        for p in (1, 5):
            for m in (1, 2, 3):
                for alpha in ALPHAS:
                    runs = t4.get(f"{method} M={m} alpha={alpha} p={p}", [])
                    preset = f"xormixfl/table4 strategy.M={m} strategy.alpha={alpha} strategy.p={p}"
                    test = lookup("xormixfl_table4", preset, method).mean
                    nine = lookup("xormixfl_table4_label9", preset, method).mean
                    print(
                        f"| {NAMES[method]} | {p} | {m} | {alpha} | "
                        f"{fmt([r['final_accuracy'] for r in runs])} | {test:.2f} | "
                        f"{fmt([r['target_accuracy'] for r in runs])} | {nine:.2f} |"
                    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--table", type=int, choices=(2, 3, 4), default=2)
    run.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    run.add_argument("--out", default="results/xormixfl")
    run.add_argument("--methods", nargs="+", default=None, help="tables 3/4: xormixfl, mixfl")
    run.add_argument("--mix-order", default=None, help="MixFL's strategy.mix_order (e.g. equal)")
    report = sub.add_parser("report")
    report.add_argument("--out", default="results/xormixfl")
    args = parser.parse_args(argv)
    {"run": cmd_run, "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
