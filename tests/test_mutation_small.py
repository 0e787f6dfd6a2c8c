"""Small functions no other mutation entry lists, pinned exactly (docs/mutation.md, the
`reproduce_stored` and `library_small` entries): reproduce's cells read from run folders or a
stored file, and the little helpers of data/, privacy/, functional/ and engine/. Tiny run
folders, paper tables and stored files are written to tmp_path; no simulation runs."""

import io
import json
import statistics
from pathlib import Path
from statistics import NormalDist
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fedshare.config import TrainConfig
from fedshare.data import files, label_skew, pathological
from fedshare.data.dataset import Augmentation, Dataset
from fedshare.engine import distributed, progress
from fedshare.engine.client import Client
from fedshare.engine.run_folder import RunFolder
from fedshare.engine.state_log import ClientStateLog
from fedshare.errors import FedshareError
from fedshare.functional.gmm import GaussianMixture
from fedshare.paper.compare import Comparison, PaperEntry
from fedshare.privacy import dp
from fedshare.reproduce.jobs import Cell
from fedshare.reproduce.measure import (
    Measured,
    _add_stored,
    _read_name,
    load_stored,
    measure,
    stored_cells,
    write_stored,
)
from fedshare.results.rundir import RunDirectory


# ------------------------------------------------------------- reproduce's stored cells
def write_run(folder: Path, status: str, summary: dict, accuracies: list[float]) -> None:
    """A run folder as the engine leaves it: summary.json and one metrics line a round."""
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"status": status, **summary}))
    lines = [json.dumps({"round": r + 1, "accuracy": a}) for r, a in enumerate(accuracies)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def paper_table(tmp_path: Path) -> str:
    """A paper table of metric best_accuracy: fedavg and scaffold under column c1, and moon,
    whose runs never finish."""
    entries = [
        {"preset": "c1", "method": "fedavg", "mean": 51.0, "std": 2.0},
        {"preset": "c1", "method": "scaffold", "mean": 10.0, "std": 0.5},
        {"preset": "c1", "method": "moon", "mean": 40.0, "std": 1.0},
    ]
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"metric": "best_accuracy", "entries": entries}))
    return str(path)


def cells_and_runs(tmp_path: Path) -> tuple[list[Cell], Path]:
    """fedavg: seeds 0 and 1 completed, seed 2 still running; fedprox (no paper entry): one
    completed seed; scaffold: two completed seeds at 0 %; moon: a failed seed; seed 1 of
    fedprox finished without the metric."""
    out = tmp_path / "runs"
    runs = {
        ("fedavg", 0): (
            "completed",
            {
                "best_accuracy": 50.0,
                "final_accuracy": 30.0,
                "wall_time_s": 12.5,
                "per_client": [1, 2],
            },
            [10, 40, 30],
        ),
        ("fedavg", 1): ("completed", {"best_accuracy": 54.0, "final_accuracy": 60.0}, [20, 30, 60]),
        ("fedavg", 2): ("running", {"best_accuracy": 99.0}, [99]),
        ("fedprox", 0): ("completed", {"best_accuracy": 70.0, "final_accuracy": 70.0}, [70]),
        ("fedprox", 1): ("completed", {"final_accuracy": 1.0}, [1]),
        ("scaffold", 0): ("completed", {"best_accuracy": 0.0, "final_accuracy": 0.0}, [0]),
        ("scaffold", 1): ("completed", {"best_accuracy": 0.0, "final_accuracy": 0.0}, [0]),
        ("moon", 0): ("failed", {"best_accuracy": 45.0}, [45]),
    }
    cells = [Cell("t", "c1", m, s, (f"seed={s}",)) for m, s in runs]
    for cell in cells:
        status, summary, accuracies = runs[cell.method, cell.seed]
        write_run(out / cell.folder, status, summary, accuracies)
    return cells, out


def test_measure_reads_each_cells_completed_seeds_and_compares_with_the_paper(tmp_path: Path):
    table = paper_table(tmp_path)
    cells, out = cells_and_runs(tmp_path)
    stats = ("seeds", "seeds:last1", "wall_time_s")
    found = {m.method: m for m in measure(cells, [table], out, stats, lists=("per_client",))}
    assert list(found) == ["fedavg", "fedprox", "scaffold", "moon"]
    fedavg = found["fedavg"]
    assert (fedavg.numbers, fedavg.column, fedavg.metric) == (table, "c1", "best_accuracy")
    assert (fedavg.values, fedavg.seeds) == ([50.0, 54.0], [0, 1])
    assert fedavg.stats == [{"last1": 30.0, "wall_time_s": 12.5}, {"last1": 60.0}]
    assert fedavg.lists == {"per_client": [[1.0, 2.0], []]}
    assert fedavg.paper == (51.0, 2.0)
    entry = PaperEntry(table, "c1", "fedavg", 51.0, 2.0)
    assert fedavg.comparison == Comparison(entry, 52.0, 6.0)  # max(3 std, 3) points
    fedprox = found["fedprox"]  # no paper entry; seed 1 has no best_accuracy
    assert (fedprox.values, fedprox.seeds, fedprox.paper, fedprox.comparison) == (
        [70.0],
        [0],
        None,
        None,
    )
    scaffold = found["scaffold"]  # measured at 0 %: compared at 0, not at a stand-in
    assert scaffold.comparison == Comparison(
        PaperEntry(table, "c1", "scaffold", 10.0, 0.5), 0.0, 3.0
    )
    moon = found["moon"]  # nothing completed: the paper's number, no comparison
    assert (moon.values, moon.paper, moon.comparison) == ([], (40.0, 1.0), None)


def test_measure_without_a_paper_table_or_with_another_metric_compares_nothing(tmp_path: Path):
    table = paper_table(tmp_path)
    cells, out = cells_and_runs(tmp_path)
    plain = {m.method: m for m in measure(cells, [], out)}
    assert plain["fedavg"].numbers is None and plain["fedavg"].metric == "final_accuracy"
    assert plain["fedavg"].values == [30.0, 60.0] and plain["fedprox"].values == [70.0, 1.0]
    assert all(m.paper is None and m.comparison is None for m in plain.values())
    assert plain["fedavg"].stats[0] == {  # the default statistics of [10, 40, 30]
        "best": 40.0,
        "last10": statistics.fmean([10, 40, 30]),
        "settled": 35.0,
    }
    other = {m.method: m for m in measure(cells, [table], out, metric="final_accuracy")}
    assert other["fedavg"].metric == "final_accuracy" and other["fedavg"].values == [30.0, 60.0]
    assert all(m.paper is None and m.comparison is None for m in other.values())


def test_read_name_is_the_value_a_per_seed_statistic_reads():
    assert _read_name("seeds") == ""
    assert _read_name("seeds:best") == "best"
    assert _read_name("best") == "best"
    assert _read_name("best@personal:x") == "best@personal:x"


def test_stored_cells_keep_the_measured_ones_rounded_to_four_places():
    measured = Measured(
        "t",
        "c",
        "a",
        "m",
        values=[1.234567, 2.0],
        seeds=[0, 1],
        stats=[{"x": 0.123456}, {}],
        lists={"l": [[0.987654], []]},
    )
    no_stats = Measured("t", "c", "b", "m", values=[3.0], seeds=[4], stats=[{}])
    empty = Measured("t", "c", "e", "m")
    summary = Measured("t", "c", "s", "m", values=[5.0], seeds=[0], stored=(5.0, None))
    assert stored_cells([measured, no_stats, empty, summary]) == [
        {
            "numbers": "t",
            "column": "c",
            "method": "a",
            "seeds": [0, 1],
            "values": [1.2346, 2.0],
            "stats": [{"x": 0.1235}, {}],
            "lists": {"l": [[0.9877], []]},
        },
        {"numbers": "t", "column": "c", "method": "b", "seeds": [4], "values": [3.0]},
    ]


def test_write_stored_writes_its_header_then_one_line_a_cell_unescaped(tmp_path: Path):
    data = {
        "table": "Tâble 1",
        "scale": "cpu",
        "cells": [{"method": "é", "seeds": [0]}, {"method": "b", "seeds": [1]}],
    }
    path = tmp_path / "stored.json"
    write_stored(path, data)
    assert path.read_text() == (
        '{\n "table": "Tâble 1",\n "scale": "cpu",\n "cells": [\n'
        '  {"method": "é", "seeds": [0]},\n  {"method": "b", "seeds": [1]}\n ]\n}\n'
    )
    assert json.loads(path.read_text()) == data


VALID_STORED = [
    {"numbers": "t", "column": "c", "method": "a", "seeds": [0, 1], "values": [1, 2]},
    {"numbers": "t", "column": "c", "method": "b", "seeds": [0, 1], "mean": 3.0},
    {
        "numbers": "t",
        "column": "c",
        "method": "d",
        "seeds": [0, 1],
        "values": [1, 2],
        "stats": [{"x": 1}, {"x": 2}],
        "stat_means": {"y": 1.0},
        "lists": {"l": [[1], []]},
    },
]


@pytest.mark.parametrize("cells", [[], VALID_STORED])
def test_load_stored_reads_a_file_of_measured_cells(tmp_path: Path, cells: list):
    path = tmp_path / "stored.json"
    path.write_text(json.dumps({"table": "t", "cells": cells}))
    assert load_stored(path) == {"table": "t", "cells": cells}


CELL = {"numbers": "t", "column": "c", "method": "a", "seeds": [0, 1], "values": [1, 2]}


@pytest.mark.parametrize(
    "data",
    [
        [CELL],
        {"cells": {"a": CELL}},
        {"cells": [CELL, 1]},
        {"cells": [{k: v for k, v in CELL.items() if k != "method"}]},
        {"cells": [{k: v for k, v in CELL.items() if k != "values"}]},
        {"cells": [{**CELL, "values": [1]}]},
        {"cells": [{**CELL, "mean": 1.0, "values": [1, 2, 3]}]},
        {"cells": [{**CELL, "stats": [{"x": 1}]}]},
        {"cells": [{**CELL, "stat_means": [1.0]}]},
        {"cells": [{**CELL, "lists": {"l": [[1]]}}]},
    ],
)
def test_load_stored_refuses_a_file_that_is_not_one_of_measured_cells(tmp_path: Path, data):
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FedshareError, match=r"stored.json is not a stored file of measured"):
        load_stored(path)


def test_load_stored_names_a_file_it_cannot_read(tmp_path: Path):
    with pytest.raises(FedshareError, match=r"cannot read .*missing.json"):
        load_stored(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(FedshareError, match=r"cannot read .*bad.json"):
        load_stored(tmp_path / "bad.json")


STORED = [
    {
        "numbers": "t",
        "column": "c",
        "method": "a",
        "seeds": [0, 1, 2],
        "values": [1, 2, 3],
        "stats": [{"x": 1}, {"x": 2}, {"x": 3}],
        "lists": {"l": [[1], [2, 2], []]},
        "stat_means": {"y": 5.0},
    },
    {"numbers": "t", "column": "c", "method": "b", "seeds": [0], "values": [9]},
    {"numbers": "t", "column": "d", "method": "a", "seeds": [0, 2], "values": [8, 8]},
    {"numbers": "u", "column": "c", "method": "a", "seeds": [2], "values": [7]},
    {"numbers": "t", "column": "c", "method": "n", "seeds": [0, 1], "values": [4, 6]},
]


def test_add_stored_takes_the_seeds_per_seed_value_statistics_and_lists():
    item = Measured("t", "c", "a", "m")
    for seed in (2, 0, 5):  # seed 5: not stored
        _add_stored(item, seed, STORED)
    assert (item.seeds, item.values) == ([2, 0], [3.0, 1.0])
    assert item.stats == [{"x": 3}, {"x": 1}]
    assert item.lists == {"l": [[], [1.0]]}
    assert item.stored_stats == {"y": 5.0} and item.stored is None
    plain = Measured("t", "c", "n", "m")  # no statistics, no lists
    _add_stored(plain, 1, STORED)
    assert (plain.seeds, plain.values, plain.stats, plain.lists) == ([1], [6.0], [], {})


def test_add_stored_takes_a_summary_over_all_its_seeds():
    summary = {
        "numbers": "t",
        "column": "c",
        "method": "s",
        "seeds": [0, 1, 2],
        "mean": 51.5,
        "std": 1.5,
        "values": [50, 52, 52.5],
        "stats": [{"x": 1}, {"x": 2}, {"x": 3}],
        "stat_means": {"best": {"mean": 60.0, "std": 1.0}},
    }
    item = Measured("t", "c", "s", "m")
    _add_stored(item, 1, [summary])
    assert item.stored == (51.5, 1.5) and item.n == 3
    assert (item.seeds, item.values) == ([0, 1, 2], [50.0, 52.0, 52.5])
    assert item.stats == summary["stats"]
    assert item.stored_stats == {"best": {"mean": 60.0, "std": 1.0}}
    bare = Measured("t", "c", "s", "m")
    kept_only_the_mean = {k: v for k, v in summary.items() if k not in ("std", "values", "stats")}
    _add_stored(bare, 0, [kept_only_the_mean])
    assert bare.stored == (51.5, None) and bare.values == [] and bare.stats == []


def test_measure_from_a_stored_file_gives_the_run_folders_cells(tmp_path: Path):
    table = paper_table(tmp_path)
    cells, out = cells_and_runs(tmp_path)
    stats = ("seeds:last1", "wall_time_s")
    from_runs = measure(cells, [table], out, stats, lists=("per_client",))
    stored = tmp_path / "stored.json"
    write_stored(stored, {"table": "t", "cells": stored_cells(from_runs)})
    from_file = measure(cells, [table], stored, stats, lists=("per_client",))
    assert [m.method for m in from_file] == [m.method for m in from_runs]
    for a, b in zip(from_runs, from_file, strict=True):
        assert (a.values, a.seeds, a.stats, a.paper) == (b.values, b.seeds, b.stats, b.paper)
        assert a.comparison == b.comparison
    assert from_file[0].lists == {"per_client": [[1.0, 2.0], []]}


# ------------------------------------------------------------------ data/: small helpers
def test_available_memory_is_the_smaller_of_memavailable_and_the_cgroups_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(files, "Path", lambda name: tmp_path / name.lstrip("/"))
    proc, cgroup = tmp_path / "proc", tmp_path / "sys/fs/cgroup"
    assert files.available_memory() is None  # neither readable
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal: 8000 kB\nMemAvailable:    4000 kB\nCached: 7 kB\n")
    assert files.available_memory() == 4000 * 1024
    cgroup.mkdir(parents=True)
    (cgroup / "memory.max").write_text("5000000\n")
    (cgroup / "memory.current").write_text("1000000\n")
    assert files.available_memory() == 5000000 - 1000000  # below MemAvailable's 4,096,000
    (cgroup / "memory.max").write_text("max\n")
    assert files.available_memory() == 4000 * 1024
    (proc / "meminfo").write_text("MemAvailable: lots kB\n")
    (cgroup / "memory.max").write_text("9000000\n")
    assert files.available_memory() == 9000000 - 1000000


@pytest.mark.parametrize("module", [label_skew, pathological])
def test_num_classes_is_the_largest_label_plus_one(module):
    assert module._num_classes(np.array([0, 3, 1])) == 4
    assert module._num_classes(np.array([], dtype=np.int64)) == 0


# ------------------------------------------------------------ privacy/ and functional/
@pytest.mark.parametrize("t", [-2.0, 0.0, 0.5, 1.0, 3.0])
def test_phi_is_the_standard_normal_cdf(t: float):
    assert dp._phi(t) == pytest.approx(NormalDist().cdf(t), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(("kind", "per_component"), [("full", 2 * 3 + 3 + 1), ("diag", 7)])
def test_a_mixtures_components_dimension_and_numbers_sent(kind: str, per_component: int):
    means = torch.zeros(2, 3)
    covariances = torch.eye(3).expand(2, 3, 3) if kind == "full" else torch.ones(2, 3)
    mixture = GaussianMixture(torch.full((2,), 0.5), means, covariances, kind)
    assert (mixture.n_components, mixture.dim) == (2, 3)
    assert mixture.num_params == 2 * per_component


# ------------------------------------------------------------------------------ engine/
def test_a_clients_prepare_does_not_augment_unless_asked():
    x = torch.arange(4 * 16, dtype=torch.uint8).view(4, 1, 4, 4)
    y = torch.arange(4) % 2
    data = Dataset("img", x, y, x[:2], y[:2], 2, scale=1 / 255, augmentation=Augmentation(1, True))
    client = Client(0, 1, torch.arange(4), data, nn.Linear(16, 2), TrainConfig(), 5)

    def seeded() -> torch.Generator:
        return torch.Generator().manual_seed(0)

    augmented = data.prepare(x, True, seeded())
    assert not torch.equal(augmented, x.float() * (1 / 255))
    assert torch.equal(client.prepare(x, generator=seeded()), x.float() * (1 / 255))
    assert torch.equal(client.prepare(x, True, seeded()), augmented)


class Bar:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_progress_close_closes_its_bar_once_and_nothing_without_one():
    shown = progress.Progress(3, 0, False, "x", stream=io.StringIO(), terminal=False)
    shown.close()  # no bar
    shown.bar = Bar()
    shown.close()
    assert shown.bar.closed == 1


def test_a_run_folder_keeps_a_state_log_only_with_a_folder(tmp_path: Path):
    folder = RunFolder(SimpleNamespace(dir=RunDirectory(tmp_path)))
    assert isinstance(folder.state_log, ClientStateLog)
    assert folder.state_log.folder.parent == tmp_path
    assert folder.checkpoint_round == 0 and folder.dir.path == tmp_path
    bare = RunFolder(SimpleNamespace(dir=None))
    assert (bare.state_log, bare.checkpoint_round, bare.dir) == (None, 0, None)


class Group:
    """Stands in for a RankGroup: records the check and runs the writer's function."""

    def __init__(self) -> None:
        self.checked: list = []

    def check_same(self, what: str, value) -> None:
        self.checked.append((what, value))

    def from_writer(self, make):
        return ("sent", make())


def test_open_runs_on_the_writer_with_the_states_inline_only_with_several_processes():
    folder = RunFolder(SimpleNamespace(dir=None, record={"seed": 3}))
    folder._open = lambda resume: ("opened", resume)
    folder._states_inline = lambda state: ("inline", state)
    assert folder.open(True, None) == ("opened", True)
    group = Group()
    assert folder.open(False, group) == ("sent", ("inline", ("opened", False)))
    assert group.checked == [("config", {"seed": 3})]


@pytest.mark.parametrize(("group", "initialized"), [(None, True), ("objects", True), (None, False)])
def test_rank_group_close_leaves_its_own_group_then_the_default_one(
    monkeypatch: pytest.MonkeyPatch, group, initialized: bool
):
    left: list = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: initialized)
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda g=None: left.append(g))
    distributed.RankGroup(0, 2, 0, group).close()
    assert left == ([group] if group is not None else []) + ([None] if initialized else [])
