"""Scale: how fedshare's costs grow with the clients that are *not* in the round's cohort.

FedAvg (`--strategy`: any other, e.g. scaffold with its state per client) with a fixed cohort
(10 clients per round), a fixed number of samples per client
(default 20) and the small CNN, for several client counts. Every setting runs in a subprocess of
its own, so its peak RSS is its own. Measured per setting:

* data: building the training set of clients × samples images (MNIST's images repeated
  cyclically when 60,000 are not enough; `--data synthetic`: random 28×28 uint8 images
  with class-dependent means, no data root needed);
* partition: `make_partition` (IID) alone, and `federate` (partition + federated data);
* setup: from `simulate()` to the first round (model, strategy, config.yaml, partition.json,
  partition.png); partition.json and partition.png are also timed on their own;
* round: median wall time of the rounds after the first, not counting the last (which evaluates
  the test set); it includes the engine's own checkpoint (`checkpoint.every=1`);
* checkpoint: size of checkpoint.pt, time of the engine's own `save_checkpoint` (median) and of
  one `load_checkpoint`, the bytes the last checkpoint wrote (checkpoint.pt and its client-state
  segment, `engine/state_log.py`) and the client state held;
* resume: `simulate(..., resume=True)` of the finished run (setup + loading the checkpoint,
  no round left to run);
* run directory size, and the process's peak RSS.

    FEDSHARE_DATA=../shared/datasets python scripts/bench_scale.py --clients 100 1000 10000 \
        --out scale.json
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

TRAIN = {"local_epochs": 1, "batch_size": 20, "lr": 0.05, "optimizer": "sgd"}
TEST_SIZE = 1000


def build_dataset(kind: str, size: int, seed: int = 0) -> Any:
    """A training set of exactly `size` 1×28×28 uint8 images (and a 1,000-image test set)."""
    from fedshare.data import Dataset, load_dataset

    if kind == "mnist":
        mnist = load_dataset({"name": "mnist", "test_subset": TEST_SIZE})
        reps = np.resize(np.arange(len(mnist.y_train)), size)  # cyclic repetition
        return Dataset(
            "mnist_tiled",
            mnist.x_train[reps],
            mnist.y_train[reps],
            mnist.x_test,
            mnist.y_test,
            num_classes=10,
            scale=mnist.scale,
            mean=mnist.mean,
            std=mnist.std,
            default_model="cnn_small",
        )
    rng = np.random.default_rng(seed)
    means = rng.integers(40, 200, size=(10, 1, 28, 28))

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = np.arange(n) % 10
        x = np.clip(means[y] + rng.normal(0, 40, size=(n, 1, 28, 28)), 0, 255).astype(np.uint8)
        return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    x_tr, y_tr = draw(size)
    x_te, y_te = draw(TEST_SIZE)
    return Dataset(
        "synthetic_images", x_tr, y_tr, x_te, y_te, num_classes=10, scale=1 / 255,
        mean=(0.5,), std=(0.25,), default_model="cnn_small",
    )  # fmt: skip


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def newest_bytes(run_dir: Path) -> int:
    """Bytes a checkpoint wrote: checkpoint.pt plus the client-state segment it added."""
    segments = sorted((run_dir / "client_states").glob("*.pt"), key=lambda p: p.stat().st_mtime)
    newest = segments[-1].stat().st_size if segments else 0
    return (run_dir / "checkpoint.pt").stat().st_size + newest


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One setting (run inside its own process)."""
    from fedshare import simulate
    from fedshare.data import federate, make_partition, plot_partition
    from fedshare.engine.callbacks import Callback
    from fedshare.engine.checkpoint import load_checkpoint
    from fedshare.engine.rng import numpy_rng
    from fedshare.results.rundir import write_json
    from fedshare.strategies import make_strategy

    torch.set_num_threads(args.threads)
    n = args.worker
    out: dict[str, Any] = {"clients": n, "samples_per_client": args.samples_per_client}
    t = time.perf_counter()
    dataset = build_dataset(args.data, n * args.samples_per_client)
    out["data_s"] = time.perf_counter() - t
    out["data"] = dataset.name

    labels = dataset.y_train.numpy()
    t = time.perf_counter()
    part = make_partition(labels, n, {"name": "iid"}, numpy_rng(0, "partition"), 10)
    out["partition_s"] = time.perf_counter() - t
    t = time.perf_counter()
    fed = federate(dataset, "iid", num_clients=n, seed=0)
    out["federate_s"] = time.perf_counter() - t

    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        side = Path(tmp) / "side"
        side.mkdir()
        t = time.perf_counter()
        write_json(side / "partition.json", part.summary())
        out["partition_json_s"] = time.perf_counter() - t
        t = time.perf_counter()
        plot_partition(part, side / "partition.png")
        out["partition_png_s"] = time.perf_counter() - t
        del part

        run_dir = Path(tmp) / "run"
        marks: list[float] = []
        ckpt_s: list[float] = []
        load_s: list[float] = []

        written: list[int] = []

        def timer(sim: Any, rounds_completed: int, record: Any) -> None:
            now = time.perf_counter()
            marks.append(now)
            t0 = time.perf_counter()
            load_checkpoint(sim.dir.checkpoint_path)
            load_s.append(time.perf_counter() - t0)
            marks.append(time.perf_counter())  # the next round starts after this

        kwargs: dict[str, Any] = dict(
            rounds=args.rounds,
            seed=0,
            train=TRAIN,
            clients={"per_round": args.per_round},
            eval={"every": 10**6},  # evaluated at the last round only
            checkpoint={"every": 1},
            device="cpu",
            run_dir=run_dir,
        )
        model = args.model
        t = time.perf_counter()
        begin: list[float] = []

        class Probe(Callback):
            def on_begin(self, sim: Any) -> None:
                begin.append(time.perf_counter())
                save = sim.save_checkpoint

                def timed_save() -> None:  # the engine's own checkpoint write, timed
                    t0 = time.perf_counter()
                    save()
                    ckpt_s.append(time.perf_counter() - t0)
                    written.append(newest_bytes(run_dir))

                sim.save_checkpoint = timed_save

            def on_round_end(self, sim: Any, record: Any) -> None:
                timer(sim, sim.rounds_completed, record)

        result = simulate(make_strategy(args.strategy), fed, model, callbacks=[Probe()], **kwargs)
        out["strategy"] = args.strategy
        out["client_state_bytes"] = result.summary.get("client_state_bytes", 0)
        out["ckpt_written_bytes"] = written[-1]
        out["run_s"] = time.perf_counter() - t
        out["setup_s"] = begin[0] - t
        starts = [begin[0], *marks[1::2][:-1]]
        ends = marks[0::2]
        rounds = [e - s for s, e in zip(starts, ends, strict=True)]
        middle = rounds[1:-1] or rounds
        out["round_s"] = statistics.median(middle)
        out["round_s_all"] = rounds
        out["ckpt_write_s"] = statistics.median(ckpt_s)
        out["ckpt_load_s"] = statistics.median(load_s)
        out["ckpt_bytes"] = (run_dir / "checkpoint.pt").stat().st_size
        out["partition_json_bytes"] = (run_dir / "partition.json").stat().st_size
        out["partition_png_bytes"] = (run_dir / "partition.png").stat().st_size
        out["run_dir_bytes"] = dir_bytes(run_dir)
        t = time.perf_counter()
        simulate(make_strategy(args.strategy), fed, model, resume=True, **kwargs)
        out["resume_s"] = time.perf_counter() - t
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


FORWARDED = ("samples_per_client", "per_round", "rounds", "model", "strategy", "data", "threads")
"""The options each setting's subprocess gets."""

COLUMNS = [
    ("clients", "clients", "{:d}"),
    ("data_s", "data s", "{:.2f}"),
    ("partition_s", "partition s", "{:.3f}"),
    ("federate_s", "federate s", "{:.3f}"),
    ("partition_json_s", "partition.json s", "{:.3f}"),
    ("partition_png_s", "partition.png s", "{:.2f}"),
    ("setup_s", "setup s", "{:.2f}"),
    ("round_s", "round s (median)", "{:.3f}"),
    ("ckpt_write_s", "ckpt write s", "{:.4f}"),
    ("ckpt_load_s", "ckpt load s", "{:.4f}"),
    ("resume_s", "resume s", "{:.2f}"),
    ("ckpt_bytes", "ckpt KB", "kb"),
    ("ckpt_written_bytes", "last ckpt wrote KB", "kb"),
    ("client_state_bytes", "client state KB", "kb"),
    ("partition_json_bytes", "partition.json KB", "kb"),
    ("run_dir_bytes", "run dir KB", "kb"),
    ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
]


def table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    lines = [head, rule]
    for row in rows:
        cells = []
        for key, _, fmt in COLUMNS:
            value = row[key]
            cells.append(f"{value / 1024:.0f}" if fmt == "kb" else fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--samples-per-client", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="cnn_small")
    parser.add_argument("--strategy", default="fedavg", help="e.g. scaffold (state per client)")
    parser.add_argument("--data", choices=["auto", "mnist", "synthetic"], default="auto")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.data == "auto":
        root = os.environ.get("FEDSHARE_DATA")
        has_mnist = root is not None and (Path(root) / "MNIST" / "raw").is_dir()
        args.data = "mnist" if has_mnist else "synthetic"
    if args.worker is not None:
        print(json.dumps(measure(args)))
        return
    rows = []
    for n in args.clients:
        cmd = [sys.executable, __file__, "--worker", str(n)]
        for flag in FORWARDED:
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"the setting with {n} clients failed")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{n} clients done", file=sys.stderr, flush=True)
    print(
        f"{args.strategy}, {args.model}, {args.samples_per_client} samples/client "
        f"({rows[0]['data']}), "
        f"{args.per_round} clients/round, E=1, {args.rounds} rounds, {args.threads} thread(s)"
    )
    print(table(rows))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
