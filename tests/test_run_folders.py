"""Run folders never mix runs: resume checks, used folders, the lock, signals, kill -9."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from fedshare import simulate
from fedshare.config.defaults import DATASET_TRAIN
from fedshare.engine.resume import changed_keys
from fedshare.errors import FedshareError
from fedshare.results.atomic import png_complete
from fedshare.results.rundir import read_metrics, summarize
from fedshare.strategies import FedAvg, FedProx
from helpers import digits_federation, snapshot
from test_cli import FAST, fedshare_run

SLOW_RUN = ["progress=false", "rounds=200", "clients.num=4", "train.local_epochs=3"]


def start(tmp_path: Path, *args: str, sigint: Any = signal.SIG_DFL) -> subprocess.Popen:
    """`python -m fedshare.run ARGS`, started with SIGINT's disposition `sigint` (a background
    job of a script inherits it ignored)."""
    return subprocess.Popen(
        [sys.executable, "-m", "fedshare.run", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )


def wait_for_rounds(path: Path, rounds: int, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and len(read_metrics(path)) >= rounds:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {rounds} rounds")


def resume_base() -> dict:
    """The run the Python resume tests start from: FedAvg, digits IID over 4 clients, 1 round."""
    return {"strategy": FedAvg(), "data": digits_federation("iid", 4), "rounds": 1}


@pytest.fixture(scope="module")
def one_round_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of `resume_base`'s run, made once for the module."""
    folder = tmp_path_factory.mktemp("resume") / "r"
    simulate(**resume_base(), model="cnn_small", run_dir=folder)
    return folder


@pytest.fixture
def run_copy(one_round_run: Path, tmp_path: Path) -> Path:
    """A test's own copy of `one_round_run` (file times kept)."""
    return Path(shutil.copytree(one_round_run, tmp_path / "r"))


@pytest.mark.parametrize(
    "change",
    [
        {"strategy": FedProx(mu=0.01)},
        {"data": digits_federation("dirichlet", 4)},
        {"seed": 1},
        {"train": {"lr": 0.1}},
        {"clients": {"fraction": 0.5}},
    ],
    ids=["strategy", "partition", "seed", "train", "clients"],
)
def test_python_resume_refuses_any_change_of_what_the_run_computes(run_copy, change):
    before = snapshot(run_copy)
    with pytest.raises(FedshareError, match="cannot resume"):
        simulate(**{**resume_base(), **change}, model="cnn_small", run_dir=run_copy, resume=True)
    assert snapshot(run_copy) == before


def test_python_resume_continues_and_redraws_only_a_missing_picture(run_copy):
    picture = (run_copy / "partition.png").stat().st_mtime_ns
    simulate(**{**resume_base(), "rounds": 2}, model="cnn_small", run_dir=run_copy, resume=True)
    assert (run_copy / "partition.png").stat().st_mtime_ns == picture  # not redrawn
    assert [r["round"] for r in read_metrics(run_copy / "metrics.jsonl")] == [1, 2]
    (run_copy / "partition.png").unlink()
    simulate(**{**resume_base(), "rounds": 3}, model="cnn_small", run_dir=run_copy, resume=True)
    assert (run_copy / "partition.png").exists()


def test_resuming_a_finished_run_changes_no_byte_and_more_rounds_run(run_copy):
    """A resume of a finished run writes nothing (bytes and file times kept) and says so;
    asking for more rounds runs them."""
    times = {p.name: p.stat().st_mtime_ns for p in run_copy.iterdir()}
    before = snapshot(run_copy)
    result = simulate(**resume_base(), model="cnn_small", run_dir=run_copy, resume=True)
    assert snapshot(run_copy) == before
    assert {p.name: p.stat().st_mtime_ns for p in run_copy.iterdir()} == times
    assert result.summary["nothing_to_do"] is True
    stored = json.loads(before["summary.json"])
    assert {k: v for k, v in result.summary.items() if k != "nothing_to_do"} == stored
    assert result.history == read_metrics(run_copy / "metrics.jsonl")
    more = simulate(
        **{**resume_base(), "rounds": 2}, model="cnn_small", run_dir=run_copy, resume=True
    )
    assert "nothing_to_do" not in more.summary and more.summary["rounds_completed"] == 2


def test_summary_statistics_use_the_evaluated_rounds_only():
    history = [{"round": r, "accuracy": float(r), "loss": 1.0} for r in range(1, 13)]
    history.insert(3, {"round": 0, "accuracy": None, "loss": None})  # a round without eval
    summary = summarize(history, seed=3)
    assert summary["seed"] == 3 and summary["final_accuracy"] == 12.0
    assert summary["best_accuracy"] == 12.0
    assert summary["last10_mean_accuracy"] == pytest.approx(7.5)  # rounds 3..12
    assert summary["last5_mean_accuracy"] == pytest.approx(10.0)  # rounds 8..12
    short = summarize(history[:2])
    assert short["last5_mean_accuracy"] == short["last10_mean_accuracy"] == 1.5
    assert summarize([])["last5_mean_accuracy"] is None


def test_changed_keys_ignore_only_the_listed_ones():
    saved = {"rounds": 2, "train": {"lr": 0.1, "momentum": 0.9}, "data": {"root": "a"}}
    current = {"rounds": 5, "train": {"lr": 0.2, "momentum": 0.9}, "data": {"root": "b"}}
    assert changed_keys(saved, current) == ["train.lr"]
    assert changed_keys(saved, {**saved, "extra": 1}) == ["extra"]
    # a checkpoint older than train.amp matches amp's old behaviour (off), not another value
    assert changed_keys(saved, {**saved, "train": {**saved["train"], "amp": False}}) == []
    assert changed_keys(saved, {**saved, "train": {**saved["train"], "amp": True}}) == ["train.amp"]
    assert changed_keys(saved, {**saved, "train": {**saved["train"], "compile": True}}) == []


def test_a_used_folder_is_refused_and_overwrite_replaces_the_old_run(run_copy, tmp_path):
    fed, lr = digits_federation("iid", 4), {"lr": 0.2}
    before = snapshot(run_copy)
    with pytest.raises(FedshareError, match="already holds a run"):
        simulate(FedAvg(), fed, "cnn_small", rounds=1, run_dir=run_copy, train=lr)
    assert snapshot(run_copy) == before
    proc = fedshare_run(*FAST, f"run_dir={run_copy}", cwd=tmp_path)
    assert proc.returncode == 2 and "already holds a run" in proc.stderr
    assert snapshot(run_copy) == before
    simulate(FedAvg(), fed, "cnn_small", rounds=1, run_dir=run_copy, train=lr, overwrite=True)
    # the old checkpoint is gone: the one there now records the new run's settings
    state = torch.load(run_copy / "checkpoint.pt", weights_only=True)
    assert state["config"]["train"]["lr"] == 0.2 != DATASET_TRAIN["digits"]["lr"]


def test_checkpoint_is_kept_by_default_and_can_be_turned_off(one_round_run, tmp_path):
    assert (one_round_run / "checkpoint.pt").is_file()  # `resume_base`: the default checkpoint
    off = {"every": 0}
    fed = digits_federation("iid", 4)
    simulate(FedAvg(), fed, "cnn_small", rounds=1, run_dir=tmp_path / "off", checkpoint=off)
    assert not (tmp_path / "off" / "checkpoint.pt").exists()


def test_default_folder_names_do_not_collide(tmp_path):
    procs = [start(tmp_path, *FAST[:1], "rounds=1", "clients.num=2") for _ in range(2)]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.communicate()
    folders = list((tmp_path / "runs" / "fedavg-digits-iid").iterdir())
    assert len(folders) == 2
    assert all(len(read_metrics(f / "metrics.jsonl")) == 1 for f in folders)


def test_lock_refuses_a_second_writer_and_sigterm_leaves_a_resumable_run(tmp_path):
    out = tmp_path / "run"
    first = start(tmp_path, *SLOW_RUN, f"run_dir={out}")
    try:
        wait_for_rounds(out / "metrics.jsonl", 2, first)
        second = fedshare_run(*FAST, "overwrite=true", f"run_dir={out}", cwd=tmp_path)
        assert second.returncode == 2 and "another fedshare process" in second.stderr
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 130, err
    assert "interrupted (SIGTERM)" in err and "resume=true" in err and "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    done = summary["rounds_completed"]
    proc = fedshare_run(
        *SLOW_RUN[:2],
        "rounds=" + str(done + 1),
        *SLOW_RUN[2:],
        "resume=true",
        f"run_dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "summary.json").read_text())["rounds_completed"] == done + 1


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "ignored"])
def test_ctrl_c_is_named_in_the_message(tmp_path, inherited):
    """SIGINT (Ctrl-C) stops a run with exit 130 and a message naming it (once "()"), also
    when the process inherited SIGINT ignored (once it then ran all its rounds, exit 0)."""
    out = tmp_path / "run"
    proc = start(tmp_path, *SLOW_RUN, f"run_dir={out}", sigint=inherited)
    try:
        wait_for_rounds(out / "metrics.jsonl", 1, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)  # the final files take long on a loaded CPU
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.startswith("fedshare: interrupted (SIGINT); what was written stays in"), err


def test_kill_9_leaves_every_file_readable(tmp_path):
    out = tmp_path / "run"
    proc = start(tmp_path, *SLOW_RUN, f"run_dir={out}")
    try:
        wait_for_rounds(out / "metrics.jsonl", 3, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    records = read_metrics(out / "metrics.jsonl")
    assert len(records) >= 3
    for name in ("partition.json", "summary.json"):
        if (out / name).exists():
            json.loads((out / name).read_text())
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["rounds_completed"] >= 2
    for name in ("partition.png", "curves.png"):  # written atomically: whole or absent
        assert not (out / name).exists() or png_complete(out / name), name
