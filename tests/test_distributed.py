"""One run across K processes (`fedshare.engine.distributed`): K = 2 gives the K = 1 result
(within float tolerance; on this CPU bit for bit where the client steps are serial), the same
K gives the same bits, per-client state travels with its client, traffic is the simulated
network's, and a killed rank leaves a resumable checkpoint.

The processes are forked from the test (gloo on a free local port), so they share the parent's
imported modules and loaded data and a two-process run costs about what its training costs.
"""

import io
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from queue import Empty

import pytest
import torch

from fedshare.config import CheckpointConfig, ClientsConfig, SimulationConfig
from fedshare.config.api import init_model
from fedshare.config.defaults import resolve_rounds, resolve_train
from fedshare.data import federate
from fedshare.engine.checkpoint import load_checkpoint
from fedshare.engine.distributed import (
    LAUNCHER_PID,
    RankGroup,
    assign,
    blocks,
    forwarded_stops,
)
from fedshare.engine.signals import held_signals
from fedshare.engine.simulation import Simulation
from fedshare.strategies import STRATEGIES, make_strategy
from test_every_strategy import HEAD_LR, ON_FEATURES, SHORT_BUDGET, dataset, quick_simulation

Build = Callable[[RankGroup | None], Simulation]
TRAFFIC = ("bytes_up", "bytes_down", "bytes_shared", "bytes_down_personal", "bytes_peer")


def without_timings(record: dict) -> dict:
    """A history record without its machine measurements (`wall_time_s`, FedAA's `time_*_s`)."""
    return {key: value for key, value in record.items() if not key.endswith("_s")}


def outcome(sim: Simulation, resume: bool = False) -> dict:
    """What a run computed: its history (without wall times), traffic, final global weights
    and client states."""
    result = sim.run(resume=resume)
    model = sim.strategy.global_model()
    return {
        "history": [without_timings(record) for record in result.history],
        "traffic": {k: result.summary[k] for k in TRAFFIC},
        "summary": result.summary,
        "weights": torch.cat([t.detach().float().flatten() for t in model.state_dict().values()]),
        "client_states": {cid: dict(state) for cid, state in sim.client_states.items()},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(build: Build, rank: int, world: int, port: int, queue, resume: bool) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    try:
        group = RankGroup.join("cpu", timeout_s=120)
        try:
            got = outcome(build(group), resume)
        finally:
            group.close()
    except BaseException as err:  # reported to the test, which fails with it
        got = {"error": f"{type(err).__name__}: {err}\n{traceback.format_exc()}"}
    buffer = io.BytesIO()
    torch.save((rank, got), buffer)
    queue.put(buffer.getvalue())


def run_ranks(
    build: Build, world: int = 2, timeout_s: float = 300, resume: bool = False
) -> list[dict]:
    """`build(group)` run (with `resume`: resumed) in `world` forked processes; each rank's
    outcome in rank order (a rank that died without one: `{"died": exit code}`)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_rank_main, args=(build, rank, world, port, queue, resume))
        for rank in range(world)
    ]
    for proc in procs:
        proc.start()
    results: dict[int, dict] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < world and time.monotonic() < deadline:
            try:
                data = queue.get(timeout=1)
            except Empty:
                if all(p.exitcode is not None for p in procs) and queue.empty():
                    break
                continue
            rank, got = torch.load(io.BytesIO(data), weights_only=False)
            results[rank] = got
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    return [results.get(rank, {"died": procs[rank].exitcode}) for rank in range(world)]


def named_run(name: str, rounds: int = 2, run_dir: Path | None = None) -> Build:
    """`name` on digits, Dir(0.3) over 6 clients of unequal size, 4 sampled a round (so that
    a client's state is made on one rank and used on another); heads on random-ReLU features
    for the methods that train heads. With `run_dir`, a checkpoint every round."""
    on_features = name in ON_FEATURES

    def build(group: RankGroup | None) -> Simulation:
        data = dataset("digits", features=on_features)
        strategy = make_strategy(name, SHORT_BUDGET.get(name))
        fed = federate(data, {"name": "dirichlet", "alpha": 0.3}, 6, 0)
        train = resolve_train(HEAD_LR if on_features else {}, strategy, data.name)
        config = SimulationConfig(
            rounds=resolve_rounds(None if strategy.one_shot else rounds, strategy),
            seed=0,
            device="cpu",
            progress=False,
            clients=ClientsConfig(num=6, per_round=None if strategy.one_shot else 4),
            train=train,
            checkpoint=CheckpointConfig(every=0 if run_dir is None else 1),
        )
        model = init_model("linear" if on_features else data.default_model, fed, 0)
        return Simulation(strategy, fed, model, config, run_dir, group=group)

    return build


def assert_same_run(one: dict, many: dict, exact: bool) -> None:
    assert many["traffic"] == one["traffic"]  # the simulated network's, whoever ran what
    assert [r["round"] for r in many["history"]] == [r["round"] for r in one["history"]]
    if exact:
        assert torch.equal(many["weights"], one["weights"])
        assert many["history"] == one["history"]
        return
    torch.testing.assert_close(many["weights"], one["weights"], rtol=1e-4, atol=1e-5)
    for a, b in zip(many["history"], one["history"], strict=True):
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1.0)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-4)


def test_blocks_are_contiguous_and_balanced_by_size():
    assert blocks([5] * 10, 2) == [0] * 5 + [1] * 5
    assert blocks([100, 10, 60, 50, 40, 10], 2) == [0, 0, 1, 1, 1, 1]  # loads 110 / 160
    assert blocks([10, 10, 10], 1) == [0, 0, 0]
    assert blocks([1, 1], 3) == [0, 2]  # fewer clients than ranks: a rank may run none
    owners = blocks([3, 1, 4, 1, 5, 9, 2, 6], 3)
    assert owners == sorted(owners) and set(owners) == {0, 1, 2}


def test_assignment_is_balanced_by_size_and_the_same_everywhere():
    sizes = [100, 10, 60, 50, 40, 10]
    owners = assign(sizes, 2)
    load = [sum(s for s, o in zip(sizes, owners, strict=True) if o == r) for r in range(2)]
    assert owners == [0, 1, 1, 1, 0, 1]  # largest first onto the least-loaded rank
    assert load == [140, 130]
    assert assign(sizes, 1) == [0] * 6
    assert sorted(assign([5] * 5, 3)) == [0, 0, 1, 1, 2]


@pytest.mark.parametrize("name", ["fedavg", "scaffold", "flea", "fedaa", "fedpft"])
def test_two_processes_give_the_one_process_result(name):
    """K = 2 equals K = 1: FedAvg; SCAFFOLD with per-client c_i moving between ranks; FLea,
    whose shared features every rank needs; FedAA's personal identifier messages; FedPFT
    one-shot. Serial client steps on one CPU thread make it exact here."""
    build = named_run(name)
    one = outcome(build(None))
    ranks = run_ranks(build)
    for got in ranks:
        assert "error" not in got, got.get("error")
    for got in ranks:  # every rank ends with the whole run's state
        assert_same_run(one, got, exact=True)
        assert got["client_states"].keys() == one["client_states"].keys()
        for cid, state in one["client_states"].items():
            for key, value in state.items():
                assert torch.equal(got["client_states"][cid][key], value), (cid, key)
    summary = ranks[0]["summary"]
    assert summary["workers"] == 2 and summary["interprocess_bytes"] > 0
    assert len(summary["peak_rss_mb_per_process"]) == 2
    assert len(summary["cpu_time_s_per_process"]) == 2
    assert all(cpu > 0 for cpu in summary["cpu_time_s_per_process"])
    if name == "fedavg":  # the running mean crosses (two models a round), not the 4 uploads
        assert summary["interprocess_bytes"] < 0.6 * summary["bytes_up"]


def test_same_process_count_gives_the_same_bits_batched_too():
    """Two K = 2 runs of SCAFFOLD agree bit for bit; FedAvg with `train.batched` (each rank
    vectorises its own share) equals K = 1 within float tolerance."""
    first, second = run_ranks(named_run("scaffold"))[0], run_ranks(named_run("scaffold"))[0]
    assert torch.equal(first["weights"], second["weights"])
    assert first["history"] == second["history"]

    def batched(group: RankGroup | None) -> Simulation:
        sim = named_run("fedavg")(group)
        sim.config.train.batched = 4
        return sim

    assert_same_run(outcome(batched(None)), run_ranks(batched)[0], exact=False)


def test_a_killed_rank_stops_the_run_with_a_resumable_checkpoint(tmp_path):
    """Rank 1 is killed after round 2 of 4: rank 0 stops with one sentence, its folder holds
    round 2's checkpoint (whole, no temporary file) and a summary saying "failed" with that
    sentence (rank 0 sees a lost process, not a signal of its own); the run
    resumes in one process to the uninterrupted run's numbers."""
    folder = tmp_path / "run"
    build = named_run("scaffold", rounds=4, run_dir=folder)

    def doomed(group: RankGroup | None) -> Simulation:
        def kill_rank_1(sim: Simulation, rounds: int, record: object) -> None:
            if rounds == 2 and group is not None and group.rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)

        sim = build(group)
        sim.callbacks.append(kill_rank_1)
        return sim

    ranks = run_ranks(doomed, timeout_s=120)
    assert ranks[0]["error"].startswith("RankFailure: a process of this run stopped")
    assert not list(folder.glob("*.tmp"))
    assert load_checkpoint(folder / "checkpoint.pt")["rounds_completed"] == 2
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "failed" and "a process of this run stopped" in summary["error"]

    uninterrupted = outcome(named_run("scaffold", rounds=4)(None))
    assert_same_run(uninterrupted, outcome(build(None), resume=True), exact=True)


def stop_after(build: Build, rounds: int) -> Build:
    """`build` with a callback that stops the run (on every rank) after `rounds` rounds."""

    def stopping(group: RankGroup | None) -> Simulation:
        sim = build(group)
        sim.callbacks.append(lambda sim, done, record: done == rounds)
        return sim

    return stopping


@pytest.mark.parametrize(
    "first, then", [(2, 2), *(pytest.param(*k, marks=pytest.mark.slow) for k in ((1, 2), (2, 1)))]
)
def test_a_run_stopped_under_k_processes_resumes_under_k_processes(tmp_path, first, then):
    """SCAFFOLD (client state kept in checkpoint segments) stopped after round 1 of 3 under
    `first` processes, resumed under `then`: every rank ends with the uninterrupted run's
    numbers and client states. (Rank 1 of a resume once failed: it has no run folder.)"""
    build = named_run("scaffold", rounds=3, run_dir=tmp_path / "run")
    if first == 1:
        stop_after(build, 1)(None).run()
    else:
        assert "error" not in run_ranks(stop_after(build, 1), first)[0]
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["rounds_completed"] == 1
    uninterrupted = outcome(named_run("scaffold", rounds=3)(None))
    ranks = run_ranks(build, then, resume=True)
    for got in ranks:
        assert "error" not in got, got.get("error")
        assert_same_run(uninterrupted, got, exact=True)
        for cid, state in uninterrupted["client_states"].items():
            for key, value in state.items():
                assert torch.equal(got["client_states"][cid][key], value), (cid, key)
    assert ranks[0]["summary"]["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STRATEGIES.names()))
def test_every_strategy_runs_under_two_processes(name):
    """Every registered strategy, the matrix's digits run (test_every_strategy), under K = 2:
    the K = 1 result within float tolerance."""
    data = dataset("digits", features=name in ON_FEATURES)
    one = outcome(quick_simulation(name, data))
    ranks = run_ranks(lambda group: quick_simulation(name, data, group=group))
    assert "error" not in ranks[0], ranks[0].get("error")
    assert_same_run(one, ranks[0], exact=False)


def _rank_pid(parent: int, rank: int) -> int | None:
    """The pid of the `fedshare.run` process with RANK=`rank` under `parent` (Linux /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == parent and f"RANK={rank}".encode() in env:
            return int(entry.name)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("resume_workers", [1, 2])
def test_cli_workers_killed_rank_says_which_and_resumes(tmp_path, resume_workers):
    """`workers=2` from the command line; rank 1 killed once a checkpoint exists: the command
    ends with one sentence naming the killed rank, and the folder resumes with workers=1 and
    with workers=2."""
    out = tmp_path / "run"
    args = ["progress=false", "clients.num=4", "train.local_epochs=1", f"run_dir={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "fedshare.run", *args]
    proc = subprocess.Popen(
        [*command, "rounds=12", "workers=2"], stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 300
    while not (out / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    victim = _rank_pid(proc.pid, 1)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert "process rank 1 of 2" in stderr and "was killed by SIGKILL" in stderr, stderr
    done = load_checkpoint(out / "checkpoint.pt")["rounds_completed"]
    assert 1 <= done < 12
    resumed = subprocess.run(
        [*command, "rounds=12", "resume=true", f"workers={resume_workers}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "summary.json").read_text())["rounds_completed"] == 12


def test_process_group_backend_is_nccl_only_with_a_gpu_per_process(monkeypatch) -> None:
    """NCCL refuses two ranks on one GPU: more processes than GPUs fall back to gloo."""
    from fedshare.engine.distributed import process_group_backend

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert process_group_backend("cuda:0", 2) == "nccl"
    assert process_group_backend("cuda:1", 4) == "gloo"
    assert process_group_backend("cpu", 1) == "gloo"


FEDMIX_RUN = [
    "strategy=fedmix",
    "data=digits",
    "partition=dir0.3",
    "clients.num=4",
    "rounds=3",
    "seed=2",
    "progress=false",
]
"""The run of the reliability report's resume failure (issue 47, section 1)."""


def fedshare_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedshare.run", *FEDMIX_RUN, *args]


def computed(folder: Path) -> list[dict]:
    """What a run folder says was computed: its metrics lines without their timings."""
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [without_timings(json.loads(line)) for line in lines]


@pytest.fixture(scope="module")
def fedmix_uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    folder = tmp_path_factory.mktemp("fedmix") / "run"
    subprocess.run(fedshare_cli("workers=2", f"run_dir={folder}"), check=True, timeout=600)
    return computed(folder)


def stopped_after_first_checkpoint(folder: Path, workers: int) -> subprocess.CompletedProcess:
    """The fedmix run under `workers` processes, SIGTERMed once its first checkpoint exists."""
    proc = subprocess.Popen(
        fedshare_cli(f"workers={workers}", f"run_dir={folder}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (folder / "checkpoint.pt").exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.parametrize("first, then", [(2, 2), (2, 1), (1, 2)])
def test_cli_sigterm_exits_130_in_one_line_and_resumes_exactly(
    tmp_path, fedmix_uninterrupted, first, then
):
    """SIGTERM to the command after its first checkpoint: exit 130, one line naming the
    signal and no traceback, summary.json "interrupted"; `resume=true` with the same or
    another process count gives the uninterrupted run's numbers."""
    folder = tmp_path / "run"
    stopped = stopped_after_first_checkpoint(folder, first)
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.strip().splitlines() == [
        f"fedshare: interrupted (SIGTERM); what was written stays in {folder}: continue with "
        f"run_dir={folder} resume=true"
    ]
    assert json.loads((folder / "summary.json").read_text())["status"] == "interrupted"
    resumed = subprocess.run(
        fedshare_cli(f"workers={then}", f"run_dir={folder}", "resume=true"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((folder / "summary.json").read_text())["status"] == "completed"
    assert computed(folder) == fedmix_uninterrupted


def _folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}


@pytest.mark.slow
def test_cli_sigkill_to_the_launcher_ends_its_ranks_at_once(tmp_path):
    """SIGKILL to the `workers=2` command: its ranks die with it (nothing writes the run
    folder afterwards), and the folder resumes."""
    folder = tmp_path / "run"
    proc = subprocess.Popen(
        fedshare_cli("workers=2", f"run_dir={folder}", "rounds=6"), stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while not (folder / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    ranks = [_rank_pid(proc.pid, rank) for rank in (0, 1)]
    assert None not in ranks
    proc.kill()
    proc.wait(timeout=30)
    time.sleep(0.5)
    for pid in ranks:
        state = Path(f"/proc/{pid}/stat")
        assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    before = _folder_state(folder)
    time.sleep(3)
    assert _folder_state(folder) == before
    resumed = subprocess.run(
        fedshare_cli("workers=2", f"run_dir={folder}", "rounds=6", "resume=true"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.slow
def test_cli_sigterm_in_the_last_round_exit_status_agrees_with_the_summary(tmp_path):
    """SIGTERM while the last round runs or its files are written: exit 0 with summary.json
    "completed", or exit 130 with "interrupted", never one with the other."""
    folder = tmp_path / "run"
    proc = subprocess.Popen(
        fedshare_cli("workers=2", f"run_dir={folder}"), stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        metrics = folder / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    status = json.loads((folder / "summary.json").read_text())["status"]
    assert (proc.returncode, status) in ((0, "completed"), (130, "interrupted")), err
    assert "Traceback" not in err


def test_a_held_stop_signal_waits_and_the_handlers_come_back():
    """Inside `held_signals` a SIGTERM is recorded, not acted on; afterwards the previous
    handler is back."""
    before = signal.getsignal(signal.SIGTERM)
    with held_signals() as received:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    assert received == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is before


TRAP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (print('got', a[0], flush=True), sys.exit(0)))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_the_launcher_passes_a_stop_signal_on_to_its_ranks(monkeypatch):
    """SIGTERM to the launcher (this process, inside `forwarded_stops`) reaches the child it
    marked as a rank; the launcher itself is not stopped."""
    env = {**os.environ, LAUNCHER_PID: str(os.getpid())}
    child = subprocess.Popen(
        [sys.executable, "-c", TRAP], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        with forwarded_stops() as received:
            os.kill(os.getpid(), signal.SIGTERM)
            out, _ = child.communicate(timeout=30)
        assert received == [signal.SIGTERM]
        assert out.strip() == f"got {int(signal.SIGTERM)}"
    finally:
        child.kill()


LAUNCHER = (
    "import os, subprocess, sys, time\n"
    f"os.environ[{LAUNCHER_PID!r}] = str(os.getpid())\n"
    "rank = ('from fedshare.engine.distributed import die_with_launcher\\n'\n"
    "        'die_with_launcher(); import time; print(\"ready\", flush=True); time.sleep(60)')\n"
    "child = subprocess.Popen([sys.executable, '-c', rank])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_rank_dies_the_moment_its_launcher_is_killed():
    """SIGKILL to a launcher: the rank it started (which called `die_with_launcher`) is
    gone within a second, not left running on."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True)
    try:
        rank = int(launcher.stdout.readline())
        assert launcher.stdout.readline().strip() == "ready"
        launcher.kill()
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 1
        while _alive(rank) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(rank)
    finally:
        launcher.kill()
