"""Paper-scale regression for XorMixFL (Shin et al. 2020) on MNIST: Tables 2 and 3.

Runs the experiment presets `xormixfl/table2` and `xormixfl/table3` on the real MNIST
(FEDSHARE_DATA=../shared/datasets), 3 seeds per cell, and checks them against the paper's
numbers stored in `fedshare/paper/tables/xormixfl_table{2,3}.json`. Tolerances and the
orderings that did not reproduce are explained in docs/xormixfl.md.

    FEDSHARE_DATA=../shared/datasets pytest -m paper tests/test_xormixfl_paper.py
"""

import statistics

import pytest

from fedshare.paper.compare import lookup
from helpers import run_table_cell

pytestmark = pytest.mark.paper
SEEDS = (0, 1, 2)


@pytest.fixture(autouse=True)
def mnist(mnist_root, monkeypatch):
    monkeypatch.setenv("FEDSHARE_DATA", str(mnist_root))


def mean_over_seeds(table: int, column: str, method: str, tmp_path) -> float:
    """A cell's mean over the seeds, run as `python -m fedshare.reproduce run
    xormixfl/table<k>` runs it (the MDS cells with no training and 100 test images)."""
    cell = run_table_cell(f"xormixfl/table{table}", column, method, tmp_path, SEEDS)
    return statistics.mean(cell.values)


# ------------------------------------------------------------------ Table 3: MDS
def mds(method: str, m: int, p: int, tmp_path) -> float:
    return mean_over_seeds(3, f"xormixfl/table3 strategy.M={m} strategy.p={p}", method, tmp_path)


def test_table3_mds_orderings_and_p1_cells(tmp_path):
    """XorMixFL's MDS > MixFL's in the same cell by at least 1.4× (the paper's smallest
    same-cell ratio is 1.45), XorMixFL's MDS rises with M at p = 1 and p = 5, and the p = 1
    cells of XorMixFL (every M) and MixFL (M = 1) lie within 10 % of the paper's means (the
    paper's per-sample std is 15 % of the mean; our seeds agree within 2 %)."""
    xor = {(m, p): mds("xormixfl", m, p, tmp_path) for m in (1, 2, 3) for p in (1, 5)}
    mix = {(m, p): mds("mixfl", m, p, tmp_path) for m in (1, 2, 3) for p in (1, 5)}
    for cell in xor:
        assert xor[cell] > 1.4 * mix[cell], (cell, xor[cell], mix[cell])
    for p in (1, 5):
        assert xor[1, p] < xor[2, p] < xor[3, p], p
    checks = [("xormixfl", m, xor[m, 1]) for m in (1, 2, 3)] + [("mixfl", 1, mix[1, 1])]
    for method, m, measured in checks:
        paper = lookup("xormixfl_table3", f"xormixfl/table3 strategy.M={m} strategy.p=1", method)
        assert abs(measured - paper.mean) <= 0.10 * paper.mean, (method, m, measured, paper)


# ------------------------------------------------------------------ Table 2: accuracy
TABLE2_COLUMNS = ("[9]", "[0,2]", "[0,2,4,8]")  # N = 1 (the paper's running example), 2, 4
SHARING_TOLERANCE = 3.0


def test_table2_orderings_and_cells(tmp_path):
    """Final test accuracy, mean of 3 seeds, in one column of each N (docs/xormixfl.md has all
    15 columns). The paper's orderings: MixFL above Standalone and Vanilla FL in every column;
    XorMixFL above Vanilla FL in every column, and above Standalone for N ≥ 2 and on average
    over the columns (the full sweep has XorMixFL 0.7 points below Standalone for labels 1 and
    9, so [9] alone is not asserted). Cells: XorMixFL and MixFL within 3 points of the paper
    (the full sweep's largest gap over their 30 cells is 2.5). The baselines' cells are not
    compared one by one: the paper gives no training recipe, and with ours Standalone and
    Vanilla FL are up to 6.2 and 10.6 points above the paper's numbers."""
    acc = {
        (method, col): mean_over_seeds(
            2, f"xormixfl/table2 partition.target_labels={col}", method, tmp_path
        )
        for col in TABLE2_COLUMNS
        for method in ("xormixfl", "mixfl", "standalone", "fedavg")
    }
    for col in TABLE2_COLUMNS:
        assert acc["mixfl", col] > max(acc["standalone", col], acc["fedavg", col]), (col, acc)
        assert acc["xormixfl", col] > acc["fedavg", col], (col, acc)
        if col != "[9]":
            assert acc["xormixfl", col] > acc["standalone", col], (col, acc)
    gains = [acc["xormixfl", c] - acc["standalone", c] for c in TABLE2_COLUMNS]
    assert statistics.mean(gains) > 0, gains
    for method in ("xormixfl", "mixfl"):
        for col in TABLE2_COLUMNS:
            preset = f"xormixfl/table2 partition.target_labels={col}"
            paper = lookup("xormixfl_table2", preset, method)
            measured = acc[method, col]
            assert abs(measured - paper.mean) <= SHARING_TOLERANCE, (method, col, measured, paper)
