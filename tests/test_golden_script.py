"""scripts/golden.py: its cells are the every-strategy matrix's default cells as command lines,
and `compare` finds any changed result number while ignoring times, memory and the machine."""

import json
from pathlib import Path

import pytest

from fedshare.strategies import STRATEGIES
from helpers import load_script

golden = load_script("golden")


def fake_record(out: Path, summary: dict, metrics: list[dict], **cells: dict) -> Path:
    run = out / "cells" / "matrix-fedavg-digits" / "run"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    cell = {"commands": [["strategy=fedavg"]], "returncodes": [0], "seconds": 1.0, "skipped": ""}
    index = {"cells": {"matrix-fedavg-digits": {"name": "matrix-fedavg-digits", **cell}, **cells}}
    (out / "golden.json").write_text(json.dumps(index))
    return out


SUMMARY = {"final_accuracy": 90.83333333333333, "bytes_up": 1696064, "wall_time_s": 3.0}
METRICS = [{"round": 1, "accuracy": 59.166666666666664, "loss": 1.3407819112141928}]


def test_every_registered_strategy_has_its_cells():
    names = {c.name for c in golden.cells()}
    for strategy in STRATEGIES.names():
        assert {f"matrix-{strategy}-digits", f"matrix-{strategy}-synthetic"} <= names
    assert {f"preset-{p}" for p in golden.PRESETS} | {"workers2", "batched", "resumed"} <= names


def test_compare_ignores_times_memory_and_the_machine(tmp_path, capsys):
    a = fake_record(tmp_path / "a", SUMMARY, METRICS)
    other = {**SUMMARY, "wall_time_s": 9.0, "peak_rss_mb": 1.0, "machine": {"cpu": "other"}}
    b = fake_record(tmp_path / "b", other, [{**METRICS[0], "wall_time_s": 2.0}])
    assert golden.compare(a, b) == 0
    assert "VERDICT: identical (1 cells, bit for bit)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("summary", "metrics", "found"),
    [
        ({**SUMMARY, "final_accuracy": 90.83333333333334}, METRICS, "90.83333333333333 != "),
        (SUMMARY, [{**METRICS[0], "loss": 1.3407819112141930}], "[0].loss"),
        ({**SUMMARY, "bytes_up": 1696065}, METRICS, "bytes_up: 1696064 != 1696065"),
        ({"final_accuracy": SUMMARY["final_accuracy"]}, METRICS, "bytes_up missing"),
        (SUMMARY, METRICS + METRICS, "metrics: "),
    ],
)
def test_compare_finds_a_changed_number(tmp_path, capsys, summary, metrics, found):
    a = fake_record(tmp_path / "a", SUMMARY, METRICS)
    b = fake_record(tmp_path / "b", summary, metrics)
    assert golden.compare(a, b) == 1
    printed = capsys.readouterr().out
    assert "DIFFERS  matrix-fedavg-digits" in printed and found in printed
    assert "VERDICT: 1 of 1 cells differ" in printed


def test_a_cell_missing_from_the_second_record_is_a_difference(tmp_path, capsys):
    extra = {"name": "batched", "commands": [], "returncodes": [0], "seconds": 1, "skipped": ""}
    a = fake_record(tmp_path / "a", SUMMARY, METRICS, batched=extra)
    b = fake_record(tmp_path / "b", SUMMARY, METRICS)
    assert golden.compare(a, b) == 1
    assert f"DIFFERS  batched: not recorded in {b}" in capsys.readouterr().out
    assert golden.compare(b, a) == 0  # a cell new in the second record is listed, not a failure
