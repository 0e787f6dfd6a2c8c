"""Results a person can look at: per-run curves, and `fedshare.report` over many runs."""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from fedshare import simulate
from fedshare.errors import FedshareError
from fedshare.paper.compare import lookup
from fedshare.report import default_out, main, report
from fedshare.results.plots import mean_curve, plot_comparison, plot_learning_curve
from fedshare.results.tables import (
    build_report,
    find_runs,
    group_runs,
    load_paper,
    load_run,
    to_markdown,
    write_csv,
)
from fedshare.strategies import FedAvg
from helpers import DIGITS_TRAIN, digits_federation

PNG = b"\x89PNG\r\n\x1a\n"


def fake_run(
    folder: Path,
    strategy: str,
    seed: int,
    final: float,
    *,
    shared: int = 0,
    wall: float = 1.0,
    train: dict | None = None,
    params: dict | None = None,
    partition: dict | None = None,
    device: str = "cpu",
    status: str = "completed",
    rounds: int = 3,
) -> Path:
    """A run directory as fedshare.run writes it: accuracy rises linearly to `final`."""
    folder.mkdir(parents=True)
    partition = partition or {"name": "iid", "seed": None}
    history = [
        {
            "round": r,
            "accuracy": final * r / rounds,
            "loss": 1.0 / r,
            "wall_time_s": wall * r / rounds,
            "bytes_up": 1000 * r,
            "bytes_down": 1000 * r,
            "bytes_shared": shared * r // rounds,
        }
        for r in range(1, rounds + 1)
    ]
    config = {
        "rounds": rounds,
        "seed": seed,
        "device": device,
        "progress": False,
        "train": {"lr": 0.05, "local_epochs": 1, **(train or {})},
        "strategy": {"name": strategy, **(params or {})},
        "data": {"name": "digits", "root": None},
        "partition": partition,
        "model": {"name": "cnn_small"},
        "run_dir": str(folder),
    }
    summary = {
        "strategy": strategy,
        "data": "digits",
        "partition": partition["name"],
        "model": "cnn_small",
        "seed": seed,
        "status": status,
        "rounds_completed": rounds,
        "final_accuracy": final,
        "best_accuracy": final,
        "last10_mean_accuracy": final * (rounds + 1) / (2 * rounds),
        "wall_time_s": wall,
        "bytes_up": 1000 * rounds,
        "bytes_down": 1000 * rounds,
        "bytes_shared": shared,
    }
    (folder / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    return folder


@pytest.fixture
def two_methods(tmp_path: Path) -> Path:
    """fedavg and fedprox, 3 seeds each, laid out like a Hydra sweep."""
    sweep = tmp_path / "multirun" / "2025-01-01_00-00-00"
    for i, seed in enumerate((0, 1, 2)):
        fake_run(sweep / f"{i}-fedavg-{seed}", "fedavg", seed, (70.0, 80.0, 90.0)[i], wall=1 + i)
        fake_run(
            sweep / f"{3 + i}-fedprox-{seed}",
            "fedprox",
            seed,
            (60.0, 65.0, 70.0)[i],
            params={"mu": 0.01},
            shared=(1, 2, 3)[i] * 10**6,
            device=("cpu", "cuda", "cpu")[i],  # execution keys never split rows
        )
    return sweep


def md_cells(text: str, method: str) -> list[str]:
    """The cells of the Markdown table row of `method`."""
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"| {method} ")]
    return [cell.strip() for cell in line.split("|")[1:-1]]


def load_all(*paths: Path) -> list[dict]:
    return [load_run(p) for p in find_runs(paths)]


# ---------------------------------------------------------------------------- finding runs
def test_find_runs_takes_run_dirs_summary_files_and_folders(two_methods):
    runs = find_runs([two_methods])
    assert len(runs) == 6 and all((r / "summary.json").is_file() for r in runs)
    one = runs[0]
    assert find_runs([one, one / "summary.json", two_methods]) == [one, *runs[1:]]
    run = load_run(one)
    assert run["summary"]["strategy"] == "fedavg" and run["config"]["train"]["lr"] == 0.05
    assert [h["round"] for h in run["history"]] == [1, 2, 3]


def test_find_runs_names_the_bad_path(tmp_path):
    with pytest.raises(FedshareError, match=r"no such run directory or folder.*nowhere"):
        find_runs([tmp_path / "nowhere"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FedshareError, match=r"no runs under.*empty"):
        find_runs([tmp_path / "empty"])


def test_a_cut_metrics_line_is_skipped(tmp_path):
    run = fake_run(tmp_path / "r", "fedavg", 0, 50.0)
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write('{"round": 4, "accur')  # killed while appending
    assert len(load_run(run)["history"]) == 3


# ---------------------------------------------------------------------------- grouping and stats
def test_rows_are_methods_and_the_numbers_are_mean_and_sample_std_over_seeds(two_methods):
    result = build_report(load_all(two_methods))
    assert [r.group.method for r in result.rows] == ["fedavg", "fedprox"]
    assert result.setting_keys == ["data", "partition", "model"]
    fedavg, fedprox = result.rows
    assert fedavg.group.seeds == [0, 1, 2] and fedprox.group.seeds == [0, 1, 2]
    assert fedavg.stats["final_accuracy"] == (80.0, 10.0)
    assert fedavg.stats["best_accuracy"] == (80.0, 10.0)
    assert fedavg.stats["last10_mean_accuracy"] == pytest.approx((160 / 3, 20 / 3))
    assert fedavg.stats["wall_time_s"] == (2.0, 1.0)
    assert fedavg.stats["bytes_shared"] == (0.0, 0.0)
    assert fedprox.stats["final_accuracy"] == (65.0, 5.0)
    assert fedprox.stats["bytes_shared"] == (2e6, 1e6)
    assert fedprox.stats["bytes_up_down"] == (6000.0, 0.0)
    assert result.notes == []


def test_a_swept_key_splits_rows_and_a_key_fixed_per_method_is_noted(tmp_path):
    for seed in (0, 1):
        for lr in (0.1, 0.01):
            fake_run(tmp_path / f"avg-{lr}-{seed}", "fedavg", seed, 50 + seed, train={"lr": lr})
        fake_run(tmp_path / f"prox-{seed}", "fedprox", seed, 40.0, train={"optimizer": "adam"})
    result = build_report(load_all(tmp_path))
    assert result.setting_keys == ["data", "partition", "model", "train.lr"]
    rows = [(r.group.method, r.group.setting["train.lr"], len(r.group.runs)) for r in result.rows]
    assert rows == [("fedavg", 0.01, 2), ("fedprox", 0.05, 2), ("fedavg", 0.1, 2)]
    assert result.rows[0].group.setting_label == "digits/iid/cnn_small train.lr=0.01"
    assert result.notes == ["fixed within each row but different between rows: train.optimizer"]
    # --by pools everything else, and says so
    pooled = build_report(load_all(tmp_path), by=["data"])
    assert [(r.group.method, len(r.group.runs)) for r in pooled.rows] == [
        ("fedavg", 4),
        ("fedprox", 2),
    ]
    assert pooled.notes[0] == "pooled over different values of: train.lr"
    assert "fedavg on digits: seed(s) 0, 1 appear more than once" in pooled.notes
    with pytest.raises(FedshareError, match=r"no run has a config key 'train\.lrr'"):
        group_runs(load_all(tmp_path), by=["train.lrr"])


def test_strategy_parameters_join_the_method_name(tmp_path):
    for mu in (0.1, 0.01):
        for seed in (0, 1):
            fake_run(tmp_path / f"{mu}-{seed}", "fedprox", seed, 50.0, params={"mu": mu})
    result = build_report(load_all(tmp_path))
    assert [r.group.method for r in result.rows] == ["fedprox mu=0.01", "fedprox mu=0.1"]
    assert result.setting_keys == ["data", "partition", "model"]


def test_unfinished_runs_are_noted(tmp_path):
    fake_run(tmp_path / "a", "fedavg", 0, 50.0)
    fake_run(tmp_path / "b", "fedavg", 1, 10.0, status="diverged")
    (note,) = build_report(load_all(tmp_path)).notes
    assert note == "fedavg on digits/iid/cnn_small: 1 of 2 runs diverged"


# ---------------------------------------------------------------------------- writers
def test_csv_and_markdown_hold_the_numbers(two_methods, tmp_path):
    result = build_report(load_all(two_methods))
    write_csv(result, tmp_path / "report.csv")
    with (tmp_path / "report.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["method"] for r in rows] == ["fedavg", "fedprox"]
    fedavg, fedprox = rows
    assert (fedavg["data"], fedavg["partition"], fedavg["model"]) == ("digits", "iid", "cnn_small")
    assert (fedavg["n"], fedavg["seeds"]) == ("3", "0;1;2")
    assert float(fedavg["final_accuracy_mean"]) == 80.0
    assert float(fedavg["final_accuracy_std"]) == 10.0
    assert float(fedprox["bytes_shared_mean"]) == 2e6
    assert float(fedprox["wall_time_s_std"]) == 0.0
    text = to_markdown(result)
    assert "6 runs in 2 rows" in text and "![" in text and "(curves.png)" in text
    assert "| rounds |" in text and "last-3 %" in text and "last-10 %" not in text
    assert md_cells(text, "fedavg") == [
        "fedavg", "digits", "iid", "cnn_small", "3", "3", "80.00 ± 10.00", "80.00 ± 10.00",
        "53.33 ± 6.67", "0.01 ± 0.00", "0.00 ± 0.00", "2.0 ± 1.0",
    ]  # fmt: skip
    assert md_cells(text, "fedprox")[6:] == [
        "65.00 ± 5.00", "65.00 ± 5.00", "43.33 ± 3.33", "0.01 ± 0.00", "2.00 ± 1.00", "1.0 ± 0.0",
    ]  # fmt: skip
    widths = {len(line) for line in text.splitlines() if line.startswith("|")}
    assert len(widths) == 1  # aligned


def test_a_single_run_row_has_no_std(tmp_path):
    fake_run(tmp_path / "a", "fedavg", 0, 50.0)
    (row,) = build_report(load_all(tmp_path)).rows
    assert row.stats["final_accuracy"] == (50.0, None)
    assert md_cells(to_markdown(build_report(load_all(tmp_path))), "fedavg")[6] == "50.00"


# ---------------------------------------------------------------------------- paper tables
def test_a_paper_cell_needs_the_methods_overrides(tmp_path):
    column = "rebafl/fmnist_pat2_m20"
    fake_run(tmp_path / "avg", "fedavg", 0, 70.0)
    fake_run(tmp_path / "prox", "fedprox", 0, 60.0, params={"mu": 0.001})  # the table's mu
    fake_run(tmp_path / "prox2", "fedprox", 0, 60.0, params={"mu": 0.1})
    paper = load_paper("rebafl_table1.json", "fmnist_pat2_m20")
    assert paper.columns == (column,) and paper.metric == "last10_mean_accuracy"
    result = build_report(load_all(tmp_path), paper=paper)
    cells = {r.group.method: r.paper for r in result.rows}
    assert cells["fedavg"].entry == lookup("rebafl_table1", column, "fedavg")
    assert cells["fedprox mu=0.001"].entry == lookup("rebafl_table1", column, "fedprox")
    assert cells["fedprox mu=0.1"] is None
    assert cells["fedavg"].measured == 70.0 * 4 / 6
    assert cells["fedavg"].delta == pytest.approx(70.0 * 4 / 6 - cells["fedavg"].entry.mean)
    write_csv(result, tmp_path / "r.csv")
    with (tmp_path / "r.csv").open() as fh:
        by_method = {r["method"]: r for r in csv.DictReader(fh)}
    assert by_method["fedavg"]["paper_column"] == column
    assert by_method["fedprox mu=0.1"]["paper_mean"] == ""
    assert "paper last10_mean_accuracy" in to_markdown(result)


def test_a_papers_column_overrides_pick_the_cell(tmp_path):
    for labels in ([0], [0, 2]):
        partition = {"name": "xormix", "target_labels": labels}
        fake_run(tmp_path / f"x{len(labels)}", "xormixfl", 0, 90.0, partition=partition)
    paper = load_paper("xormixfl_table2")  # one preset, columns told apart by overrides
    result = build_report(load_all(tmp_path), paper=paper)
    presets = [r.paper.entry.preset for r in result.rows]
    assert sorted(presets) == [
        "xormixfl/table2 partition.target_labels=[0,2]",
        "xormixfl/table2 partition.target_labels=[0]",
    ]


def test_a_paper_table_with_several_presets_needs_a_column():
    with pytest.raises(FedshareError, match="several columns; name one with --paper-column"):
        load_paper("flea")
    with pytest.raises(FedshareError, match="no column 'nope'"):
        load_paper("flea", "nope")
    with pytest.raises(FedshareError, match="no paper table 'nope'"):
        load_paper("nope")


# ---------------------------------------------------------------------------- plots
def test_learning_curve_copes_with_empty_histories_and_missing_values(tmp_path):
    plot_learning_curve([], tmp_path / "empty.png")
    records = [
        {"round": 1, "accuracy": None, "loss": None},
        {"round": 2, "accuracy": 40.0, "loss": math.nan, "bytes_up": 5, "bytes_down": 5},
        {
            "round": 3,
            "accuracy": 50.0,
            "loss": 1.2,
            "bytes_up": 9,
            "bytes_down": 9,
            "bytes_shared": 4,
        },
    ]
    plot_learning_curve(records, tmp_path / "sub" / "curves.png", title="a run")
    plot_learning_curve([{"loss": None}], tmp_path / "no_round.png")
    for name in ("empty.png", "sub/curves.png", "no_round.png"):
        assert (tmp_path / name).read_bytes().startswith(PNG)


def test_comparison_plot_averages_seeds_per_round(tmp_path):
    rounds, means, stds = mean_curve([(1, 10.0), (2, 20.0), (1, 30.0), (2, None), (3, math.nan)])
    assert (rounds, means, stds) == ([1, 2], [20.0, 20.0], [pytest.approx(200**0.5), 0.0])
    plot_comparison(
        {"a": [(1, 10.0), (1, 30.0), (2, 40.0)], "b": [(1, 5.0)], "c": []}, tmp_path / "c.png"
    )
    plot_comparison({}, tmp_path / "none.png")
    assert (tmp_path / "c.png").stat().st_size > 1000
    assert (tmp_path / "none.png").read_bytes().startswith(PNG)


# ---------------------------------------------------------------------------- the command
def test_the_command_writes_the_report_next_to_the_runs(two_methods):
    proc = subprocess.run(
        [sys.executable, "-m", "fedshare.report", str(two_methods)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| fedavg " in proc.stdout and "80.00 ± 10.00" in proc.stdout
    for name in ("report.csv", "report.md", "curves.png"):
        assert (two_methods / name).stat().st_size > 0, name
    assert (two_methods / "curves.png").read_bytes().startswith(PNG)
    assert "65.00 ± 5.00" in (two_methods / "report.md").read_text()


def test_a_bad_path_is_one_sentence_and_exit_code_2(tmp_path):
    missing = tmp_path / "no-such-runs"
    proc = subprocess.run(
        [sys.executable, "-m", "fedshare.report", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and str(missing) in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{empty}"], "no runs under"),
        (["{runs}", "--by", "train.nope"], "train.nope"),
        (["{runs}", "--paper", "flea"], "--paper-column"),
        (["{runs}", "--paper-column", "x"], "--paper-column needs --paper"),
        (["{runs}", "--out", "{run}"], "is a run directory"),
        (["{runs}", "--bogus"], "--bogus"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    run = fake_run(tmp_path / "runs" / "a", "fedavg", 0, 50.0)
    names = {"empty": tmp_path / "empty", "runs": tmp_path / "runs", "run": run}
    with pytest.raises(SystemExit) as stop:
        main([a.format(**names) for a in args])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("fedshare.report: error:") and err.count("\n") == 1 and message in err


def test_the_default_output_folder_is_the_common_parent_outside_run_dirs(tmp_path):
    a = fake_run(tmp_path / "runs" / "a", "fedavg", 0, 50.0)
    b = fake_run(tmp_path / "runs" / "deep" / "b", "fedavg", 1, 50.0)
    assert default_out([a, b]) == (tmp_path / "runs").resolve()
    assert default_out([a]) == (tmp_path / "runs").resolve()
    assert default_out([a / "summary.json"]) == (tmp_path / "runs").resolve()


# ---------------------------------------------------------------------------- a real run
def test_a_real_run_is_reported(tmp_path, capsys):
    data = digits_federation(num_clients=3)
    for seed in (0, 1):
        simulate(
            FedAvg(),
            data,
            "cnn_small",
            rounds=2,
            seed=seed,
            train=DIGITS_TRAIN,
            run_dir=tmp_path / "runs" / f"s{seed}",
        )
    out = report([str(tmp_path / "runs"), "--out", str(tmp_path / "report")])
    assert out == tmp_path / "report"
    with (out / "report.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert (row["method"], row["data"], row["model"], row["n"]) == (
        "fedavg",
        "digits",
        "cnn_small",
        "2",
    )
    finals = [load_run(tmp_path / "runs" / f"s{s}")["summary"]["final_accuracy"] for s in (0, 1)]
    assert float(row["final_accuracy_mean"]) == pytest.approx(sum(finals) / 2)
    assert (out / "curves.png").read_bytes().startswith(PNG)
    assert "| fedavg" in capsys.readouterr().out
    run = load_run(tmp_path / "runs" / "s0")
    plot_learning_curve(run["history"], tmp_path / "curves.png", title="fedavg, seed 0")
    assert (tmp_path / "curves.png").stat().st_size > 1000
