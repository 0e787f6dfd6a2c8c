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

`--peers` adds the peer frameworks of bench_peers.py, each with the same K in its own
documented parallel mode, every (framework, K) in a fresh process and interleaved with
fedshare's runs (needs bench_peers.py's venv):
- pfl: K processes started by torch's elastic launcher (what torchrun does), pfl's
  `PyTorchDistributedContext` (gloo): each process trains its share of the cohort and the
  model updates are all-reduced;
- Flower: `run_simulation` with K Ray actors (`init_args.num_cpus = K`, 1 CPU per client);
- BlazeFL: `FedAvgProcessPoolClientTrainer` with `num_parallels = K` (a process pool per
  round, the uploads through shared memory; its workers' CPU is counted once they are reaped).
FedLab has no parallel trainer in its standalone mode (its parallel modes are the
cross-process and cross-machine deployments of a server and client processes), so it is not
in this comparison. Reported for each: the median wall seconds per round, the CPU seconds per
round of all its processes together (fedshare and pfl: the ranks; Flower and BlazeFL: the
process tree of the driver, Ray's daemons or the pool included), peak RSS and the accuracy on
the first 1,000 test images.

    python scripts/bench_workers.py --workloads W1 --workers 1 2 \
        --peers pfl flower blazefl --rounds 3 --cycles 2 --out bench_parallel.json
"""

import argparse
import functools
import hashlib
import importlib.util
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
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


PEERS = ("pfl", "flower", "blazefl")


def marks_result(bench: Any, model: torch.nn.Module, peers: Any) -> dict[str, Any]:
    """Round walls and CPU seconds of `bench.marks` (warm-up round apart), memory, accuracy."""
    walls = [b[0] - a[0] for a, b in itertools.pairwise(bench.marks)]
    cpus = [b[1] - a[1] for a, b in itertools.pairwise(bench.marks)]
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    own = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    return {
        "round_wall_s": walls[1:],
        "warmup_wall_s": walls[0],
        "round_cpu_s": cpus[1:],
        "peak_rss_mb": max(own, max(m[2] for m in bench.marks)) / 2**20,
        "accuracy": peers.accuracy(model.float(), bench.x_test, bench.y_test),
    }


def pfl_rank(workload: str, rounds: int) -> dict[str, Any]:
    """One pfl process: the run of bench_peers.py's `run_pfl`; under torch's launcher pfl
    joins the process group itself and trains this process's share of every cohort."""
    torch.set_num_threads(1)
    peers = bench_peers()
    bench = peers.load_bench(workload, rounds + 1)
    return marks_result(bench, peers.run_pfl(bench), peers)


class BlazeModels:
    """BlazeFL's ModelSelector: a copy of the run's initial model (channels-last)."""

    def __init__(self, initial: torch.nn.Module) -> None:
        self.initial = initial

    def select_model(self, model_name: str) -> torch.nn.Module:
        import copy

        return copy.deepcopy(self.initial)


class BlazeData:
    """BlazeFL's PartitionedDataset over the workload's clients, picklable for its process
    pool (the tensors go to shared memory once): a DataLoader per client, as in its serial
    runner."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, clients: torch.Tensor) -> None:
        self.x, self.y, self.clients = x, y, clients

    def get_dataset(self, type_: Any, cid: int | None) -> Any:
        raise NotImplementedError

    def set_dataset(self, type_: Any, cid: int | None, dataset: Any) -> None:
        """BlazeFL's pool worker hands each client's dataset back; nothing to keep."""

    def get_dataloader(
        self, type_: Any, cid: int | None, batch_size: int | None = None, generator: Any = None
    ) -> Any:
        from torch.utils.data import DataLoader, TensorDataset

        idx = self.clients[cid]
        data = TensorDataset(self.x[idx], self.y[idx])
        return DataLoader(data, batch_size=batch_size, shuffle=True, generator=generator)


def run_blazefl_pool(bench: Any, parallels: int, peers: Any) -> torch.nn.Module:
    """BlazeFL's FedAvg with `FedAvgProcessPoolClientTrainer` (`num_parallels`, shared-memory
    uploads), driven like its serial pipeline in bench_peers.py."""
    import blazefl.contrib.fedavg as blaze
    from blazefl.core import IPCMode

    blaze.serialize_model = peers.reshape_serialize  # as in bench_peers.py (forked workers too)
    models = BlazeModels(peers.new_model(bench))
    data = BlazeData(bench.x, bench.y, torch.stack(bench.clients))
    num = len(bench.clients)
    handler = blaze.FedAvgBaseServerHandler(
        models, "cnn_small", data, bench.total_rounds, num, bench.per_round / num, "cpu",
        peers.BATCH, seed=0,
    )  # fmt: skip
    share = Path(tempfile.mkdtemp(prefix="bench_blazefl_"))
    trainer = blaze.FedAvgProcessPoolClientTrainer(
        models, "cnn_small", share / "share", share / "state", data, "cpu", num, peers.EPOCHS,
        peers.BATCH, peers.LR, seed=0, num_parallels=parallels, ipc_mode=IPCMode.SHARED_MEMORY,
    )  # fmt: skip
    trainer.progress_fn = lambda jobs: jobs  # no tqdm bar

    def mark() -> None:  # the pool's workers end within the round: count them once reaped
        bench.mark()
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, cpu, rss = bench.marks[-1]
        bench.marks[-1] = (wall, cpu + reaped.ru_utime + reaped.ru_stime, rss)

    mark()
    while not handler.if_stop():
        trainer.local_process(handler.downlink_package(), handler.sample_clients())
        for package in trainer.uplink_package():
            handler.load(package)
        mark()
    peers.check_channels_last(handler.model)
    return handler.model


def peer_run(framework: str, workload: str, workers: int, rounds: int) -> dict[str, Any]:
    """One (peer, K) measurement in this process (and the processes it starts)."""
    torch.set_num_threads(1)
    peers = bench_peers()
    if framework == "pfl":
        if workers == 1:
            ranks = {0: pfl_rank(workload, rounds)}
        else:  # as torchrun starts them: pfl joins the group only in a process's main process
            with tempfile.TemporaryDirectory(prefix="bench_pfl_") as tmp:
                launch(workers)(sys.executable)(__file__, "--pfl-rank", workload, str(rounds), tmp)
                ranks = {r: json.loads(Path(tmp, f"{r}.json").read_text()) for r in range(workers)}
        first = ranks[0]
        per_process = [ranks[r]["round_cpu_s"] for r in sorted(ranks)]
        return {
            **first,
            "round_cpu_s": [sum(c) for c in zip(*per_process, strict=True)],
            "round_cpu_s_per_process": per_process,
            "peak_rss_mb_per_process": [ranks[r]["peak_rss_mb"] for r in sorted(ranks)],
        }
    bench = peers.load_bench(workload, rounds + 1)
    if framework == "flower":
        model = peers.run_flower(bench, actors=workers)
    else:
        model = run_blazefl_pool(bench, workers, peers)
    return marks_result(bench, model, peers)


def launch(workers: int) -> Any:
    """torch's elastic launcher for `workers` local processes (what torchrun does)."""
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
    return functools.partial(elastic_launch, config)  # (function or executable)(*args)


def measure_peer(framework: str, workload: str, workers: int, rounds: int) -> dict[str, Any]:
    """`peer_run` in a fresh process (bench_peers.py's thread and allocator settings)."""
    with tempfile.TemporaryDirectory(prefix="bench_workers_") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--child", framework, workload, str(workers)]
        cmd += [str(rounds), str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            return {"framework": framework, "workload": workload, "workers": workers,
                    "error": " | ".join(tail)}  # fmt: skip
        result = json.loads(out.read_text())
    return {"framework": framework, "workload": workload, "workers": workers, **result}


def one_process(workload: str, rounds: int, device: str, batched: int) -> dict[str, Any]:
    """One rank's run (or the whole run when not launched): round walls, memory, weights.
    `device`: cpu, or cuda (rank r on GPU r mod the visible GPUs); `batched`: clients per
    vectorised step (`train.batched`, 0 = one at a time)."""
    from fedshare.config import ClientsConfig, EvalConfig, SimulationConfig, TrainConfig
    from fedshare.config.api import init_model
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
    model = sim.strategy.model.float().cpu()
    result = {
        "accuracy": peers.accuracy(model, bench.x_test, bench.y_test),
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
    # K = 1 too runs in a process of its own started by the launcher: glibc reads the malloc
    # thresholds set above only when a process starts, and the engine leaves them to the
    # environment once they are set, so an in-process K = 1 ran on glibc's dynamic thresholds.
    ranks = launch(workers)(one_process)(workload, rounds, device, batched)
    first = ranks[0]
    total_sent = sum(r["interprocess_bytes"] for r in ranks.values())
    per_process = [ranks[r]["round_cpu_s"] for r in sorted(ranks)]
    return {
        "framework": "fedshare",
        "workload": workload,
        "workers": workers,
        "round_wall_s": first["round_wall_s"],
        "round_cpu_s": [sum(c) for c in zip(*per_process, strict=True)],
        "round_cpu_s_per_process": per_process,
        "accuracy": first["accuracy"],
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


def side_by_side(workload: str, runs: list[dict[str, Any]]) -> str:
    """fedshare and the peers at every K: wall, throughput, CPU of all processes, memory."""
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["framework"], run["workers"]), []).append(run)
    walls = {
        key: statistics.median(t for r in group for t in r["round_wall_s"])
        for key, group in cells.items()
        if all("error" not in r for r in group)
    }
    lines = [
        f"### {workload}: each framework in its parallel mode",
        "",
        "| framework | processes / actors | s/round wall (median) | throughput vs its K=1 | "
        "wall ÷ fedshare's at this K | CPU s/round, all processes (median) | peak RSS MB | "
        "accuracy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (framework, k), group in sorted(cells.items(), key=lambda c: (c[0][1], c[0][0])):
        if (framework, k) not in walls:
            error = next(r["error"] for r in group if "error" in r)
            lines.append(f"| {framework} | {k} | failed: {error[:120]} | | | | | |")
            continue
        wall = walls[framework, k]
        own = walls.get((framework, 1))
        fed = walls.get(("fedshare", k))
        cpu = statistics.median(t for r in group for t in r["round_cpu_s"])
        rss = max(max(r.get("peak_rss_mb_per_process") or [r["peak_rss_mb"]]) for r in group)
        accuracy = statistics.median(r["accuracy"] for r in group)
        lines.append(
            f"| {framework} | {k} | {wall:.2f} | {f'{own / wall:.2f}×' if own else ''} | "
            f"{f'{wall / fed:.2f}' if fed else ''} | {cpu:.2f} | {rss:.0f} | "
            f"{100 * accuracy:.1f} % |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["W1", "W2"], choices=["W1", "W2"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument(
        "--peers", nargs="*", default=[], choices=PEERS, help="peers in their parallel modes"
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after 1 warm-up)")
    parser.add_argument("--cycles", type=int, default=2, help="interleaved repeats")
    parser.add_argument("--out", default="bench_workers.json")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--batched", type=int, default=0, help="train.batched: clients per vectorised step"
    )
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--pfl-rank", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pfl_rank:
        workload, rounds, folder = args.pfl_rank
        result = pfl_rank(workload, int(rounds))
        Path(folder, f"{os.environ['RANK']}.json").write_text(json.dumps(result))
        return
    if args.child:
        framework, workload, workers, rounds, path = args.child
        result = peer_run(framework, workload, int(workers), int(rounds))
        Path(path).write_text(json.dumps(result))
        return
    cells = [(f, k) for f in ("fedshare", *args.peers) for k in args.workers]
    runs: dict[str, list[dict[str, Any]]] = {w: [] for w in args.workloads}
    for cycle in range(args.cycles):
        shift = cycle % len(cells)
        order = cells[shift:] + cells[:shift]  # rotate so that no cell always runs first
        for workload in args.workloads:
            for framework, workers in order:
                if framework == "fedshare":
                    run = measure(workload, workers, args.rounds, args.device, args.batched)
                else:
                    run = measure_peer(framework, workload, workers, args.rounds)
                runs[workload].append(run)
                walls = run.get("round_wall_s")
                note = (
                    f"{statistics.median(walls):.2f} s/round {[round(w, 2) for w in walls]}"
                    if walls
                    else run.get("error")
                )
                print(f"cycle {cycle + 1} {workload} {framework} K={workers}: {note}", flush=True)
    for workload in args.workloads:
        print()
        print(table(workload, [r for r in runs[workload] if r["framework"] == "fedshare"]))
        if args.peers:
            print()
            print(side_by_side(workload, runs[workload]))
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
