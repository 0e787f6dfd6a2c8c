"""The machine and kernel set a run computed on, recorded in `summary.json`.

A run is reproducible bit for bit on one CPU model with one torch build: the same seed gives
the same numbers. Across CPUs it is not: torch, oneDNN and MKL choose their kernels by the
instruction set they find (AVX2, AVX-512, ...; MKL also by vendor), and kernels of different
sets sum in different orders, so float rounding differs and a run may end a few tenths of a
percent apart. Two summaries whose `machine` entries differ are not expected to agree exactly.
"""

import platform
import re
from pathlib import Path
from typing import Any

import torch


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo` on Linux, else what the platform reports)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_version(pattern: str) -> str | None:
    """The version `pattern` finds in torch's build description (`torch.__config__.show()`)."""
    found = re.search(pattern, torch.__config__.show())
    return found.group(1) if found else None


def machine(device: str = "cpu") -> dict[str, Any]:
    """The CPU, the instruction set torch's CPU kernels use, the torch, oneDNN and MKL builds,
    the intra-op thread count, and the GPU for a CUDA `device`."""
    found: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "onednn": build_version(r"MKL-DNN (v[\w.]+)")
        if torch.backends.mkldnn.is_available()
        else None,
        "mkl": build_version(r"Math Kernel Library Version ([\d.]+)")
        if torch.backends.mkl.is_available()
        else None,
        "threads": torch.get_num_threads(),
        "os": f"{platform.system()} {platform.release()}",
    }
    if device.startswith("cuda"):
        found["gpu"] = torch.cuda.get_device_name(torch.device(device))
        found["cuda"] = torch.version.cuda
    return found
