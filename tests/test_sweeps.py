"""A sweep survives a bad member: the member is recorded as failed with the reason, every other
member finishes, and the exit code says that some failed."""

import json

import pytest

from fedshare.results.rundir import MARKER, RunDirectory
from fedshare.sweep import SOME_MEMBERS_FAILED, member_folders, record_failure
from test_cli import fedshare_run

SMALL = ["progress=false", "rounds=1", "clients.num=2"]
LAUNCHERS = {
    "basic": [],
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
}


@pytest.mark.parametrize("launcher", ["basic", pytest.param("joblib", marks=pytest.mark.slow)])
def test_a_member_that_fails_is_recorded_and_the_others_finish(tmp_path, launcher):
    """data.train_subset=5000 is more than digits has: found only when the data is loaded."""
    sweep = tmp_path / "sweep"
    proc = fedshare_run(
        "-m",
        *LAUNCHERS[launcher],
        f"hydra.sweep.dir={sweep}",
        "data.train_subset=100,5000,200",
        *SMALL,
        cwd=tmp_path,
    )
    assert proc.returncode == SOME_MEMBERS_FAILED, proc.stderr
    summaries = {
        p.parent.name.split("-", 1)[0]: json.loads(p.read_text())
        for p in sweep.glob("*/summary.json")
    }
    assert sorted(summaries) == ["0", "1", "2"]
    assert summaries["0"]["status"] == summaries["2"]["status"] == "completed"
    failed = summaries["1"]
    assert failed["status"] == "failed" and "train_subset=5000" in failed["error"]
    assert failed["strategy"] == "fedavg" and failed["data"] == "digits"
    assert "1 of 3 sweep members failed" in proc.stderr and "train_subset=5000" in proc.stderr


def test_a_sweep_with_a_bad_value_is_refused_before_any_member_starts(tmp_path):
    proc = fedshare_run(
        "-m",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "train.lr=0.05,-1,0.02",
        *SMALL,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "sweep member 1 (train.lr=-1" in proc.stderr and "no member was started" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "sweep").exists()


def test_sweep_members_are_found_at_any_depth_and_launcher_folders_are_not(tmp_path):
    """fedshare.reproduce's sweeps nest the members (<column>/<method>/seed<k>); a member
    that left nothing is a top-level folder without run files; `.submitit` is submitit's."""
    for name in ("a/fedavg/seed0", "a/fedprox/seed0"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / MARKER).write_text("")
    (tmp_path / "b" / "x").mkdir(parents=True)
    (tmp_path / ".submitit" / "123").mkdir(parents=True)
    assert member_folders(tmp_path) == [
        tmp_path / "a/fedavg/seed0",
        tmp_path / "a/fedprox/seed0",
        tmp_path / "b",
    ]


def test_a_recorded_failure_can_be_overwritten_by_a_rerun(tmp_path):
    """fedshare.reproduce's --retry-failed reruns a failed member's folder with
    overwrite=true: the summary that record_failure wrote is fedshare's own, so it goes."""
    folder = tmp_path / "member"
    record_failure(folder, {"seed": 0}, "dataset 'fmnist' has no parameter 'x'")
    assert json.loads((folder / "summary.json").read_text())["status"] == "failed"
    RunDirectory(folder).clear()
    assert not (folder / "summary.json").exists()


def test_a_sweep_composes_and_builds_each_member_once_more_than_a_run(tmp_path, monkeypatch):
    """Two members that differ in a typed key: the pre-launch check composes their groups once
    (cached) and builds each member's strategy; Hydra composes once for the sweeper, once per
    member to validate the batch and once in each member, which builds its strategy once
    (docs/configuration.md's table)."""
    from fedshare.config.compose import composed
    from test_cli import run_counted

    monkeypatch.chdir(tmp_path)
    composed.cache_clear()
    argv = ["-m", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}", *SMALL]
    argv += ["train.local_epochs=1"]
    counts = run_counted(monkeypatch, argv)
    assert counts == {"compositions": 1 + 1 + 2 + 2, "builds": 2 + 2, "objects": 2 + 2 * 2}
    assert len(member_folders(tmp_path / "sweep")) == 2
