"""Run issue 47's bad-value probes through the command line and count the clean refusals.

A probe is clean when the command exits 2 within the time limit with one line on stderr that
starts "fedshare: error:" (and names what the probe expects), no traceback and no run. Usage:

    python scripts/probe_bad_values.py [--timeout 60] [--memory-gb 4] [--src SRC] [--only NAME ...]

Each probe is a subprocess under a memory limit, so an OOM probe fails alone. The read-only
probe needs a read-only mount and is skipped where none can be made (not root).
"""

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BASE = ["strategy=fedavg", "data=digits", "partition=iid", "clients.num=2", "rounds=1"]


@dataclass
class Probe:
    name: str
    args: list[str]
    expect: str
    """A text the one sentence must contain (the bad value, or the advice)."""
    run_dir: bool = True
    """Give the probe a fresh run_dir under the scratch folder."""


def probes(scratch: Path, read_only: Path | None) -> list[Probe]:
    plain_file = scratch / "a_file"
    plain_file.write_text("not a folder\n")
    foreign = scratch / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine\n")
    (scratch / "cwd").mkdir()
    (scratch / "cwd" / "notes.txt").write_text("mine\n")
    found = [
        Probe("train.amp=3", ["train.amp=3"], "train.amp=3"),
        Probe("eval.personal=2", ["eval.personal=2"], "eval.personal=2"),
        Probe("overwrite=5", ["overwrite=5"], "overwrite=5"),
        Probe("train.batch_size=null", ["train.batch_size=null"], "train.batch_size"),
        Probe("train.optimizer=null", ["train.optimizer=null"], "train.optimizer"),
        Probe("train.lr_schedule=null", ["train.lr_schedule=null"], "train.lr_schedule"),
        Probe("train.lr=1e300", ["train.lr=1e300"], "train.lr=1e+300"),
        Probe("train.weight_decay=1e300", ["train.weight_decay=1e300"], "train.weight_decay"),
        Probe("train.lr_floor=1e300", ["train.lr_floor=1e300"], "train.lr_floor"),
        Probe("logger=1", ["logger=1"], "logger=1"),
        Probe("run_dir under a file", [f"run_dir={plain_file}/run"], str(plain_file), False),
        Probe("run_dir under /proc", ["run_dir=/proc/fedshare_probe/run"], "/proc", False),
        Probe("model.channels=abc", ["model=cnn_small", "model.channels=abc"], "channels"),
        Probe("model.hidden=[nan]", ["model=mlp", "model.hidden=[nan]"], "hidden"),
        Probe("model.width=nan", ["model=lenet_fmnist", "model.width=nan"], "width"),
        Probe(
            "data.features_options={bogus:1}",
            ["data=synthetic", "data.features=random_relu", "data.features_options={bogus:1}"],
            "bogus",
        ),
        Probe("workers=10**9", ["workers=1000000000"], "workers=1000000000"),
        Probe("train.compile=5", ["train.compile=5"], "train.compile=5"),
        Probe("clients.num=10**12", ["clients.num=1000000000000"], "clients.num"),
        Probe(
            "overwrite=true into a non-run folder",
            ["overwrite=true", f"run_dir={foreign}"],
            "overwrite=true",
            run_dir=False,
        ),
        Probe("overwrite=true run_dir=.", ["overwrite=true", "run_dir=."], "overwrite=true", False),
        Probe("partition.alpha=nan", ["partition=dir0.5", "partition.alpha=nan"], "alpha"),
        Probe("partition.alpha=inf", ["partition=dir0.5", "partition.alpha=inf"], "alpha"),
        Probe("data.test_fraction=nan", ["+data.test_fraction=nan"], "test_fraction=nan"),
        Probe(
            "data.centre_scale=inf",
            ["data=synthetic_mixture", "model=mlp", "data.centre_scale=inf"],
            "centre_scale",
        ),
        Probe("data.mean=[nan]", ["data.mean=[nan]", "data.std=[1.0]"], "data.mean"),
        Probe("lr=0.1 suggests train.lr", ["lr=0.1"], "train.lr"),
        Probe("train.mu under fedprox", ["strategy=fedprox", "train.mu=0.1"], "strategy.mu"),
    ]
    if read_only is not None:
        found.append(
            Probe(
                "run_dir on a read-only mount", [f"run_dir={read_only}/run"], str(read_only), False
            )
        )
    return found


def limit_memory(gigabytes: float) -> None:
    size = int(gigabytes * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (size, size))


def run_probe(
    probe: Probe, scratch: Path, timeout: float, memory_gb: float, src: Path
) -> tuple[str, str]:
    """(verdict, first stderr line): clean, silent (exit 0), traceback, hang, or other."""
    args = [*BASE, "progress=false", *probe.args]
    if probe.run_dir:
        args.append(f"run_dir={scratch / 'runs' / re.sub(r'[^A-Za-z0-9_.]', '_', probe.name)}")
    cwd = scratch / "cwd"
    env = {**os.environ, "PYTHONPATH": str(src)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fedshare.run", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=lambda: limit_memory(memory_gb),
        )
    except subprocess.TimeoutExpired:
        return "hang", f"no answer in {timeout:.0f} s"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    first = lines[-1] if lines else ""
    if "Traceback" in done.stderr or "MemoryError" in done.stderr:
        return "traceback", first
    if done.returncode == 0:
        return "silent", done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    clean = (
        done.returncode == 2
        and len(lines) == 1
        and first.startswith("fedshare: error:")
        and probe.expect in first
    )
    return ("clean" if clean else f"exit {done.returncode}"), first


def read_only_mount(scratch: Path) -> Path | None:
    folder = scratch / "read_only"
    folder.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)])
    return folder if made.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--memory-gb", type=float, default=4)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "src",
        help="the fedshare sources to probe (default: this checkout's)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        read_only = read_only_mount(scratch)
        try:
            chosen = [p for p in probes(scratch, read_only) if not args.only or p.name in args.only]
            clean = 0
            for probe in chosen:
                start = time.monotonic()
                verdict, line = run_probe(probe, scratch, args.timeout, args.memory_gb, args.src)
                clean += verdict == "clean"
                took = time.monotonic() - start
                print(f"{verdict:9s} {took:5.1f}s  {probe.name}: {line[:160]}", flush=True)
            print(f"{clean} of {len(chosen)} probes refused cleanly (exit 2, one sentence)")
        finally:
            if read_only is not None:
                subprocess.run(["umount", str(read_only)])


if __name__ == "__main__":
    main()
