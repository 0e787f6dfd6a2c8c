"""The command line: the run-directory contract, clear errors, resume, sweeps."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedshare.config.compose import (
    check_command_line,
    check_config,
    check_named_folder,
    compose_member,
    override_args,
)
from fedshare.config.overrides import check_overrides
from fedshare.errors import FedshareError
from fedshare.results.rundir import METRIC_KEYS, SUMMARY_KEYS, read_metrics
from fedshare.run import build_simulation, config_dir, execute
from helpers import snapshot, without_wall_time

FAST = ["progress=false", "rounds=2", "clients.num=4", "train.local_epochs=1"]


def fedshare_run(*args: str, cwd: Path, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "fedshare.run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_a_run_writes_the_contract_files(tmp_path):
    out = tmp_path / "run"
    proc = fedshare_run(
        "strategy=fedprox", "partition=dir0.5", f"run_dir={out}", *FAST, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "partition.json"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["strategy"] == "fedprox" and summary["partition"] == "dir0.5"
    assert summary["model"] == "cnn_small" and summary["rounds_completed"] == 2
    assert 0 <= summary["best_accuracy"] <= 100
    records = read_metrics(out / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2]
    assert all(set(METRIC_KEYS) <= set(r) for r in records)
    partition = json.loads((out / "partition.json").read_text())
    assert partition["fingerprint"] == summary["partition_fingerprint"]
    assert len(partition["class_counts"]) == 4
    assert "mu: 0.01" in (out / "config.yaml").read_text()


USER_ERRORS = [
    (["strategy=nosuch"], "unknown strategy 'nosuch'; valid choices: "),
    (["rounds=abc"], "rounds='abc' is not valid"),
    (["nosuchkey=1"], "unknown key 'nosuchkey'; valid keys: "),
    (["train.lrr=0.1"], "unknown key 'train.lrr' (did you mean 'lr'?); valid keys of train: "),
    (
        ["-m", "strategy=fedavg,fedprx"],
        "unknown strategy 'fedprx' (did you mean 'fedprox'?); valid choices: ",
    ),
    (["-m", "train.lr=0.1,abc"], "train.lr='abc' is not valid"),
    (["+strategy.mux=1"], "strategy 'fedavg' has no parameter 'mux'"),
    (["strategy=fedprox", "strategy.mu=-1"], "mu=-1"),
    (["data=mnist", "data.root=/nonexistent/x"], "/nonexistent/x"),
    (["partition=dir0.1", "partition.min_size=1000"], "min_size=1000 is infeasible"),
    (["data.train_subset=100000"], "train_subset=100000"),
    (["clients.num=2000"], "clients with no samples"),
    (["train.local_epochs=0"], "train.local_epochs=0"),
    (["model=resnet20_cifar"], "model 'resnet20_cifar' expects"),
    (["strategy=fedpft", "rounds=3"], "one-shot"),
    (["resume=true"], "resume=true needs run_dir"),
    (["strategy.scal=0.2"], "strategy 'fedavg' has no parameter 'scal'"),
    (["eval.batch_size=0"], "eval.batch_size=0 is not valid"),
    (["train.betas=[2,3]"], "train.betas=[2.0, 3.0] is not valid"),
    (["data=synthetic", "data.dim=-1"], "data.dim=-1 is not valid"),
    (["model=mlp", "model.hidden=[-5]"], "hidden=[-5] is not valid"),
]
ON_THE_COMMAND_LINE = {
    "strategy=nosuch",
    "rounds=abc",
    "nosuchkey=1",
    "train.lrr=0.1",
    "strategy=fedavg,fedprx",
    "train.lr=0.1,abc",
    "+strategy.mux=1",
    "clients.num=2000",
    "train.local_epochs=0",
    "resume=true",
    "eval.batch_size=0",
    "train.betas=[2,3]",
}
"""The errors run through the command line (a process each): every one refused before torch
loads (about 0.5 s each), a group's parameter, one found once the data is partitioned, and
resume without a folder (the command line's own check); the others (about 4 s each, most of it
importing torch) are checked in-process by `test_user_errors_are_refused_in_one_sentence`, on
the path the command line takes."""


@pytest.mark.parametrize(
    ("args", "message"), [e for e in USER_ERRORS if e[0][-1] in ON_THE_COMMAND_LINE]
)
def test_user_errors_give_one_clear_message(tmp_path, args, message):
    """A user error: exit code 2, one line naming the bad value, no traceback, and no run
    folder left behind."""
    run_dir = [] if "resume=true" in args else [f"run_dir={tmp_path / 'e'}"]
    proc = fedshare_run(
        *FAST,
        *args,
        *run_dir,
        cwd=tmp_path,
        env={"FEDSHARE_DATA": str(tmp_path / "empty")},
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "e").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("args", "message"), [e for e in USER_ERRORS if "resume=true" not in e[0]])
def test_user_errors_are_refused_in_one_sentence(tmp_path, monkeypatch, args, message):
    """Every user error, in-process: the command line's checks before Hydra
    (`fedshare.run.main`), then the composed run checked and built as `fedshare.run.execute`
    does, raise one sentence naming the bad value, with nothing written; so does a sweep's
    check of its members."""
    monkeypatch.setenv("FEDSHARE_DATA", str(tmp_path / "empty"))
    argv = [*FAST, *args, f"run_dir={tmp_path / 'e'}"]
    with pytest.raises(FedshareError) as refused:
        check_overrides(argv, config_dir())
        check_named_folder(argv)
        cfg = compose_member(override_args(argv), str(config_dir()))
        build_simulation(cfg, tmp_path / "e", {}, strategy=check_config(cfg))
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(FedshareError) as refused:
        check_overrides(argv, config_dir())
        check_command_line(argv, config_dir())
        cfg = compose_member(override_args(argv), str(config_dir()))
        build_simulation(cfg, tmp_path / "e", {})
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "e").exists()


def test_nan_loss_stops_with_a_message_and_keeps_files(tmp_path):
    out = tmp_path / "nan"
    proc = fedshare_run("train.lr=1e12", f"run_dir={out}", *FAST, cwd=tmp_path)
    assert proc.returncode != 0
    assert "non-finite training loss" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "diverged"
    assert (out / "config.yaml").exists() and (out / "partition.json").exists()


def test_cli_resume_continues_to_the_uninterrupted_numbers(tmp_path):
    """A run cut after round 2 (an unequal partition, half the clients a round): resuming it
    with another config is refused in one sentence before any file changes; resuming it as an
    interrupted run advises (`run_dir=X resume=true`, here with more rounds), its settings read
    from its folder, ends with the numbers of the uninterrupted run (composed and run
    in-process as the command line runs it: `execute`)."""
    common = ["partition=dir0.5", "progress=false", "clients.num=4", "clients.fraction=0.5"]
    cut, full = tmp_path / "cut", tmp_path / "full"
    assert fedshare_run(*common, "rounds=2", f"run_dir={cut}", cwd=tmp_path).returncode == 0
    before = snapshot(cut)
    proc = fedshare_run(
        *common, "rounds=2", "train.lr=0.1", "resume=true", f"run_dir={cut}", cwd=tmp_path
    )
    assert proc.returncode == 2
    assert f"cannot resume {cut} with train.lr=0.1 (the run has 0.05)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert snapshot(cut) == before
    # a longer run is a legitimate change: it continues from the checkpoint, with the
    # partition, clients and seed the folder records (none of them typed again)
    proc = fedshare_run("rounds=3", "progress=false", f"run_dir={cut}", "resume=true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "fedavg on digits/dir0.5" in proc.stdout
    resumed = read_metrics(cut / "metrics.jsonl")
    assert [r["round"] for r in resumed] == [1, 2, 3]
    args = [*common, "rounds=3", f"run_dir={full}"]
    execute(compose_member(override_args(args), str(config_dir())), full, {})
    uninterrupted = read_metrics(full / "metrics.jsonl")
    assert without_wall_time(resumed) == without_wall_time(uninterrupted)


def test_multirun_sweep_with_the_joblib_launcher(tmp_path):
    proc = fedshare_run(
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "strategy=fedavg,fedprox",
        "seed=0,1",
        *FAST[:1],
        "rounds=1",
        "clients.num=4",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summaries = sorted((tmp_path / "sweep").glob("*/summary.json"))
    assert len(summaries) == 4
    seen = {
        (json.loads(p.read_text())["strategy"], json.loads(p.read_text())["seed"])
        for p in summaries
    }
    assert seen == {("fedavg", 0), ("fedavg", 1), ("fedprox", 0), ("fedprox", 1)}
    names = sorted(p.parent.name.split("-", 1)[1] for p in summaries)
    assert names == [f"{s}-digits-seed{seed}" for s in ("fedavg", "fedprox") for seed in (0, 1)]


def test_a_resume_reads_the_runs_own_settings_from_its_folder(tmp_path):
    """`run_dir=X resume=true`, as an interrupted run advises, resumes X with what its
    config.yaml records (47 §1: 60 rounds, 12 clients, dir0.3, seed 7); the command line may
    change what a resume may change, and a conflicting key is one sentence."""
    from omegaconf import OmegaConf

    from fedshare.config.resume import resumed_config

    folder = tmp_path / "run"
    original = ["partition=dir0.3", "clients.num=12", "rounds=60", "seed=7", "progress=false"]
    recorded = compose_member([*original, f"run_dir={folder}"], str(config_dir()))
    folder.mkdir()
    OmegaConf.save(recorded, folder / "config.yaml")
    (folder / "summary.json").write_text(json.dumps({"partition": "dir0.3"}))

    def resume(*args: str):
        typed = [f"run_dir={folder}", "resume=true", *args]
        return resumed_config(compose_member(typed, str(config_dir())), typed, folder)

    cfg, label = resume()
    assert label == "dir0.3" and cfg.resume is True
    assert (cfg.rounds, cfg.clients.num, cfg.seed, cfg.progress) == (60, 12, 7, False)
    assert cfg.partition.alpha == 0.3
    cfg, _ = resume("rounds=80", "device=cpu")
    assert (cfg.rounds, cfg.device, cfg.clients.num) == (80, "cpu", 12)
    cfg, _ = resume("clients.num=12", "partition=dir0.3")  # the run's own values: accepted
    assert cfg.clients.num == 12
    with pytest.raises(FedshareError) as err:
        resume("clients.num=10")
    message = str(err.value)
    assert message.startswith(f"cannot resume {folder} with clients.num=10 (the run has 12)")
    assert "\n" not in message


def run_counted(monkeypatch, argv: list[str]) -> dict[str, int]:
    """`fedshare.run.main` in this process with `argv`, counting Hydra's compositions of the
    config, the strategy builds from the config (`make_strategy`) and the strategy objects
    made (its client side is one)."""
    import signal

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra

    import fedshare.strategies
    from fedshare.run import main
    from fedshare.strategies import base

    counts = {"compositions": 0, "builds": 0, "objects": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return wrapper

    load = ConfigLoaderImpl.load_configuration
    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted("compositions", load))
    build = counted("builds", base.make_strategy)
    monkeypatch.setattr(base, "make_strategy", build)
    monkeypatch.setattr(fedshare.strategies, "make_strategy", build)
    post_init = base.Strategy.__post_init__
    monkeypatch.setattr(base.Strategy, "__post_init__", counted("objects", post_init))
    monkeypatch.setattr(sys, "argv", ["fedshare.run", *argv])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # main sets it; restored afterwards
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        main()
    finally:
        GlobalHydra.instance().clear()
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return counts


def test_a_run_is_composed_once_and_builds_its_strategy_once(tmp_path, monkeypatch):
    """One command-line run, new and resumed: Hydra composes the config once, and the strategy
    is built once (the check builds it, the run uses it), besides its client side."""
    monkeypatch.chdir(tmp_path)
    argv = ["strategy=fedprox", "clients.num=2", "train.local_epochs=1", "progress=false"]
    argv += [f"run_dir={tmp_path / 'r'}"]
    once = {"compositions": 1, "builds": 1, "objects": 2}
    assert run_counted(monkeypatch, [*argv, "rounds=1"]) == once
    assert run_counted(monkeypatch, [*argv, "rounds=2", "resume=true"]) == once
    assert [r["round"] for r in read_metrics(tmp_path / "r" / "metrics.jsonl")] == [1, 2]


def test_no_shipped_config_sets_hydra_mode():
    """`fedshare.run` answers Hydra's `get_mode` without composing (one composition a run);
    that answer is right only while no config of configs/ sets `hydra.mode`."""
    from fedshare.run import config_dir

    setting = [
        str(path.relative_to(config_dir()))
        for path in config_dir().rglob("*.yaml")
        if "mode" in ((yaml.safe_load(path.read_text()) or {}).get("hydra") or {})
    ]
    assert setting == []


def test_a_run_folder_set_in_a_preset_is_refused_in_one_sentence(tmp_path, capsys):
    """A `run_dir` that only a preset sets (not the command line) is checked before Hydra
    makes the folder: the callback configs/config.yaml registers exits 2 with one sentence."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    blocker = tmp_path / "a-file"
    blocker.write_text("")

    def run_start(folder: Path) -> None:
        with initialize_config_dir(str(config_dir()), version_base="1.3"):
            config = compose("config", [f"run_dir={folder}"], return_hydra_config=True)
        instantiate(config.hydra.callbacks.run_folder).on_run_start(config=config)

    with pytest.raises(SystemExit) as stop:
        run_start(blocker / "run")
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("fedshare: error: run_dir=") and "is a file" in err
    assert len(err.strip().splitlines()) == 1
    run_start(tmp_path / "ok")
    assert not (tmp_path / "ok").exists()  # checked, not made
