"""The per-paper CPU recipes `experiment=<paper>/cpu` (issue 34 item 9; numbers in each paper's
doc, "CPU preset"): every one composes and validates (default tier), and each one, run on seeds
0 and 1 beside the baseline it is compared with, shows its method's claim (`slow`).

The margins of the `slow` tests come from the measured seeds in the docs: each asserts a gap
well below the smallest one measured, so a broken method (a dropped term, a label to the wrong
place) fails and seed noise does not."""

from pathlib import Path

import pytest

from conftest import data_root_or_skip
from fedshare.config.compose import check_command_line, compose_member, run_values
from fedshare.reproduce import cells
from fedshare.reproduce.measure import cell_value
from fedshare.results.runs import load_run
from fedshare.run import config_dir
from helpers import run_preset

PAPERS = {
    # paper: (method, baseline, data files under FEDSHARE_DATA, the job whose `preset` scale
    # runs the preset's commands: the generated table of the doc's "CPU preset")
    "flea": ("flea", "fedavg", (), "flea/table1"),
    "rebafl": ("rebafl", "fedavg", ("FashionMNIST/raw",), "rebafl/table1"),
    "fedpft": ("fedpft", "centralized", (), "fedpft/table2"),
    "xormixfl": ("xormixfl", "fedavg", ("MNIST/raw",), "xormixfl/table2"),
    "fedaa": ("fedaa", "fedavg", ("FashionMNIST/raw",), "fedaa/table2"),
}
SEEDS = (0, 1)
# Smallest gap measured over seeds 0 and 1 (docs/<paper>.md, "CPU preset"), and the margin kept.
FLEA_MARGIN = 5.0  # best accuracy over FedAvg: +10.6, +15.0
REBAFL_MARGIN = 3.0  # last-5 mean over FedAvg: +7.7, +12.2
FEDPFT_MARGIN = 5.0  # |final accuracy − centralized|: 1.6, 2.7
XORMIXFL_MARGIN = 30.0  # accuracy on labels 0 and 2 over Vanilla FL: +73.5, +74.8
FEDAA_MARGIN = 5.0  # best accuracy over FedAvg: +11.6, +18.8


def test_every_paper_has_a_cpu_preset():
    found = {p.parent.name for p in (config_dir() / "experiment").glob("*/cpu.yaml")}
    assert found == set(PAPERS) | {"hetero"}  # a family's preset (test_hetero_clients_models)


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_cpu_preset_composes_and_validates(paper):
    method = PAPERS[paper][0]
    assert check_command_line([f"experiment={paper}/cpu"], config_dir()) == 1
    values = run_values(compose_member([f"experiment={paper}/cpu"], str(config_dir())))
    assert values["strategy"]["name"] == method
    assert values["data"]["name"] not in ("cifar10", "cifar100")  # CPU-sized data only
    baseline = PAPERS[paper][1]
    assert check_command_line([f"experiment={paper}/cpu", f"strategy={baseline}"], config_dir())


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_preset_scale_runs_exactly_the_presets_commands(paper):
    """The job's `preset` scale (`fedshare.reproduce run <table> --scale preset`, the doc's
    generated table) runs the doc's commands: the method as the preset's own strategy, the
    other rows with `strategy=` alone, seeds 0 and 1."""
    method, baseline, _, table = PAPERS[paper]
    found = cells(table, "preset")
    preset = f"experiment={paper}/cpu"
    assert {c.seed for c in found} == set(SEEDS)
    for cell in found:
        strategy = () if cell.method == method else (f"strategy={cell.method}",)
        assert cell.overrides == (preset, *strategy, f"seed={cell.seed}"), cell
    assert {c.method for c in found} >= {method, baseline}


def run_pair(paper: str, seed: int, tmp_path: Path) -> tuple[dict, dict]:
    """The preset's method and its baseline on one seed, as the `preset` scale's cells:
    (method run, baseline run)."""
    method, baseline, files, table = PAPERS[paper]
    data_root_or_skip(*files)
    runs = []
    for row in (method, baseline):
        (cell,) = cells(table, "preset", methods=[row], seeds=[seed])
        out = tmp_path / f"{row}-seed{seed}"
        run_preset(list(cell.overrides), out)
        runs.append(load_run(out))
    return runs[0], runs[1]


def gaps(paper: str, metric: str, tmp_path: Path) -> list[float]:
    """method − baseline on `metric`, one per seed."""
    result = []
    for seed in SEEDS:
        ours, theirs = run_pair(paper, seed, tmp_path)
        result.append(cell_value(ours, metric) - cell_value(theirs, metric))
    return result


@pytest.mark.slow
def test_flea_cpu_beats_fedavg_under_label_skew(tmp_path):
    """FLea Table 1's claim on the label-skew stand-in: above FedAvg on every seed."""
    result = gaps("flea", "best_accuracy", tmp_path)
    assert min(result) > FLEA_MARGIN, result


@pytest.mark.slow
def test_rebafl_cpu_beats_fedavg_on_pathological_fmnist(tmp_path):
    """ReBaFL Table I: above FedAvg on the last-rounds mean, every seed."""
    result = gaps("rebafl", "last5_mean_accuracy", tmp_path)
    assert min(result) > REBAFL_MARGIN, result


@pytest.mark.slow
def test_fedpft_cpu_one_shot_close_to_centralized(tmp_path):
    """FedPFT Table 2: one round of GMM statistics lands within a few points of the head
    trained on every client's features."""
    result = gaps("fedpft", "final_accuracy", tmp_path)
    assert max(abs(gap) for gap in result) < FEDPFT_MARGIN, result


@pytest.mark.slow
def test_xormixfl_cpu_beats_vanilla_fl_on_the_missing_label(tmp_path):
    """XorMixFL Table 2: the labels the server lacks (0 and 2) are learnt better than by one-shot
    FedAvg."""
    result = gaps("xormixfl", "target_label_accuracy", tmp_path)
    assert min(result) > XORMIXFL_MARGIN, result


@pytest.mark.slow
def test_fedaa_cpu_beats_fedavg_on_one_class_clients(tmp_path):
    """FedAA Table 2: above FedAvg when every client holds one class."""
    result = gaps("fedaa", "best_accuracy", tmp_path)
    assert min(result) > FEDAA_MARGIN, result
