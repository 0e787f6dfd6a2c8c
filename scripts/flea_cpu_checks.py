"""FLea's small-scale claims on real data (flea.md §9 B): accuracy of FedAvg, FLea, FedMix and
FedData over several seeds, and the λ2 privacy trade-off. CPU-sized; prints one JSON line per
run and a mean ± std table.

    python scripts/flea_cpu_checks.py accuracy --partition qua3 --seeds 0 1 2
    python scripts/flea_cpu_checks.py privacy --seeds 0 1 2
    python scripts/flea_cpu_checks.py accuracy --methods fedavg fedprox fedgen_input \
        --params '{"fedprox": {"mu": 0.001}, "fedgen_input": {"warmup_rounds": 12}}'
"""

import argparse
import json
import statistics
import time
from typing import Any

import torch

from fedshare import api
from fedshare.data import federate, load_dataset
from fedshare.data.federated import FederatedData
from fedshare.privacy.reconstruction import reconstruction_attack
from fedshare.strategies import make_strategy

PARTITIONS = {
    "qua3": {"name": "quantity", "classes_per_client": 3},
    "qua2": {"name": "quantity", "classes_per_client": 2},
    "dir0.1": {"name": "dirichlet", "alpha": 0.1},
    "dir0.5": {"name": "dirichlet", "alpha": 0.5},
}
# The code's training (flea.md §2.6): Adam re-created every step, linear LR decay to 1e-4.
TRAIN = {
    "optimizer": "adam",
    "lr": 1e-3,
    "batch_size": 32,
    "optimizer_reset_each_step": True,
    "lr_schedule": "linear",
    "lr_decay": 0.018,
    "lr_floor": 1e-4,
}


def federation(args: argparse.Namespace, seed: int) -> FederatedData:
    data = load_dataset(
        {
            "name": args.data,
            "root": args.root,
            "train_subset": args.train_subset,
            "test_subset": args.test_subset,
        }
    )
    return federate(data, PARTITIONS[args.partition], None, seed, args.samples_per_client)


def run(
    fed: FederatedData, method: str, params: dict[str, Any], args: argparse.Namespace, seed: int
) -> dict[str, Any]:
    model = api.init_model(args.model, fed, seed, {"share_layer": args.split, "width": args.width})
    if method == "flea":  # FLea's split is its own parameter (the model's flea_layer by default)
        params = {"split_layer": args.split, **params}
    start = time.perf_counter()
    result = api.simulate(
        make_strategy(method, params),
        fed,
        model,
        rounds=args.rounds,
        seed=seed,
        clients={"fraction": args.fraction},
        train={**TRAIN, "local_epochs": args.epochs},
        eval={"context_attack": args.context_attack, "davies_bouldin": args.davies_bouldin},
        device="cpu",
    )
    last = result.history[-1]
    return {
        "method": method,
        "params": params,
        "seed": seed,
        "partition": args.partition,
        "best": round(result.best_accuracy, 2),
        "final": round(result.final_accuracy, 2),
        "last5": round(sum(r["accuracy"] for r in result.history[-5:]) / 5, 2),
        "shared_dcor": result.summary.get("shared_dcor"),
        "train_dcor": last.get("train_dcor"),
        "exposure_pairs": result.summary.get("exposure_pairs"),
        "exposure_data_mean": result.summary.get("exposure_data_mean"),
        "bytes_shared": result.summary["bytes_shared"],
        "context_attack": result.summary.get("context_attack_accuracy"),
        **{k: v for k, v in last.items() if k.endswith("davies_bouldin")},
        "seconds": round(time.perf_counter() - start, 1),
        "model": result.strategy.global_model(),
        "fed": fed,
    }


def table(rows: list[dict[str, Any]], key: str = "best") -> None:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["label"], []).append(row)
    for label, runs in groups.items():
        values = [r[key] for r in runs]
        std = statistics.pstdev(values) if len(values) > 1 else 0.0
        secs = statistics.mean(r["seconds"] for r in runs)
        print(
            f"{label:28s} {key} {statistics.mean(values):6.2f} ± {std:5.2f}  "
            f"(n={len(values)}, {secs:.0f} s/run)  {values}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("check", choices=["accuracy", "privacy"])
    parser.add_argument("--data", default="fmnist")
    parser.add_argument("--root", default=None)
    parser.add_argument("--partition", default="qua3", choices=sorted(PARTITIONS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["fedavg", "flea", "fedmix", "feddata"])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--samples-per-client", type=int, default=100)
    parser.add_argument("--train-subset", type=int, default=10000)
    parser.add_argument("--test-subset", type=int, default=2000)
    parser.add_argument("--model", default="lenet_fmnist")
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--split", type=int, default=1, help="FLea's split layer")
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 3.0])
    parser.add_argument(
        "--davies-bouldin",
        action="store_true",
        help="log FLea's Fig. 3 separability (global and local models, last round in the row)",
    )
    parser.add_argument(
        "--context-attack",
        type=int,
        nargs="*",
        default=[],
        help="attacker training-set sizes of FLea's Fig. 9(d) attack (sharing methods only)",
    )
    parser.add_argument(
        "--params", type=json.loads, default={}, help="JSON: {method: {parameter: value}}"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for seed in args.seeds:
        fed = federation(args, seed)
        if args.check == "accuracy":
            jobs = [(m, dict(args.params.get(m, {}))) for m in args.methods]
        else:
            jobs = [
                (
                    "flea",
                    {"dcor_weight": lam, "dcor_schedule": "constant", "warmup_dcor_weight": lam},
                )
                for lam in args.lambdas
            ]
        for method, params in jobs:
            row = run(fed, method, params, args, seed)
            privacy = args.check == "privacy"
            row["label"] = f"{method} λ2={params['dcor_weight']:g}" if privacy else method
            if args.check == "privacy":
                attack = reconstruction_attack(row["model"], row["fed"].dataset, seed=seed)
                row["decoder_train_mse"] = round(attack.train_mse, 5)
                row["decoder_test_mse"] = round(attack.test_mse, 5)
            row.pop("model"), row.pop("fed")
            rows.append(row)
            print(json.dumps(row), flush=True)
    table(rows)
    if args.check == "accuracy":
        table(rows, "last5")
    if args.check == "privacy":
        table(rows, "shared_dcor")
        table(rows, "decoder_train_mse")
        table(rows, "decoder_test_mse")


if __name__ == "__main__":
    main()
