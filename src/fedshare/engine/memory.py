"""Resource use of the running process (peak memory, CPU time, age), for `summary.json` and
the run line."""

import os
import resource
import sys
from pathlib import Path

import torch


def peak_memory(device: torch.device) -> dict[str, float]:
    """Peak resident set size of this process in MB (the OS's high-water mark, so it covers
    everything the process did before the run too) and, on CUDA, the device's peak allocated
    memory in MB since the process started or the last `torch.cuda.reset_peak_memory_stats`."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_mb = kib / 2**20 if sys.platform == "darwin" else kib / 2**10  # macOS reports bytes
    peaks = {"peak_rss_mb": round(rss_mb, 1)}
    if device.type == "cuda":
        peaks["cuda_max_allocated_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return peaks


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and by its child processes
    that have ended and been waited for."""
    used = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return sum(u.ru_utime + u.ru_stime for u in used)


def command_seconds() -> float | None:
    """Seconds since the command started: this process, or under `workers=K` the launcher
    that started it (Linux /proc; None elsewhere). Beside the rounds' `wall_time_s` this
    counts the start-up (imports, data, setup) and the final files."""
    from fedshare.engine.distributed import LAUNCHER_PID

    pid = os.environ.get(LAUNCHER_PID, str(os.getpid()))
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
