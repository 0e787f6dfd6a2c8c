"""Issue 47's bad-value probes: each is refused before the run in one sentence that names the
bad value (exit 2 at the command line), none runs silently, hangs or ends in a traceback; and
the friction of a first day (a key set in the wrong group, a dataset's missing-data advice, a
partition named by what it is).

Most probes run the command line's own checks in-process (`fedshare.run.main` runs the same
two before Hydra starts); a few go through a process to pin the exit code and the one line."""

import errno
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fedshare.config.compose import check_command_line
from fedshare.config.overrides import check_overrides
from fedshare.data import load_dataset
from fedshare.errors import FedshareError
from fedshare.results.labels import partition_label
from fedshare.results.rundir import MARKER, RunDirectory, check_run_folder
from fedshare.run import config_dir


def refusal(args: list[str]) -> str:
    """The sentence the command line's checks refuse `args` with (fails if they pass)."""
    with pytest.raises(FedshareError) as refused:
        check_overrides(args, config_dir())
        check_command_line(args, config_dir())
    sentence = str(refused.value)
    assert "\n" not in sentence
    return sentence


def accepted(args: list[str]) -> None:
    check_overrides(args, config_dir())
    check_command_line(args, config_dir())


# (probe, the command line's arguments, text the one sentence must hold)
TYPED_KEYS = [
    ("bool given 3", ["train.amp=3"], "train.amp=3 is not valid: it must be of type bool"),
    ("bool given 2", ["eval.personal=2"], "eval.personal=2 is not valid"),
    ("bool given 5", ["overwrite=5"], "overwrite=5 is not valid"),
    ("compile given a number", ["train.compile=5"], "train.compile=5 is not valid"),
    ("null batch size", ["train.batch_size=null"], "train.batch_size=null is not valid"),
    ("null optimizer", ["train.optimizer=null"], "train.optimizer=null is not valid"),
    ("null schedule", ["train.lr_schedule=null"], "train.lr_schedule=null is not valid"),
    ("huge lr", ["train.lr=1e300"], "train.lr=1e+300 is not valid"),
    ("huge weight decay", ["train.weight_decay=1e300"], "train.weight_decay=1e+300 is not"),
    ("huge lr floor", ["train.lr_floor=1e300"], "train.lr_floor=1e+300 is not valid"),
    ("huge lr decay", ["train.lr_decay=1e300"], "train.lr_decay=1e+300 is not valid"),
    ("logger a number", ["logger=1"], "logger=1 is not valid"),
    ("logger a list of numbers", ["logger=[1]"], "logger=[1] is not valid"),
    ("huge workers", ["workers=1000000000"], "workers=1000000000 is not valid"),
    ("huge clients", ["clients.num=1000000000000"], "clients.num=1000000000000 is not valid"),
    ("sweep member coerced", ["-m", "train.amp=true,3"], "train.amp=3 is not valid"),
]
GROUP_VALUES = [
    ("channels as text", ["model=cnn_small", "model.channels=abc"], "'channels' must be of"),
    ("hidden holds NaN", ["model=mlp", "model.hidden=[nan]"], "'hidden' must be of type"),
    ("width NaN", ["model=lenet_fmnist", "model.width=nan"], "width=nan is not valid"),
    ("alpha NaN", ["partition=dir0.5", "partition.alpha=nan"], "alpha=nan is not valid"),
    ("alpha inf", ["partition=dir0.5", "partition.alpha=inf"], "alpha=inf is not valid"),
    ("test fraction NaN", ["+data.test_fraction=nan"], "test_fraction=nan is not valid"),
    (
        "mixture scale inf",
        ["data=synthetic_mixture", "data.centre_scale=inf"],
        "centre_scale=inf is not valid",
    ),
    (
        "unknown backbone option",
        ["data=synthetic", "data.features=random_relu", "data.features_options={bogus:1}"],
        "feature backbone 'random_relu' has no parameter 'bogus'",
    ),
    (
        "backbone option inside an empty node",
        ["data=synthetic", "data.features=random_relu", "data.features_options.dim=3"],
        "set it with +data.features_options.dim=<value>",
    ),
    (
        "backbone batch size as text",
        ["data=synthetic", "data.features=random_relu", "+data.features_options.batch_size=x"],
        "data.features_options.batch_size='x' is not valid",
    ),
]
ELSEWHERE = [
    ("lr at the top", ["lr=0.1"], "unknown key 'lr' (did you mean 'train.lr'?)"),
    (
        "a strategy parameter under train",
        ["strategy=fedprox", "train.mu=0.1"],
        "unknown key 'train.mu' (did you mean 'strategy.mu'?)",
    ),
    (
        "a partition parameter under train",
        ["partition=dir0.1", "train.alpha=0.1"],
        "(did you mean 'partition.alpha'?)",
    ),
    ("a train key under strategy", ["strategy.lr=0.1"], "(did you mean 'train.lr'?)"),
    (
        "a name two groups have",
        ["batch_size=8"],
        "(did you mean 'eval.batch_size' or 'train.batch_size'?)",
    ),
]


@pytest.mark.parametrize(
    ("args", "message"),
    [pytest.param(a, m, id=i) for i, a, m in TYPED_KEYS + GROUP_VALUES + ELSEWHERE],
)
def test_a_bad_value_is_one_sentence_before_the_run(args, message):
    assert message in refusal(args)


@pytest.mark.parametrize(
    "args",
    [
        ["rounds=null"],
        ["train.amp=true"],
        ["logger=[tensorboard,mlflow]"],
        ["logger=null"],
        ["train.lr=1e30"],
        ["workers=1"],
        ["data=synthetic", "data.features=random_relu", "data.features_options={dim:16}"],
        ["data=synthetic", "data.features=random_relu", "+data.features_options.dim=16"],
        ["model=mlp", "model.hidden=[8,4]"],
    ],
    ids=lambda args: " ".join(args),
)
def test_the_valid_neighbours_of_the_probes_pass(args):
    accepted(args)


def test_run_dir_under_a_file_is_refused(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("x\n")
    assert "which is a file, not a folder" in refusal([f"run_dir={plain}/run"])


def test_run_dir_where_no_folder_can_be_made_is_refused():
    assert "/proc refuses a new folder" in refusal(["run_dir=/proc/fedshare_probe/run"])


def test_run_dir_on_a_read_only_file_system_is_refused(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    sentence = refusal([f"run_dir={tmp_path}/new/run"])
    assert f"run_dir={tmp_path}/new/run cannot be created" in sentence
    assert "Read-only file system" in sentence
    assert not (tmp_path / "new").exists()
    assert f"run_dir={tmp_path} cannot be written" in refusal([f"run_dir={tmp_path}"])


def test_overwrite_into_a_folder_that_holds_no_run_is_refused(tmp_path, monkeypatch):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine\n")
    sentence = refusal(["overwrite=true", f"run_dir={foreign}"])
    assert "overwrite=true but run_dir" in sentence and "notes.txt" in sentence
    monkeypatch.chdir(foreign)
    assert "not written by a fedshare run" in refusal(["overwrite=true", "run_dir=."])
    assert (foreign / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_overwrite_replaces_a_run_and_takes_an_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    check_run_folder(tmp_path / "empty", overwrite=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / MARKER).touch()
    (run / "summary.json").write_text("{}\n")
    check_run_folder(run, overwrite=True)
    RunDirectory(run).clear()
    assert not (run / "summary.json").exists()


def test_a_new_run_clears_nothing_and_an_overwrite_only_a_runs_files(tmp_path):
    """`clear` (a new run, or `overwrite`) deletes nothing where no run wrote, and refuses
    run-named files in a folder without the marker, naming what is there."""
    (tmp_path / "notes.txt").write_text("mine\n")
    RunDirectory(tmp_path).clear()
    (tmp_path / "summary.json").write_text("{}\n")
    with pytest.raises(FedshareError, match=r"not written by a fedshare run \(notes.txt, summ"):
        RunDirectory(tmp_path).clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "summary.json"]


def write_cifar10_sample(root: Path) -> None:
    sample = root / "cifar10_sample"
    sample.mkdir()
    for split in ("train", "test"):
        np.savez(sample / f"{split}.npz", x=np.zeros((3, 32, 32, 3), np.uint8), y=np.arange(3))


def test_cifar10_without_its_files_says_where_the_sample_is_and_where_the_full_set_is(
    tmp_path,
):
    with pytest.raises(FedshareError) as without:
        load_dataset({"name": "cifar10", "root": str(tmp_path)})
    assert "sample there" not in str(without.value)
    assert "in <root>/cifar10_sample, loads as data=cifar10_sample" in str(without.value)
    write_cifar10_sample(tmp_path)
    with pytest.raises(FedshareError) as beside:
        load_dataset({"name": "cifar10", "root": str(tmp_path)})
    sentence = str(beside.value)
    assert f"{tmp_path / 'cifar10_sample'} holds only the 4,000 / 1,000-image sample" in sentence
    assert "for the full set get CIFAR-10's python version from https://" in sentence


@pytest.mark.parametrize(
    ("overrides", "label"),
    [
        ([], "dir0.1"),
        (["partition.alpha=0.05"], "dir0.1+alpha0.05"),
        (["partition.alpha=0.1"], "dir0.1"),
        (["+partition.min_size=3", "partition.alpha=0.5"], "dir0.1+min_size3+alpha0.5"),
        (["partition.seed=7"], "dir0.1+seed7"),
    ],
)
def test_an_overridden_partition_parameter_shows_in_the_label(overrides, label):
    preset = {"name": "dirichlet", "alpha": 0.1, "min_size": None, "max_tries": 1000, "seed": None}
    values = dict(preset)
    for override in overrides:
        key, value = override.lstrip("+").split("=")
        values[key.split(".")[1]] = json.loads(value)
    assert partition_label("dir0.1", values, preset, overrides) == label


def fedshare_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fedshare.run", "progress=false", "rounds=1", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [["train.amp=3"], ["data.features_options={bogus:1}", "data.features=random_relu"]],
    ids=["coerced bool", "unknown backbone option"],
)
def test_the_command_line_exits_2_with_one_line(tmp_path, args):
    proc = fedshare_run(*args, f"run_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("fedshare: error: ")
    assert not (tmp_path / "run").exists()


def test_a_run_names_its_overridden_partition_in_the_line_folder_and_summary(tmp_path):
    proc = fedshare_run(
        "partition=dir0.5",
        "partition.alpha=0.3",
        "clients.num=3",
        "data.train_subset=300",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "on digits/dir0.5+alpha0.3" in proc.stdout
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name == "fedavg-digits-dir0.5+alpha0.3"
    (run,) = folder.iterdir()
    assert json.loads((run / "summary.json").read_text())["partition"] == "dir0.5+alpha0.3"


def test_the_logger_rule_names_the_registered_loggers():
    from fedshare.config.schema import LOGGER_NAMES
    from fedshare.tracking import LOGGERS

    assert sorted(LOGGER_NAMES) == sorted(LOGGERS)
