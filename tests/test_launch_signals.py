"""`python -m fedshare.reproduce run` and its multirun end together: SIGTERM to the parent is
passed on (the parent exits 130, "interrupted"), and SIGKILL to the parent kills the child
through the kernel (`fedshare.reproduce.launch.run_child`); either way no cell goes on."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TINY = str(Path(__file__).parent / "data" / "reproduce" / "tiny.yaml")


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG and /proc are Linux's")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_multirun_dies_with_reproduce_run(tmp_path, signum):
    out = tmp_path / "tiny"
    command = [sys.executable, "-m", "fedshare.reproduce", "run", TINY, "--methods", "fedavg"]
    command += ["--out", str(out), "--set", "rounds=200"]
    parent = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "digits_quickstart" / "fedavg" / "seed0" / "metrics.jsonl"
    try:
        wait_until(
            lambda: metrics.parent.exists() or parent.poll() is not None, 300, "no run began"
        )
        assert parent.poll() is None, parent.communicate()
        (child,) = children(parent.pid)
        parent.send_signal(signum)
        parent.wait(timeout=120)
        wait_until(lambda: not alive(child), 10, "the multirun outlived reproduce run")
    finally:
        for pid in [parent.pid, *children(parent.pid)]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    if signum == signal.SIGTERM:
        assert parent.returncode == 130 and "interrupted" in parent.stderr.read()
    rounds = metrics.read_text().count("\n") if metrics.exists() else 0
    time.sleep(2)
    assert (metrics.read_text().count("\n") if metrics.exists() else 0) == rounds < 200
