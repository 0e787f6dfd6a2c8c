"""fedshare and FedLab round by round in one process: CPU seconds on a loaded machine.

On a shared machine the CPU time of a process moves with the other processes' load (cache and
memory-bandwidth contention), by more than the few per cent two lean frameworks differ. Here
both run in one process and alternate: after each fedshare round (bench_peers.py's `fedshare`
run, through a `simulate` callback) the same process runs one FedLab round (bench_peers.py's
FedLab setup, the body of FedLab's `StandalonePipeline.main`), so every pair of rounds sees the
same load. Reported: each round's process CPU seconds, both frameworks, and their ratio per pair.
Same workload, model, data, SGD settings and thread count as bench_peers.py (needs its venv).

    FEDSHARE_DATA=/path/to/datasets python scripts/bench_paired.py --workload W1 --rounds 6
"""

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_peers as peers  # noqa: E402


def fedlab_round(bench: peers.Bench) -> Any:
    """FedLab's handler and serial trainer; the returned function runs one round."""
    from fedlab.contrib.algorithm.basic_client import SGDSerialClientTrainer
    from fedlab.contrib.algorithm.basic_server import SyncServerHandler
    from fedlab.utils.serialization import SerializationTool

    SerializationTool.serialize_model = staticmethod(peers.reshape_serialize)
    random.seed(0)

    class Data:
        def get_dataloader(self, cid: int, batch_size: int) -> Any:
            return peers.client_loader(bench, cid)

    num = len(bench.clients)
    handler = SyncServerHandler(peers.new_model(bench), bench.total_rounds, bench.per_round / num)
    trainer = SGDSerialClientTrainer(peers.new_model(bench), num)
    trainer.setup_dataset(Data())
    trainer.setup_optim(peers.EPOCHS, peers.BATCH, peers.LR)
    handler.num_clients = num

    def one_round() -> None:  # FedLab's StandalonePipeline.main, one iteration
        sampled = handler.sample_clients()
        trainer.local_process(handler.downlink_package, sampled)
        for pack in trainer.uplink_package:
            handler.load(pack)

    return one_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="W1", choices=list(peers.WORKLOADS))
    parser.add_argument("--rounds", type=int, default=6, help="pairs of rounds (first: warm-up)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench = peers.load_bench(args.workload, args.rounds)
    fedlab = fedlab_round(bench)
    cpu: dict[str, list[float]] = {"fedshare": [], "fedlab": []}
    clock: list[float] = []

    def mark() -> None:  # bench_peers.run_fedshare calls it before round 1 and after each round
        now = time.process_time()
        if clock:
            cpu["fedshare"].append(now - clock[-1])
            fedlab()
            cpu["fedlab"].append(time.process_time() - now)
            print(
                f"round {len(cpu['fedlab'])}: fedshare {cpu['fedshare'][-1]:.3f} CPU s, "
                f"FedLab {cpu['fedlab'][-1]:.3f} CPU s, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        clock.append(time.process_time())

    bench.mark = mark  # type: ignore[method-assign]
    peers.run_fedshare(bench)
    timed = {name: values[1:] for name, values in cpu.items()}  # round 1: warm-up
    ratios = [a / b for a, b in zip(timed["fedshare"], timed["fedlab"], strict=True)]
    print(
        f"\n{args.workload}, {len(ratios)} timed pairs: fedshare "
        f"{statistics.median(timed['fedshare']):.3f} CPU s/round (median), FedLab "
        f"{statistics.median(timed['fedlab']):.3f}; fedshare ÷ FedLab per pair: median "
        f"{statistics.median(ratios):.3f}, range {min(ratios):.3f}–{max(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
