"""Fast exact tests of the engine's small modules, for mutation testing (docs/mutation.md,
`engine_rest`): a client's augmented batches, the run clock, the progress lines, the held stop
signals, resource use, the device and memory layout, the run result. No simulation runs."""

import io
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch
from torch import nn

from fedshare.config import ClientsConfig, SimulationConfig, TrainConfig
from fedshare.data.dataset import Augmentation, Dataset
from fedshare.engine import clock, device, memory, progress, setup
from fedshare.engine.accounting import Traffic
from fedshare.engine.architectures import (
    _labels,
    assign_architectures,
    build_client_models,
    client_architectures,
    model_entries,
    refuse_strategy,
    takes_client_models,
)
from fedshare.engine.checkpoint import rng_state
from fedshare.engine.client import Client
from fedshare.engine.result import RunResult
from fedshare.engine.rng import derive_seed
from fedshare.engine.run_folder import RunFolder
from fedshare.engine.signals import held_signals, signal_name
from fedshare.errors import FedshareError
from fedshare.models.base import build_model, feature_width
from fedshare.strategies.base import SetupContext, Strategy


# ----------------------------------------------------------------- a client's augmented batches
def image_client() -> Client:
    x = torch.arange(8 * 16, dtype=torch.uint8).view(8, 1, 4, 4)
    y = torch.arange(8) % 2
    data = Dataset("img", x, y, x[:2], y[:2], 2, scale=1 / 255, augmentation=Augmentation(1, True))
    return Client(
        0, 1, torch.arange(8), data, nn.Linear(16, 2), TrainConfig(batch_size=4, local_epochs=2), 5
    )


def all_batches(client: Client, **kwargs) -> list[torch.Tensor]:
    return [x for x, _ in client.batches(**kwargs)]


def test_batches_augment_by_default_with_and_without_received_samples():
    client = image_client()
    extra = (torch.zeros(2, 1, 4, 4, dtype=torch.uint8) + 7, torch.tensor([0, 1]))
    assert len(all_batches(client, epochs=1)) == 2 and len(all_batches(client, batch_size=8)) == 2
    for kwargs in ({}, {"extra": extra}):
        default = all_batches(client, **kwargs)
        augmented = all_batches(client, augment=True, **kwargs)
        plain = all_batches(client, augment=False, **kwargs)
        assert len(default) == (6 if kwargs else 4)  # local_epochs passes, the last one short
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


def test_a_terminal_gets_a_bar_whose_postfix_follows_the_accuracy_and_the_stage(
    monkeypatch: pytest.MonkeyPatch,
):
    out = io.StringIO()
    bar = progress.Progress(5, 2, True, "fedavg", stream=out, terminal=True)
    assert bar.bar is not None and not bar.lines and bar.bar.n == 2
    bar.update(3, {"accuracy": 50.0}, 10)
    assert bar.bar.n == 3 and bar.bar.postfix == "acc=50.00" and bar.round == 3
    bar.stage("train: 1/4 clients")
    assert bar.bar.postfix == "acc=50.00, train: 1/4 clients"
    bar.close()
    assert out.getvalue() == ""
    monkeypatch.setattr(progress.sys, "stderr", io.StringIO())  # no terminal
    assert progress.Progress(5, 0, True, "x", stream=out).lines


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
    assert progress.megabytes(10**12) == "1000000.00 MB"


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
    uses = {memory.resource.RUSAGE_SELF: usage(3 * 2**10 + 60, 1.5, 0.25)}
    uses[memory.resource.RUSAGE_CHILDREN] = usage(0, 2.0, 0.125)
    monkeypatch.setattr(memory.resource, "getrusage", uses.__getitem__)
    monkeypatch.setattr(memory.sys, "platform", "linux")
    assert memory.peak_memory(torch.device("cpu")) == {"peak_rss_mb": 3.1}
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 5 * 2**20 + 2**17)
    assert memory.peak_memory(torch.device("cuda")) == {
        "peak_rss_mb": 3.1,
        "cuda_max_allocated_mb": 5.1,
    }
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory.peak_memory(torch.device("cpu")) == {"peak_rss_mb": 0.0}
    uses[memory.resource.RUSAGE_SELF] = usage(3 * 2**20 + 2**17, 1.5, 0.25)
    assert memory.peak_memory(torch.device("cpu")) == {"peak_rss_mb": 3.1}
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


# ---------------------------------------------------------------------------- architectures
IMAGES = Dataset(
    "img8",
    torch.zeros(4, 1, 8, 8),
    torch.arange(4) % 3,
    torch.zeros(1, 1, 8, 8),
    torch.zeros(1, dtype=torch.long),
    3,
)
CNN4 = {"name": "cnn4", "channels": (2, 2), "padding": 2}
SMALL = {"name": "cnn_small", "channels": (2, 2), "hidden": 6}


def run_model() -> nn.Module:
    return build_model("mlp", IMAGES.input_shape, 3, {"hidden": (6,)})


def test_entries_are_names_or_named_mappings_and_a_bad_one_is_named_with_the_choices():
    assert model_entries(["mlp", {"name": "cnn4", "padding": 2}]) == [
        ("mlp", {}),
        ("cnn4", {"padding": 2}),
    ]
    for bad in ["", {"padding": 2}, 3]:
        with pytest.raises(FedshareError, match=r"clients.models\[1\]=.* is not valid.*mlp"):
            model_entries(["mlp", bad])
    assert _labels(["cnn4", "mlp", "cnn4"]) == ("cnn4#0", "mlp", "cnn4#2")


def test_clients_get_cyclic_block_random_or_listed_positions():
    labels = ("a", "b", "c")
    assert assign_architectures("cyclic", labels, 7, 0) == (0, 1, 2, 0, 1, 2, 0)
    assert assign_architectures("blocks", labels, 7, 0) == (0, 0, 0, 1, 1, 2, 2)
    order = torch.randperm(
        7, generator=torch.Generator().manual_seed(derive_seed(4, "client_model_of"))
    )
    want = tuple(int(i) for i in (torch.arange(7) % 3)[order])
    assert assign_architectures("random", labels, 7, 4) == want != (0, 1, 2, 0, 1, 2, 0)
    assert assign_architectures([2, "a", 1, "c"], labels, 4, 0) == (2, 0, 1, 2)


@pytest.mark.parametrize(
    ("model_of", "message"),
    [
        ("round", r"clients.model_of='round' is not valid: choose cyclic, blocks, random"),
        (3, r"clients.model_of=3 is not valid"),
        ([0, 1], r"clients.model_of has 2 entries for 3 clients"),
        ([0, 3, 1], r"clients.model_of\[1\]=3 is not valid: give a position 0-2 .*\(a, b, c\)"),
        ([0, -1, 1], r"clients.model_of\[1\]=-1 is not valid"),
        ([0, True, 1], r"clients.model_of\[1\]=True is not valid"),
        ([0, 1, "d"], r"clients.model_of\[2\]='d' is not valid"),
    ],
)
def test_a_bad_assignment_is_refused_naming_the_value_and_the_choices(model_of, message):
    with pytest.raises(FedshareError, match=message):
        assign_architectures(model_of, ("a", "b", "c"), 3, 0)


def test_client_models_are_built_seeded_per_position_at_the_runs_width_leaving_the_stream():
    shared, third = run_model(), {"name": "cnn4", "padding": 2}
    before = torch.random.get_rng_state()
    built = build_client_models([CNN4, SMALL, third], shared, IMAGES, 9, 5, "blocks")
    assert torch.equal(torch.random.get_rng_state(), before)
    assert built is not None and built.names == ("cnn4#0", "cnn_small", "cnn4#2")
    assert built.assignment == (0, 0, 1, 1, 2) and built.index(3) == 1
    assert built.name_of(4) == "cnn4#2"
    for i, (model, options) in enumerate(zip(built.models, [CNN4, SMALL], strict=False)):
        torch.manual_seed(derive_seed(9, "client_model_init", i))
        width = {"feature_dim": 6} if options["name"] == "cnn4" else {}
        kwargs = {k: v for k, v in options.items() if k != "name"} | width
        want = build_model(options["name"], IMAGES.input_shape, 3, kwargs)
        for got, expected in zip(model.parameters(), want.parameters(), strict=True):
            assert torch.equal(got, expected)
    assert feature_width(built.models[2], IMAGES.input_shape) == 6


def test_no_client_models_is_none_and_a_bad_build_or_width_is_refused():
    assert build_client_models([], run_model(), IMAGES, 0, 3) is None
    with pytest.raises(FedshareError, match=r"clients.model_of=.blocks. needs clients.models"):
        build_client_models([], run_model(), IMAGES, 0, 3, "blocks")
    with pytest.raises(FedshareError, match=r"clients.models\[1\]: model 'cnn4' expects"):
        build_client_models([CNN4, "cnn4"], run_model(), IMAGES, 0, 3)
    with pytest.raises(FedshareError, match="'cnn4' has 5-d penultimate features"):
        build_client_models([{**CNN4, "feature_dim": 5}], run_model(), IMAGES, 0, 3)


class Shares:
    name = "shares"


class Keeps:
    name = "keeps"
    takes_client_models = True


def test_a_strategy_that_shares_whole_models_is_refused_naming_those_that_can():
    assert takes_client_models(Keeps) and not takes_client_models(Shares)
    refuse_strategy(Keeps())  # type: ignore[arg-type]
    with pytest.raises(FedshareError, match=r"strategy shares cannot take .*fedgen"):
        refuse_strategy(Shares())  # type: ignore[arg-type]


def test_each_architecture_gets_a_worker_copy_and_the_run_model_stays_the_default(
    monkeypatch: pytest.MonkeyPatch,
):
    compiled: list[nn.Module] = []
    monkeypatch.setattr(nn.Module, "compile", lambda self: compiled.append(self))
    config = SimulationConfig(
        clients=ClientsConfig(num=4, per_round=2, models=[CNN4, SMALL]),
        memory_format="channels_last",
        train=TrainConfig(compile=True),
    )
    runs = client_architectures(Keeps(), config, run_model(), IMAGES, 4)  # type: ignore[arg-type]
    assert runs.models is not None and len(runs.workers) == 2
    for model, worker in zip(runs.models.models, runs.workers, strict=True):
        assert worker is not model
        for got, built in zip(worker.parameters(), model.parameters(), strict=True):
            assert torch.equal(got, built)
    conv = [p for p in runs.models.models[0].parameters() if p.dim() == 4][-1]
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert compiled == list(runs.workers)
    default = nn.Linear(1, 1)
    assert (
        runs.worker_of(3, default) is runs.workers[1]
        and runs.worker_of(2, default) is runs.workers[0]
    )
    plain = client_architectures(Shares(), SimulationConfig(), run_model(), IMAGES, 4)  # type: ignore[arg-type]
    assert plain.models is None and plain.workers == () and plain.worker_of(1, default) is default
    with pytest.raises(FedshareError, match="strategy shares cannot take"):
        client_architectures(Shares(), config, run_model(), IMAGES, 4)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- set-up before round 0
@dataclass
class Recorded(Strategy):
    name: ClassVar[str] = "recorded"

    def setup(self, ctx: SetupContext) -> None:
        self.ctx = ctx


def test_set_up_gives_the_server_the_run_and_checks_a_context_attack_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
):
    checks: list[tuple] = []
    monkeypatch.setattr(setup, "check_run_attack", lambda *args: checks.append(args))
    sim = SimpleNamespace(
        strategy=Recorded(),
        config=SimulationConfig(seed=6),
        data=SimpleNamespace(dataset=IMAGES, num_clients=4),
        model=run_model(),
        worker=run_model(),
        device=torch.device("cpu"),
        stage=print,
        architectures=SimpleNamespace(models=None),
    )
    replica = setup.set_up(sim)  # type: ignore[arg-type]
    ctx = sim.strategy.ctx
    assert (ctx.model, ctx.data, ctx.config, ctx.on_stage) == (
        sim.model,
        sim.data,
        sim.config,
        print,
    )
    assert checks == [] and replica is not sim.strategy and isinstance(replica, Recorded)
    sim.config.eval.context_attack = [8]
    setup.set_up(sim)  # type: ignore[arg-type]
    assert checks == [(sim.strategy.context_view(), "recorded", (1, 8, 8), [8])]


# ------------------------------------------------------------------ the run folder's restore
class Calls:
    """Records every method called on it, with its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, args))


def folderless_run() -> SimpleNamespace:
    parts = ("strategy", "client_states", "kept", "inboxes", "clock")
    return SimpleNamespace(dir=None, device=torch.device("cpu"), **{p: Calls() for p in parts})


def checkpoint_state(**changes) -> dict:
    torch.manual_seed(3)
    state = {
        "strategy": {"w": 1},
        "history": [{"round": 1, "accuracy": 5.0}],
        "rounds_completed": 2,
        "traffic": {"bytes_up": 7, "bytes_peer": 3},
        "client_states": {"c": 1},
        "kept_messages": {"k": 2},
        "inboxes": {"i": 3},
        "wall_time_s": 5,
        "cpu_time_s": 2,
        "rng": rng_state(),
    }
    return {**state, **changes}


def test_begin_restores_the_run_from_an_inline_checkpoint():
    sim = folderless_run()
    folder = RunFolder(sim)  # type: ignore[arg-type]
    state = checkpoint_state()
    torch.manual_seed(0)
    folder.begin(state)
    assert torch.equal(torch.get_rng_state(), state["rng"]["torch"])
    assert sim.history == state["history"] and sim.history is not state["history"]
    assert sim.rounds_completed == sim.rounds_recorded == folder.checkpoint_round == 2
    assert sim.traffic == Traffic(bytes_up=7, bytes_peer=3)
    assert sim.strategy.calls == [("load_state_dict", ({"w": 1},))]
    assert sim.client_states.calls == [("load_state_dict", ({"c": 1},)), ("mark_all_changed", ())]
    assert sim.kept.calls == [("load_state_dict", ({"k": 2}, sim.device))]
    assert sim.inboxes.calls == [("load_state_dict", ({"i": 3}, sim.device))]
    assert sim.clock.calls == [("continue_from", (5.0, 2.0))]


def test_begin_marks_inline_states_changed_only_where_no_segment_holds_them():
    sim = folderless_run()
    folder = RunFolder(sim)  # type: ignore[arg-type]
    old = {k: v for k, v in checkpoint_state().items() if k not in ("cpu_time_s", "inboxes")}
    folder.state_log = SimpleNamespace(segments=[1])  # type: ignore[assignment]
    folder.begin(old)
    assert sim.client_states.calls == [("load_state_dict", ({"c": 1},))]
    assert sim.inboxes.calls == [("load_state_dict", ({}, sim.device))]
    assert sim.clock.calls == [("continue_from", (5.0, None))]
    sim = folderless_run()
    folder = RunFolder(sim)  # type: ignore[arg-type]
    folder.state_log = SimpleNamespace(segments=[], load=lambda segments: {"read": segments})  # type: ignore[assignment]
    folder.begin(checkpoint_state(client_state_segments=[4]))
    assert sim.client_states.calls == [("load_state_dict", ({"read": [4]},))]


def test_a_new_run_without_a_folder_restores_nothing_and_a_cut_back_does_nothing():
    sim = folderless_run()
    folder = RunFolder(sim)  # type: ignore[arg-type]
    folder.begin(None)
    folder.cut_back(3)
    assert not hasattr(sim, "history") and folder.checkpoint_round == 0
    assert all(getattr(sim, p).calls == [] for p in ("strategy", "client_states", "clock"))
    assert folder._states_inline(None) is None
    inline = {"rounds_completed": 1, "client_states": {}}
    assert folder._states_inline(inline) is inline


def test_states_inline_reads_a_checkpoints_segments_into_it():
    folder = RunFolder(folderless_run())  # type: ignore[arg-type]
    folder.state_log = SimpleNamespace(load=lambda segments: {"read": segments})  # type: ignore[assignment]
    state = {"rounds_completed": 1, "client_state_segments": [4, 5]}
    assert folder._states_inline(state) == {
        "rounds_completed": 1,
        "client_states": {"read": [4, 5]},
    }
    assert state == {"rounds_completed": 1, "client_state_segments": [4, 5]}


def test_cut_back_cuts_the_folders_metrics_after_the_round_and_skips_a_missing_file(
    tmp_path: Path,
):
    metrics = tmp_path / "metrics.jsonl"
    sim = SimpleNamespace(dir=SimpleNamespace(path=tmp_path, metrics_path=metrics))
    folder = RunFolder(sim)  # type: ignore[arg-type]
    folder.cut_back(2)
    assert not metrics.exists()
    metrics.write_text("".join(f'{{"round": {r}}}\n' for r in (1, 2, 3)))
    folder.cut_back(2)
    assert metrics.read_text() == '{"round": 1}\n{"round": 2}\n'
