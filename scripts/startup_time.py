"""Start-up of a command-line run: CPU and wall seconds from interpreter start to the first
round (docs/performance.md, "Start-up").

    python scripts/startup_time.py experiment=digits_quickstart rounds=1 progress=false

Runs `python -m fedshare.run <args>` in this process and prints, when the first round is
about to start, `time.process_time()` (CPU seconds of this process so far, imports included:
robust on a loaded machine) and the wall seconds since the interpreter started.
"""

import os
import runpy
import sys
import time
from pathlib import Path

START = time.time()


def uptime_of_process() -> float:
    """Wall seconds since this process started (from /proc, else since this script began)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = float(Path("/proc/uptime").read_text().split()[0])
        return boot - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time() - START


def main() -> None:
    from fedshare.engine import callbacks

    original = callbacks.ProgressBar.on_begin

    def on_begin(self, sim) -> None:  # type: ignore[no-untyped-def]
        print(
            f"start-up: cpu {time.process_time():.2f} s, wall {uptime_of_process():.2f} s",
            file=sys.stderr,
            flush=True,
        )
        original(self, sim)

    callbacks.ProgressBar.on_begin = on_begin  # type: ignore[method-assign]
    sys.argv = ["fedshare.run", *sys.argv[1:]]
    runpy.run_module("fedshare.run", run_name="__main__")


if __name__ == "__main__":
    main()
