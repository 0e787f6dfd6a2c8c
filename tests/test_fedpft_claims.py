"""FedPFT's small-scale claims (specs/fedpft.md §8.2) over 3 seeds, with the spec's tolerances,
on digits random-ReLU features, synthetic Gaussian-mixture features and ResNet-20 features of
the CIFAR-10 sample. Slow tier (minutes): `pytest -m slow tests/test_fedpft_claims.py`.
The settings come from scripts/fedpft_checks.py (one source for the docs' tables and these
tests); docs/fedpft.md has the measured numbers."""

import itertools
import statistics

import pytest

from conftest import data_root_or_skip
from fedshare.data import load_dataset
from helpers import load_script

pytestmark = pytest.mark.slow
SEEDS = [0, 1, 2]

checks = load_script("fedpft_checks")


def means(results):
    return {k: statistics.mean(v) for k, v in results.items()}


CENTRAL, AVG, ENS_MAX, ENS_MEAN = checks.BASELINES


@pytest.fixture(scope="module")
def digits64():
    return checks.digits(64)


def test_c1_fedpft_approaches_centralized_on_digits(digits64):
    methods = [CENTRAL, checks.fedpft("diag", 10), checks.fedpft("full", 1)]
    m = means(checks.run_grid(digits64, {"name": "dirichlet", "alpha": 0.3}, 5, methods, SEEDS))
    assert m["FedPFT diag K=10"] >= m["Centralized"] - 3
    assert m["FedPFT full K=1"] >= m["Centralized"] - 3


def test_c1_every_family_and_k_on_synthetic_clusters():
    data = load_dataset({"name": "synthetic_mixture"})
    methods = [CENTRAL] + [
        checks.fedpft(c, k) for c in ("spherical", "diag", "full") for k in (1, 2, 5, 10)
    ]
    m = means(checks.run_grid(data, {"name": "dirichlet", "alpha": 0.1}, 10, methods, SEEDS))
    central = m.pop("Centralized")
    assert min(m.values()) >= central - 4, m


def test_c2_accuracy_rises_with_k_and_beats_one_shot_averaging():
    """C2 (spherical and diag; full too, as the issue asks) on digits-128, I=10, Dir(0.1), and
    the Dir(0.1) gap to one-shot averaging."""
    methods = [checks.fedpft(c, k) for c in ("spherical", "diag", "full") for k in (1, 2, 5, 10)]
    part = {"name": "dirichlet", "alpha": 0.1}
    m = means(checks.run_grid(checks.digits(128), part, 10, [*methods, AVG], SEEDS))
    for short in ("spher", "diag", "full"):
        accs = [m[f"FedPFT {short} K={k}"] for k in (1, 2, 5, 10)]
        assert all(b >= a - 1 for a, b in itertools.pairwise(accs)), (short, accs)
    for short in ("spher", "diag"):
        assert m[f"FedPFT {short} K=10"] - m[f"FedPFT {short} K=1"] >= 2
    assert m["FedPFT diag K=10"] >= m["Average"] + 20


def test_c4_two_client_label_shift(digits64):
    chain = (
        "FedPFT",
        "fedpft_chain",
        {"covariance": "diag", "n_components": 10, "small_class_policy": "shrink"},
    )
    methods = [CENTRAL, chain, AVG, ENS_MAX, ENS_MEAN, checks.KD]
    m = means(checks.run_grid(digits64, {"name": "task", "tasks": 2}, 2, methods, SEEDS))
    assert m["FedPFT"] >= m["Centralized"] - 3
    for baseline in ("Average", "Ensemble-max", "Ensemble-mean", checks.KD[0]):
        assert m["FedPFT"] >= m[baseline] + 4, (baseline, m)


def test_c6_dp_degrades_gracefully_with_epsilon():
    data = load_dataset({"name": "synthetic_mixture", "train_size": 22500, "test_size": 7500})
    methods = [
        ("inf", "fedpft", {"covariance": "spherical", "n_components": 1, "l2_normalize": True})
    ]
    methods += [(f"{eps:g}", "dp_fedpft", {"dp_epsilon": eps}) for eps in (10.0, 1.0, 0.1)]
    m = means(
        checks.run_grid(
            data, {"name": "dirichlet", "alpha": 1.0}, 3, methods, SEEDS, checks.DP_TRAIN
        )
    )
    assert m["inf"] >= m["10"] - 1 and m["10"] >= m["1"] - 1
    assert m["1"] >= m["inf"] - 6
    assert m["0.1"] <= m["1"] - 20


def test_c10_gmm_fidelity_at_one_client(digits64):
    methods = [("real", "centralized", {}), checks.fedpft("diag", 10)]
    m = means(checks.run_grid(digits64, "iid", 1, methods, SEEDS))
    assert m["FedPFT diag K=10"] >= m["real"] - 3


def test_c11_decentralized_chain():
    data = load_dataset(
        {
            "name": "digits",
            "test_fraction": 0.25,
            "train_subset": 500,
            "features": "random_relu",
            "features_options": {"dim": 64},
        }
    )
    records = []

    def keep(result):
        records.append(result.history[-1])
        return result.final_accuracy

    chain = (
        "chain",
        "fedpft_chain",
        {"covariance": "diag", "n_components": 1, "report_local": True},
    )
    last = means(checks.run_grid(data, "iid", 5, [chain], SEEDS, extract=keep))["chain"]
    central = means(checks.run_grid(data, "iid", 5, [CENTRAL], SEEDS))["Centralized"]
    local = statistics.mean(statistics.mean(r["local_accuracy"]) for r in records)
    per_client = [statistics.mean(r["chain_accuracy"][i] for r in records) for i in range(5)]
    assert last >= local + 3
    assert last >= central - 5
    assert statistics.mean(per_client[1:]) > per_client[0]


def test_c12_float16_round_trip(digits64):
    methods = [checks.fedpft("diag", 10, wire_dtype=w) for w in ("float16", "float32")]
    methods = [(m[2]["wire_dtype"], m[1], m[2]) for m in methods]
    m = means(checks.run_grid(digits64, {"name": "dirichlet", "alpha": 0.3}, 5, methods, SEEDS))
    assert abs(m["float16"] - m["float32"]) <= 1


def test_resnet20_cifar10_sample_dirichlet():
    """The issue's check on real features: ResNet-20 features (64-d) of the CIFAR-10 sample,
    10 clients, Dir(0.1): FedPFT close to Centralized (within 4 pp, the paper's largest gap) and
    far above one-shot averaging; full-covariance accuracy not decreasing in K (1 pp slack)."""
    root = data_root_or_skip("cifar10_sample/train.npz", "pretrained/cifar10_resnet20")
    data = load_dataset({"name": "cifar10_sample", "root": str(root), "features": "resnet20_cifar"})
    methods = [CENTRAL, AVG, checks.fedpft("diag", 10)]
    methods += [checks.fedpft("full", k) for k in (1, 2, 5, 10)]
    part = {"name": "dirichlet", "alpha": 0.1, "min_size": 10}
    m = means(checks.run_grid(data, part, 10, methods, SEEDS))
    for row in ("FedPFT diag K=10", "FedPFT full K=1"):
        assert m[row] >= m["Centralized"] - 4, m
        assert m[row] >= m["Average"] + 10, m
    full = [m[f"FedPFT full K={k}"] for k in (1, 2, 5, 10)]
    assert all(b >= a - 1 for a, b in itertools.pairwise(full)), full
