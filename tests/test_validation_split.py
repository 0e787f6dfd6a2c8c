"""The validation split (`data.val_fraction`): carved per client and from the server's data,
seeded and fingerprinted with the partition; scored every evaluated round; summarised as the
test accuracy at the best-validation round; shown by the report beside the best test accuracy."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.data.validation import held_out
from fedshare.engine.evaluation import evaluate_batches, validation_metrics
from fedshare.errors import FedshareError
from fedshare.results.labels import with_validation
from fedshare.results.rundir import summarize, validation_summary
from fedshare.results.table import build_report
from fedshare.results.writers import table_rows

DIGITS = load_dataset({"name": "digits"})
DIR = {"name": "dirichlet", "alpha": 0.5}


def split(fraction: float, seed: int = 0, **options):
    return federate(DIGITS, DIR, 6, seed, val_fraction=fraction, **options)


def test_zero_fraction_changes_nothing():
    plain, zero = federate(DIGITS, DIR, 6, 0), split(0.0)
    assert zero.val_indices is None
    assert zero.partition.fingerprint == plain.partition.fingerprint
    for a, b in zip(plain.client_indices, zero.client_indices, strict=True):
        assert torch.equal(a, b)


def test_each_client_gives_its_share_and_keeps_the_rest():
    whole, held = split(0.0), split(0.2)
    val = set(held.val_indices.tolist())
    assert len(val) == len(held.val_indices)  # no sample twice
    for before, after in zip(whole.client_indices, held.client_indices, strict=True):
        mine = set(before.tolist())
        kept = set(after.tolist())
        assert kept < mine and not kept & val
        assert len(mine - kept) == held_out(len(mine), 0.2) and mine - kept <= val
    assert len(val) == sum(held_out(n, 0.2) for n in whole.client_sizes)
    assert held.client_sizes == [len(ix) for ix in held.client_indices]
    counts = np.asarray(held.partition.class_counts)
    assert counts.sum() == sum(held.client_sizes)
    assert held.partition.info["validation"]["size"] == len(val)


def test_the_split_is_seeded_and_fingerprinted():
    a, b, other = split(0.2), split(0.2), split(0.2, seed=1)
    assert torch.equal(a.val_indices, b.val_indices)
    assert a.partition.fingerprint == b.partition.fingerprint
    assert a.partition.fingerprint not in (
        split(0.0).partition.fingerprint,
        split(0.3).partition.fingerprint,
    )
    assert other.partition.fingerprint != a.partition.fingerprint


def test_the_server_data_gives_its_share_too():
    whole = split(0.0, server_size=100)
    held = split(0.2, server_size=100)
    assert len(held.server_indices) == 100 - held_out(100, 0.2)
    lost = set(whole.server_indices.tolist()) - set(held.server_indices.tolist())
    assert lost and lost <= set(held.val_indices.tolist())
    assert held.partition.info["server_data"]["size"] == len(held.server_indices)


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_a_fraction_outside_0_1_is_refused(fraction):
    with pytest.raises(FedshareError, match=rf"data.val_fraction={fraction} must be in \[0, 1\)"):
        split(fraction)


def test_a_split_leaving_a_client_no_training_sample_is_refused():
    tiny = federate(DIGITS, "iid", 1000, 0)  # clients of 1 or 2 samples
    assert min(tiny.client_sizes) == 1
    with pytest.raises(FedshareError, match=r"leaves client \d+ \(1 sample\) no training sample"):
        federate(DIGITS, "iid", 1000, 0, val_fraction=0.6)


def test_validation_metrics_score_the_held_out_samples():
    data = split(0.2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    got = validation_metrics(data, model, batch_size=7)
    x, y = DIGITS.x_train[data.val_indices], DIGITS.y_train[data.val_indices]
    expected = 100.0 * float((model(DIGITS.prepare(x)).argmax(1) == y).float().mean())
    assert got["val_accuracy"] == pytest.approx(expected)
    whole = evaluate_batches(model, DIGITS, [(x, y)])
    assert got["val_loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert validation_metrics(split(0.0), model, 7) == {}


def test_every_evaluated_round_records_validation_and_the_summary_picks_its_best_round():
    data = split(0.2)
    result = simulate("fedavg", data, "linear", rounds=3, progress=False, seed=0)
    assert all({"accuracy", "val_accuracy", "val_loss"} <= set(r) for r in result.history)
    best = max(result.history, key=lambda r: r["val_accuracy"])
    summary = result.summary
    assert summary["best_val_round"] == best["round"]
    assert summary["test_at_best_val_accuracy"] == best["accuracy"]
    assert summary["final_val_accuracy"] == result.history[-1]["val_accuracy"]
    plain = simulate("fedavg", split(0.0), "linear", rounds=1, progress=False, seed=0)
    assert "val_accuracy" not in plain.history[0] and "best_val_round" not in plain.summary


def test_the_test_accuracy_at_best_validation_is_not_the_best_test_accuracy():
    history = [
        {"round": 1, "accuracy": 50.0, "val_accuracy": 40.0},
        {"round": 2, "accuracy": 70.0, "val_accuracy": 60.0},
        {"round": 3, "accuracy": 80.0, "val_accuracy": 60.0},  # a tie: the first round counts
        {"round": 4, "accuracy": 90.0, "val_accuracy": 55.0},
    ]
    assert validation_summary(history) == {
        "best_val_accuracy": 60.0,
        "best_val_round": 2,
        "test_at_best_val_accuracy": 70.0,
        "final_val_accuracy": 55.0,
    }
    assert summarize(history)["best_accuracy"] == 90.0
    assert validation_summary([{"round": 1, "accuracy": 50.0}]) == {}


def fake_run(seed: int, at_best_val: float | None) -> dict:
    summary = {"strategy": "fedavg", "data": "digits", "partition": "iid", "seed": seed}
    summary.update(best_accuracy=90.0, final_accuracy=80.0, rounds_completed=2)
    if at_best_val is not None:
        summary["test_at_best_val_accuracy"] = at_best_val
    history = [{"round": 1, "accuracy": 80.0}]
    return {"summary": summary, "history": history, "path": f"r{seed}", "config": {"seed": seed}}


def test_the_report_shows_test_at_best_validation_beside_best_test():
    headers, cells = table_rows(build_report([fake_run(0, 70.0), fake_run(1, 74.0)]))
    column = headers.index("test@best-val %")
    assert headers[column - 1] == "best %"
    assert cells[0][column] == "72.00 ± 2.83"
    headers, _ = table_rows(build_report([fake_run(0, None)]))
    assert "test@best-val %" not in headers


def test_the_partition_label_names_the_split():
    assert with_validation("dir0.1", 0.1) == "dir0.1+val0.1"
    assert with_validation("dir0.1", 0.0) == "dir0.1"


def test_the_command_line_refuses_a_bad_fraction_with_one_sentence(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedshare.run",
            "data.val_fraction=1.5",
            f"run_dir={tmp_path / 'r'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.val_fraction" in lines[0] and "1.5" in lines[0]
    assert not (tmp_path / "r").exists()


def test_a_command_line_run_records_validation(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable, "-m", "fedshare.run", "data.val_fraction=0.2", "model=linear",
            "rounds=2", "clients.num=4", "progress=false", f"run_dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert summary["partition"] == "iid+val0.2"
    assert all("val_accuracy" in line for line in lines)
    assert summary["test_at_best_val_accuracy"] in [line["accuracy"] for line in lines]
