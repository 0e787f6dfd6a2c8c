"""`python -m fedshare.reproduce`: job lists as data, resumable runs, reports, docs blocks."""

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from fedshare.config.compose import run_values
from fedshare.config.validation import check_run
from fedshare.errors import FedshareError
from fedshare.paper.compare import entries
from fedshare.reproduce import available_jobs, cells, launch, load_job, measure, run_cells
from fedshare.reproduce.__main__ import main
from fedshare.reproduce.docs import BLOCK, default_files, regenerate
from fedshare.reproduce.jobs import Layout, merged, runnable_methods, scale_methods
from fedshare.reproduce.launch import DONE, FAILED, RESTART, RESUME, state_of
from fedshare.reproduce.measure import Measured, cell_value, curve_value, load_stored
from fedshare.reproduce.render import (
    column_means,
    layout_markdown,
    lists_markdown,
    stat_label,
    stat_text,
    tables_markdown,
)
from fedshare.results.rundir import read_metrics
from fedshare.run import config_dir

TINY = str(Path(__file__).parent / "data" / "reproduce" / "tiny.yaml")
PAPERS = ("xormixfl", "rebafl", "flea", "fedpft", "fedaa", "fedproto", "fedtgp", "lg_fedavg")
FEDPFT_OTHER = {  # FedPFT's named scales that are no claim check: the docs' other tables
    "fedpft/table2": ("topology",),
    "fedpft/table5": ("head_budget", "server_distill", "frontier"),
}
FEDPFT_CHECKS = {  # FedPFT's claim checks (tests/test_fedpft_claims.py): its other named scales
    t: tuple(s for s in load_job(t).scales if s not in ("paper", "cpu", "preset", *FEDPFT_OTHER[t]))
    for t in FEDPFT_OTHER
}


def test_every_paper_table_has_a_job_and_its_cells_cover_the_table():
    names = [n for n in available_jobs() if load_job(n).numbers]
    assert {n.split("/")[0] for n in names} == set(PAPERS)
    for name in names:
        job = load_job(name)
        in_table = {(e.preset, e.method) for e in entries(job.numbers[0])}
        runnable = {m for m, o in job.methods.items() if o is not None}
        found = cells(name, "paper", seeds=[0])
        assert {(c.column, c.method) for c in found} == {
            (p, m) for p, m in in_table if m in runnable
        }, name
        for cell in found:
            assert cell.overrides[0] == f"experiment={cell.column.split()[0]}"
            assert cell.overrides[-1] == "seed=0"


def test_cell_overrides_compose_in_order_and_later_keys_win():
    assert merged(["a=1", "b=2"], ["a=3"]) == ("b=2", "a=3")
    (cell,) = cells("xormixfl/table2", "cpu", ["[0,2]"], ["mixfl"], [4])
    assert cell.overrides == (
        "experiment=xormixfl/table2",
        "partition.target_labels=[0,2]",
        "train.local_epochs=2",
        "data.test_subset=2000",
        "strategy=mixfl",
        "seed=4",
    )
    assert cell.folder == "table2-partition.target_labels-0-2/mixfl/seed4"
    # a stand-in replaces the paper's preset
    standin = cells("fedaa/table2", "cpu", methods=["fedprox"], seeds=[0])[0].overrides
    assert not any(o.startswith("experiment=") for o in standin) and "data=fmnist" in standin
    assert "strategy.mu=0.01" in standin


def test_every_scale_composes():
    """The first cell of every scale of every table composes (the methods' overrides are
    composed by each paper's own test file; FedPFT's claim checks' every cell by the next)."""
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        for name in available_jobs():
            job = load_job(name)
            for scale in set(job.scales) - set(FEDPFT_CHECKS.get(name, ())):
                cell = cells(name, scale, seeds=[0])[0]
                cfg = compose("config", overrides=list(cell.overrides))
                rows = scale_methods(job, scale)[cell.method]
                if rows:  # a row without overrides runs its preset's strategy (CPU presets)
                    strategy = rows[0].removeprefix("strategy=")
                    assert cfg.strategy.name == strategy, (name, scale, cell.method)


def test_every_cell_of_fedpfts_claim_checks_passes_the_runs_checks():
    """FedPFT's claim-check scales (tests/test_fedpft_claims.py runs them): every cell's
    overrides compose and pass the run's value checks. Their rows set only the strategy, so
    each column is composed once and each row's strategy group applied to it."""
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        for table, scales in FEDPFT_CHECKS.items():
            for scale in scales:
                methods = scale_methods(load_job(table), scale)
                found = cells(table, scale, seeds=[0])
                for column in dict.fromkeys(c.column for c in found):
                    first = next(c for c in found if c.column == column)
                    own = set(methods[first.method] or ())
                    base = compose("config", overrides=[o for o in first.overrides if o not in own])
                    for cell in (c for c in found if c.column == column):
                        rows = methods[cell.method] or ()
                        assert all(o.startswith("strategy") for o in rows), cell.method
                        cfg = base.copy()
                        group = rows[0].removeprefix("strategy=")
                        cfg.strategy = OmegaConf.load(config_dir() / "strategy" / f"{group}.yaml")
                        for key, _, value in (o.partition("=") for o in rows[1:]):
                            OmegaConf.update(cfg, key, yaml.safe_load(value), merge=True)
                        check_run(run_values(cfg))


def test_every_cell_of_fedpfts_other_scales_composes_and_passes_the_runs_checks():
    """The scales of docs/fedpft.md's other tables (topology, head budget, server distillation,
    frontier), whose rows set more than the strategy: every cell composes with its row's
    strategy and passes the run's value checks; the frontier's multi-round rows run the
    multi-round preset (20 rounds), its one-shot rows one round."""
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        for table, scales in FEDPFT_OTHER.items():
            for scale in scales:
                methods = scale_methods(load_job(table), scale)
                for cell in cells(table, scale, seeds=[0]):
                    cfg = compose("config", overrides=list(cell.overrides))
                    strategy = next(o for o in methods[cell.method] or () if "strategy=" in o)
                    assert cfg.strategy.name == strategy.removeprefix("strategy="), cell
                    check_run(run_values(cfg))
                    if scale == "frontier":
                        multi = "experiment=fedpft/heads_multiround" in cell.overrides
                        assert cfg.rounds == (20 if multi else 1), cell.method
                    if "strategy.head_budget=epochs" in cell.overrides:
                        assert cfg.strategy.head_budget == "epochs", cell.method


def test_bad_names_are_one_sentence_errors():
    with pytest.raises(FedshareError, match="no reproducible table 'flea/table9'"):
        load_job("flea/table9")
    with pytest.raises(FedshareError, match="has no scale 'cpu'"):
        cells("rebafl/table2", "cpu")
    with pytest.raises(FedshareError, match="no method 'nope'; methods: fedavg, fedprox, diverges"):
        cells(TINY, methods=["nope"])
    proc = subprocess.run(
        [sys.executable, "-m", "fedshare.reproduce", "run", "flea/table9"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "no reproducible table" in proc.stderr


def test_a_failed_cell_is_kept_the_others_finish_and_a_second_run_starts_nothing(
    tmp_path, monkeypatch, capsys
):
    """The tiny table through the basic launcher (one process): the diverging cell is
    recorded as failed and the two others finish; a second run starts no process and touches
    no file; `--retry-failed` would rerun only the failed cell; report and docs render."""
    out = tmp_path / "tiny"
    tiny = cells(TINY)
    first = run_cells(tiny, out)
    assert [p.state for p in first] == [DONE, DONE, FAILED]
    diverged = json.loads((out / tiny[2].folder / "summary.json").read_text())
    assert diverged["status"] == "diverged" and "non-finite" in diverged["error"]
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}

    def refuse(*args, **kwargs):
        raise AssertionError("a second run started a process")

    monkeypatch.setattr(launch, "run_child", refuse)
    assert [p.state for p in run_cells(tiny, out)] == [DONE, DONE, FAILED]
    assert stamps == {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    started = []
    monkeypatch.setattr(launch, "run_child", lambda cmd, env: started.append(cmd))
    run_cells(tiny, out, retry_failed=True)
    (retried,) = json.loads((out / "cells.json").read_text())
    assert len(started) == 1 and "train.lr=1e9" in retried and "overwrite=true" in retried

    measured = {m.method: m for m in measure(tiny, load_job(TINY).numbers, out)}
    for method in ("fedavg", "fedprox"):
        summary = json.loads((out / f"digits_quickstart/{method}/seed0/summary.json").read_text())
        assert measured[method].values == [summary["final_accuracy"]]
        assert measured[method].comparison.delta == pytest.approx(
            summary["final_accuracy"] - {"fedavg": 80.0, "fedprox": 10.0}[method]
        )
    # the fixture's made-up "paper" numbers: FedProx's 10 % is far below anything measured
    assert not measured["fedprox"].comparison.ok
    assert measured["diverges"].values == [] and measured["diverges"].comparison is None

    with pytest.raises(SystemExit) as stop:
        main(["report", TINY, str(out)])
    assert stop.value.code == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("| digits_quick"))
    assert f"{measured['fedavg'].values[0]:.2f} (1)" in row and "80.00 ± 0.00" in row
    assert {p.name for p in out.iterdir()} >= {"report.md", "report.csv", "report.png"}

    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n<!-- reproduce:{TINY} {out} -->\nstale\n<!-- /reproduce -->\nafter\n")
    assert regenerate([doc]) == [doc]
    text = doc.read_text()
    assert "stale" not in text and "80.00 ± 0.00" in text and text.endswith("after\n")
    assert regenerate([doc], check=True) == []  # up to date now
    gone = tmp_path / "gone.md"
    gone.write_text(f"<!-- reproduce:{TINY} {tmp_path / 'none'} -->\nkept\n<!-- /reproduce -->\n")
    assert regenerate([gone]) == [] and "kept" in gone.read_text()


@pytest.mark.slow
def test_cells_run_in_parallel_through_joblib(tmp_path):
    out = tmp_path / "tiny"
    tiny = cells(TINY, methods=["fedavg", "fedprox"])
    assert [p.state for p in run_cells(tiny, out, jobs=2)] == [DONE, DONE]
    assert "hydra/launcher=joblib" in launch.launcher_overrides(2, None)


def test_an_interrupted_cell_is_resumed_and_one_without_a_checkpoint_restarted(tmp_path):
    """The folders an interrupted run leaves: with a checkpoint, the cell's job resumes it in
    place; with run files but no checkpoint, it starts over (the real interruption:
    test_interrupted_run_continues_from_its_checkpoint, slow tier)."""
    out = tmp_path / "tiny"
    fedavg, fedprox, _ = cells(TINY)
    interrupted = out / fedavg.folder
    interrupted.mkdir(parents=True)
    (interrupted / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    (interrupted / "checkpoint.pt").write_bytes(b"")
    early = out / fedprox.folder
    early.mkdir(parents=True)
    (early / "config.yaml").write_text("seed: 0\n")
    planned = launch.plan([fedavg, fedprox], out)
    assert [p.state for p in planned] == [RESUME, RESTART]
    launch.command(planned, out)
    jobs = json.loads((out / "cells.json").read_text())
    assert jobs[0][-2:] == [f"hydra.sweep.subdir={fedavg.folder}", "resume=true"]
    assert f"run_dir={interrupted.resolve()}" in jobs[0]
    assert jobs[1][-1] == "overwrite=true"


@pytest.mark.slow
def test_interrupted_run_continues_from_its_checkpoint(tmp_path):
    """SIGINT stops `run` during the cell's first rounds; the next `run` resumes that run
    folder (its first rounds' records stay as they were) instead of starting it over."""
    out = tmp_path / "tiny"
    command = [sys.executable, "-m", "fedshare.reproduce", "run", TINY, "--methods", "fedavg"]
    command += ["--out", str(out)]
    slow = [*command, "--set", "rounds=6", "train.local_epochs=3"]
    proc = subprocess.Popen(
        slow,
        start_new_session=True,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C's signal reaches it even where this process was started with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    metrics = out / "digits_quickstart" / "fedavg" / "seed0" / "metrics.jsonl"
    try:
        while not (metrics.parent / "checkpoint.pt").exists():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    folder = metrics.parent
    assert state_of(folder) == RESUME
    before = read_metrics(metrics)
    assert 1 <= len(before) < 6
    done = subprocess.run(slow, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "1 to resume" in done.stdout and "resume=true" in (out / "cells.json").read_text()
    after = read_metrics(metrics)
    assert [r["round"] for r in after] == list(range(1, 7))
    assert after[: len(before)] == before
    assert state_of(folder) == DONE


def fake_run(
    folder: Path, accuracy: float, per_class: list[float], targets: list[int], **summary: Any
) -> None:
    """A finished run folder as the engine writes it (the files `measure` reads)."""
    folder.mkdir(parents=True)
    summary = {"status": "completed", "final_accuracy": accuracy, "best_accuracy": 99.0, **summary}
    (folder / "summary.json").write_text(json.dumps(summary))
    record = {"round": 1, "accuracy": accuracy, "per_class_accuracy": per_class}
    (folder / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    (folder / "config.yaml").write_text(f"partition:\n  target_labels: {targets}\n")


def test_report_reads_each_tables_metric_beside_the_papers_number(tmp_path):
    """Two seeds of XorMixFL's Table 2 cell [9] (paper 91.54) and of a Table 4 cell, whose
    second table is the accuracy on the target label 9 (paper 52.89 for XorMixFL, M = 1,
    α = 0.25, p = 1): the mean over the seeds, its sample std, Δ and the label's accuracy."""
    from fedshare.reproduce.render import tables_markdown

    t2 = cells("xormixfl/table2", columns=["=[9]"], methods=["xormixfl"], seeds=[0, 1])
    for cell, acc in zip(t2, (91.0, 92.0), strict=True):
        fake_run(tmp_path / cell.folder, acc, [0.0] * 10, [9])
    (item,) = measure(t2, load_job("xormixfl/table2").numbers, tmp_path)
    assert item.values == [91.0, 92.0] and item.paper == (91.54, 0.0)
    assert item.comparison.delta == pytest.approx(91.5 - 91.54) and item.comparison.ok
    text = tables_markdown([item])
    assert "91.50 ± 0.71 (2)" in text and "91.50 (91.54) ✓" in text

    column = "xormixfl/table4 strategy.M=1 strategy.alpha=0.25 strategy.p=1"
    t4 = cells("xormixfl/table4", columns=[column], methods=["xormixfl"], seeds=[0, 1])
    for cell, nine in zip(t4, (50.0, 54.0), strict=True):
        fake_run(tmp_path / cell.folder, 90.0, [100.0] * 9 + [nine], [9])
    test, label9 = measure(t4, load_job("xormixfl/table4").numbers, tmp_path)
    assert (test.metric, test.values) == ("final_accuracy", [90.0, 90.0])
    assert (label9.metric, label9.values) == ("target_label_accuracy", [50.0, 54.0])
    assert label9.paper[0] == 52.89 and label9.comparison.ok


def test_a_checks_cells_without_paper_numbers_are_printed_as_measured_only():
    items = [
        Measured("fedpft_table5", "fedpft/digits_dir0.3", "centralized", "final_accuracy"),
        Measured("fedpft_table5", "fedpft/digits_dir0.3", "kd", "final_accuracy"),
    ]
    items[0].values, items[0].seeds = [90.0, 92.0], [0, 1]
    text = tables_markdown(items)
    assert "no paper number" in text and "| centralized | 91.00 ± 1.41 (2) |" in text
    assert "| kd          | —" in text and "Δ" not in text


def test_a_layout_prints_cells_as_rows_by_a_parameter_and_must_name_one_method_a_value(
    tmp_path,
):
    items = [Measured("t", "c", m, "final_accuracy") for m in ("plain", "eps1")]
    items[0].values, items[1].values = [90.0, 92.0], [80.0]
    layout = Layout("ε", ("∞", "1"), {"a": ("plain", "eps1"), "b": ("plain", None)})
    text = layout_markdown(items, layout)
    assert "rows × ε" in text and "| ∞ " in text
    assert "| a | 91.00 ± 1.41 (2) | 80.00 (1) |" in text
    assert "| b | 91.00 ± 1.41 (2) |           |" in text
    bad = tmp_path / "bad.yaml"
    tiny_numbers = str(Path(TINY).with_name("tiny.json"))
    bad.write_text(
        yaml.safe_dump(
            {
                "numbers": [tiny_numbers],
                "scales": {"paper": {"layout": {"columns": ["1", "2"], "rows": {"a": ["x"]}}}},
            }
        )
    )
    with pytest.raises(FedshareError, match="a layout needs 'columns'"):
        load_job(str(bad))
    for name in available_jobs():  # the jobs' layouts name their scales' methods
        job = load_job(name)
        for scale, spec in job.scales.items():
            if spec.layout is not None:
                named = {m for row in spec.layout.rows.values() for m in row if m}
                assert named <= set(runnable_methods(job, scale)), (name, scale)


def test_a_scales_lists_are_read_per_seed_stored_and_printed_element_by_element(tmp_path):
    """The chain's per-client accuracies (`lists` of fedpft/table2's `chain` scale): each
    element's mean ± std over seeds and the mean of a run's elements, from run folders and
    from a stored file alike."""
    runs = tmp_path / "runs"
    chain = cells("fedpft/table2", "chain", methods=["fedpft_chain"], seeds=[0, 1])
    for cell, base in zip(chain, (70.0, 72.0), strict=True):
        lists = {"chain_accuracy": [base, base + 10, base + 20], "local_accuracy": [base]}
        fake_run(runs / cell.folder, base + 20, [], [], **lists)
    names = load_job("fedpft/table2").scale("chain").lists
    (item,) = measure(chain, load_job("fedpft/table2").numbers, runs, lists=names)
    assert item.lists["chain_accuracy"] == [[70.0, 80.0, 90.0], [72.0, 82.0, 92.0]]
    text = lists_markdown([item], names)
    assert "| `chain_accuracy` | 71.00 ± 1.41 (2) | 81.00 ± 1.41 (2) | 91.00 ± 1.41 (2) " in text
    assert text.count("81.00 ± 1.41 (2)") == 2  # element 2 and the mean of a run's elements
    assert "| `local_accuracy` | 71.00 ± 1.41 (2) |                  |" in text
    stored = tmp_path / "chain.json"
    with pytest.raises(SystemExit) as stop:
        main(["store", "fedpft/table2", str(runs), "--scale", "chain", "--to", str(stored)])
    assert stop.value.code == 0
    (from_file,) = measure(chain, load_job("fedpft/table2").numbers, stored)
    assert from_file.lists == item.lists


def test_store_keeps_a_run_folders_cells_and_report_reads_them_back(tmp_path):
    """`store` writes the measured cells of a run folder to a small JSON file; `measure`
    reads the same values and curve statistics from it; a stored mean ± std (numbers kept
    without their per-seed values) renders as such."""
    from fedshare.reproduce.render import tables_markdown

    runs = tmp_path / "runs"
    t2 = cells("xormixfl/table2", columns=["=[9]"], methods=["xormixfl"], seeds=[0, 1])
    for cell, acc in zip(t2, (91.0, 92.0), strict=True):
        fake_run(runs / cell.folder, acc, [0.0] * 10, [9])
    stored = tmp_path / "t2.json"
    with pytest.raises(SystemExit) as stop:
        main(["store", "xormixfl/table2", str(runs), "--columns", "=[9]", "--to", str(stored)])
    assert stop.value.code == 0
    data = json.loads(stored.read_text())
    assert data["table"] == "xormixfl/table2" and data["command"].startswith("python -m")
    (cell,) = data["cells"]
    assert (cell["seeds"], cell["values"]) == ([0, 1], [91.0, 92.0])
    numbers = load_job("xormixfl/table2").numbers
    stats = load_job("xormixfl/table2").scale("paper").stats  # the target-label accuracy
    (from_runs,), (from_file,) = measure(t2, numbers, runs, stats), measure(t2, numbers, stored)
    assert from_file.values == from_runs.values and from_file.stats == from_runs.stats
    assert from_file.stats == [{"target_label_accuracy": 0.0}] * 2
    assert tables_markdown([from_file], stats) == tables_markdown([from_runs], stats)

    data["cells"] = [{**cell, "seeds": [0, 1, 2], "mean": 95.23, "std": 0.4}]
    del data["cells"][0]["values"], data["cells"][0]["stats"]
    stored.write_text(json.dumps(data))
    three = cells("xormixfl/table2", columns=["=[9]"], methods=["xormixfl"], seeds=[0, 1, 2])
    (item,) = measure(three, numbers, stored)
    assert item.n == 3 and item.mean_std == (95.23, 0.4)
    assert "95.23 ± 0.40 (3)" in tables_markdown([item])
    (one,) = measure(three[:1], numbers, stored)  # seed 0 asked for: still the 3 seeds' mean
    assert one.n == 3 and one.seeds == [0, 1, 2]
    stored.write_text(json.dumps({"cells": [{"column": "x"}]}))
    with pytest.raises(FedshareError, match="not a stored file of measured cells"):
        measure(three, numbers, stored)


def test_the_docs_tables_are_generated_from_the_stored_cells_and_a_hand_edit_is_found(
    tmp_path, monkeypatch
):
    """Every `reproduce:` block of docs/ reads cells that are in the repository
    (docs/measured/), and regenerating changes nothing; an edited number is found."""
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    docs = default_files()
    blocks = [m["args"] for path in docs for m in BLOCK.finditer(path.read_text())]
    assert len(blocks) >= 20
    for args in blocks:
        source = Path(shlex.split(args)[1])
        assert source.is_file() and source.parts[:2] == ("docs", "measured"), args
    assert regenerate(docs, check=True) == []

    edited = tmp_path / "xormixfl.md"
    text = (root / "docs" / "xormixfl.md").read_text()
    assert "| XorMixFL              | 95.23 (94.44) ✓" in text
    edited.write_text(
        text.replace(
            "| XorMixFL              | 95.23 (94.44) ✓", "| XorMixFL              | 96.23 (94.44) ✓"
        )
    )
    assert regenerate([edited], check=True) == [edited]
    assert regenerate([edited]) == [edited] and edited.read_text() == text
    # a statistic beside the metric (Table 3's MDS std) is generated too
    assert "| 255.72 ± 7.25 " in text
    edited.write_text(text.replace("| 255.72 ± 7.25 ", "| 255.73 ± 7.25 "))
    assert regenerate([edited], check=True) == [edited]
    with pytest.raises(SystemExit) as stop:
        main(["docs", "--check", str(edited)])
    assert stop.value.code == 1


def curve_run(folder: Path, accuracy: list[float], summary: dict, seconds: float = 2.0) -> None:
    """A finished run folder with one record a round (accuracy, cumulative wall time)."""
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"status": "completed", **summary}))
    records = [
        {"round": r, "accuracy": a, "wall_time_s": seconds * r, "test_davies_bouldin": 10.0 - r}
        for r, a in enumerate(accuracy, start=1)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "config.yaml").write_text("seed: 0\n")


def test_statistics_are_read_from_a_run_folder_by_name():
    """Curve statistics, summary keys, seconds a round, the last record's keys and `%`."""
    curve = [10.0, 30.0, 20.0, 50.0, 40.0]
    assert curve_value(curve, "best") == 50.0
    assert curve_value(curve, "last2") == 45.0 and curve_value(curve, "from4") == 45.0
    assert curve_value(curve, "min_last3") == 20.0 and curve_value(curve, "max_last3") == 50.0
    assert curve_value(curve, "absdelta_last3") == 20.0  # |50-20|, |40-50|
    assert curve_value(curve, "absdelta_from2") == pytest.approx(50 / 3)  # 10, 30, 10
    assert curve_value(curve, "settled") == pytest.approx(110 / 3)  # the second half
    assert curve_value(curve, "absdelta_last1") is None and curve_value(curve, "nope") is None
    run = {
        "summary": {"mds_std": 2.5, "upload_target_exposed": 0.25},
        "config": {"partition": {"target_labels": [1, 2]}},
        "history": [
            {"round": 1, "accuracy": 10.0, "wall_time_s": 3.0, "per_class_accuracy": [0, 40, 60]},
            {"round": 2, "accuracy": 20.0, "wall_time_s": 8.0, "db": 1.5},
        ],
    }
    assert cell_value(run, "mds_std") == 2.5 and cell_value(run, "upload_target_exposed%") == 25
    assert cell_value(run, "seconds_per_round") == 4.0 and cell_value(run, "db") == 1.5
    assert cell_value(run, "target_label_accuracy") == 50.0 and cell_value(run, "last2") == 15.0
    assert cell_value(run, "absent") is None
    assert cell_value(run, "bytes_sent") is None  # no byte count
    run["summary"].update(bytes_up=3_000_000, bytes_down=500_000, bytes_peer=250_000)
    assert cell_value(run, "bytes_sent") == 3_750_000 and cell_value(run, "bytes_sent/1e6") == 3.75
    assert cell_value(run, "mds_std/0.5") == 5.0 and cell_value(run, "absent/2") is None
    assert stat_label("bytes_sent/1e6") == "MB sent" and stat_label("x/1e3") == "x / 1e3"
    assert stat_label("absdelta_last50") == "mean \\|Δ\\| last-50"
    assert (
        stat_label("min_last10") == "min last-10" and stat_label("from10") == "mean from round 10"
    )
    assert stat_label("seeds:wall_time_s") == "s / run per seed" and stat_label("x%") == "x %"
    assert stat_label("seeds:cpu_time_s") == "CPU s / run per seed"


def test_a_curve_statistic_of_another_key_reads_that_keys_rounds():
    """`STAT@KEY` (the heterogeneous papers' best mean personal accuracy): the curve statistic
    over KEY's per-round values, rounds without KEY skipped; not the accuracy's curve."""
    history = [
        {"round": 1, "accuracy": 90.0, "personal_accuracy": 40.0},
        {"round": 2, "accuracy": 10.0},
        {"round": 3, "accuracy": 20.0, "personal_accuracy": 70.0},
        {"round": 4, "accuracy": 30.0, "personal_accuracy": 60.0},
    ]
    run = {"summary": {"personal_accuracy": 60.0}, "config": {}, "history": history}
    assert cell_value(run, "best@personal_accuracy") == 70.0
    assert cell_value(run, "last2@personal_accuracy") == 65.0
    assert cell_value(run, "best") == 90.0 and cell_value(run, "best@absent") is None
    assert cell_value(run, "best@personal_accuracy/10") == 7.0  # `/K` applies to the whole
    assert cell_value(run, "nope@personal_accuracy") is None
    assert stat_label("best@personal_accuracy") == "best personal_accuracy"


def test_a_round_range_and_the_best_round_of_a_100_round_curve():
    """FLea's UCI-HAR tables: the mean, min and max of rounds 31-100 (`from31`,
    `min_from31`, `max_from31`: fedshare numbers a run's rounds 1-100, so the 31st evaluated
    round is round 31) and the round of the best accuracy (the first one where it ties),
    listed per seed as a whole number."""
    curve = [float(r % 7) + (50.0 if r == 12 else 0.0) for r in range(1, 101)]
    curve[39] = curve[11]  # round 40 ties round 12's best
    assert curve_value(curve, "from31") == pytest.approx(statistics.fmean(curve[30:]))
    assert curve_value(curve, "from31") != pytest.approx(curve_value(curve, "settled"))
    assert curve_value(curve, "min_from31") == 0.0 and curve_value(curve, "max_from31") == 55.0
    history = [{"round": r, "accuracy": a} for r, a in enumerate(curve, start=1)]
    run = {"summary": {}, "config": {}, "history": [{"round": 0}, *history]}
    assert cell_value(run, "best_round") == 12.0
    assert cell_value({**run, "history": [{"round": 1}]}, "best_round") is None
    item = Measured("flea", "c", "m", "best_accuracy", [55.0, 54.0], [0, 1])
    item.stats = [{"best_round": 12.0, "from31": 3.1, "wall_time_s": 2288.4}, {"best_round": 40.0}]
    assert stat_text(item, "seeds:best_round") == "12 / 40"
    assert stat_text(item, "seeds:wall_time_s") == "2288.40 / —"
    assert stat_text(item, "seeds:from31") == "3.10 / —"
    assert stat_label("seeds:best_round") == "best round per seed"
    assert stat_label("min_from31") == "min from round 31"


def test_a_jobs_statistics_are_measured_stored_and_printed_beside_the_metric(tmp_path):
    """XorMixFL Table 3's job names three statistics besides the MDS mean: `report` prints
    them as mean ± sample std over the seeds, `store` keeps them per seed, and the stored
    file prints the same; `--stats` picks others, `seeds:NAME` lists each seed's."""
    runs = tmp_path / "runs"
    t3 = cells("xormixfl/table3", columns=["M=1 strategy.p=1"], methods=["xormixfl"], seeds=[0, 1])
    for cell, (mds, std, share) in zip(
        t3, ((2200.0, 250.0, 0.5), (2210.0, 260.0, 0.4)), strict=True
    ):
        summary = {"mds_mean": mds, "mds_std": std, "mds_upload_mean": 1900.0}
        curve_run(runs / cell.folder, [10.0], {**summary, "upload_target_exposed": share})
    assert load_job("xormixfl/table3").scale("paper").stats == (
        "mds_std",
        "mds_upload_mean",
        "upload_target_exposed%",
    )
    with pytest.raises(SystemExit):
        main(["report", "xormixfl/table3", str(runs), "--to", str(tmp_path / "rep")])
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| mds_std " in text and "| upload_target_exposed % |" in text
    row = next(line for line in text.splitlines() if line.startswith("| strategy.M=1"))
    assert "| 2205.00 ± 7.07 (2) |" in row and "| 255.00 ± 7.07 " in row
    assert "| 1900.00 " in row and "| 45.00 ± 7.07 " in row
    csv_head = (tmp_path / "rep" / "report.csv").read_text().splitlines()[0]
    assert csv_head.endswith("upload_target_exposed%_mean,upload_target_exposed%_std")

    stored = tmp_path / "t3.json"
    with pytest.raises(SystemExit):
        main(["store", "xormixfl/table3", str(runs), "--to", str(stored)])
    (cell,) = load_stored(stored)["cells"]
    assert cell["stats"][1] == {
        "mds_std": 260.0,
        "mds_upload_mean": 1900.0,
        "upload_target_exposed%": 40.0,
    }
    with pytest.raises(SystemExit):
        main(["report", "xormixfl/table3", str(stored), "--to", str(tmp_path / "rep2")])
    again = (tmp_path / "rep2" / "report.md").read_text()
    body = text.split("Table 3 (", 1)[1]
    assert again.split("Table 3 (", 1)[1] == body

    with pytest.raises(SystemExit):
        main(
            [
                "report",
                "xormixfl/table3",
                str(runs),
                "--stats",
                "seeds:mds_std",
                "best",
                "--to",
                str(tmp_path / "rep3"),
            ]
        )
    row = next(
        line
        for line in (tmp_path / "rep3" / "report.md").read_text().splitlines()
        if line.startswith("| strategy.M=1")
    )
    assert "| 250.00 / 260.00 " in row and row.rstrip().endswith("| 10.00 ± 0.00 |")


def test_a_checks_own_metric_has_no_paper_number_and_lists_its_seeds(tmp_path):
    """ReBaFL Fig. 1's scale reads the last-5 mean (Table I's metric is the last-10 mean), so
    its cells are a check's: mean ± std and each seed's last-5, best and swing from round 10."""
    fig1 = cells("rebafl/table1", "fig1", seeds=[0, 1])
    curves = {
        "fedavg": (
            [float(10 * (r % 2)) for r in range(30)],
            [float(10 * ((r + 1) % 2)) for r in range(30)],
        ),
        "fedavg_ft": ([50.0] * 25 + [60.0] * 5, [50.0] * 25 + [70.0] * 5),
    }
    for cell in fig1:
        curve_run(tmp_path / cell.folder, curves[cell.method][cell.seed], {})
    items = measure(
        fig1,
        load_job("rebafl/table1").numbers,
        tmp_path,
        ("seeds", "seeds:best", "seeds:absdelta_from10"),
        "last5",
    )
    assert all(i.paper is None and i.comparison is None for i in items)
    ft = next(i for i in items if i.method == "fedavg_ft")
    assert ft.values == [60.0, 70.0] and [s["absdelta_from10"] for s in ft.stats] == [0.5, 1.0]
    with pytest.raises(SystemExit):
        main(
            [
                "report",
                "rebafl/table1",
                str(tmp_path),
                "--scale",
                "fig1",
                "--seeds",
                "0",
                "1",
                "--to",
                str(tmp_path / "rep"),
            ]
        )
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "no paper number" in text and "metric `last5`" in text and "Δ" in text
    assert "| fedavg_ft | 65.00 ± 7.07 (2) | 60.00 / 70.00 | 60.00 / 70.00 | 0.50 / 1.00" in text
    assert "| fedavg    | 5.00 ± 1.41 (2)  | 6.00 / 4.00   | 10.00 / 10.00 | 10.00 / 10.00" in text


def test_stored_summaries_and_cells_added_to_a_stored_file(tmp_path):
    """A stored cell typed as a summary (mean ± std, per-seed values rounded, statistics as a
    mean, a mean ± std or a range) prints as typed; `store --add` puts new cells into a stored
    file in place of the same cells, each with its own command, date and source."""
    column = "rebafl/fmnist_pat2_m20"
    typed = {
        "numbers": "rebafl_table1",
        "column": column,
        "method": "fedavg",
        "seeds": [0, 1],
        "values": [74.1, 75.0],
        "mean": 74.57,
        "stat_means": {"last5": {"mean": 70.0, "std": 1.5}, "wall_time_s": {"min": 12, "max": 14}},
    }
    stored = tmp_path / "t1.json"
    head = {"table": "rebafl/table1", "scale": "paper", "command": "typed", "date": "2026-11-21"}
    stored.write_text(
        json.dumps({**head, "cells": [typed, {**typed, "method": "moon", "mean": 61.0}]})
    )
    chosen = cells(
        "rebafl/table1", columns=["fmnist_pat2_m20"], methods=["fedavg", "moon"], seeds=[0, 1]
    )
    numbers = load_job("rebafl/table1").numbers
    fedavg, moon = measure(chosen, numbers, stored, ("seeds", "last5", "wall_time_s"))
    text = tables_markdown([fedavg, moon], ("seeds", "last5", "wall_time_s"))
    assert "| 74.57 (2) | 75.27 ± 0.00 | -0.70 | yes " in text
    assert "| 74.10 / 75.00 | 70.00 ± 1.50 | 12.00–14.00 |" in text

    runs = tmp_path / "runs"
    for cell in chosen:
        if cell.method == "moon":
            curve_run(runs / cell.folder, [60.0] * 20, {"last10_mean_accuracy": 62.0 + cell.seed})
    with pytest.raises(SystemExit):
        main(
            [
                "store",
                "rebafl/table1",
                str(runs),
                "--columns",
                "fmnist_pat2_m20",
                "--methods",
                "moon",
                "--seeds",
                "0",
                "1",
                "--add",
                "--to",
                str(stored),
                "--source",
                "rerun here",
            ]
        )
    data = load_stored(stored)
    assert [c["method"] for c in data["cells"]] == ["fedavg", "moon"] and data["command"] == "typed"
    moon = data["cells"][1]
    assert moon["values"] == [62.0, 63.0] and moon["provenance"]["source"] == "rerun here"
    assert moon["stats"][0]["min_last10"] == 60.0 and "absdelta_last50" in moon["stats"][0]
    with pytest.raises(SystemExit):
        main(
            [
                "report",
                "rebafl/table1",
                str(stored),
                "--columns",
                "fmnist_pat2_m20",
                "--methods",
                "fedavg",
                "moon",
                "--seeds",
                "0",
                "1",
                "--to",
                str(tmp_path / "rep"),
            ]
        )
    text = (tmp_path / "rep" / "report.md").read_text()
    assert (
        "Stored later (`store --add`), moon: python -m fedshare.reproduce run rebafl/table1" in text
    )
    assert "rerun here" in text and "| 62.50 ± 0.71 (2) |" in text
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**head, "table": "xormixfl/table2", "cells": []}))
    with pytest.raises(SystemExit) as stop:
        main(
            ["store", "rebafl/table1", str(runs), "--methods", "moon", "--add", "--to", str(other)]
        )
    assert stop.value.code == 2


def test_a_job_without_paper_numbers_runs_its_scales_own_columns_and_methods(tmp_path):
    """A job with no `numbers` (checks of no paper table, e.g. `baselines/checks`): its scales
    name the columns and the methods, the cells compose in order, have no paper number, are
    stored and read back; a scale without its own columns is refused."""
    job = tmp_path / "checks.yaml"
    job.write_text(
        yaml.safe_dump(
            {
                "seeds": [0, 1],
                "scales": {
                    "small": {
                        "metric": "best",
                        "columns": {"digits partition=pat2": ["experiment=null", "data=digits"]},
                        "overrides": ["rounds=3"],
                        "extra_methods": {"avg": ["strategy=fedavg"], "dyn": ["strategy=feddyn"]},
                        "stats": ["seeds", "final_accuracy"],
                    }
                },
            }
        )
    )
    found = cells(str(job), "small")
    assert [(c.method, c.seed) for c in found] == [("avg", 0), ("dyn", 0), ("avg", 1), ("dyn", 1)]
    assert found[1].overrides == (
        "partition=pat2",
        "rounds=3",
        "data=digits",
        "strategy=feddyn",
        "seed=0",
    )
    for cell in found:
        curve_run(
            tmp_path / "runs" / cell.folder, [50.0, 60.0 + cell.seed], {"final_accuracy": 1.0}
        )
    items = measure(found, load_job(str(job)).numbers, tmp_path / "runs", ("seeds",), "best")
    assert [(i.numbers, i.method, i.values) for i in items] == [
        (None, "avg", [60.0, 61.0]),
        (None, "dyn", [60.0, 61.0]),
    ]
    assert all(i.paper is None and i.comparison is None for i in items)
    stored = tmp_path / "checks-small.json"
    with pytest.raises(SystemExit):
        main(["store", str(job), str(tmp_path / "runs"), "--scale", "small", "--to", str(stored)])
    with pytest.raises(SystemExit):
        main(["report", str(job), str(stored), "--to", str(tmp_path / "rep")])
    text = (tmp_path / "rep" / "report.md").read_text()
    assert (
        "A check of no paper table, its own columns and rows (no paper number), metric `best`"
        in text
    )
    assert "| avg    | 60.50 ± 0.71 (2) | 60.00 / 61.00 | 1.00" in text
    job.write_text(yaml.safe_dump({"scales": {"small": {"overrides": ["rounds=3"]}}}))
    load_job.cache_clear()
    with pytest.raises(
        FedshareError, match="needs each scale's own 'columns'; scales without: small"
    ):
        load_job(str(job))


def test_column_means_are_each_rows_mean_over_its_measured_columns_beside_the_papers():
    items = [
        Measured("xormixfl_table2", f"xormixfl/table2 partition.target_labels=[{k}]", m, "x")
        for m in ("xormixfl", "mixfl")
        for k in (0, 1)
    ]
    for item, value in zip(items, (95.0, 90.0, 97.0, None), strict=True):
        item.values, item.seeds = ([value], [0]) if value is not None else ([], [])
        item.paper = (94.44, 0.0) if "[0]" in item.column else (95.84, 0.0)
    text = column_means(items)
    assert "| XorMixFL | 2       | 92.50          | 95.14       | 5.84" in text
    assert "| MixFL    | 1       | 97.00          | 94.44       | 2.56" in text
