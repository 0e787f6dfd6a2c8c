"""The built wheel carries the Hydra configs (the command line finds them from it), the type
marker and the one version."""

import email
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE_VERSION = re.search(
    r'^__version__ = "([^"]+)"$',
    (REPO / "src" / "fedshare" / "__init__.py").read_text(),
    re.MULTILINE,
)


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


def test_wheel_ships_py_typed(wheel):
    assert "fedshare/py.typed" in zipfile.ZipFile(wheel).namelist()


def test_the_version_is_written_once(wheel):
    """The wheel's version is `fedshare.__version__`, and pyproject.toml does not repeat it."""
    assert SOURCE_VERSION is not None
    assert "version" in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dynamic"]
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(name))
    assert metadata["Version"] == SOURCE_VERSION.group(1)
    assert wheel.name.startswith(f"fedshare-{SOURCE_VERSION.group(1)}-")


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
