"""`fedshare.simulate` resolves what `python -m fedshare.run` resolves (one code path,
`fedshare.config.assemble`): the same settings give the same summary.json, the layered defaults
(strategy > dataset > global) included."""

import dataclasses
import functools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf
from torch import nn

import fedshare
from fedshare.config import SimulationConfig
from fedshare.config.assemble import resolve_config
from fedshare.config.compose import compose_member
from fedshare.config.defaults import resolve_train
from fedshare.data import Dataset, FederatedData, federate, load_dataset
from fedshare.run import build_simulation, config_dir
from fedshare.strategies.base import STRATEGIES

CONFIGS = config_dir()

DIR03 = OmegaConf.to_container(OmegaConf.load(CONFIGS / "partition" / "dir0.3.yaml"))
XORMIX = {"name": "xormix", "target_labels": [1], "n": 2, "m": 30}
SETTINGS = {
    # strategy: (command-line overrides, load_dataset config, partition, clients, model)
    "fedavg": ([], {"name": "digits"}, DIR03, 4, "auto"),
    "flea": ([], {"name": "digits"}, DIR03, 4, "auto"),
    "rebafl": ([], {"name": "digits"}, DIR03, 4, "auto"),
    "fedpft": (
        ["data.features=random_relu", "model=linear"],
        {"name": "digits", "features": "random_relu"},
        DIR03,
        4,
        "linear",
    ),
    "xormixfl": (
        ["partition=xormix", "partition.target_labels=[1]", "partition.n=2", "partition.m=30"],
        {"name": "digits"},
        XORMIX,
        4,
        "auto",
    ),
}
MACHINE = ("wall_time_s", "cpu_time_s", "peak_rss_mb", "peak_gpu_mb", "device", "partition")
"""Measurements of the machine, not results; and the partition's name, which the command line
takes from the config's file name (`dir0.3`), the API from the partitioner (`dirichlet`)."""


def results(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in MACHINE}


def cli_summaries(out: Path) -> dict[str, dict]:
    """Each strategy of SETTINGS run by one `python -m fedshare.run -m` command (fedshare's cell
    sweeper, as `fedshare.reproduce` runs a table's cells): every member is composed by Hydra
    and run as a single run is, at the cost of one process start instead of five."""
    cells = []
    for strategy, (extra, *_) in SETTINGS.items():
        args = [f"strategy={strategy}", "data=digits", "partition=dir0.3", "clients.num=4", *extra]
        if not STRATEGIES.get(strategy).one_shot:
            args.append("rounds=2")
        cells.append([*args, f"run_dir={out / strategy}", f"hydra.sweep.subdir={strategy}"])
    out.mkdir()
    (out / "cells.json").write_text(json.dumps(cells))
    command = [
        sys.executable,
        "-m",
        "fedshare.run",
        "-m",
        "hydra/sweeper=fedshare_cells",
        f"hydra.sweeper.cells_file={out / 'cells.json'}",
        f"hydra.sweep.dir={out}",
        "progress=false",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {s: json.loads((out / s / "summary.json").read_text()) for s in SETTINGS}


def test_simulate_gives_the_command_lines_summary(tmp_path):
    cli = cli_summaries(tmp_path / "cli")
    for strategy, (_, data_cfg, partition, clients, model) in SETTINGS.items():
        rounds = None if STRATEGIES.get(strategy).one_shot else 2
        fed = federate(load_dataset(data_cfg), partition, clients, seed=0)
        api_dir = tmp_path / "api" / strategy
        api = fedshare.simulate(strategy, fed, model, rounds, run_dir=api_dir).summary
        assert results(api) == results(cli[strategy]), strategy
        written = json.loads((api_dir / "summary.json").read_text())
        assert results(written) == results(cli[strategy]), strategy


def test_simulate_fills_unset_training_keys_from_the_layered_defaults():
    """A partial `train` keeps the strategy's and the dataset's defaults for the other keys, as
    the command line does (FLea's optimizer, digits' learning rate); a set key wins."""
    fed = federate(load_dataset({"name": "digits"}), "iid", 3, seed=0)
    seen = []
    fedshare.simulate(
        "flea", fed, rounds=1, train={"batch_size": 16}, callbacks=[lambda s, n, r: seen.append(s)]
    )
    flea = STRATEGIES.get("flea")
    assert seen[0].config.train == resolve_train({"batch_size": 16}, flea, "digits")
    assert seen[0].config.train.batch_size == 16
    assert seen[0].config.train.optimizer == flea.train_defaults["optimizer"] != "sgd"


# ------------------------------------------------------------------ every default defined once
class Recorded:
    """Stands in for the engine's `Simulation`: keeps what a path hands over, runs nothing."""

    def __init__(self, strategy, data, model, config, run_dir=None, meta=None, *args, **kw):
        self.strategy, self.config, self.meta = strategy, config, meta

    def run(self, resume: bool = False) -> "Recorded":
        return self


DATASETS = sorted(p.stem for p in (CONFIGS / "data").glob("*.yaml"))


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_dataset({"name": "digits"})


@functools.cache
def composed(group: str, option: str) -> DictConfig:
    """The command line's config with one group chosen (composed once per option)."""
    return compose_member([f"{group}={option}", "run_dir=r"], str(CONFIGS))


def composed_pair(strategy: str, data: str) -> DictConfig:
    """`strategy=<strategy> data=<data>` as Hydra composes it: a strategy's file sets only its
    group (asserted here), so the pair is the dataset's config with the strategy's group."""
    alone, default = outside_strategy(strategy), outside_strategy("fedavg")
    assert alone == default, f"configs/strategy/{strategy}.yaml sets keys outside its group"
    cfg = composed("data", data).copy()
    cfg.strategy = composed("strategy", strategy).strategy
    return cfg


def outside_strategy(strategy: str) -> dict:
    values = OmegaConf.to_container(composed("strategy", strategy), resolve=False)
    return {key: value for key, value in values.items() if key != "strategy"}


SAMPLED = ("fedavg", "flea", "fedpft")
"""No training defaults of their own, a paper's optimizer and schedule, a one-shot head."""
PAIRS = [
    pytest.param(
        strategy,
        data,
        marks=() if data == "digits" or strategy in SAMPLED else pytest.mark.slow,
    )
    for data in DATASETS
    for strategy in STRATEGIES.names()
]
"""Every strategy × dataset pair; the default tier runs every strategy on digits and every
dataset with `SAMPLED`, the slow tier the rest."""


@pytest.fixture
def recorded(digits, monkeypatch) -> Callable[[str], FederatedData]:
    """The engine's `Simulation` recorded instead of run, the model not built and the data not
    read: `load_dataset` gives the digits' tensors under the asked name."""
    import fedshare.config.assemble
    import fedshare.data
    import fedshare.engine.simulation

    monkeypatch.setattr(fedshare.engine.simulation, "Simulation", Recorded)
    monkeypatch.setattr(fedshare.config.assemble, "build_model", lambda *args: nn.Identity())

    def federation(name: str) -> FederatedData:
        fed = federate(dataclasses.replace(digits, name=name), "iid", 10, seed=0)
        monkeypatch.setattr(fedshare.data, "load_dataset", lambda cfg, seed=0: fed.dataset)
        monkeypatch.setattr(fedshare.data, "federate", lambda *args, **kw: fed)
        return fed

    return federation


@pytest.mark.parametrize(("strategy", "data"), PAIRS)
def test_every_path_resolves_the_same_settings(strategy, data, recorded):
    """The command line and `fedshare.simulate`, with nothing set, hand the engine the same
    rounds, training settings (optimizer, lr, ...), progress, every other setting and model;
    and those are the layered defaults (`resolve_config`)."""
    fed = recorded(data)
    cli = build_simulation(composed_pair(strategy, data), Path("r"), {"partition": "iid"})
    api = fedshare.simulate(strategy, fed)
    assert cli.config == api.config
    assert cli.meta["model"] == api.meta["model"] == fed.dataset.default_model
    cls = STRATEGIES.get(strategy)
    assert api.config == resolve_config(cls(), data)
    train = resolve_train({}, cls, data)
    assert (api.config.train.optimizer, api.config.train.lr) == (train.optimizer, train.lr)
    assert api.config.rounds == (1 if cls.one_shot else SimulationConfig().rounds)
    assert api.config.progress is SimulationConfig().progress
