"""No run lost or misstated: true statuses, a summary that agrees with what was saved, refused
edited checkpoints, no result over zero samples, atomic files checked on resume, a marker
that keeps `overwrite` off a user's own files, and full disks as one sentence."""

import errno
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fedshare import simulate
from fedshare.engine.callbacks import Callback
from fedshare.engine.evaluation import evaluate
from fedshare.engine.run_folder import cut_metrics
from fedshare.errors import FedshareError
from fedshare.results.atomic import clean_temporaries, png_complete
from fedshare.results.rundir import MARKER, RunDirectory, read_metrics
from fedshare.strategies import FedAvg, Scaffold
from helpers import digits_federation
from test_cli import FAST, fedshare_run

FED = digits_federation("iid", 3)


def shutil_usage(free: int):
    import shutil

    return shutil._ntuple_diskusage(total=1 << 30, used=(1 << 30) - free, free=free)


def run(out: Path, rounds: int = 2, **options):
    return simulate(FedAvg(), FED, "cnn_small", rounds=rounds, run_dir=out, **options)


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def raise_at(round_: int, error: BaseException):
    def callback(sim, rounds_completed, record):
        if rounds_completed == round_:
            raise error

    return callback


def test_a_crash_is_failed_with_its_sentence_and_a_signal_is_interrupted(tmp_path):
    with pytest.raises(RuntimeError):
        run(tmp_path / "crash", callbacks=[raise_at(1, RuntimeError("boom"))])
    crashed = summary_of(tmp_path / "crash")
    assert crashed["status"] == "failed" and crashed["error"] == "RuntimeError: boom"
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "signal", callbacks=[raise_at(1, KeyboardInterrupt())])
    stopped = summary_of(tmp_path / "signal")
    assert stopped["status"] == "interrupted" and "error" not in stopped


def test_a_model_that_evaluates_to_nan_is_diverged_not_completed(tmp_path):
    """The global model breaks (NaN outputs) while the clients' training stays finite: the
    run stops as "diverged" with a sentence naming the round, not "completed" at chance."""
    out = tmp_path / "r"

    class Breaks(Callback):
        def on_begin(self, sim):
            sim.strategy.global_model().register_forward_hook(lambda m, i, o: o * float("nan"))

    with pytest.raises(FedshareError, match="test loss after round 1 is nan"):
        run(out, callbacks=[Breaks()])
    summary = summary_of(out)
    assert summary["status"] == "diverged" and "diverged" in summary["error"]
    assert summary["rounds_completed"] == 0 and read_metrics(out / "metrics.jsonl") == []


def test_the_summary_counts_only_the_rounds_that_were_saved(tmp_path):
    """An interrupt after round 2 was evaluated but before its line and checkpoint were
    written: summary.json, metrics.jsonl and checkpoint.pt all stop at round 1."""
    out = tmp_path / "r"
    from fedshare.engine import simulation

    original = simulation.MetricsLog.on_round_end

    def log(self, sim, record):
        if sim.rounds_completed == 2:
            raise KeyboardInterrupt
        return original(self, sim, record)

    simulation.MetricsLog.on_round_end = log
    try:
        with pytest.raises(KeyboardInterrupt):
            run(out, rounds=3)
    finally:
        simulation.MetricsLog.on_round_end = original
    summary = summary_of(out)
    assert summary["rounds_completed"] == 1 and summary["final_accuracy"] is not None
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    assert torch.load(out / "checkpoint.pt", weights_only=True)["rounds_completed"] == 1
    # interrupted in a user's callback, after round 2 was logged and checkpointed: all say 2
    late = tmp_path / "late"
    with pytest.raises(KeyboardInterrupt):
        run(late, rounds=3, callbacks=[raise_at(2, KeyboardInterrupt())])
    assert summary_of(late)["rounds_completed"] == 2
    assert [r["round"] for r in read_metrics(late / "metrics.jsonl")] == [1, 2]
    assert torch.load(late / "checkpoint.pt", weights_only=True)["rounds_completed"] == 2


@pytest.mark.parametrize(("edit", "message"), [(100, "says 100 rounds"), (0, "says 0 rounds")])
def test_a_checkpoint_whose_rounds_disagree_with_its_history_is_refused(tmp_path, edit, message):
    out = tmp_path / "r"
    run(out, rounds=2)
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    state["rounds_completed"] = edit
    torch.save(state, out / "checkpoint.pt")
    with pytest.raises(FedshareError, match=message):
        run(out, rounds=200, resume=True)


def test_a_checkpoint_past_the_asked_rounds_is_refused(tmp_path):
    run(tmp_path / "r", rounds=2)
    with pytest.raises(FedshareError, match="has 2 rounds completed but rounds=1"):
        run(tmp_path / "r", rounds=1, resume=True)


def test_an_evaluation_over_zero_samples_is_an_error_not_a_number():
    data = FED.dataset
    empty = replace(data, x_test=data.x_test[:0], y_test=data.y_test[:0])
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with pytest.raises(FedshareError, match="0 test samples"):
        evaluate(model, empty, 32)
    with pytest.raises(FedshareError, match="batches of -1"):
        evaluate(model, data, -1)
    with pytest.raises(FedshareError, match="test set of digits is empty"):
        simulate(FedAvg(), replace(FED, dataset=empty), "cnn_small", rounds=1)


def test_resume_redraws_a_cut_off_picture_and_rewrites_a_cut_off_partition_file(tmp_path):
    out = tmp_path / "r"
    run(out, rounds=1)
    picture = (out / "partition.png").read_bytes()
    (out / "partition.png").write_bytes(picture[: len(picture) // 2])
    text = (out / "partition.json").read_text()
    (out / "partition.json").write_text(text[: len(text) // 2])
    (out / "summary.tmp.json").write_text("{")
    (out / "checkpoint.tmp.pt").write_bytes(b"")
    run(out, rounds=2, resume=True)
    assert png_complete(out / "partition.png") and png_complete(out / "curves.png")
    assert json.loads((out / "partition.json").read_text())["fingerprint"]
    assert not list(out.glob("*.tmp*"))


def test_temporaries_are_found_by_their_mark_only(tmp_path):
    for name in ("a.tmp", "b.tmp.png", "summary.json.tmp", "keep.json", "tmpfile"):
        (tmp_path / name).write_text("x")
    assert sorted(clean_temporaries(tmp_path)) == ["a.tmp", "b.tmp.png", "summary.json.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json", "tmpfile"]


def test_overwrite_deletes_only_what_a_fedshare_run_wrote(tmp_path):
    own = tmp_path / "mine"
    own.mkdir()
    (own / "config.yaml").write_text("my: own\n")
    (own / "summary.json").write_text("{}\n")
    with pytest.raises(FedshareError, match="not written by a fedshare run"):
        run(own, rounds=1, overwrite=True)
    assert (own / "config.yaml").read_text() == "my: own\n"
    ours = tmp_path / "ours"
    run(ours, rounds=1)
    assert (ours / MARKER).exists()
    run(ours, rounds=1, overwrite=True)


def test_a_full_disk_is_one_sentence_naming_the_folder_and_the_kept_checkpoint(
    tmp_path, monkeypatch
):
    out = tmp_path / "r"

    def full(self, summary):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path / "summary.json"))

    monkeypatch.setattr(RunDirectory, "write_summary", full)
    with pytest.raises(FedshareError) as caught:
        run(out, rounds=2)
    message = str(caught.value)
    assert str(out) in message and "No space left on device" in message
    assert "checkpoint.pt of round 2 is intact" in message
    assert torch.load(out / "checkpoint.pt", weights_only=True)["rounds_completed"] == 2


def test_a_disk_filling_in_a_checkpoint_leaves_a_folder_that_states_the_run(tmp_path, monkeypatch):
    """The disk fills while round 2's checkpoint (client state segment) is written: no
    temporary stays, metrics.jsonl and summary.json stop at round 1 with the checkpoint, and
    summary.json says "failed" naming the full disk."""
    from fedshare.engine import checkpoint

    out, saves, real_save = tmp_path / "r", [], torch.save

    def fills_up(obj, path):
        saves.append(path)
        if len(saves) == 3:  # round 2's segment (round 1: its segment, its checkpoint)
            Path(path).write_bytes(b"partial")
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos")
        real_save(obj, path)

    monkeypatch.setattr(checkpoint.torch, "save", fills_up)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda p: shutil_usage(free=0))
    with pytest.raises(FedshareError, match="No space left on device"):
        simulate(Scaffold(), FED, "cnn_small", rounds=3, run_dir=out)
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]
    summary = summary_of(out)
    assert summary["status"] == "failed" and "No space left on device" in summary["error"]
    assert summary["rounds_completed"] == 1
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    assert torch.load(out / "checkpoint.pt", weights_only=False)["rounds_completed"] == 1


def test_cut_metrics_keeps_whole_lines_up_to_the_round(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"round": 1}\n{"round": 2}\n{"round": 3}\n{"rou')
    cut_metrics(path, 2)
    assert path.read_bytes() == b'{"round": 1}\n{"round": 2}\n'
    cut_metrics(path, 0)
    assert path.read_bytes() == b""


def test_an_unwritable_folder_is_one_sentence(tmp_path, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(FedshareError, match=r"cannot write in run_dir .*Permission denied"):
        run(tmp_path / "r", rounds=1)


def test_a_run_started_with_hydra_run_dir_resumes_with_it(tmp_path):
    out = tmp_path / "h"
    base = [a for a in FAST if not a.startswith("rounds=")]
    first = fedshare_run(*base, "rounds=1", f"hydra.run.dir={out}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    proc = fedshare_run(*base, "rounds=2", "resume=true", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]


def test_an_empty_run_dir_is_refused_and_the_current_folder_untouched(tmp_path):
    (tmp_path / "config.yaml").write_text("my: own\n")
    proc = fedshare_run(*FAST, "run_dir=", "overwrite=true", cwd=tmp_path)
    assert proc.returncode == 2 and "run_dir= is empty" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
    assert (tmp_path / "config.yaml").read_text() == "my: own\n"
