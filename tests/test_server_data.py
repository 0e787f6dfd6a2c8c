"""Data on the server (carved before the partition) and FedAvg-FT, its first user."""

import json

import pytest
import torch

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.errors import FedshareError
from fedshare.strategies import FedAvg, FedAvgFT
from helpers import DIGITS_TRAIN, without_wall_time
from test_cli import FAST, fedshare_run


@pytest.fixture(scope="module")
def digits():
    return load_dataset({"name": "digits"})


def test_server_data_is_balanced_disjoint_and_fingerprinted(digits):
    fed = federate(digits, "dirichlet", 5, 0, server_size=300)
    server = set(fed.server_indices.tolist())
    clients = torch.cat(fed.client_indices).tolist()
    assert len(server) == 300 and not server & set(clients)
    assert len(server) + len(clients) == len(digits.y_train)
    assert torch.bincount(digits.y_train[fed.server_indices]).tolist() == [30] * 10
    assert fed.partition.info["server_data"]["class_counts"] == [30] * 10
    plain = federate(digits, "dirichlet", 5, 0)
    assert plain.server_indices is None
    assert fed.partition.fingerprint != plain.partition.fingerprint
    again = federate(digits, "dirichlet", 5, 0, server_size=300)
    assert torch.equal(again.server_indices, fed.server_indices)
    with pytest.raises(FedshareError, match=r"server_data\.size=5000"):
        federate(digits, "iid", 5, 0, server_size=5000)


def test_the_command_line_records_the_server_data(tmp_path):
    out = tmp_path / "r"
    proc = fedshare_run(
        *FAST, "strategy=fedavg_ft", "server_data.size=100", f"run_dir={out}", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads((out / "partition.json").read_text())["info"]
    assert info["server_data"]["size"] == 100


def run(strategy, fed, rounds=3):
    return simulate(
        strategy, fed, "cnn_small", rounds=rounds, train=DIGITS_TRAIN, clients={"fraction": 0.5}
    )


def test_fedavg_ft_without_head_epochs_is_fedavg_and_tunes_only_the_head(digits):
    fed = federate(digits, "dirichlet", 6, 0, server_size=200)
    plain = run(FedAvg(), fed)
    assert without_wall_time(run(FedAvgFT(head_epochs=0), fed).history) == without_wall_time(
        plain.history
    )
    one_plain, one_ft = run(FedAvg(), fed, 1), run(FedAvgFT(), fed, 1)
    body = [n for n in one_plain.strategy.model.state_dict() if not n.startswith("blocks.head")]
    plain_state = one_plain.strategy.model.state_dict()
    ft_state = one_ft.strategy.model.state_dict()
    assert all(torch.equal(plain_state[n], ft_state[n]) for n in body)
    assert not torch.equal(plain_state["blocks.head.weight"], ft_state["blocks.head.weight"])


def test_fedavg_ft_needs_labelled_server_data(digits):
    with pytest.raises(FedshareError, match=r"server_data\.size"):
        run(FedAvgFT(), federate(digits, "iid", 4, 0))
    unlabelled = federate(digits, "iid", 4, 0, server_size=100, server_labelled=False)
    with pytest.raises(FedshareError, match="labelled"):
        run(FedAvgFT(), unlabelled)


@pytest.mark.slow
def test_fedavg_ft_is_more_accurate_and_stable_than_fedavg_on_fmnist():
    """ReBaFL Fig. 1's claim on the CPU stand-in of docs/rebafl.md (seed 0)."""
    from conftest import load_real

    data = load_real("fmnist", train_subset=6000, test_subset=2000, augment=False)
    part = {"name": "pathological", "classes_per_client": 2, "per_class": 120}
    fed = federate(data, part, 20, 0, server_size=300)
    train = {"local_epochs": 2, "batch_size": 50, "lr": 0.01, "momentum": 0.5, "weight_decay": 5e-4}
    accs = {}
    for strategy in (FedAvg(), FedAvgFT()):
        result = simulate(
            strategy, fed, "lenet_fmnist", rounds=30, train=train, clients={"availability": 0.2}
        )
        accs[strategy.name] = result.accuracies
    last5 = {name: sum(a[-5:]) / 5 for name, a in accs.items()}
    jitter = {
        name: sum(abs(x - y) for x, y in zip(a[10:], a[9:-1], strict=True)) / 20
        for name, a in accs.items()
    }
    assert last5["fedavg_ft"] > last5["fedavg"] + 10  # measured 66.25 vs 29.62
    assert jitter["fedavg_ft"] < jitter["fedavg"] / 2  # measured 2.52 vs 8.36
