"""Every registered strategy on every offline dataset, with the layered defaults of the command
line (strategy > dataset > global): 2 rounds on a small subset, a finite loss, and better
than chance where the method trains.

The default tier runs every strategy once on images (digits) and once on vectors (the synthetic
set), each strategy that needs a feature extractor refusing the synthetic mixture's linear
model, and FedAvg, FedPFT and SCAFFOLD on every dataset; the other pairs of the matrix
(Fashion-MNIST's images, the mixture's vectors: the same code paths on other data) are `slow`
(`-m slow`)."""

import math

import numpy as np
import pytest
import torch

from conftest import load_real
from fedshare.config import CheckpointConfig, ClientsConfig, SimulationConfig
from fedshare.config.api import init_model
from fedshare.config.defaults import resolve_rounds, resolve_train
from fedshare.data import federate, load_dataset
from fedshare.data.dataset import Dataset
from fedshare.engine.distributed import RankGroup
from fedshare.engine.simulation import Simulation
from fedshare.errors import FedshareError
from fedshare.strategies import STRATEGIES, make_strategy

SMALL = {"train_subset": 800, "test_subset": 300}
DATASETS = {
    "digits": {},
    "synthetic": {"train_size": 800, "test_size": 300},
    "synthetic_mixture": {"train_size": 2000, "test_size": 300},
    "mnist": SMALL,
    "fmnist": SMALL,
    "cifar10_sample": SMALL,
    "fsdd": SMALL,
    "uci_har": SMALL,
}
MODEL = {"cifar10_sample": "lenet_cifar"}
MODEL_OPTIONS = {"uci_har": {"width": 0.25}}
ROUNDS = {"uci_har": 5}
PAIR_ROUNDS = {("scaffold", "cifar10_sample"): 5, ("scaffold", "fsdd"): 5}
"""SCAFFOLD trains with plain SGD (lr 0.05, no momentum) where the other methods take CIFAR's
Adam: the LeNet's loss moves 2.298 -> 2.296 in 2 rounds (best 14.0 %, under the bar; lr 0.02:
15.0, 0.1: 12.0, 0.2 diverges) and reaches 24.3 % by round 5 (measured, seed 0). On FSDD its
2 rounds end at 17.0 %, 1.8 points over the bar of 15.2 (seed 0, AMD EPYC): closer than runs
drift apart across CPUs (docs/install.md, "Results across machines"); by round 5 the best is
22.3 % (seed 0) and 21.7 % (seed 1)."""
SERVER_EPOCHS = {"uci_har": 30}
"""HARNet needs about 100 steps to leave chance (measured centrally on 800 windows: 40 % after
50 steps, 70 % after 100); the server's ~200 windows give 3 steps an epoch."""
"""The dataset's default model, except CIFAR's MobileNetV2: about 80 samples/s on this CPU and
still at chance after this budget, so the matrix takes the zoo's small CIFAR LeNet (ReBaFL's);
`test_default_cifar_model_learns` (slow) checks MobileNetV2 with the CIFAR defaults. HARNet
(115 ms per step of 32 windows here) runs at a quarter of its width, for 5 rounds: averaged
Adam-trained HARNets sit at chance for the first rounds (measured: 16.7 % after 2 rounds while
the clients' training loss fell from 1.29 to 0.92)."""
ALWAYS_THERE = ("digits", "synthetic", "synthetic_mixture")


def server_partition(data: Dataset) -> dict:
    """The one-shot server strategies need a server with data of its own (XorMixFL's
    Sec. 4.1): XorMixFL's split with label 1 deficient, as many samples per other label as 4
    participants can each get."""
    per_label = int(torch.bincount(data.y_train).min()) // 4
    return {"name": "xormix", "target_labels": [1], "n": 2, "m": per_label}


NEEDS_SERVER = ("xormixfl", "mixfl", "standalone")
ON_FEATURES = (
    "fedpft",
    "dp_fedpft",
    "fedpft_chain",
    "oneshot_avg",
    "ensemble",
    "kd",
    "fedbe",
    "fedkt",
)
"""Heads on frozen features: run on the documented feature pipeline (a fixed random-ReLU map,
`data.features=random_relu`, with `model=linear`), as `experiment=fedpft/digits_dir0.3` does."""
HEAD_LR = {"lr": 1e-2}
"""FedPFT's Adam 1e-4 underfits heads on a few hundred samples per client (issue 18 item 5 and
the `fedpft/digits_dir0.3` preset use 1e-2); the matrix trains the heads at 1e-2."""
HEAD_EPOCHS = 10
"""The one-shot heads' local epochs in the matrix: 10 instead of FedPFT's 50, a short budget like
the other methods' 2 local epochs (the heads' training took most of these cells' time)."""
NEEDS_SERVER_DATA = ("fedavg_ft", "fedbe", "fedkt")
"""Strategies that train on data the server holds: 10 % of the training set is carved out."""
NEEDS_BODY = {
    (s, "synthetic_mixture")
    for s in (
        "fedbabu",
        "rebafl",
        "fedavg_ft",
        "flea",
        "moon",
        "feddecorr",
        "fedaa",
        "ccvr",
        "feature_recalibration",
        "fedgen",
        "fedbr",
    )
}
"""The dataset's default model is a linear head alone: these methods refuse it clearly."""
NOT_YET_ABOVE_CHANCE = (
    {
        ("dp_fedpft", d)
        for d in (
            "digits",
            "synthetic",
            "synthetic_mixture",
            "mnist",
            "fmnist",
            "cifar10_sample",
            "fsdd",
            "uci_har",
        )
    }
    | {("fedmix", "fsdd"), ("fedgen_input", "fsdd")}
    | {(s, "fsdd") for s in ON_FEATURES}
)
"""Pairs held to a finite loss only. DP-FedPFT: its noise at ε = 1 on ~50 samples per class can
leave it at chance. FedMix on FSDD: measured 10.3–13.3 % after this budget over seeds 0–2 (and
at 1,600 samples), while FedAvg reaches 18.7–24.3 % and FedData 19.0–22.3 % (its train loss
falls slowly: 2.29 -> 2.27); an open finding, not a tolerance. Heads on random-ReLU features
of FSDD's spectrograms: best 11.7–17.3 % over seeds 0–2 for ensemble, oneshot_avg, fedpft and kd
(128-d; 512-d is no better), against 18.7–24.3 % for FedAvg on the spectrograms: the random map
keeps little linear class information of unnormalised dB values (these methods need a
pretrained backbone's features, as their papers use). FLea's input-space FedGen on FSDD with
the matrix's one-round warm-up: 13.7 % (seed 0) — its generator learns against a round-0 model
still at chance, and its uniformly labelled inputs then pull the clients towards uniform
predictions; its 30-round warm-up exists for this (the FedAvg rounds before it match FedAvg
exactly, a test)."""


SHORT_BUDGET = {
    "fedaa": {
        "adv_per_label": 4,
        "adv_max_iter": 10,
        "finetune_epochs": 1,
        "identifier_epochs": 2,
        "identifier_hidden": 64,
    },
    "fedgen_input": {"warmup_rounds": 1, "generator_steps": 10},
}
"""Server-side work that the matrix shortens like the local epochs: FedAA's defaults synthesise
32 inputs per (client, label) with 100 L-BFGS iterations and fine-tune each model 10 epochs on
them, about a minute a round on these iid clients of 10 labels (its own tests check it).
FLea's input-space FedGen warms up for one round instead of 30, so that its generator is
trained and used here."""


def load(name: str, features: bool = False) -> Dataset:
    options = dict(DATASETS[name])
    if features:
        options.update(features="random_relu", features_options={"dim": 128}, cache=False)
    if name in ALWAYS_THERE:
        return load_dataset({"name": name, **options})
    return load_real(name, **options)


_CACHE: dict[tuple[str, bool], Dataset] = {}


def dataset(name: str, features: bool = False) -> Dataset:
    if (name, features) not in _CACHE:
        _CACHE[name, features] = load(name, features)
    return _CACHE[name, features]


def rounds(strategy_name: str, data: Dataset) -> int:
    return PAIR_ROUNDS.get((strategy_name, data.name), ROUNDS.get(data.name, 2))


def quick_run(strategy_name: str, data: Dataset, seed: int = 0):
    return quick_simulation(strategy_name, data, seed).run()


def quick_simulation(
    strategy_name: str, data: Dataset, seed: int = 0, group: RankGroup | None = None
) -> Simulation:
    """The matrix's run of `strategy_name` on `data` (`group`: one process of several)."""
    strategy = make_strategy(strategy_name, SHORT_BUDGET.get(strategy_name))
    partition = server_partition(data) if strategy_name in NEEDS_SERVER else "iid"
    server_size = len(data.y_train) // 10 if strategy_name in NEEDS_SERVER_DATA else 0
    fed = federate(data, partition, 4, seed, server_size=server_size)
    train = resolve_train(HEAD_LR if strategy_name in ON_FEATURES else {}, strategy, data.name)
    if not strategy.one_shot:
        train.local_epochs = 2  # a fixed, short budget; everything else is the layered default
    elif strategy_name in NEEDS_SERVER:
        train.local_epochs = SERVER_EPOCHS.get(data.name, train.local_epochs)
    elif strategy_name in ON_FEATURES:
        train.local_epochs = HEAD_EPOCHS
    config = SimulationConfig(
        rounds=resolve_rounds(None if strategy.one_shot else rounds(strategy_name, data), strategy),
        seed=seed,
        device="cpu",
        progress=False,
        clients=ClientsConfig(num=4),
        train=train,
        checkpoint=CheckpointConfig(every=0),
    )
    on_features = strategy_name in ON_FEATURES
    model_name = "linear" if on_features else MODEL.get(data.name, data.default_model)
    options = None if on_features else MODEL_OPTIONS.get(data.name)
    model = init_model(model_name, fed, seed, options)
    return Simulation(strategy, fed, model, config, group=group)


def chance(data: Dataset) -> float:
    counts = torch.bincount(data.y_test, minlength=data.num_classes).double()
    return float(counts.max() / counts.sum() * 100)


QUICK_DATASETS = ("digits", "synthetic")
"""Every strategy runs on these in the default tier: images through a CNN, vectors through an
MLP. Fashion-MNIST (images again) and the synthetic mixture (vectors again) took 63 of 178 CPU s
over the first 135 of the default tier's former 168 cells (measured 2026-11-26, under load) and
are `slow`."""
EVERY_DATASET = ("fedavg", "fedpft", "scaffold")
"""Run on every dataset in the default tier: weights (each dataset's default model learns
under its defaults), heads on features, and SCAFFOLD, whose plain-SGD default must learn where
the dataset's own optimizer is Adam (under Adam its control variates grew to ‖c‖ ≈ 50 at
chance, docs/baselines.md). FLea's cells beyond digits and the synthetic set are `slow`: on
MNIST, the CIFAR sample, FSDD and UCI-HAR they took 35 CPU s of the default tier (measured
2026-11-26 under load), and each model's FLea split is checked in tests/test_models.py."""


def matrix() -> list:
    """(strategy, dataset) pairs; those outside the default tier's share are marked slow."""
    return [
        pytest.param(
            strategy,
            data,
            marks=()
            if data in QUICK_DATASETS or strategy in EVERY_DATASET or (strategy, data) in NEEDS_BODY
            else pytest.mark.slow,
        )
        for strategy in sorted(STRATEGIES.names())
        for data in sorted(DATASETS)
    ]


@pytest.mark.parametrize(("strategy_name", "data_name"), matrix())
def test_strategy_learns_on_dataset(strategy_name, data_name):
    data = dataset(data_name, features=strategy_name in ON_FEATURES)
    if (strategy_name, data_name) in NEEDS_BODY:
        with pytest.raises(FedshareError, match="needs a model with a feature extractor"):
            quick_run(strategy_name, data)
        return
    result = quick_run(strategy_name, data)
    losses = [r["loss"] for r in result.history]
    assert result.summary["status"] == "completed"
    assert all(loss is not None and math.isfinite(loss) for loss in losses), losses
    train_losses = [r["train_loss"] for r in result.history if "train_loss" in r]
    assert all(math.isfinite(v) for v in train_losses), train_losses
    if (strategy_name, data_name) not in NOT_YET_ABOVE_CHANCE:
        best = result.summary["best_accuracy"]
        base = chance(data)
        # a classifier at chance scores base ± 3 binomial std on this test set
        spread = 3 * np.sqrt(base * (100 - base) / len(data.y_test))
        assert best > base + spread, f"{best:.1f}% is not above chance ({base:.1f}%)"


@pytest.mark.slow
@pytest.mark.parametrize("strategy_name", ["fedavg", "flea"])
def test_default_cifar_model_learns(strategy_name):
    """MobileNetV2 (CIFAR's default model) with the layered defaults learns on the sample."""
    data = load_real("cifar10_sample", train_subset=2000, test_subset=500)
    strategy = make_strategy(strategy_name)
    fed = federate(data, "iid", 4, 0)
    config = SimulationConfig(
        rounds=3,
        device="cpu",
        progress=False,
        clients=ClientsConfig(num=4),
        train=resolve_train({"local_epochs": 2}, strategy, data.name),
        checkpoint=CheckpointConfig(every=0),
    )
    result = Simulation(strategy, fed, init_model("auto", fed, 0), config).run()
    assert result.summary["best_accuracy"] > chance(data) + 3 * np.sqrt(10 * 90 / 500)
