"""FedAvg vs FLea's baselines (FedDecorr, FedNTD, FLea's "CCVR" = feature_recalibration, FedBR,
FLea's "FedGen" = fedgen_input; their FLea values) and the papers' own CCVR and FedGen (`ccvr`,
`fedgen`) under label skew on digits: 10 clients × 2 classes × 80 samples, half of them a round,
20 rounds, E = 2, SGD 0.05 with momentum 0.9, cnn_small; seeds 0-2. fedgen_input warms up for
10 of the 20 rounds (30 of 100 in FLea).

    python scripts/flea_baselines_check.py                    # every method
    python scripts/flea_baselines_check.py ccvr fedgen        # some
    python scripts/flea_baselines_check.py 'feature_recalibration={"share_fraction": 1.0}'
"""

import json
import sys
import time

import torch

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.strategies import make_strategy

PARAMS = {"fedgen_input": {"warmup_rounds": 10}}
METHODS = (
    "fedavg",
    "feddecorr",
    "fedntd",
    "feature_recalibration",
    "ccvr",
    "fedbr",
    "fedgen_input",
    "fedgen",
)

torch.set_num_threads(1)
partition = {"name": "pathological", "classes_per_client": 2, "per_class": 80}
train = {"local_epochs": 2, "batch_size": 32, "lr": 0.05, "momentum": 0.9}
EXPOSURE = ("shared_single_features", "statistic_groups", "smallest_statistic_group")
for arg in sys.argv[1:] or METHODS:
    name, _, given = arg.partition("=")  # method, or method={JSON parameters}
    params = json.loads(given) if given else PARAMS.get(name)
    finals, bests, start = [], [], time.time()
    for seed in (0, 1, 2):
        fed = federate(load_dataset({"name": "digits"}, seed=seed), partition, 10, seed)
        result = simulate(
            make_strategy(name, params),
            fed,
            "cnn_small",
            rounds=20,
            seed=seed,
            train=train,
            clients={"fraction": 0.5},
        )
        finals.append(round(result.final_accuracy, 1))
        bests.append(round(result.best_accuracy, 1))
    mean = sum(finals) / len(finals)
    shared = result.summary["bytes_shared"]  # the last seed's
    exposure = {k: result.summary[k] for k in EXPOSURE if k in result.summary}
    print(
        f"{arg}: final {finals} (mean {mean:.1f}), best {bests}, "
        f"{time.time() - start:.0f} s, bytes_shared {shared} {exposure}"
    )
