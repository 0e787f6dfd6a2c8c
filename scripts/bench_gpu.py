"""FLea's round with its batched loss, and FedAA's server synthesis, on a GPU (docs/performance.md,
"On a GPU").

1. FLea (its own training defaults: Adam rebuilt each step, its buffer, the dCor term and the
   teacher's KD inside the loss) on MNIST's first 10,000 training images, 100 clients Dir(0.5),
   10 per round, cnn_small: one client after another (`train.batched=0`) and 10 clients per
   vectorised step (`train.batched=10`). Reported: median s/round over the rounds after the
   first (the first builds the buffer and the GPU kernels), every round's accuracy and
   training loss under both, peak GPU memory.
2. FedAA's adversarial synthesis (Eq. 4: 10 labels × 32 inputs from N(0, 1) noise, L-BFGS,
   100 iterations) against one cnn_small trained for one epoch on those images: scipy's
   L-BFGS-B in float64 on the host (the CPU default) with the model on the CPU and on the GPU,
   and torch's L-BFGS on the GPU (`adv_solver=auto` on a CUDA run). Reported: wall seconds,
   the mean loss before and after, the fraction of inputs the model assigns to their target.

    FEDSHARE_DATA=/path/to/datasets python scripts/bench_gpu.py --out bench_gpu.json
"""

import argparse
import dataclasses
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from fedshare import simulate
from fedshare.config.api import init_model
from fedshare.data import federate, load_dataset
from fedshare.functional.fooling import fool
from fedshare.strategies import make_strategy

IMAGES, CLIENTS, PER_ROUND = 10_000, 100, 10


def sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def gpu_peak_mb(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if device != "cpu" else None


def mnist_federation() -> Any:
    data = load_dataset({"name": "mnist"})
    data = dataclasses.replace(
        data,
        x_train=data.x_train[:IMAGES],
        y_train=data.y_train[:IMAGES],
        x_test=data.x_test[:2000],
        y_test=data.y_test[:2000],
    )
    return federate(data, {"name": "dirichlet", "alpha": 0.5}, num_clients=CLIENTS, seed=0)


def flea_run(fed: Any, device: str, batched: int, rounds: int) -> dict[str, Any]:
    marks: list[float] = []

    def clock(sim: Any, completed: int, record: Any) -> bool:
        sync(device)
        marks.append(time.perf_counter())
        return False

    if device != "cpu":
        torch.cuda.reset_peak_memory_stats()
    marks.append(time.perf_counter())
    run = simulate(
        make_strategy("flea", {}),
        fed,
        "cnn_small",
        rounds=rounds,
        seed=0,
        clients={"per_round": PER_ROUND},
        train={"batched": batched, "local_epochs": 1, "batch_size": 32},
        device=device,
        callbacks=[clock],
    )
    walls = [b - a for a, b in itertools.pairwise(marks)]
    return {
        "batched": batched,
        "round_wall_s": walls,
        "median_wall_s_after_first": statistics.median(walls[1:]),
        "accuracy": [r["accuracy"] for r in run.history],
        "train_loss": [r["train_loss"] for r in run.history],
        "gpu_peak_allocated_mb": gpu_peak_mb(device),
    }


def trained_model(fed: Any, device: str) -> torch.nn.Module:
    """cnn_small after one epoch of SGD on the pooled images (a model worth fooling)."""
    model = init_model("cnn_small", fed, seed=0).to(device)
    x = fed.dataset.prepare(fed.dataset.x_train).to(device)
    y = fed.dataset.y_train.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0)).to(device)
    for batch in order.split(64):
        opt.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    return model.eval()


def synthesis(fed: Any, model: torch.nn.Module, device: str, solver: str) -> dict[str, Any]:
    model = model.to(device)
    targets = torch.arange(10, device=device).repeat_interleave(32)
    generator = torch.Generator(device=device).manual_seed(0)
    shape = tuple(fed.dataset.x_train.shape[1:])
    sync(device)
    start = time.perf_counter()
    out = fool(model, targets, shape, generator, solver=solver, max_iter=100)
    sync(device)
    return {
        "solver": solver,
        "model_device": device,
        "wall_s": time.perf_counter() - start,
        "loss_start": out.loss_start,
        "loss_end": out.loss_end,
        "hit_rate": out.hit_rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="bench_gpu.json")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu to check the script")
    args = parser.parse_args()
    gpu = args.device
    if gpu != "cpu" and not torch.cuda.is_available():
        parser.error(f"--device={gpu} but torch sees no CUDA device; valid: cpu")
    fed = mnist_federation()
    name = torch.cuda.get_device_name() if gpu != "cpu" else "cpu"
    report: dict[str, Any] = {"device": name, "torch": torch.__version__}
    report["flea"] = [flea_run(fed, gpu, b, args.rounds) for b in (0, PER_ROUND)]
    for run in report["flea"]:
        print(
            f"FLea batched={run['batched']}: {run['median_wall_s_after_first']:.3f} s/round, "
            f"accuracy {[round(a, 4) for a in run['accuracy']]}, "
            f"GPU MB {run['gpu_peak_allocated_mb']}",
            flush=True,
        )
    model = trained_model(fed, gpu).cpu()
    report["fedaa_synthesis"] = [
        synthesis(fed, model, "cpu", "lbfgsb"),
        synthesis(fed, model, gpu, "lbfgsb"),
        synthesis(fed, model, gpu, "torch"),
        synthesis(fed, model, gpu, "torch"),  # again, with the kernels warm
    ]
    for row in report["fedaa_synthesis"]:
        print(
            f"FedAA synthesis {row['solver']} on {row['model_device']}: {row['wall_s']:.2f} s, "
            f"loss {row['loss_start']:.2f} -> {row['loss_end']:.4f}, hit {row['hit_rate']:.3f}",
            flush=True,
        )
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
