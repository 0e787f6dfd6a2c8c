"""One run across K processes on `torch.distributed` (docs/engine.md, "Several processes").

Every process (rank) holds the whole simulation: the server side, every client's state, the
kept messages and inboxes. Per phase of a round, every rank computes the same broadcast and
the same client-to-rank assignment (`assign`: balanced by client size, no coordinator), runs
the client steps of its own share, and all ranks exchange what those steps produced (the
upload, the client's state afterwards, its measurements: `RankGroup.gather`). Every rank then
routes, counts and aggregates the full list in the cohort's order, exactly as one process
does, so the result does not depend on which rank ran which client. The global random state
after the phase is the one the cohort's last client left (sent by its rank), as in one
process. Rank 0 alone evaluates, writes the run folder and checkpoints; it sends each
evaluated record to the others.

A phase whose aggregate is the weighted mean of the uploaded weights (`Phase.weights_mean`:
FedAvg and every strategy that keeps its aggregate) exchanges less: each rank runs a contiguous
block of the cohort (`blocks`), the uploads' weights stay where they were trained, and the
running mean passes from rank to rank in cohort order (`RankGroup.pass_along`), so the
additions are the ones one process makes, in its order; every rank still receives every
update without its weights (metrics, payload, the weights' size for the traffic count).

Objects cross between processes as `torch.save` bytes over a gloo group (also on GPUs, where
the run's default group is nccl): tensors come back on the receiving rank's device.
"""

import contextlib
import ctypes
import dataclasses
import io
import logging
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from fedshare.engine.signals import held_signals, signal_name
from fedshare.errors import FedshareError, RankFailure

T = TypeVar("T")

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def assign(sizes: Sequence[int], world: int) -> list[int]:
    """The rank of each of a phase's clients (given their sample counts, in cohort order):
    largest first onto the least-loaded rank (ties: the lower position, the lower rank), so
    every rank computes the same answer from the same sizes."""
    load = [0] * world
    owners = [0] * len(sizes)
    for position in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(world), key=lambda r: (load[r], r))
        owners[position] = rank
        load[rank] += max(int(sizes[position]), 1)
    return owners


def blocks(sizes: Sequence[int], world: int) -> list[int]:
    """The rank of each client as contiguous blocks of the cohort order, rank 0 first: the
    block boundaries fall where the running sample count comes closest to r/world of the
    total, so every rank computes the same answer from the same sizes."""
    loads = [max(int(s), 1) for s in sizes]
    total, done, owners = sum(loads), 0, []
    for load in loads:
        owners.append(min(world - 1, (2 * done + load) * world // (2 * total)))
        done += load
    return owners


def launched() -> bool:
    """Whether this process was started by torchrun / torch's elastic launcher with K > 1."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def local_device(name: str, local_rank: int) -> str:
    """The device of the process with `local_rank` on its machine: `cuda`/`auto` with GPUs
    become `cuda:<local_rank mod visible GPUs>` (several processes per GPU when there are more
    processes than GPUs); an explicit `cuda:N` or `cpu` is kept."""
    if name in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{local_rank % torch.cuda.device_count()}"
    return "cpu" if name == "auto" else name


def process_group_backend(device: str, local_processes: int) -> str:
    """nccl when each of this machine's processes has a GPU of its own, else gloo: NCCL refuses
    two ranks on one GPU, so several processes per GPU (more processes than GPUs) use gloo."""
    if device.startswith("cuda") and local_processes <= torch.cuda.device_count():
        return "nccl"
    return "gloo"


def detached(obj: Any) -> Any:
    """A copy of `obj` (an `Update`, a state dict, nested lists/tuples/dicts) whose tensors own
    compact storage: what a client step returned, safe from the next step reusing the worker's
    buffers, and serialised without the storage a view points into."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: detached(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, dict):
        return {key: detached(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(detached(value) for value in obj)
    return obj


def to_bytes(obj: Any) -> memoryview:
    """`obj` as `torch.save` bytes (a view of the buffer they were written to, not a copy)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getbuffer()


def from_bytes(data: Any, device: torch.device | str) -> Any:
    """The object `to_bytes` wrote, from any bytes-like `data`, tensors on `device`."""
    return torch.load(io.BytesIO(data), map_location=device, weights_only=False)


@dataclass
class Failed:
    """An exception one rank raised inside a collective step, sent to every rank."""

    error: BaseException


class RankGroup:
    """This process's place in the run: rank, world size and the collectives the engine uses.
    `bytes_sent` counts what this process sent to the others (each byte once per receiver)."""

    def __init__(self, rank: int, world: int, local_rank: int, group: Any = None) -> None:
        self.rank, self.world, self.local_rank = rank, world, local_rank
        self.group = group
        self.bytes_sent = 0

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    @classmethod
    def join(cls, device: str, timeout_s: float = 1800.0) -> "RankGroup":
        """Join the process group that torchrun / `workers=K` set up in the environment
        (`process_group_backend`), plus a gloo group for the engine's object exchange."""
        missing = [key for key in ENV_KEYS if key not in os.environ]
        if missing:
            raise FedshareError(
                f"WORLD_SIZE={os.environ.get('WORLD_SIZE')} but {', '.join(missing)} is not "
                f"set; start several processes with workers=K or torchrun, not by hand"
            )
        die_with_launcher()
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ["LOCAL_RANK"])
        backend = process_group_backend(device, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        if not dist.is_initialized():
            dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        objects = dist.new_group(backend="gloo") if backend != "gloo" else None
        return cls(rank, world, local_rank, objects)

    def settle(self) -> None:
        """Wait until every rank has finished its run (files written), so that all part
        together: a rank tearing down while another still works once aborted at exit."""
        with held_signals(), self._collective():
            dist.barrier(group=self.group)

    def close(self) -> None:
        """Leave the process groups, the engine's own first (a stop signal meanwhile is held
        back: the run's outcome is already written)."""
        with held_signals():
            if self.group is not None:
                dist.destroy_process_group(self.group)
            if dist.is_initialized():
                dist.destroy_process_group()

    # ------------------------------------------------------------------ collectives
    @contextlib.contextmanager
    def _collective(self) -> Iterator[None]:
        """A collective or point-to-point step; a lost process becomes `RankFailure`."""
        try:
            yield
        except (RuntimeError, dist.DistBackendError) as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
            raise RankFailure(
                f"a process of this run stopped or lost its connection ({reason}); rank "
                f"{self.rank} stops too"
            ) from None

    def _exchange(self, data: memoryview) -> list[memoryview | None]:
        """Every other rank's bytes, in rank order (None in this rank's place): sizes first,
        then the buffers, padded to the longest."""
        with self._collective():
            size = torch.tensor([len(data)], dtype=torch.int64)
            sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
            dist.all_gather(sizes, size, group=self.group)
            longest = int(max(s.item() for s in sizes))
            mine = torch.empty(longest, dtype=torch.uint8)
            if len(data):
                mine[: len(data)] = torch.frombuffer(data, dtype=torch.uint8)
            buffers = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world)]
            dist.all_gather(buffers, mine, group=self.group)
        self.bytes_sent += len(data) * (self.world - 1)
        return [
            None if rank == self.rank else b.numpy().data[: int(s.item())]
            for rank, (b, s) in enumerate(zip(buffers, sizes, strict=True))
        ]

    def gather(self, obj: Any, device: torch.device | str = "cpu") -> list[Any]:
        """Every rank's `obj`, in rank order, tensors on `device` (this rank's own `obj` as
        given, not a copy). A `Failed` from any rank is raised on every rank (the lowest
        rank's first)."""
        try:
            data = to_bytes(obj)
        except Exception as err:  # an exception that does not pickle still reaches every rank
            cause = obj.error if isinstance(obj, Failed) else err
            obj = Failed(RuntimeError(f"rank {self.rank}: {cause!r}"))
            data = to_bytes(obj)
        gathered = [
            obj if item is None else from_bytes(item, device) for item in self._exchange(data)
        ]
        for item in gathered:
            if isinstance(item, Failed):
                raise item.error
        return gathered

    def pass_along(self, step: Callable[[T | None], T], device: torch.device | str = "cpu") -> T:
        """`step` on every rank in rank order, each applied to the previous rank's result
        (None on rank 0); the last rank's result on every rank. Only for values every rank
        can compute without failing once the phase's exchange has passed (a running sum)."""
        value: Any = None
        if self.rank > 0:
            value = from_bytes(self._receive(self.rank - 1), device)
        value = step(value)
        last = self.world - 1
        data = to_bytes(value)
        payload = torch.frombuffer(data, dtype=torch.uint8)
        with self._collective():
            if self.rank < last:
                dist.send(torch.tensor([len(data)]), self.rank + 1, group=self.group)
                dist.send(payload, self.rank + 1, group=self.group)
                self.bytes_sent += len(data)
            size = torch.tensor([len(data) if self.rank == last else 0])
            dist.broadcast(size, last, group=self.group)
            buffer = payload if self.rank == last else torch.empty(int(size), dtype=torch.uint8)
            dist.broadcast(buffer, last, group=self.group)
            self.bytes_sent += len(data) * last if self.rank == last else 0
        return value if self.rank == last else from_bytes(buffer.numpy().data, device)

    def _receive(self, source: int) -> memoryview:
        """The bytes rank `source` sends this rank (`pass_along`)."""
        with self._collective():
            size = torch.zeros(1, dtype=torch.int64)
            dist.recv(size, source, group=self.group)
            buffer = torch.empty(int(size.item()), dtype=torch.uint8)
            dist.recv(buffer, source, group=self.group)
        return buffer.numpy().data

    def from_writer(self, make: Callable[[], T], device: torch.device | str = "cpu") -> T:
        """`make()` on rank 0, its value on every rank (its exception raised on every rank);
        `make` runs on rank 0 alone."""
        value: Any = None
        if self.is_writer:
            try:
                value = make()
            except Exception as err:  # sent to every rank, raised there and here
                value = Failed(err)
        return self.gather(value if self.is_writer else None, device)[0]

    def check_same(self, what: str, value: Any) -> None:
        """Refuse to run when the ranks disagree on `value` (a foreign or stale process)."""
        values = self.gather(pickle.dumps(value))
        for rank, other in enumerate(values):
            if other != values[0]:
                raise FedshareError(
                    f"process rank {rank} of this run has another {what} than rank 0; every "
                    f"process of a run must start with the same command line"
                )


def rng_snapshot(device: torch.device) -> dict[str, torch.Tensor]:
    """The global random state a client step leaves: the CPU generator and the device's."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


LAUNCHER_PID = "FEDSHARE_LAUNCHER_PID"
"""Set by `launch` for its ranks: the process each rank dies with (`die_with_launcher`)."""

INTERRUPTED = 130
"""The exit code of a run stopped by SIGINT or SIGTERM."""

PR_SET_PDEATHSIG = 1
"""Linux prctl(2) option: the signal a process gets when its parent dies."""


def die_with_launcher() -> None:
    """Under `launch` on Linux: the kernel SIGKILLs this rank the moment its launcher dies
    (`prctl(PR_SET_PDEATHSIG)`), so no rank writes the run folder after the launcher is
    killed; a rank whose launcher is already gone stops at once."""
    launcher = os.environ.get(LAUNCHER_PID)
    if launcher is None or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(launcher):
        os.kill(os.getpid(), signal.SIGKILL)


def ignore_further_stops() -> None:
    """A rank that is already stopping ignores later SIGINT/SIGTERM (the launcher repeats
    them to the ranks still running when one exits), so its files and its one message are
    not cut off; the launcher SIGKILLs a rank that does not end within 30 s."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def _rank_pids() -> list[int]:
    """The ranks this launcher started: its child processes that `launch` marked (Linux)."""
    me, mark = str(os.getpid()), f"{LAUNCHER_PID}={os.getpid()}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            if parent == me and mark in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def forwarded_stops() -> Iterator[list[int]]:
    """SIGINT and SIGTERM to the launcher are passed on to its ranks (which stop as a
    one-process run does: summary.json, one message, exit 130), torch's agent being told to
    leave them alone (`launch`); the list yielded records them."""
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        for pid in _rank_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, forward)
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def launch(argv: Sequence[str], workers: int) -> int:
    """Run `python -m fedshare.run <argv>` as `workers` processes on this machine through
    torch's elastic launcher (what `torchrun --standalone --nproc-per-node=K` does: a fresh
    rendezvous of its own, so no stale or foreign process can join). The ranks die with
    this process (`die_with_launcher`); SIGINT/SIGTERM reach them (`forwarded_stops`).
    Returns the exit code: 0 when every rank finished; 130 when a stop signal came (the
    ranks said what was kept); the workers' own when they all stopped the same way (a user
    error: 2); else 1 after one sentence naming the process that failed first."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    parser = get_args_parser()
    options = ["--standalone", f"--nproc-per-node={workers}"]
    if "--signals-to-handle" in parser.format_help():  # SIGINT, SIGTERM: `forwarded_stops`
        options.append("--signals-to-handle=SIGHUP,SIGQUIT")
    args = parser.parse_args([*options, "--module", "fedshare.run", *argv])
    os.environ[LAUNCHER_PID] = str(os.getpid())
    for name in list(logging.root.manager.loggerDict):  # one sentence of ours instead
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    with forwarded_stops() as received:
        try:
            run(args)
        except SignalException as err:  # SIGHUP or SIGQUIT: torch's agent stopped the ranks
            print(f"fedshare: interrupted ({signal_name(err.sigval)})", file=sys.stderr)
            return INTERRUPTED
        except ChildFailedError as err:
            codes = {failure.exitcode for failure in err.failures.values()}
            if received:
                if INTERRUPTED not in codes:  # no rank got as far as saying so
                    print(f"fedshare: interrupted ({signal_name(received[0])})", file=sys.stderr)
                return INTERRUPTED
            return _failure_code(err, workers)
    return 0


def _failure_code(err: Any, workers: int) -> int:
    """The exit code of a run whose ranks failed (`ChildFailedError`): theirs when they all
    stopped the same way (each said why), else 1 after one sentence naming the first."""
    codes = {failure.exitcode for failure in err.failures.values()}
    if len(codes) == 1 and codes.pop() > 0:
        return next(iter(err.failures.values())).exitcode
    rank, failure = err.get_first_failure()
    how = (
        f"was killed by {signal_name(-failure.exitcode)}"
        if failure.exitcode < 0
        else f"exited with code {failure.exitcode}"
    )
    print(
        f"fedshare: error: process rank {rank} of {workers} (pid {failure.pid}) {how}, so "
        f"the run stopped; its folder keeps the last checkpoint: continue with "
        f"run_dir=<that folder> resume=true",
        file=sys.stderr,
    )
    return 1
