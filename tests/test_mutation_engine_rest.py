"""Fast exact tests of the engine's small modules, for mutation testing (docs/mutation.md,
`engine_rest`): a client's augmented batches, the run clock, the progress lines, the held stop
signals, resource use, the device and memory layout, the run result. No simulation runs."""

import io
import os
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from fedshare.config import TrainConfig
from fedshare.data.dataset import Augmentation, Dataset
from fedshare.engine import clock, device, memory, progress
from fedshare.engine.client import Client
from fedshare.engine.result import RunResult
from fedshare.engine.signals import held_signals, signal_name
from fedshare.errors import FedshareError


# ----------------------------------------------------------------- a client's augmented batches
def image_client() -> Client:
    x = torch.arange(8 * 16, dtype=torch.uint8).view(8, 1, 4, 4)
    y = torch.arange(8) % 2
    data = Dataset("img", x, y, x[:2], y[:2], 2, scale=1 / 255, augmentation=Augmentation(1, True))
    return Client(0, 1, torch.arange(8), data, nn.Linear(16, 2), TrainConfig(batch_size=4), 5)


def all_batches(client: Client, **kwargs) -> list[torch.Tensor]:
    return [x for x, _ in client.batches(epochs=1, **kwargs)]


def test_batches_augment_by_default_with_and_without_received_samples():
    client = image_client()
    extra = (torch.zeros(2, 1, 4, 4, dtype=torch.uint8) + 7, torch.tensor([0, 1]))
    for kwargs in ({}, {"extra": extra}):
        default = all_batches(client, **kwargs)
        augmented = all_batches(client, augment=True, **kwargs)
        plain = all_batches(client, augment=False, **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(default, augmented, strict=True))
        assert not all(torch.equal(a, b) for a, b in zip(default, plain, strict=True))


# ------------------------------------------------------------------------------- the run clock
class Ticks:
    """Stands in for perf_counter and cpu_seconds: returns the value it is set to."""

    def __init__(self) -> None:
        self.wall, self.cpu = 100.0, 10.0


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> Ticks:
    now = Ticks()
    monkeypatch.setattr(clock, "time", SimpleNamespace(perf_counter=lambda: now.wall))
    monkeypatch.setattr(clock, "cpu_seconds", lambda: now.cpu)
    return now


def test_the_clock_counts_from_its_start_on_top_of_a_resumed_runs_seconds(ticks: Ticks):
    run = clock.RunClock()
    ticks.wall, ticks.cpu = 103.0, 12.5
    assert run.elapsed() == 3.0 and run.cpu_time() == 2.5
    run.continue_from(40.0, 7.0)
    assert run.elapsed() == 43.0 and run.cpu_time() == 9.5
    run.start()
    ticks.wall, ticks.cpu = 104.0, 13.0
    assert run.elapsed() == 41.0 and run.cpu_time() == 7.5


def test_the_clock_stops_where_the_rounds_ended_and_knows_no_cpu_after_an_old_checkpoint(
    ticks: Ticks,
):
    run = clock.RunClock()
    ticks.wall, ticks.cpu = 105.0, 11.0
    run.stop()
    ticks.wall, ticks.cpu = 200.0, 50.0
    assert run.elapsed() == 5.0 and run.cpu_time() == 1.0
    run.start()
    run.continue_from(2.0, None)
    ticks.wall = 201.0
    assert run.elapsed() == 3.0 and run.cpu_time() is None
    run.stop()
    assert run.cpu_time() is None


# ---------------------------------------------------------------------------- the progress lines
@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> Ticks:
    now = Ticks()
    monkeypatch.setattr(progress, "time", SimpleNamespace(perf_counter=lambda: now.wall))
    return now


def log_progress(total: int = 12, initial: int = 0) -> tuple[progress.Progress, io.StringIO]:
    out = io.StringIO()
    return progress.Progress(total, initial, True, "fedavg", stream=out, terminal=False), out


def test_a_log_gets_one_line_per_round_with_accuracy_loss_bytes_and_seconds(wall: Ticks):
    line, out = log_progress()
    assert line.bar is None and line.lines
    wall.wall = 102.5
    line.update(1, {"accuracy": 41.256, "loss": 1.23456}, 2_500_000)
    wall.wall = 103.5
    line.update(2, None, 3_000_000)
    wall.wall = 106.0
    line.update(3, {"loss": 0.5}, 0)
    assert out.getvalue().splitlines() == [
        "fedavg round  1/12  acc  41.26%  loss 1.2346  sent 2.50 MB  2.5s/round",
        "fedavg round  2/12  acc      -  loss -  sent 3.00 MB  1.0s/round",
        "fedavg round  3/12  acc      -  loss 0.5000  sent 0.00 MB  2.5s/round",
    ]
    assert line.round == 3 and line.accuracy == 41.256


def test_a_stage_prints_a_heartbeat_only_after_heartbeat_seconds_without_a_line(wall: Ticks):
    line, out = log_progress(total=5, initial=2)
    wall.wall = 100.0 + progress.HEARTBEAT_S - 0.5
    line.stage("train: 1/4 clients")
    assert out.getvalue() == ""
    wall.wall = 100.0 + progress.HEARTBEAT_S
    line.stage("train: 2/4 clients")
    assert out.getvalue() == "fedavg round 3/5  train: 2/4 clients  (30s in the round)\n"
    wall.wall += progress.HEARTBEAT_S - 1
    line.stage("server: synthesis")
    assert out.getvalue().count("\n") == 1


def test_a_disabled_progress_is_silent(wall: Ticks):
    out = io.StringIO()
    quiet = progress.Progress(3, 0, False, "x", stream=out, terminal=False)
    wall.wall = 1e6
    quiet.stage("train")
    quiet.update(1, {"accuracy": 1.0}, 5)
    assert out.getvalue() == "" and not quiet.lines and quiet.bar is None


def test_the_bars_postfix_shows_the_accuracy_and_the_stage():
    line, _ = log_progress()
    assert line._postfix("train") == "train" and line._postfix(None) == ""
    line.accuracy = 12.345
    assert line._postfix("train") == "acc=12.35, train" and line._postfix(None) == "acc=12.35"
    assert progress.megabytes(1_234_567) == "1.23 MB"


# ---------------------------------------------------------------------------- held stop signals
def test_stop_signals_inside_the_block_are_recorded_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with held_signals() as received:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
    assert received == [signal.SIGTERM, signal.SIGINT]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert signal_name(15) == "SIGTERM"


def test_off_the_main_thread_nothing_is_held():
    seen: list[object] = []

    def block() -> None:
        with held_signals() as received:
            seen.append((received, signal.getsignal(signal.SIGTERM)))

    thread = threading.Thread(target=block)
    thread.start()
    thread.join()
    assert seen == [([], signal.getsignal(signal.SIGTERM))]


# ---------------------------------------------------------------------------- resource use
def usage(maxrss: int, user: float, system: float) -> SimpleNamespace:
    return SimpleNamespace(ru_maxrss=maxrss, ru_utime=user, ru_stime=system)


def test_peak_memory_is_the_high_water_mark_in_mb_and_cpu_seconds_add_self_and_children(
    monkeypatch: pytest.MonkeyPatch,
):
    uses = {memory.resource.RUSAGE_SELF: usage(3 * 2**10 + 512, 1.5, 0.25)}
    uses[memory.resource.RUSAGE_CHILDREN] = usage(0, 2.0, 0.125)
    monkeypatch.setattr(memory.resource, "getrusage", uses.__getitem__)
    monkeypatch.setattr(memory.sys, "platform", "linux")
    assert memory.peak_memory(torch.device("cpu")) == {"peak_rss_mb": 3.5}
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory.peak_memory(torch.device("cpu")) == {"peak_rss_mb": round(3584 / 2**20, 1)}
    assert memory.cpu_seconds() == 3.875


def test_command_seconds_is_uptime_less_the_launchers_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    stat = tmp_path / "stat"
    fields = ["S"] + [str(i) for i in range(1, 30)]
    fields[19] = "250"
    stat.write_text("42 (python (x)) " + " ".join(fields))
    (tmp_path / "uptime").write_text("10.5 3.0\n")
    files = {"/proc/42/stat": stat, "/proc/uptime": tmp_path / "uptime"}
    monkeypatch.setattr(memory, "Path", lambda name: files.get(name, tmp_path / "missing"))
    monkeypatch.setattr(memory.os, "sysconf", lambda name: 100)
    from fedshare.engine.distributed import LAUNCHER_PID

    monkeypatch.setenv(LAUNCHER_PID, "42")
    assert memory.command_seconds() == 8.0
    monkeypatch.setenv(LAUNCHER_PID, "43")
    assert memory.command_seconds() is None


# ---------------------------------------------------------------------------- device and layout
def test_channels_last_follows_the_memory_format_and_auto_looks_for_4d_weights():
    conv, linear = nn.Conv2d(1, 2, 3), nn.Linear(2, 2)
    assert device.uses_channels_last(conv, "auto") and not device.uses_channels_last(linear, "auto")
    assert device.uses_channels_last(linear, "channels_last")
    assert not device.uses_channels_last(conv, "contiguous")
    with pytest.raises(FedshareError, match="memory_format='nchw' is not a memory format; valid"):
        device.uses_channels_last(conv, "nchw")


def test_resolve_device_takes_cpu_auto_and_refuses_unknown_or_missing_devices(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.resolve_device("auto") == torch.device("cpu")
    assert device.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(FedshareError, match="unknown device 'gpu0'; valid: auto, cpu"):
        device.resolve_device("gpu0")
    with pytest.raises(FedshareError, match="device='cuda:1' was asked for but no CUDA"):
        device.resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device.resolve_device("auto") == torch.device("cuda")
    assert device.resolve_device("cuda:1") == torch.device("cuda:1")


# ---------------------------------------------------------------------------- the run result
def test_a_run_result_reads_its_history_and_summary():
    result = RunResult([{"accuracy": 10.0}, {"accuracy": 30.0}], {}, None)  # type: ignore[arg-type]
    result.summary.update(final_accuracy=30.0, best_accuracy=31.0)
    assert result.accuracies == [10.0, 30.0]
    assert result.final_accuracy == 30.0 and result.best_accuracy == 31.0
