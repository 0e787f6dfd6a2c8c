"""The one-shot head baselines learn where FedPFT learns (issue 33; docs/fedpft.md, "Local heads'
budget"): under the paper's head training (Adam 1e-4, batch 32, 50 epochs, the strategies'
`train_defaults`) on small clients, each baseline must stay clearly above chance. With
`head_budget=epochs` (50 passes over ~150 samples: ~250 optimizer steps) the local heads stay
near their initialisation and these baselines sit at chance. KD runs as in FedPFT's Table 2,
one source and one destination: with more sources its destination distils on its own few
classes only (docs/fedpft.md). A run takes 10-140 s on the shared 2-core machine, so the
default tier checks the ensemble (and the budget) and the slow tier the other baselines."""

import math

import numpy as np
import pytest

from fedshare.config import CheckpointConfig, ClientsConfig, SimulationConfig
from fedshare.config.api import init_model
from fedshare.config.defaults import resolve_train
from fedshare.data import federate, load_dataset
from fedshare.engine.simulation import Simulation
from fedshare.strategies import make_strategy

CLIENTS = 4
TEST = 300


@pytest.fixture(scope="module")
def data():
    return load_dataset({"name": "synthetic", "train_size": 700, "test_size": TEST})


def one_shot(name: str, data, params: dict | None = None) -> float:
    """Best accuracy (%) of the one-shot strategy `name` with the layered default training."""
    strategy = make_strategy(name, params)
    server = 100 if name in ("fedbe", "fedkt") else 0
    clients = 2 if name == "kd" else CLIENTS
    fed = federate(data, {"name": "dirichlet", "alpha": 0.3}, clients, 0, server_size=server)
    config = SimulationConfig(
        rounds=1,
        seed=0,
        device="cpu",
        progress=False,
        clients=ClientsConfig(num=clients),
        train=resolve_train({}, strategy, data.name),  # Adam 1e-4, batch 32, 50 epochs
        checkpoint=CheckpointConfig(every=0),
    )
    result = Simulation(strategy, fed, init_model("auto", fed, 0), config).run()
    return result.summary["best_accuracy"]


CHANCE = 10.0 + 3 * np.sqrt(10 * 90 / TEST)  # 10 classes: chance + 3 binomial std


@pytest.fixture(scope="module")
def fedpft(data):
    return one_shot("fedpft", data)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["oneshot_avg", "kd", "fedkt", "fedbe"])
def test_baseline_is_clearly_above_chance_where_fedpft_learns(name, data, fedpft):
    assert fedpft > 40.0  # FedPFT's head learns under these settings
    accuracy = one_shot(name, data)
    assert accuracy > CHANCE + 5.0, f"{name}: {accuracy:.1f} % (FedPFT {fedpft:.1f} %)"


def test_the_pooled_budget_trains_the_local_heads_better_than_their_own_epochs(data):
    """The ensemble with the default `head_budget` (pooled: I × the epochs over each client's
    own data) against 50 passes over it: measured 55.0 vs 27.7 % on 500 samples (docs/fedpft.md).
    The step count itself is pinned by the test below."""
    pooled = one_shot("ensemble", data)
    epochs = one_shot("ensemble", data, {"head_budget": "epochs"})
    assert pooled > CHANCE + 5.0, pooled
    assert pooled >= epochs + 15.0, (pooled, epochs)


@pytest.mark.parametrize(("budget", "passes"), [("pooled", 12), ("epochs", 3)])
def test_the_pooled_budget_counts_the_pooled_heads_steps_at_equal_shares(budget, passes):
    """4 clients of 25 samples, batch 5, 3 epochs: `pooled` gives each local head 12 passes,
    60 steps, the 3 × 20 steps of the pooled head over the 100 samples; `epochs` gives 15."""
    from fedshare.config import TrainConfig
    from fedshare.strategies._feature_heads import HeadBudget

    budget_of = HeadBudget(head_budget=budget)
    budget_of.num_clients = 4
    epochs = budget_of.head_epochs(TrainConfig(local_epochs=3, batch_size=5))
    assert epochs == passes
    local_steps = epochs * math.ceil(25 / 5)
    pooled_steps = 3 * math.ceil(100 / 5)
    assert (local_steps == pooled_steps) == (budget == "pooled")
