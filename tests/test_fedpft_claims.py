"""FedPFT's small-scale claims (Sec. 5, docs/fedpft.md) over 3 seeds, with docs/fedpft.md's margins,
on digits random-ReLU features, synthetic Gaussian-mixture features and ResNet-20 features of
the CIFAR-10 sample. Slow tier (minutes): `pytest -m slow tests/test_fedpft_claims.py`.
The settings are the claim-check scales of the jobs fedpft/table2 and fedpft/table5, run as
`python -m fedshare.reproduce run fedpft/table5 --scale digits64` runs them (one source for
the docs' tables and these tests); docs/fedpft.md has the measured numbers."""

import itertools
import statistics
from pathlib import Path

import pytest

from conftest import data_root_or_skip
from fedshare.reproduce import cells
from fedshare.results.runs import load_run
from helpers import run_table_cells

pytestmark = pytest.mark.slow
SEEDS = [0, 1, 2]
FEDPFT = [f"fedpft_{c}_k{k}" for c in ("spher", "diag", "full") for k in (1, 2, 5, 10)]


def means(
    table: str, scale: str, out: Path, methods: list[str], column: str | None = None
) -> dict[str, float]:
    """Method → mean accuracy over SEEDS of the scale's cells (its one column, or `column`)."""
    found = run_table_cells(table, scale, out, [column] if column else None, methods, SEEDS)
    return {m.method: m.mean_std[0] for m in found}


def test_c1_fedpft_approaches_centralized_on_digits(tmp_path):
    m = means(
        "fedpft/table5", "digits64", tmp_path, ["centralized", "fedpft_diag_k10", "fedpft_full_k1"]
    )
    assert m["fedpft_diag_k10"] >= m["centralized"] - 3
    assert m["fedpft_full_k1"] >= m["centralized"] - 3


def test_c1_every_family_and_k_on_synthetic_clusters(tmp_path):
    m = means("fedpft/table5", "synthetic", tmp_path, ["centralized", *FEDPFT])
    central = m.pop("centralized")
    assert min(m.values()) >= central - 4, m


def test_c2_accuracy_rises_with_k_and_beats_one_shot_averaging(tmp_path):
    """C2 (spherical and diag; full too, as the issue asks) on digits-128, I=10, Dir(0.1), and
    the Dir(0.1) gap to one-shot averaging."""
    m = means("fedpft/table5", "digits128", tmp_path, [*FEDPFT, "average"])
    for short in ("spher", "diag", "full"):
        accs = [m[f"fedpft_{short}_k{k}"] for k in (1, 2, 5, 10)]
        assert all(b >= a - 1 for a, b in itertools.pairwise(accs)), (short, accs)
    for short in ("spher", "diag"):
        assert m[f"fedpft_{short}_k10"] - m[f"fedpft_{short}_k1"] >= 2
    assert m["fedpft_diag_k10"] >= m["average"] + 20


def test_c4_two_client_label_shift(tmp_path):
    baselines = ["average", "ensemble_max", "ensemble_mean", "kd"]
    m = means(
        "fedpft/table2",
        "labelshift",
        tmp_path,
        ["centralized", "fedpft_chain_diag_k10", *baselines],
    )
    assert m["fedpft_chain_diag_k10"] >= m["centralized"] - 3
    for baseline in baselines:
        assert m["fedpft_chain_diag_k10"] >= m[baseline] + 4, (baseline, m)


def test_c6_dp_degrades_gracefully_with_epsilon(tmp_path):
    rows = ["fedpft_spher_k1_l2", *(f"dp_spher_raw_eps{e}" for e in ("10", "1", "0.1"))]
    inf, eps10, eps1, eps01 = (means("fedpft/table5", "dp", tmp_path, rows)[r] for r in rows)
    assert inf >= eps10 - 1 and eps10 >= eps1 - 1
    assert eps1 >= inf - 6
    assert eps01 <= eps1 - 20


def test_c10_gmm_fidelity_at_one_client(tmp_path):
    m = means("fedpft/table5", "fidelity", tmp_path, ["centralized", "fedpft_diag_k10"])
    assert m["fedpft_diag_k10"] >= m["centralized"] - 3


def test_c11_decentralized_chain(tmp_path):
    m = means("fedpft/table2", "chain", tmp_path, ["centralized", "fedpft_chain_diag_k1"])
    records = [
        load_run(tmp_path / c.folder)["history"][-1]
        for c in cells("fedpft/table2", "chain", methods=["fedpft_chain_diag_k1"], seeds=SEEDS)
    ]
    last = m["fedpft_chain_diag_k1"]
    local = statistics.mean(statistics.mean(r["local_accuracy"]) for r in records)
    per_client = [statistics.mean(r["chain_accuracy"][i] for r in records) for i in range(5)]
    assert last >= local + 3
    assert last >= m["centralized"] - 5
    assert statistics.mean(per_client[1:]) > per_client[0]


def test_c12_float16_round_trip(tmp_path):
    m = means("fedpft/table5", "digits64", tmp_path, ["fedpft_diag_k10", "fedpft_diag_k10_float32"])
    assert abs(m["fedpft_diag_k10"] - m["fedpft_diag_k10_float32"]) <= 1


def test_resnet20_cifar10_sample_dirichlet(tmp_path):
    """The issue's check on real features: ResNet-20 features (64-d) of the CIFAR-10 sample,
    10 clients, Dir(0.1): FedPFT close to Centralized (within 4 pp, the paper's largest gap) and
    far above one-shot averaging; full-covariance accuracy not decreasing in K (1 pp slack)."""
    data_root_or_skip("cifar10_sample/train.npz", "pretrained/cifar10_resnet20")
    full = [f"fedpft_full_k{k}" for k in (1, 2, 5, 10)]
    methods = ["centralized", "average", "fedpft_diag_k10", *full]
    m = means("fedpft/table5", "cifar10", tmp_path, methods, "fedpft/cifar10_sample_resnet20")
    for row in ("fedpft_diag_k10", "fedpft_full_k1"):
        assert m[row] >= m["centralized"] - 4, m
        assert m[row] >= m["average"] + 10, m
    accs = [m[r] for r in full]
    assert all(b >= a - 1 for a, b in itertools.pairwise(accs)), accs
