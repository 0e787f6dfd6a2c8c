"""The built wheel carries the Hydra configs, and the command line finds them from it."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the wheel failed: {proc.stderr[-2000:]}")
    return next(out.glob("fedshare-*.whl"))


def test_wheel_contains_the_configs(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in ("config.yaml", "strategy/fedavg.yaml", "data/digits.yaml", "partition/iid.yaml"):
        assert f"fedshare/configs/{rel}" in names
    assert "hydra_plugins/fedshare_cells/__init__.py" in names  # `reproduce run`'s sweeper
    assert "fedshare/paper/jobs/xormixfl/table2.yaml" in names


def test_cli_runs_from_the_installed_wheel(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        timeout=600,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", "import fedshare.run as r; print(r.config_dir())"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(proc.stdout.strip()) == site / "fedshare" / "configs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedshare.run",
            "rounds=1",
            "clients.num=3",
            "progress=false",
            f"run_dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "summary.json").exists()
