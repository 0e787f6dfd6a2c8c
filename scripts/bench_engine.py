"""Engine overhead: FedAvg through fedshare vs a bare PyTorch loop doing the same steps.

Setting (issue 2): MNIST, 100 clients × 100 samples (IID), 10 clients per round, 5 local
epochs, batch 32, the small CNN, plain SGD. Both loops draw the same batches from the same
random streams, so they also end at the same weights (the script checks). The two loops
alternate, and so does which goes first, to even out machine noise and order effects; the
median per-round wall time and process CPU time are reported (CPU time is the steadier figure
on a busy machine; use --threads 1).

    FEDSHARE_DATA=../shared/datasets python scripts/bench_engine.py --rounds 5 --repeats 3
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from fedshare import simulate
from fedshare.config.api import init_model
from fedshare.data import federate, load_dataset
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.engine.sampling import CohortSampler
from fedshare.engine.simulation import uses_channels_last
from fedshare.models import prepare_for_device
from fedshare.strategies import FedAvg

TRAIN = {"local_epochs": 5, "batch_size": 32, "lr": 0.05, "optimizer": "sgd"}


def bare_fedavg(fed, model, rounds: int, seed: int, per_round: int) -> torch.Tensor:
    """FedAvg written directly in PyTorch: the reference the engine is measured against."""
    ds = fed.dataset
    global_params = [p.detach().clone() for p in model.parameters()]
    sampler = CohortSampler(fed.num_clients, per_round, torch.ones(fed.num_clients).numpy(), seed)
    mean = torch.tensor(ds.mean).view(1, -1, 1, 1)
    std = torch.tensor(ds.std).view(1, -1, 1, 1)
    for r in range(rounds):
        total = 0
        acc = [torch.zeros_like(p) for p in global_params]
        for cid in sampler.cohort(r):
            seed_global_torch(seed, "client/train", r, cid)
            with torch.no_grad():
                for p, g in zip(model.parameters(), global_params, strict=True):
                    p.copy_(g)
            opt = torch.optim.SGD(model.parameters(), lr=TRAIN["lr"])
            idx = fed.client_indices[cid]
            gen = torch_generator(seed, "train/batches", r, cid)
            for _ in range(TRAIN["local_epochs"]):
                order = idx[torch.randperm(len(idx), generator=gen)]
                for start in range(0, len(order), TRAIN["batch_size"]):
                    b = order[start : start + TRAIN["batch_size"]]
                    x = (ds.x_train[b].float() * ds.scale - mean) / std
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(model(x), ds.y_train[b]).backward()
                    opt.step()
            with torch.no_grad():
                for a, p in zip(acc, model.parameters(), strict=True):
                    a.add_(p, alpha=len(idx))
            total += len(idx)
        global_params = [a / total for a in acc]
    return torch.cat([g.reshape(-1) for g in global_params])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_dataset({"name": "mnist", "train_subset": 10_000, "test_subset": 1000})
    fed = federate(data, "iid", num_clients=100, seed=0)
    # the first optimizer of a process imports torch._dynamo (about a second, once): pay it
    # before timing, for both loops
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1).step()
    engine_s, bare_s, engine_cpu, bare_cpu = [], [], [], []

    def run_engine() -> torch.Tensor:
        model = init_model("cnn_small", fed, seed=0)
        t0, c0 = time.perf_counter(), time.process_time()
        run = simulate(
            FedAvg(),
            fed,
            model,
            rounds=args.rounds,
            seed=0,
            train=TRAIN,
            clients={"per_round": 10},
            eval={"every": 10**6},
            device="cpu",
        )
        engine_s.append((time.perf_counter() - t0) / args.rounds)
        engine_cpu.append((time.process_time() - c0) / args.rounds)
        return torch.cat([p.detach().reshape(-1) for p in run.strategy.model.parameters()])

    def run_bare() -> torch.Tensor:
        model = init_model("cnn_small", fed, seed=0)  # the engine's layout (memory_format=auto)
        model = prepare_for_device(model, "cpu", uses_channels_last(model, "auto"))
        t0, c0 = time.perf_counter(), time.process_time()
        weights = bare_fedavg(fed, model, args.rounds, seed=0, per_round=10)
        model.eval()
        with torch.no_grad():  # the engine evaluates once at the last round; so does this
            model(data.prepare(data.x_test)).argmax(1)
        bare_s.append((time.perf_counter() - t0) / args.rounds)
        bare_cpu.append((time.process_time() - c0) / args.rounds)
        return weights

    for repeat in range(args.repeats):
        # alternate which loop goes first: the second of a pair ran up to 5 % faster
        if repeat % 2 == 0:
            engine_w, bare_w = run_engine(), run_bare()
        else:
            bare_w, engine_w = run_bare(), run_engine()
    engine, bare = statistics.median(engine_s), statistics.median(bare_s)
    steps = 10 * TRAIN["local_epochs"] * 4
    print(f"torch threads {torch.get_num_threads()}, {args.rounds} rounds × {args.repeats} repeats")
    print(f"engine: {engine:.3f} s/round   bare: {bare:.3f} s/round   ({steps} steps/round)")
    print(f"ratio engine/bare (wall): {engine / bare:.3f}")
    e_cpu, b_cpu = statistics.median(engine_cpu), statistics.median(bare_cpu)
    print(
        f"CPU time: engine {e_cpu:.3f} s/round, bare {b_cpu:.3f} s/round, ratio {e_cpu / b_cpu:.3f}"
    )
    print(f"max |weight difference| engine vs bare: {(engine_w - bare_w).abs().max():.2e}")


if __name__ == "__main__":
    main()
