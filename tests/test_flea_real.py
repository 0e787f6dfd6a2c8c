"""FLea's small-scale claims on real data (FLea §4.2–4.4, CPU scale; margins: docs/flea.md).

Setting (CPU-sized): FMNIST, a class-balanced 5,000-sample training subset, 100 samples per
client (K = 50, 5 clients per round), LeNet-FMNIST at half width split after conv1
(8×12×12 activations), E = 2, b = 32, 12 rounds, the code's training (Adam re-created every
step, linear LR decay), 1,000 test images.
"""

import statistics

import pytest
import torch

from conftest import data_root_or_skip, load_real
from fedshare.config import api
from fedshare.data import federate
from fedshare.privacy.reconstruction import reconstruction_attack
from fedshare.strategies import make_strategy

TRAIN = {
    "optimizer": "adam",
    "lr": 1e-3,
    "batch_size": 32,
    "local_epochs": 2,
    "optimizer_reset_each_step": True,
    "lr_schedule": "linear",
    "lr_decay": 0.018,
    "lr_floor": 1e-4,
}
PARTITIONS = {
    "qua3": {"name": "quantity", "classes_per_client": 3},
    "dir0.1": {"name": "dirichlet", "alpha": 0.1},
}


@pytest.fixture(scope="module")
def fmnist():
    data_root_or_skip("FashionMNIST/raw")
    return load_real("fmnist", train_subset=5000, test_subset=1000)


MEASURED_FEDMIX = {"form": "code", "local_ce_weight": 1.0}
"""The FedMix these margins were measured with: FLea's code's form plus the local CE, the
library's default until `strategy=fedmix` became Yoon et al.'s FedMix."""


def fmnist_run(dataset, partition, method, seed, params=None, rounds=12, width=0.5):
    fed = federate(dataset, PARTITIONS[partition], None, seed, 100)
    model = api.init_model("lenet_fmnist", fed, seed, {"share_layer": 1, "width": width})
    return api.simulate(
        make_strategy(method, params or {}),
        fed,
        model,
        rounds=rounds,
        seed=seed,
        clients={"fraction": 0.1},
        train=TRAIN,
        device="cpu",
    )


def test_flea_and_fedmix_beat_fedavg_on_fmnist_qua3(fmnist):
    """FLea Table 1's orderings at one seed (measured at seed 0, the smallest margins of seeds 0–4:
    FLea 59.8, FedMix 60.2, FedAvg 53.0)."""
    flea = fmnist_run(fmnist, "qua3", "flea", seed=0)
    fedavg = fmnist_run(fmnist, "qua3", "fedavg", seed=0)
    fedmix = fmnist_run(fmnist, "qua3", "fedmix", seed=0, params=MEASURED_FEDMIX)
    assert flea.best_accuracy >= fedavg.best_accuracy + 3.0
    assert fedmix.best_accuracy >= fedavg.best_accuracy + 3.0
    assert flea.summary["exposure_data_max"] <= 0.1
    assert 0 < flea.summary["exposure_pairs"] < 0.2


@pytest.mark.slow
@pytest.mark.parametrize("partition", ["qua3", "dir0.1"])
def test_orderings_over_seeds(fmnist, partition):
    """FLea Table 1's orderings over seeds 0–2 at 40 rounds (not starved, issue 17 item 3):
    FLea > FedAvg, FedMix > FedAvg, FedData ≥ FLea; FLea ahead of FedMix under Qua(3) (measured +3.3
    on the mean, ahead on every seed) and within 3 points of it under Dir(0.1) (measured −0.8)."""
    best: dict[str, list[float]] = {}
    for seed in range(3):
        for method in ("fedavg", "flea", "fedmix", "feddata"):
            params = MEASURED_FEDMIX if method == "fedmix" else None
            run = fmnist_run(fmnist, partition, method, seed, params=params, rounds=40)
            best.setdefault(method, []).append(run.best_accuracy)
    mean = {k: statistics.mean(v) for k, v in best.items()}
    assert mean["flea"] >= mean["fedavg"] + 5.0, best
    assert mean["fedmix"] >= mean["fedavg"] + 5.0, best
    assert mean["feddata"] >= mean["flea"], best
    assert all(f > a for f, a in zip(best["flea"], best["fedavg"], strict=True)), best
    if partition == "qua3":
        assert mean["flea"] >= mean["fedmix"] + 1.0, best
    else:
        assert mean["flea"] >= mean["fedmix"] - 3.0, best


@pytest.mark.slow
def test_privacy_tradeoff_of_the_dcor_weight(fmnist):
    """FLea §4.4 (Fig. 9): with λ2 = 3 the shared activations have lower dCor with their inputs
    and a linear decoder reconstructs the inputs worse than with λ2 = 0 (seeds 0–2; full
    width, 30 rounds: measured decoder test MSE +8.6 % and +14 % at seeds 0 and 1)."""
    dcor: dict[float, list[float]] = {}
    mse: dict[float, list[float]] = {}
    for seed in range(3):
        for lam in (0.0, 3.0):
            params = {"dcor_weight": lam, "warmup_dcor_weight": lam, "dcor_schedule": "constant"}
            run = fmnist_run(fmnist, "qua3", "flea", seed, params, rounds=30, width=1.0)
            dcor.setdefault(lam, []).append(run.summary["shared_dcor"])
            attack = reconstruction_attack(run.strategy.global_model(), fmnist, seed=seed)
            mse.setdefault(lam, []).append(attack.test_mse)
    for seed in range(3):
        assert dcor[3.0][seed] < dcor[0.0][seed], dcor
        assert mse[3.0][seed] > mse[0.0][seed], mse
    assert statistics.mean(mse[3.0]) >= 1.05 * statistics.mean(mse[0.0]), mse


@pytest.mark.slow
def test_flea_runs_end_to_end_on_fsdd_audio():
    """FSDD spectrograms (2×64×63) through AudioNet: the buffer holds block-2 activations of
    the previous round's clients and the dCor metric is logged. No accuracy claim: at CPU scale
    FLea − FedAvg was +1.1 ± 1.2 points over seeds 0–2 (docs/flea.md)."""
    data_root_or_skip("fsdd/recordings")
    dataset = load_real("fsdd")
    fed = federate(dataset, PARTITIONS["qua3"], None, 0, 100)
    model = api.init_model("audionet", fed, 0)
    result = api.simulate(
        "flea",
        fed,
        model,
        rounds=2,
        seed=0,
        clients={"fraction": 0.2},
        train=TRAIN,
        device="cpu",
    )
    strat = result.strategy
    with torch.no_grad():
        shape = model.encode(dataset.prepare(dataset.x_train[:1]), strat.split).shape[1:]
    assert strat.buffer["features"].shape[1:] == shape == (16, 16, 16)
    assert strat.buffer_size == sum(int(0.1 * fed.client_sizes[c]) for c in strat.buffer_owners)
    assert 0 < result.history[-1]["shared_dcor"] < 1
    assert result.history[-1]["buffer_size"] > 0
