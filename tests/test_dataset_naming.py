"""A dataset name means that dataset (issue 34 item 2): `data=cifar10` never becomes the
4,000 / 1,000-image sample, and the console line names the data source of the run."""

import subprocess
import sys

from conftest import data_root_or_skip


def fedshare_run(*args: str, cwd) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "fedshare.run", *args, "progress=false"]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600)


def test_cifar10_without_the_full_set_is_an_error_naming_the_sample(tmp_path):
    root = data_root_or_skip("cifar10_sample/train.npz")
    if (root / "cifar-10-batches-py").exists():
        root = tmp_path  # no full set here either: only the error's wording differs
    proc = fedshare_run("data=cifar10", f"data.root={root}", cwd=tmp_path)
    assert proc.returncode == 2
    message = proc.stderr.strip()
    assert message.startswith("fedshare: error: dataset 'cifar10' not found")
    assert "data=cifar10_sample" in message and "\n" not in message
    assert not (tmp_path / "runs").exists()


def test_the_console_line_names_the_data_source(tmp_path):
    data_root_or_skip("cifar10_sample/train.npz")
    proc = fedshare_run(
        "data=cifar10_sample",
        "data.train_subset=200",
        "data.test_subset=100",
        "model=lenet_cifar",
        "rounds=1",
        "clients.num=2",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("fedavg on cifar10_sample/iid (data: npz cifar10_sample (4000/1000)):")
