"""Speed of fedshare beside peer FL frameworks on the same FedAvg workloads.

Every framework trains fedshare's `cnn_small` (same initial weights, conv weights
channels-last: fedshare's `memory_format=auto`) with plain SGD (lr 0.05, no momentum),
cross-entropy, 5 local epochs, batch 32, on the same MNIST client index sets (fedshare's IID
partition of the first N training images, normalised with mean 0.1307 / std 0.3081), one torch
thread. Each (framework, workload) runs in its own subprocess; frameworks are interleaved over
`--cycles`. Reported per framework: median per-round wall time and CPU time of the process tree
over the timed rounds (after one warm-up round), peak RSS, and the accuracy of the final global
model on the first 1,000 test images (evaluated once, after the timed rounds, with the same
code for every framework; not timed).

`--device cuda` trains every framework on the GPU the way it documents: fedshare keeps the
data on the device (`device=cuda`); FedLab (`cuda=True`) and BlazeFL (`device="cuda"`) move
each DataLoader batch there; pfl (`PFL_PYTORCH_DEVICE=cuda`) gets its users' tensors on the
device. Round boundaries wait for the GPU; the peak GPU memory of torch's allocator is
reported. Flower's runner is CPU-only (its Ray wheel could not be carried to the GPU machine).

Workloads: W1 = 100 clients × 100 samples (first 10,000 images), 10 per round;
W2 = FLea's scale, 500 clients × 100 samples (first 50,000 images), 50 per round.

What differs per peer and cannot be matched (each is that framework's documented way):
- FedLab 1.3 (`SGDSerialClientTrainer` + `SyncServerHandler` in a `StandalonePipeline`):
  a `torch.utils.data.DataLoader` per client (per-sample indexing + collate), the model
  flattened to one vector per client and back, its own client sampler (`random.sample`) and
  unweighted averaging (equal client sizes, so the same mean). Its `SerializationTool`
  flattens with `.view(-1)`, which fails on channels-last weights; the benchmark swaps in
  `.reshape(-1)` (one copy per conv weight), the only change made to a peer.
- pfl 0.6 (`SimulatedBackend`, `FederatedAveraging`, `PyTorchModel`): a user's batches are
  fixed consecutive slices (no reshuffle between epochs); the update is the model difference,
  averaged and applied by a central SGD optimizer (lr 1); the first round also evaluates
  every user before and after local training (pfl evaluates at iteration 0 whatever the
  frequency), which falls in the warm-up round; its own user sampler (minimise reuse).
- Flower 1.42 (`run_simulation`, message API `FedAvg`, Ray backend, 1 CPU, 1 actor): every
  client call goes through Ray (messages, `ArrayRecord` serialisation of the weights both
  ways, a fresh model built per call as in Flower's templates); the CPU time includes the Ray
  processes (raylet, GCS, the actor) that are alive at the round boundaries, and the peak RSS
  is the largest sampled sum over the process tree. The first round includes starting Ray.
  (`run_simulation` is deprecated in 1.42 in favour of `flwr run`, which needs an app project.)
- BlazeFL 2.0 (`FedAvgBaseClientTrainer`, its serial trainer, + `FedAvgBaseServerHandler`):
  a `DataLoader` per client driven by its own RNG suite, flattening of the state dict as in
  FedLab (same `.view(-1)` swap), weighted averaging of flat vectors. BlazeFL declares
  Python >= 3.12; its code runs on 3.11 (installed with `--ignore-requires-python`).
- fedshare: `fedshare.simulate(FedAvg(), ...)`; batches are index gathers from the stored
  uint8 images, prepared per batch; the run is stopped after the timed rounds so the engine's
  own last-round evaluation is not timed. `fedshare+compile`, `fedshare+amp` and
  `fedshare+batched` are the same run with one opt-in switch (`train.compile`, `train.amp`,
  `train.batched=10`); the first round (reported, not timed) holds torch.compile's compile.

Allocator: by default (`--malloc fixed`) every child runs with MALLOC_MMAP_THRESHOLD_=32 MiB
and MALLOC_TRIM_THRESHOLD_=128 MiB. With glibc's dynamic thresholds (`--malloc default`) the
per-step activations (up to 3.2 MB) are returned to the OS and faulted back in every step
unless the process happened to free a larger block earlier. fedshare's engine fixes the same
thresholds itself when a simulation starts (`fedshare.runtime`); the peers' children
get them by chance (building the normalised copy of the images frees a large block) or not.
Fixed thresholds give every framework the same allocator.

    FEDSHARE_DATA=/path/to/datasets python scripts/bench_peers.py --workloads W1 W2 \
        --rounds 3 --cycles 2 --out bench_peers.json
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.metadata
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", message="The pynvml package is deprecated")  # FedLab's dep
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
for _var in THREAD_VARS:
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

LR, EPOCHS, BATCH = 0.05, 5, 32
TRAIN = {
    "local_epochs": EPOCHS,
    "batch_size": BATCH,
    "lr": LR,
    "optimizer": "sgd",
    "momentum": 0.0,  # explicit: fedshare's MNIST default is momentum 0.9 (config.defaults)
    "weight_decay": 0.0,
}
WORKLOADS: dict[str, dict[str, int]] = {
    "W1": {"num_clients": 100, "train_images": 10_000, "per_round": 10},
    "W2": {"num_clients": 500, "train_images": 50_000, "per_round": 50},
}
TEST_IMAGES = 1000
FEDSHARE_SWITCHES: dict[str, dict[str, Any]] = {
    "fedshare": {},
    "fedshare+compile": {"compile": True},
    "fedshare+amp": {"amp": True},
    "fedshare+batched": {"batched": 10},
    "fedshare+batched50": {"batched": 50},
}
"""fedshare's default run and its opt-in speed switches (`train.compile`, `train.amp` = bf16
autocast, `train.batched` = 10 or 50 clients per vectorised step), each on the same workload."""
FRAMEWORKS = (*FEDSHARE_SWITCHES, "fedlab", "pfl", "flower", "blazefl")
DISTRIBUTIONS = {
    **dict.fromkeys(FEDSHARE_SWITCHES, "fedshare"),
    "fedlab": "fedlab",
    "pfl": "pfl",
    "flower": "flwr",
    "blazefl": "blazefl",
}
PIP = {
    **dict.fromkeys(FEDSHARE_SWITCHES, 'pip install -e ".[dev]"'),
    "fedlab": 'pip install -c constraints-bench.txt -e ".[bench]"',
    "pfl": 'pip install -c constraints-bench.txt -e ".[bench]"',
    "flower": 'pip install -c constraints-bench.txt -e ".[bench]"',
    "blazefl": "pip install --no-deps --ignore-requires-python blazefl==2.0.3",
}


# ---------------------------------------------------------------- shared by every framework


@dataclasses.dataclass
class Bench:
    """The workload's data as every framework sees it, and the round-boundary clock."""

    fed: Any  # fedshare FederatedData (the partition every framework uses)
    x: torch.Tensor  # normalised float training images, N×1×28×28
    y: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    clients: list[torch.Tensor]  # client index sets into x / y
    per_round: int
    total_rounds: int  # warm-up + timed
    device: str = "cpu"  # where every framework trains (`--device`)
    marks: list[tuple[float, float, int]] = dataclasses.field(default_factory=list)

    def mark(self) -> None:
        """A round boundary: wall clock, process-tree CPU seconds, process-tree RSS bytes
        (after the GPU's queued work, so that a round's time is its own)."""
        if self.device != "cpu":
            torch.cuda.synchronize()
        cpu, rss = tree_usage()
        self.marks.append((time.perf_counter(), cpu, rss))


def tree_usage() -> tuple[float, int]:
    """CPU seconds and RSS bytes of this process and its live descendants (Linux /proc)."""
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        stats[int(entry)] = fields
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    cpu = rss = 0
    for pid in tree:
        fields = stats.get(pid)
        if fields is not None:  # fields[11], [12]: utime, stime; [21]: rss pages
            cpu += int(fields[11]) + int(fields[12])
            rss += int(fields[21]) * page
    return cpu / tick, rss


def new_model(bench: Bench) -> nn.Module:
    """fedshare's cnn_small with the run's initial weights (seed 0), conv weights channels-last.

    `init_model` seeds torch from (seed 0, "model_init") and calls
    `build_model("cnn_small", (1, 28, 28), 10, {})`, as `fedshare.simulate` does.
    """
    from fedshare.config.api import init_model

    return init_model("cnn_small", bench.fed, seed=0).to(memory_format=torch.channels_last)


def fresh_model() -> nn.Module:
    """cnn_small, channels-last, with weights that are about to be overwritten (Flower)."""
    from fedshare.models import build_model

    model = build_model("cnn_small", (1, 28, 28), 10, {})
    return model.to(memory_format=torch.channels_last)


def check_channels_last(model: nn.Module) -> None:
    """Stop if a conv weight with more than one input channel is not channels-last."""
    for name, p in model.named_parameters():
        cl = p.is_contiguous(memory_format=torch.channels_last)
        if p.dim() == 4 and p.shape[1] > 1 and not cl:
            raise RuntimeError(f"{name} is not channels-last")


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def load_bench(workload: str, rounds: int, peer: bool = True, device: str = "cpu") -> Bench:
    """MNIST's first N training / 1,000 test images, fedshare's IID partition of them.

    `peer`: also the normalised float copy of the training images the peers train on
    (fedshare prepares its batches from the stored uint8 images itself).
    """
    from fedshare.data import federate, load_dataset

    spec = WORKLOADS[workload]
    data = load_dataset({"name": "mnist"})
    n = spec["train_images"]
    data = dataclasses.replace(
        data,
        x_train=data.x_train[:n],
        y_train=data.y_train[:n],
        x_test=data.x_test[:TEST_IMAGES],
        y_test=data.y_test[:TEST_IMAGES],
    )
    fed = federate(data, "iid", num_clients=spec["num_clients"], seed=0)
    clients = [ix.clone() for ix in fed.client_indices]
    every = torch.cat(clients)
    if every.unique().numel() != n or {len(c) for c in clients} != {n // spec["num_clients"]}:
        raise RuntimeError("the IID partition is not disjoint and equal-sized as expected")
    return Bench(
        fed=fed,
        x=data.prepare(data.x_train).contiguous() if peer else torch.empty(0),
        y=data.y_train.clone(),
        x_test=data.prepare(data.x_test).contiguous(),
        y_test=data.y_test.clone(),
        clients=clients,
        per_round=spec["per_round"],
        total_rounds=rounds,
        device=device,
    )


def client_loader(bench: Bench, cid: int, generator: torch.Generator | None = None) -> Any:
    from torch.utils.data import DataLoader, TensorDataset

    idx = bench.clients[cid]
    data = TensorDataset(bench.x[idx], bench.y[idx])
    return DataLoader(data, batch_size=BATCH, shuffle=True, generator=generator)


def reshape_serialize(model: nn.Module, cpu: bool = True) -> torch.Tensor:
    """FedLab's / BlazeFL's flattening, with reshape so that channels-last weights work."""
    flat = torch.cat([p.data.reshape(-1) for p in model.parameters()])
    return flat.cpu() if cpu else flat


# --------------------------------------------------------------------------- the frameworks


def run_fedshare(bench: Bench, switches: dict[str, Any] | None = None) -> nn.Module:
    """`fedshare.simulate(FedAvg(), ...)` with `switches` added to the train settings."""
    from fedshare import simulate
    from fedshare.config.api import init_model
    from fedshare.strategies import FedAvg

    def after_round(sim: Any, completed: int, record: Any) -> bool:
        bench.mark()
        return completed >= bench.total_rounds  # stop before the engine's last-round eval

    bench.mark()
    run = simulate(
        FedAvg(),
        bench.fed,
        init_model("cnn_small", bench.fed, seed=0),
        rounds=bench.total_rounds + 1,
        seed=0,
        train={**TRAIN, **(switches or {})},
        clients={"per_round": bench.per_round},
        eval={"every": 10**6},
        device=bench.device,
        memory_format="auto",
        callbacks=[after_round],
    )
    return run.strategy.model


def run_fedlab(bench: Bench) -> nn.Module:
    import random

    from fedlab.contrib.algorithm.basic_client import SGDSerialClientTrainer
    from fedlab.contrib.algorithm.basic_server import SyncServerHandler
    from fedlab.core.standalone import StandalonePipeline
    from fedlab.utils.serialization import SerializationTool

    SerializationTool.serialize_model = staticmethod(reshape_serialize)
    random.seed(0)
    torch.manual_seed(0)

    class Data:  # FedLab's FedDataset interface: get_dataloader(id, batch_size)
        def get_dataloader(self, cid: int, batch_size: int) -> Any:
            return client_loader(bench, cid)

    num, cuda = len(bench.clients), bench.device != "cpu"
    handler = SyncServerHandler(
        new_model(bench), bench.total_rounds, bench.per_round / num, cuda=cuda, device=bench.device
    )
    trainer = SGDSerialClientTrainer(new_model(bench), num, cuda=cuda, device=bench.device)
    trainer.setup_dataset(Data())
    trainer.setup_optim(EPOCHS, BATCH, LR)
    check_channels_last(trainer.model)

    class Pipeline(StandalonePipeline):
        def evaluate(self) -> None:  # called after every round; FedLab's own only prints
            bench.mark()

    pipeline = Pipeline(handler, trainer)
    bench.mark()
    pipeline.main()
    check_channels_last(trainer.model)
    return handler.model


def run_pfl(bench: Bench) -> nn.Module:
    import numpy as np
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.pytorch import PyTorchTensorDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel

    np.random.seed(0)
    torch.manual_seed(0)

    class Net(nn.Module):  # pfl's PyTorch models carry their loss and metrics
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:
            self.eval() if eval else self.train()
            return F.cross_entropy(self(x), y)

        def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict:
            self.eval() if eval else self.train()
            with torch.no_grad():
                loss = F.cross_entropy(self(x), y, reduction="sum").item()
            return {"loss": Weighted(loss, len(y))}

    def make_user(uid: int) -> PyTorchTensorDataset:  # on pfl's device (PFL_PYTORCH_DEVICE)
        idx = bench.clients[uid]
        tensors = (bench.x[idx].to(bench.device), bench.y[idx].to(bench.device))
        return PyTorchTensorDataset(tensors, user_id=str(uid))

    def federated() -> FederatedDataset:
        users = list(range(len(bench.clients)))
        return FederatedDataset(make_user, get_user_sampler("minimize_reuse", users))

    class Clock(TrainingProcessCallback):
        def on_train_begin(self, *, model: Any) -> Metrics:
            bench.mark()
            return Metrics()

        def after_central_iteration(
            self, aggregate_metrics: Metrics, model: Any, *, central_iteration: int
        ) -> tuple[bool, Metrics]:
            bench.mark()
            return False, Metrics()

    net = Net(new_model(bench))
    check_channels_last(net)
    model = PyTorchModel(
        model=net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    backend = SimulatedBackend(training_data=federated(), val_data=federated())
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=bench.total_rounds,
            evaluation_frequency=10**6,
            train_cohort_size=bench.per_round,
            val_cohort_size=None,
        ),
        backend=backend,
        model=model,
        model_train_params=NNTrainHyperParams(
            local_num_epochs=EPOCHS, local_learning_rate=LR, local_batch_size=BATCH
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=1000),
        callbacks=[Clock()],
    )
    check_channels_last(net)
    return net.net


def run_flower(bench: Bench, actors: int = 1) -> nn.Module:
    """Flower's `run_simulation` with `actors` Ray actors (1 CPU each) training clients."""
    import logging

    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    if bench.device != "cpu":
        raise RuntimeError("the Flower runner is CPU-only (docs/performance.md: not on a GPU)")
    logging.getLogger("flwr").setLevel(logging.WARNING)
    share = Path(tempfile.mkdtemp(prefix="bench_flower_"))
    torch.save({"x": bench.x, "y": bench.y, "clients": bench.clients}, share / "data.pt")
    data_file = str(share / "data.pt")
    num = len(bench.clients)
    final: dict[str, ArrayRecord] = {}

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        # Runs in the Ray actor. The data is loaded once per actor process and kept in a
        # module registered in sys.modules (this function itself is re-sent with each call).
        import sys as _sys
        import types as _types

        import torch as _torch
        import torch.nn.functional as _F
        from torch.utils.data import DataLoader, TensorDataset

        _torch.set_num_threads(1)
        cache = _sys.modules.setdefault("_bench_peers_cache", _types.ModuleType("cache"))
        if not hasattr(cache, "data"):
            cache.data = _torch.load(data_file, mmap=True)
        data = cache.data
        model = fresh_model()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        check_channels_last(model)
        idx = data["clients"][int(context.node_config["partition-id"])]
        loader = DataLoader(TensorDataset(data["x"][idx], data["y"][idx]), BATCH, shuffle=True)
        opt = _torch.optim.SGD(model.parameters(), lr=float(msg.content["config"]["lr"]))
        model.train()
        for _ in range(EPOCHS):
            for xb, yb in loader:
                opt.zero_grad()
                _F.cross_entropy(model(xb), yb).backward()
                opt.step()
        content = RecordDict(
            {
                "arrays": ArrayRecord(model.state_dict()),
                "metrics": MetricRecord({"num-examples": len(idx)}),
            }
        )
        return Message(content=content, reply_to=msg)

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(
            fraction_train=bench.per_round / num,
            fraction_evaluate=0.0,
            min_train_nodes=bench.per_round,
            min_evaluate_nodes=0,
            min_available_nodes=num,
        )

        def clock(server_round: int, arrays: ArrayRecord) -> None:
            bench.mark()  # called before round 1 and after every round
            final["arrays"] = arrays

        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(new_model(bench).state_dict()),
            num_rounds=bench.total_rounds,
            train_config=ConfigRecord({"lr": LR}),
            evaluate_fn=clock,
        )

    bench.mark()
    try:
        run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=num,
            backend_config={
                "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                "init_args": {"num_cpus": actors, "num_gpus": 0, "include_dashboard": False},
            },
        )
    finally:
        shutil.rmtree(share, ignore_errors=True)
    del bench.marks[1]  # the mark before round 1 (Ray is up by then): keep the launch mark
    model = new_model(bench)
    model.load_state_dict(final["arrays"].to_torch_state_dict())
    return model


def run_blazefl(bench: Bench) -> nn.Module:
    import copy

    import blazefl.contrib.fedavg as blaze
    from torch.utils.data import DataLoader, Dataset

    blaze.serialize_model = reshape_serialize
    initial = new_model(bench)

    class Selector:  # BlazeFL's ModelSelector protocol
        def select_model(self, model_name: str) -> nn.Module:
            return copy.deepcopy(initial)

    class Partitioned:  # BlazeFL's PartitionedDataset protocol
        def get_dataset(self, type_: Any, cid: int | None) -> Dataset:
            raise NotImplementedError

        def set_dataset(self, type_: Any, cid: int | None, dataset: Dataset) -> None:
            raise NotImplementedError

        def get_dataloader(
            self, type_: Any, cid: int | None, batch_size: int | None = None, generator: Any = None
        ) -> DataLoader:
            return client_loader(bench, cid, generator)

    num = len(bench.clients)
    handler = blaze.FedAvgBaseServerHandler(
        Selector(), "cnn_small", Partitioned(), bench.total_rounds, num,
        bench.per_round / num, bench.device, BATCH, seed=0,
    )  # fmt: skip
    trainer = blaze.FedAvgBaseClientTrainer(
        Selector(), "cnn_small", Partitioned(), bench.device, num, EPOCHS, BATCH, LR, seed=0
    )
    check_channels_last(trainer.model)
    bench.mark()
    while not handler.if_stop():  # BlazeFL's serial pipeline, as in its examples
        cids = handler.sample_clients()
        trainer.local_process(handler.downlink_package(), cids)
        for package in trainer.uplink_package():
            handler.load(package)
        bench.mark()
    check_channels_last(trainer.model)
    return handler.model


RUNNERS: dict[str, Callable[[Bench], nn.Module]] = {
    **{
        name: functools.partial(run_fedshare, switches=switches)
        for name, switches in FEDSHARE_SWITCHES.items()
    },
    "fedlab": run_fedlab,
    "pfl": run_pfl,
    "flower": run_flower,
    "blazefl": run_blazefl,
}


# ------------------------------------------------------------------------ child and parent


def child(framework: str, workload: str, rounds: int, result_path: str, device: str) -> None:
    """Run one measurement (warm-up round + `rounds` timed rounds) and write its JSON."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    os.environ["PFL_PYTORCH_DEVICE"] = device  # pfl picks a visible GPU by itself otherwise
    peer = framework not in FEDSHARE_SWITCHES
    bench = load_bench(workload, rounds + 1, peer=peer, device=device)
    model = RUNNERS[framework](bench)
    check_channels_last(model)
    marks = bench.marks
    if len(marks) != bench.total_rounds + 1:
        raise RuntimeError(f"expected {bench.total_rounds + 1} round marks, got {len(marks)}")
    walls = [b[0] - a[0] for a, b in itertools.pairwise(marks)]
    cpus = [b[1] - a[1] for a, b in itertools.pairwise(marks)]
    own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "framework": framework,
        "workload": workload,
        "version": importlib.metadata.version(DISTRIBUTIONS[framework]),
        "torch_threads": torch.get_num_threads(),
        "round_wall_s": walls[1:],
        "round_cpu_s": cpus[1:],
        "warmup_wall_s": walls[0],
        "peak_rss_mb": max(own_peak, max(m[2] for m in marks)) / 2**20,
        "accuracy": accuracy(model.float().cpu(), bench.x_test, bench.y_test),
        "device": device,
    }
    if device != "cpu":  # the run's GPU memory: peak of torch's allocator (tensors, caches)
        result["gpu_name"] = torch.cuda.get_device_name()
        result["gpu_peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
        result["gpu_peak_reserved_mb"] = torch.cuda.max_memory_reserved() / 2**20
    Path(result_path).write_text(json.dumps(result))


def installed(framework: str) -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTIONS[framework])
    except importlib.metadata.PackageNotFoundError:
        return None


MALLOC_FIXED = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**27)}


def measure(
    framework: str, workload: str, rounds: int, log_dir: Path, malloc: str, device: str
) -> dict[str, Any]:
    out = log_dir / f"{framework}-{workload}.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, **dict.fromkeys(THREAD_VARS, "1"))
    if malloc == "fixed":
        env.update(MALLOC_FIXED)
    cmd = [sys.executable, __file__, "--child", framework, workload, str(rounds), str(out), device]
    log = log_dir / f"{framework}-{workload}.log"
    with open(log, "a") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0 or not out.exists():
        tail = log.read_text().strip().splitlines()[-3:]
        return {"framework": framework, "workload": workload, "error": " | ".join(tail)}
    return json.loads(out.read_text())


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"]}
    gpu = {
        key: statistics.median([r[key] for r in ok])
        for key in ("gpu_peak_allocated_mb", "gpu_peak_reserved_mb")
        if key in ok[0]
    }
    return {
        **gpu,
        "version": ok[0]["version"],
        "wall_s": statistics.median([t for r in ok for t in r["round_wall_s"]]),
        "cpu_s": statistics.median([t for r in ok for t in r["round_cpu_s"]]),
        "warmup_wall_s": statistics.median([r["warmup_wall_s"] for r in ok]),
        "peak_rss_mb": statistics.median([r["peak_rss_mb"] for r in ok]),
        "accuracy": statistics.median([r["accuracy"] for r in ok]),
        "runs": len(ok),
    }


def table(workload: str, summary: dict[str, dict[str, Any]], rounds: int, cycles: int) -> str:
    spec = WORKLOADS[workload]
    lines = [
        f"### {workload}: {spec['num_clients']} clients × 100 samples, {spec['per_round']} per "
        f"round, E={EPOCHS}, B={BATCH} ({rounds} timed rounds × {cycles} cycles)",
        "",
        "| framework | version | s/round (wall) | CPU s/round | ratio to fedshare "
        "(wall / CPU) | first round s | peak RSS MB | peak GPU MB (allocated / reserved) | "
        "accuracy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base = summary.get("fedshare", {})
    for name, s in summary.items():
        if "missing" in s:
            lines.append(f"| {name} | not installed (`{s['missing']}`) | | | | | | | |")
            continue
        if "error" in s:
            lines.append(f"| {name} | failed: {s['error'][:120]} | | | | | | | |")
            continue
        ratio = ""
        if "wall_s" in base:
            ratio = f"{s['wall_s'] / base['wall_s']:.2f} / {s['cpu_s'] / base['cpu_s']:.2f}"
        gpu = ""
        if "gpu_peak_allocated_mb" in s:
            gpu = f"{s['gpu_peak_allocated_mb']:.0f} / {s['gpu_peak_reserved_mb']:.0f}"
        lines.append(
            f"| {name} | {s['version']} | {s['wall_s']:.2f} | {s['cpu_s']:.2f} | {ratio} | "
            f"{s['warmup_wall_s']:.1f} | {s['peak_rss_mb']:.0f} | {gpu} | "
            f"{100 * s['accuracy']:.1f} % |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["W1", "W2"], choices=list(WORKLOADS))
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after 1 warm-up)")
    parser.add_argument("--cycles", type=int, default=2, help="interleaved repeats")
    parser.add_argument("--out", default="bench_peers.json", help="JSON results file")
    parser.add_argument("--logs", default=None, help="folder for the children's logs")
    parser.add_argument(
        "--malloc",
        choices=["fixed", "default"],
        default="fixed",
        help="glibc malloc thresholds in the children: fixed (same for all) or glibc's dynamic",
    )
    parser.add_argument(
        "--device", default="cpu", help="where every framework trains: cpu (default) or cuda"
    )
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        framework, workload, rounds, path, device = args.child
        child(framework, workload, int(rounds), path, device)
        return
    if args.device != "cpu" and not torch.cuda.is_available():
        parser.error(f"--device={args.device} but torch sees no CUDA device; valid: cpu")
    log_dir = Path(args.logs or tempfile.mkdtemp(prefix="bench_peers_"))
    log_dir.mkdir(parents=True, exist_ok=True)
    present = [f for f in args.frameworks if installed(f)]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {w: {} for w in args.workloads}
    for cycle in range(args.cycles):
        shift = cycle % max(1, len(present))
        order = present[shift:] + present[:shift]  # rotate so no framework is always first
        for workload in args.workloads:
            for framework in order:
                result = measure(
                    framework, workload, args.rounds, log_dir, args.malloc, args.device
                )
                runs[workload].setdefault(framework, []).append(result)
                wall = result.get("round_wall_s")
                note = f"{statistics.median(wall):.2f} s/round" if wall else result.get("error")
                print(f"cycle {cycle + 1} {workload} {framework}: {note}", flush=True)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "device": torch.cuda.get_device_name() if args.device != "cpu" else "cpu",
        "rounds": args.rounds,
        "cycles": args.cycles,
        "malloc": args.malloc,
        "workloads": {},
    }
    for workload in args.workloads:
        summary: dict[str, dict[str, Any]] = {}
        for framework in args.frameworks:
            if framework not in present:
                summary[framework] = {"missing": PIP[framework]}
            else:
                summary[framework] = summarise(runs[workload][framework])
        report["workloads"][workload] = {"summary": summary, "runs": runs[workload]}
        print()
        print(table(workload, summary, args.rounds, args.cycles))
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"\nresults: {args.out}   logs: {log_dir}")


if __name__ == "__main__":
    main()
