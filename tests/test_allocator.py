"""`fedshare.runtime.steady_malloc`: glibc keeps the per-step activations instead of faulting
them back in at every step (docs/performance.md, "Allocator")."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's malloc thresholds are Linux-only"
)

ALLOCATOR = Path(__file__).resolve().parents[1] / "src/fedshare/runtime.py"
HEAP = """
import ctypes, runpy, sys
steady_malloc = runpy.run_path(sys.argv[2])["steady_malloc"]  # without torch: a clean heap
class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype, libc.malloc.restype = Info, ctypes.c_void_p
libc.malloc.argtypes, libc.free.argtypes = [ctypes.c_size_t], [ctypes.c_void_p]
applied = steady_malloc() if sys.argv[1] == "steady" else False
before = libc.mallinfo2()
block = libc.malloc(16 * 2**20)  # an activation-sized block (16 MiB)
mapped = libc.mallinfo2().hblks - before.hblks
libc.free(block)
print(applied, mapped, (libc.mallinfo2().arena - before.arena) // 2**20)
"""


def heap(mode: str, **env: str) -> tuple[bool, int, int]:
    """In a fresh process: (thresholds fixed?, blocks that a 16 MiB malloc mmapped, MiB of
    heap kept after freeing it)."""
    out = subprocess.run(
        [sys.executable, "-c", HEAP, mode, str(ALLOCATOR)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    ).stdout.split()
    return out[0] == "True", int(out[1]), int(out[2])


def test_steady_thresholds_keep_large_blocks_in_the_heap() -> None:
    """glibc's defaults mmap a 16 MiB block and unmap it when freed (the next step faults it
    back in); with the steady thresholds it comes from the heap and stays there."""
    assert heap("glibc") == (False, 1, 0)
    applied, mapped, kept_mib = heap("steady")
    assert applied and mapped == 0 and kept_mib >= 16


@pytest.mark.parametrize("env", [{"FEDSHARE_MALLOC": "default"}, {"MALLOC_TRIM_THRESHOLD_": "0"}])
def test_a_users_own_choice_is_kept(env: dict[str, str]) -> None:
    applied, mapped, _ = heap("steady", **env)
    assert not applied and mapped == 1
