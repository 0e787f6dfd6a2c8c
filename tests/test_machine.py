"""`summary.json` records the machine and kernel set a run computed on (results agree bit for
bit on one CPU model and torch build, not across CPUs): `fedshare.results.machine`."""

import json
import platform
from pathlib import Path

import pytest
import torch

from fedshare import simulate
from fedshare.results.machine import cpu_model, machine
from helpers import digits_federation


def test_machine_names_the_cpu_kernels_and_builds():
    found = machine()
    build = torch.__config__.show()
    assert found["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert found["torch"] == torch.__version__
    assert found["threads"] == torch.get_num_threads()
    for key, needle in (("onednn", "MKL-DNN "), ("mkl", "Math Kernel Library Version ")):
        if found[key] is not None:
            assert f"{needle}{found[key]}" in build, (key, found[key])
    assert "gpu" not in found


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/cpuinfo")
def test_cpu_model_is_the_model_name_of_proc_cpuinfo():
    names = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    if not names:
        pytest.skip("this kernel's /proc/cpuinfo names no model")
    assert cpu_model() == names[0]


def test_summary_records_the_machine(tmp_path):
    simulate(
        "fedavg", digits_federation(num_clients=2), "cnn_small", 1, progress=False, run_dir=tmp_path
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["machine"] == machine("cpu")
