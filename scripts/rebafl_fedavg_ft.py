"""FedAvg vs FedAvg-FT on FMNIST, 2 classes per client, availability 0.2 (ReBaFL Fig. 1's
claim on a CPU-sized setting): FedAvg-FT is more accurate and more stable.

    FEDSHARE_DATA=/path/to/datasets python scripts/rebafl_fedavg_ft.py
"""

import statistics as st
import time

import torch

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.strategies import FedAvg, FedAvgFT

torch.set_num_threads(1)
data = load_dataset({"name": "fmnist", "train_subset": 6000, "test_subset": 2000, "augment": False})
train = {"local_epochs": 2, "batch_size": 50, "lr": 0.01, "momentum": 0.5, "weight_decay": 5e-4}
partition = {"name": "pathological", "classes_per_client": 2, "per_class": 120}
for seed in (0, 1, 2):
    fed = federate(data, partition, 20, seed, server_size=300)
    for name, strategy in (("fedavg", FedAvg()), ("fedavg_ft", FedAvgFT())):
        start = time.time()
        result = simulate(
            strategy,
            fed,
            "lenet_fmnist",
            rounds=30,
            seed=seed,
            train=train,
            clients={"availability": 0.2},
        )
        acc = result.accuracies
        jitter = st.mean(abs(a - b) for a, b in zip(acc[10:], acc[9:-1], strict=True))
        print(
            f"seed {seed} {name:9s} last5 {st.mean(acc[-5:]):.2f} best {max(acc):.2f} "
            f"mean|dacc| {jitter:.2f} ({time.time() - start:.0f}s)",
            flush=True,
        )
