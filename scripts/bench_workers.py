"""fedshare on scripts/bench_peers.py's workloads with K processes sharing each round's clients.

The same FedAvg run as bench_peers.py's `fedshare` row (MNIST, cnn_small channels-last, SGD
lr 0.05, E = 5, B = 32, one torch thread per process, fixed malloc thresholds), started with
torch's elastic launcher (`torch.distributed.launcher.elastic_launch`, what `workers=K` and
torchrun use) for K > 1 and as a plain single process for K = 1. Reported per (workload, K):
median wall seconds per timed round (rank 0's round boundaries; the ranks meet at every
round's exchange), throughput relative to K = 1, each process's CPU seconds per round (on a
loaded machine the wall time follows the load; K = 1's CPU time over the busiest rank's is the
speed-up an idle machine would allow), each process's peak RSS, the bytes the
processes exchanged per round, and the largest difference of the final weights from K = 1's.

    FEDSHARE_DATA=/path/to/datasets python scripts/bench_workers.py --workloads W1 W2 \
        --workers 1 2 --rounds 3 --cycles 2 --out bench_workers.json
"""

import argparse
import hashlib
import importlib.util
import itertools
import json
import os
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 * 2**20))
os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(2**27))

import torch  # noqa: E402


def bench_peers() -> Any:
    """scripts/bench_peers.py as a module (its workloads, training settings and data)."""
    path = Path(__file__).resolve().with_name("bench_peers.py")
    spec = importlib.util.spec_from_file_location("bench_peers", path)
    if "bench_peers" not in sys.modules:
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_peers"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules["bench_peers"]


def one_process(workload: str, rounds: int, device: str, batched: int) -> dict[str, Any]:
    """One rank's run (or the whole run when not launched): round walls, memory, weights.
    `device`: cpu, or cuda (rank r on GPU r mod the visible GPUs); `batched`: clients per
    vectorised step (`train.batched`, 0 = one at a time)."""
    from fedshare.api import init_model
    from fedshare.config import ClientsConfig, EvalConfig, SimulationConfig, TrainConfig
    from fedshare.engine.distributed import RankGroup, launched, local_device
    from fedshare.engine.simulation import Simulation
    from fedshare.strategies import FedAvg

    torch.set_num_threads(1)
    peers = bench_peers()
    bench = peers.load_bench(workload, rounds + 1, peer=False)
    device = local_device(device, int(os.environ.get("LOCAL_RANK", "0")))
    group = RankGroup.join(device) if launched() else None
    marks: list[float] = []
    cpu: list[float] = []

    def after_round(sim: Any, completed: int, record: Any) -> bool:
        if device != "cpu":
            torch.cuda.synchronize()
        marks.append(time.perf_counter())
        cpu.append(time.process_time())
        return completed >= bench.total_rounds

    config = SimulationConfig(
        rounds=bench.total_rounds + 1,
        seed=0,
        device=device,
        progress=False,
        clients=ClientsConfig(per_round=bench.per_round),
        train=TrainConfig(**peers.TRAIN, batched=batched),
        eval=EvalConfig(every=10**6),
    )
    model = init_model("cnn_small", bench.fed, seed=0)
    sim = Simulation(FedAvg(), bench.fed, model, config, callbacks=[after_round], group=group)
    marks.append(time.perf_counter())
    cpu.append(time.process_time())
    sim.run()
    weights = sim.strategy.flat.flatten(sim.strategy.model).double().cpu()
    result = {
        "round_wall_s": [b - a for a, b in itertools.pairwise(marks)][1:],
        "warmup_wall_s": marks[1] - marks[0],
        "round_cpu_s": [b - a for a, b in itertools.pairwise(cpu)][1:],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "weights": weights.tolist() if group is None or group.rank == 0 else None,
        "weights_sha": hashlib.sha256(weights.numpy().tobytes()).hexdigest()[:16],
        "interprocess_bytes": 0 if group is None else group.bytes_sent,
        "gpu_peak_allocated_mb": (
            torch.cuda.max_memory_allocated() / 2**20 if device != "cpu" else None
        ),
    }
    if group is not None:
        group.close()
    return result


def measure(
    workload: str, workers: int, rounds: int, device: str = "cpu", batched: int = 0
) -> dict[str, Any]:
    """The run with `workers` processes; rank 0's timings, every rank's memory."""
    if workers == 1:
        ranks = {0: one_process(workload, rounds, device, batched)}
    else:
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=workers,
            rdzv_backend="c10d",
            rdzv_endpoint="localhost:0",
            run_id=str(uuid.uuid4()),
            max_restarts=0,
            monitor_interval=0.5,
        )
        ranks = elastic_launch(config, one_process)(workload, rounds, device, batched)
    first = ranks[0]
    total_sent = sum(r["interprocess_bytes"] for r in ranks.values())
    return {
        "workload": workload,
        "workers": workers,
        "round_wall_s": first["round_wall_s"],
        "round_cpu_s_per_process": [ranks[r]["round_cpu_s"] for r in sorted(ranks)],
        "warmup_wall_s": first["warmup_wall_s"],
        "peak_rss_mb_per_process": [ranks[r]["peak_rss_mb"] for r in sorted(ranks)],
        "gpu_peak_allocated_mb_per_process": [
            ranks[r]["gpu_peak_allocated_mb"] for r in sorted(ranks)
        ],
        "interprocess_bytes_per_round": total_sent / (rounds + 1),
        "weights": first["weights"],
        "weights_sha": first["weights_sha"],
    }


def table(workload: str, runs: list[dict[str, Any]]) -> str:
    by_k: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        by_k.setdefault(run["workers"], []).append(run)
    base = (
        statistics.median(t for r in by_k.get(1, []) for t in r["round_wall_s"])
        if 1 in by_k
        else None
    )
    ref = torch.tensor(by_k[1][0]["weights"]) if 1 in by_k else None
    lines = [
        f"### {workload}",
        "",
        "| processes | s/round (median) | rounds timed | throughput vs K=1 | CPU s/round per "
        "process (median) | peak RSS MB per process | peak GPU MB per process | exchanged "
        "MB/round | max abs weight diff vs K=1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for k, group in sorted(by_k.items()):
        walls = [t for r in group for t in r["round_wall_s"]]
        median = statistics.median(walls)
        speed = f"{base / median:.2f}×" if base else ""
        rss = ", ".join(f"{m:.0f}" for m in group[0]["peak_rss_mb_per_process"])
        gpu = ", ".join(
            f"{m:.0f}" for m in group[0]["gpu_peak_allocated_mb_per_process"] if m is not None
        )
        diff = ""
        if ref is not None:
            diff = f"{(torch.tensor(group[0]['weights']) - ref).abs().max().item():.2e}"
        mb = group[0]["interprocess_bytes_per_round"] / 2**20
        cpus = ", ".join(
            f"{statistics.median(t for r in group for t in r['round_cpu_s_per_process'][rank]):.2f}"
            for rank in range(k)
        )
        lines.append(
            f"| {k} | {median:.2f} | {len(walls)} | {speed} | {cpus} | {rss} | {gpu} | "
            f"{mb:.1f} | {diff} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["W1", "W2"], choices=["W1", "W2"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after 1 warm-up)")
    parser.add_argument("--cycles", type=int, default=2, help="interleaved repeats")
    parser.add_argument("--out", default="bench_workers.json")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--batched", type=int, default=0, help="train.batched: clients per vectorised step"
    )
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {w: [] for w in args.workloads}
    for cycle in range(args.cycles):
        order = args.workers if cycle % 2 == 0 else args.workers[::-1]
        for workload in args.workloads:
            for workers in order:
                run = measure(workload, workers, args.rounds, args.device, args.batched)
                runs[workload].append(run)
                walls = run["round_wall_s"]
                print(
                    f"cycle {cycle + 1} {workload} K={workers}: "
                    f"{statistics.median(walls):.2f} s/round {[round(w, 2) for w in walls]}",
                    flush=True,
                )
    for workload in args.workloads:
        print()
        print(table(workload, runs[workload]))
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "device": torch.cuda.get_device_name() if args.device != "cpu" else "cpu",
        "load_avg_at_end": os.getloadavg(),
        "argv": sys.argv,
        "runs": {
            w: [{k: v for k, v in r.items() if k != "weights"} for r in rs]
            for w, rs in runs.items()
        },
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"\nresults: {args.out}")


if __name__ == "__main__":
    main()
