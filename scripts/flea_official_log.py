"""The FLea authors' UCI-HAR training log: store it as numbers, and compare runs with it.

The authors' repository (github.com/XTxiatong/FLea) ships one real training log,
`models/logs/FLea_HAR_K150_Dir0.1.log` (FLea's Table 1 reports the best round): FLea on UCI-HAR,
K = 150, Dir(0.1), seed 0. It prints the partition (per client: class fractions and size) and
the global test accuracy after every round (round 0 is the warm-up). `extract` keeps those
facts in `fedshare/paper/logs/<name>.json`; `compare` prints the curve statistics of fedshare
runs beside the log's (warm-up round left out everywhere) and plots the curves:

    git -C <FLea clone> show HEAD:models/logs/FLea_HAR_K150_Dir0.1.log > flea_har.log
    python scripts/flea_official_log.py extract flea_har.log --commit <FLea commit> \
        --out src/fedshare/paper/logs/flea_har_k150_dir0.1.json
    python scripts/flea_official_log.py compare runs/dir0.1_flea_s0 runs/dir0.1_fedavg_s* \
        --plot docs/img/flea_har_dir01_official.png
    python scripts/flea_official_log.py partition --root ../shared/datasets/uci_har_hapt

`compare` and `partition` print Markdown tables as docs/flea.md shows them (the runs' own
statistics are cells of `flea/table1`, generated there from docs/measured/).
"""

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from fedshare.data import federate, load_dataset
from fedshare.paper.logs import curve_stats, load_log, skew_stats
from fedshare.results.plots import plot_comparison
from fedshare.results.rundir import read_metrics
from fedshare.run import config_dir

CLIENT_ROW = re.compile(r"^Client\s+(\d+),([\d.,]+)$")
ACCURACY = re.compile(r"^Global Model Acc on global data: ([\d.]+) length of data: (\d+)")


def parse(text: str) -> dict[str, Any]:
    """Partition (class counts per client) and per-round accuracy (percent) of one log."""
    class_counts: list[list[int]] = []
    accuracy: list[float] = []
    test_size = None
    for line in text.splitlines():
        if (row := CLIENT_ROW.match(line.strip())) is not None:
            *fractions, size = row.group(2).split(",")
            counts = [round(float(f) * int(size)) for f in fractions]
            if sum(counts) != int(size):
                raise ValueError(f"client {row.group(1)}: class fractions do not give {size}")
            class_counts.append(counts)
        elif (acc := ACCURACY.match(line.strip())) is not None:
            accuracy.append(round(100 * float(acc.group(1)), 4))
            test_size = int(acc.group(2))
    return {"class_counts": class_counts, "accuracy": accuracy, "test_size": test_size}


def extract(args: argparse.Namespace) -> None:
    parsed = parse(args.log.read_text())
    record = {
        "source": "github.com/XTxiatong/FLea models/logs/FLea_HAR_K150_Dir0.1.log",
        "commit": args.commit,
        "run": "FLea, UCI-HAR, K = 150, 15 per round, Dir(0.1), E = 5, b = 32, seed 0",
        "preset": "flea/uci_har_dir0.1_n50",
        "method": "flea",
        "note": "accuracy[0] is the warm-up round (fedshare's round 1); class_counts are the "
        "printed class fractions times the client's size",
        **parsed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=None, separators=(",", ":")) + "\n")
    print(f"{len(parsed['class_counts'])} clients, {len(parsed['accuracy'])} rounds -> {args.out}")


def markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table as docs/flea.md writes it (`|---|` rules, no padding)."""
    lines = ["| " + " | ".join(line) + " |" for line in (headers, *rows)]
    return "\n".join([lines[0], "|---" * len(headers) + "|", *lines[1:]])


def compare(args: argparse.Namespace) -> None:
    log = load_log(args.log)
    rows = [(f"**authors' log, {log.run.split(',')[0]} seed 0**", log.accuracy[1:])]
    by_strategy: dict[str, list[tuple[int, float]]] = defaultdict(list)
    seeds: dict[str, list[int]] = defaultdict(list)
    for run in args.runs:
        summary = json.loads((run / "summary.json").read_text())
        history = read_metrics(run / "metrics.jsonl")[1:]
        accuracy = [r["accuracy"] for r in history]
        rows.append((f"{run.name} ({summary['strategy']}, seed {summary['seed']})", accuracy))
        by_strategy[summary["strategy"]] += [(r["round"], r["accuracy"]) for r in history]
        seeds[summary["strategy"]].append(summary["seed"])
    curves = {rows[0][0]: list(enumerate(log.accuracy[1:], start=2))}
    for strategy, points in by_strategy.items():
        listed = ", ".join(map(str, sorted(seeds[strategy])))
        curves[f"fedshare {strategy} (seeds {listed}; mean ± std)"] = points
    headers = ["run", "best", "last-10 mean", "settled min", "settled mean", "settled max"]
    table = []
    for name, accuracy in rows:
        stats = curve_stats(accuracy, args.settled_from)
        table.append([name, *(f"{v:.2f}" for v in stats.values())])
    print(markdown(headers, table))
    if args.plot:
        plot_comparison(curves, args.plot, title=f"{log.run}: authors' log vs fedshare runs")
        print(f"plot -> {args.plot}")


def partition(args: argparse.Namespace) -> None:
    """How skewed the log's partition is beside the preset's (partition seed 1), the preset's
    scheme over partition seeds 0-5 and the same scheme at Dir(0.2)."""
    log = load_log(args.log)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={log.preset}"])
    dataset = load_dataset({"name": "uci_har", "root": args.root})
    scheme = OmegaConf.to_container(cfg.partition, resolve=True)
    assert isinstance(scheme, dict)

    def drawn(**change: float) -> dict[str, float]:
        part = federate(dataset, {**scheme, **change}, cfg.clients.num, seed=0).partition
        return skew_stats(part.class_counts)

    def row(name: str, found: Sequence[dict[str, float]]) -> list[str]:
        def cell(key: str, text: Callable[[float], str]) -> str:
            low, high = min(f[key] for f in found), max(f[key] for f in found)
            return text(low) if low == high else f"{text(low)}–{text(high)}"

        return [
            name,
            cell("classes_per_client", lambda v: f"{v:.2f}"),
            cell("single_class_share", lambda v: f"{100 * v:.1f}") + " %",
            cell("dominant_share", lambda v: f"{v:.3f}"),
            cell("median_size", lambda v: f"{v:g}"),
        ]

    theirs = skew_stats(log.class_counts)
    seed = int(scheme["seed"])
    rows = [
        row("authors' log", [theirs]),
        row(f"the preset's (partition seed {seed}, every run above)", [drawn()]),
        row(
            f"the preset's scheme, partition seeds {args.seeds[0]}–{args.seeds[-1]}",
            [drawn(seed=s) for s in args.seeds],
        ),
        row(f"the same scheme at Dir(0.2), seed {seed}", [drawn(alpha=0.2)]),
    ]
    head = f"partition (K = {theirs['clients']}, {theirs['total']:,} windows)"
    headers = [head, "classes per client", "single-class clients", "dominant class's share"]
    print(markdown([*headers, "median size"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    ex = commands.add_parser("extract", help="parse the authors' log into a JSON file")
    ex.add_argument("log", type=Path)
    ex.add_argument("--commit", required=True, help="the FLea repository commit read")
    ex.add_argument("--out", type=Path, required=True)
    ex.set_defaults(func=extract)
    co = commands.add_parser("compare", help="curve statistics of runs beside the log's")
    co.add_argument("runs", type=Path, nargs="*", help="run directories of the log's preset")
    co.add_argument("--log", default="flea_har_k150_dir0.1")
    co.add_argument("--settled-from", type=int, default=30, help="first round of the settled part")
    co.add_argument("--plot", type=Path)
    co.set_defaults(func=compare)
    pa = commands.add_parser("partition", help="the log's partition skew beside the preset's")
    pa.add_argument("--root", help="a folder holding `UCI HAR Dataset` (or uci_har_hapt/)")
    pa.add_argument("--log", default="flea_har_k150_dir0.1")
    pa.add_argument("--seeds", type=int, nargs="+", default=list(range(6)))
    pa.set_defaults(func=partition)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
