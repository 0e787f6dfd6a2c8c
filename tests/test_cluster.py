"""Sweeps on a cluster: Hydra's submitit launcher, here with submitit's local executor (the
same code path as `hydra/launcher=submitit_slurm` without a Slurm queue; docs/engine.md).

Slow tier: the members are fresh processes that submitit starts and polls; on the shared 2-core
machine the two-member sweep took 2–4 minutes, most of it process start-up and polling."""

import json
import subprocess
import sys

import pytest

from fedshare.report import report


@pytest.mark.slow
def test_submitit_local_sweep_with_a_failing_member(tmp_path):
    """Member 1 diverges (lr 1e12): the sweep exits non-zero and says why, member 0 finishes,
    both run folders record their status, and `fedshare.report` over the sweep shows both."""
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedshare.run",
            "-m",
            "hydra/launcher=submitit_local",
            "hydra.launcher.timeout_min=20",
            f"hydra.sweep.dir={sweep}",
            "train.lr=0.05,1e12",
            "progress=false",
            "rounds=1",
            "clients.num=4",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode != 0
    assert "non-finite training loss" in proc.stderr
    statuses = {
        json.loads((folder / "summary.json").read_text())["status"]
        for folder in sweep.iterdir()
        if (folder / "summary.json").exists()
    }
    assert statuses == {"completed", "diverged"}
    out = report([str(sweep), "--out", str(tmp_path / "report")])
    rows = (out / "report.csv").read_text().splitlines()
    assert len(rows) == 3  # a header and one row per member
    by_lr = {row.split(",")[4]: row.split(",") for row in rows[1:]}
    assert float(by_lr["0.05"][7]) > 10  # final accuracy of the finished member
    assert by_lr["1000000000000.0"][7] == ""  # none for the diverged one
