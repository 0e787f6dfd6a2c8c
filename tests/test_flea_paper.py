"""FLea's Table 1 as presets and data (FLea's Table 1): consistency here, regression on a GPU."""

import json
import os
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import data_root_or_skip
from fedshare.data import federate, load_dataset
from fedshare.paper.compare import compare, entries, load_table, lookup, method_overrides
from fedshare.paper.logs import curve_stats, load_log
from fedshare.results.rundir import read_metrics
from fedshare.run import config_dir
from fedshare.strategies import make_strategy
from helpers import run_table_cell

METHODS = tuple(load_table("flea")["methods"])
PRESETS = sorted({e.preset for e in entries("flea")})
DATA_FILES = {
    "cifar10": "cifar-10-batches-py",
    "urbansound8k": "UrbanSound8K/metadata/UrbanSound8K.csv",
    "uci_har": "UCI HAR Dataset",
}
# (dataset, |D_k|) -> (clients, model, local epochs, batch size), FLea's App. C.1 and C.2
SETUP = {
    ("cifar10", 100): (500, "mobilenetv2_cifar", 10, 64),
    ("cifar10", 50): (1000, "mobilenetv2_cifar", 10, 64),
    ("urbansound8k", 100): (70, "audionet", 15, 64),
    ("urbansound8k", 50): (140, "audionet", 15, 64),
    ("uci_har", 100): (75, "harnet", 5, 32),
    ("uci_har", 50): (150, "harnet", 5, 32),
}


def test_table_has_every_column_and_method():
    assert len(PRESETS) == 18 and len(entries("flea")) == 11 * 18
    for preset in PRESETS:
        methods = [e.method for e in entries("flea") if e.preset == preset]
        assert len(set(methods)) == 11 and set(methods) <= set(METHODS)
        for method in methods:
            entry = lookup("flea", preset, method)
            assert 0 < entry.mean < 100 and 0 < entry.std < 5
    # FedProx runs the authors' scripts' mu: 0.001 for CIFAR-10, 1 for UrbanSound8K and UCI-HAR
    prox = {
        e.preset.split("/")[1].split("_")[0]: e.method
        for e in entries("flea")
        if e.method.startswith("fedprox")
    }
    assert prox == {"cifar10": "fedprox", "urbansound8k": "fedprox_mu1", "uci": "fedprox_mu1"}
    # facts read off FLea's Table 1: FedData beats FLea in every column, FLea
    # beats every real baseline
    for preset in PRESETS:
        rows = {e.method: e.mean for e in entries("flea") if e.preset == preset}
        assert (
            rows["feddata"]
            > rows["flea"]
            > max(v for k, v in rows.items() if k not in ("flea", "feddata"))
        )
    assert compare("flea", "flea/uci_har_qua2_n100", "flea", 73.0).ok
    assert not compare("flea", "flea/uci_har_qua2_n100", "flea", 70.0).ok


def test_every_preset_composes_with_the_papers_setup():
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for preset in PRESETS:
            cfg = compose("config", overrides=[f"experiment={preset}"])
            name = preset.split("/")[1]
            dataset = name[: name.index("_qua") if "_qua" in name else name.index("_dir")]
            size = int(name.rsplit("_n", 1)[1])
            clients, model, epochs, batch = SETUP[(dataset, size)]
            assert cfg.data.name == dataset and cfg.model.name == model
            assert cfg.strategy.name == "flea" and cfg.rounds == 100
            assert cfg.clients.num == clients and cfg.clients.fraction == 0.1
            assert (cfg.train.local_epochs, cfg.train.batch_size) == (epochs, batch)
            assert cfg.train.optimizer == "adam" and cfg.train.optimizer_reset_each_step
            assert cfg.partition.seed == 1
            part = OmegaConf.to_container(cfg.partition)
            alpha = name.split("_dir")[1].split("_")[0] if "_dir" in name else None
            if alpha:
                assert part["alpha"] == float(alpha)
            else:
                assert part["classes_per_client"] == int(name.split("_qua")[1][0])
        first_of_each_method = {e.method: e for e in reversed(entries("flea"))}.values()
        for entry in first_of_each_method:
            assert_cell_composes(entry)


@pytest.mark.slow
def test_every_cell_composes_to_its_strategy():
    """The check above for every one of the table's 198 cells (each method once there)."""
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for entry in entries("flea"):
            assert_cell_composes(entry)


def assert_cell_composes(entry) -> None:
    """The cell's preset and method overrides compose to a strategy that builds."""
    overrides = method_overrides("flea", entry.method)
    cfg = compose("config", overrides=[f"experiment={entry.preset}", *overrides])
    assert cfg.strategy.name == overrides[0].split("=")[1]
    params = OmegaConf.to_container(cfg.strategy, resolve=True)
    make_strategy(params.pop("name"), params)


HAR_PRESETS = [p for p in PRESETS if "uci_har" in p]
GPU_PRESETS = [p for p in PRESETS if p not in HAR_PRESETS]


def cells(presets: list[str]) -> list[tuple[str, str]]:
    """The table's (preset, method) cells under `presets`."""
    return [(e.preset, e.method) for e in entries("flea") if e.preset in presets]


@pytest.mark.slow  # ~45 s: the Dir(0.1) presets redraw ~25,000 times
def test_every_uci_har_preset_partitions_the_real_labels():
    """Each HAR preset's partition (seed 1) builds on UCI-HAR's 7,352 labels with its sizes:
    the K = 150 Dir(0.1) halves need thousands of redraws, as the authors' unbounded loop."""
    root = data_root_or_skip("uci_har_hapt/UCI HAR Dataset/train/y_train.txt") / "uci_har_hapt"
    labels = load_dataset({"name": "uci_har", "root": str(root)})
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for preset in HAR_PRESETS:
            cfg = compose("config", overrides=[f"experiment={preset}"])
            part = OmegaConf.to_container(cfg.partition, resolve=True)
            fed = federate(labels, part, cfg.clients.num, 0)
            sizes = [len(ix) for ix in fed.client_indices]
            assert len(sizes) == cfg.clients.num and sum(sizes) == 7352, preset
            floor = part.get("min_size") or (6 if "alpha" in part else 1)  # FLea's code: 6 for HAR
            assert min(sizes) >= floor, (preset, min(sizes))


def run_cell(preset: str, method: str, out: Path, device: str) -> dict:
    """Run one Table 1 cell with the seed of $FEDSHARE_PAPER_SEED (default 0), as
    `python -m fedshare.reproduce run flea/table1` runs it; its summary.json."""
    name = preset.split("/")[1]
    dataset = next(d for d in DATA_FILES if name.startswith(d))
    base = Path(os.environ.get("FEDSHARE_DATA", "."))
    rebuilt = dataset == "uci_har" and (base / "uci_har_hapt" / DATA_FILES[dataset]).exists()
    root = base if rebuilt else data_root_or_skip(DATA_FILES[dataset])
    seed = int(os.environ.get("FEDSHARE_PAPER_SEED", "0"))
    run_table_cell(
        "flea/table1", preset, method, out, [seed], [f"device={device}", f"data.root={root}"]
    )
    (summary,) = out.rglob("summary.json")
    return json.loads(summary.read_text())


@pytest.mark.paper
@pytest.mark.gpu
@pytest.mark.parametrize(("preset", "method"), cells(GPU_PRESETS))
def test_table1_best_accuracy(preset, method, tmp_path):
    """One seed of a Table 1 cell: best accuracy within max(3·std, 3 points) of the paper."""
    if not torch.cuda.is_available():
        pytest.skip("the CIFAR-10 and UrbanSound8K presets need a CUDA device")
    summary = run_cell(preset, method, tmp_path / "run", "cuda")
    result = compare("flea", preset, method, summary["best_accuracy"])
    assert result.ok, str(result)


@pytest.mark.paper
@pytest.mark.parametrize(("preset", "method"), cells(HAR_PRESETS))
def test_table1_uci_har_best_accuracy(preset, method, tmp_path):
    """The UCI-HAR cells run on a CPU too (HARNet; about 30 min a FedAvg run on one core)."""
    summary = run_cell(preset, method, tmp_path / "run", "auto")
    result = compare("flea", preset, method, summary["best_accuracy"])
    assert result.ok, f"{result} (data: {summary.get('data_source')})"


@pytest.mark.paper
def test_flea_uci_har_dir01_tracks_the_authors_log(tmp_path):
    """FLea in the one setting the authors published a log of (UCI-HAR, K = 150, Dir(0.1),
    seed 0): the mean accuracy over rounds 31–100 (warm-up left out, as in the log) within 5
    points of the log's. A mean over 70 rounds of this swinging curve is steadier than its
    best; seed 0 here is not the authors' RNG, so the curves agree in level, not round by
    round (docs/flea.md: 51.2 against 54.9 on the rebuilt data)."""
    log = load_log("flea_har_k150_dir0.1")
    run_cell(log.preset, log.method, tmp_path / "run", "auto")
    (metrics,) = (tmp_path / "run").rglob("metrics.jsonl")
    history = read_metrics(metrics)
    ours = curve_stats([r["accuracy"] for r in history][1:])
    theirs = curve_stats(log.accuracy[1:])
    assert abs(ours["settled_mean"] - theirs["settled_mean"]) <= 5, (ours, theirs)
