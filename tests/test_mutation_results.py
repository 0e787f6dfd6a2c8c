"""The statistics of the report and of `reproduce`, pinned exactly (docs/mutation.md, `results`):
which numbers count as finite, mean ± sample std, the bytes of a row, the last-k header; a
cell's value read from a run (scaled, in %, a curve statistic, the best round, seconds per
round, the target labels' accuracy) and the statistics over its seeds."""

import statistics
from itertools import pairwise

import pytest

from fedshare.reproduce.measure import (
    Measured,
    _run_list,
    bytes_sent,
    cell_value,
    curve_value,
    is_curve,
)
from fedshare.results.stats import finite, mean_std, stat_header, summary_value

# ---------------------------------------------------------------------------- results/stats


def test_stat_header_names_a_short_runs_last_k_mean():
    assert stat_header("last10_mean_accuracy", "last-10 %", [5, 7]) == "last-7 %"
    assert stat_header("last10_mean_accuracy", "last-10 %", [9]) == "last-9 %"
    assert stat_header("last10_mean_accuracy", "last-10 %", [10, 3]) == "last-10 %"
    assert stat_header("last10_mean_accuracy", "last-10 %", []) == "last-10 %"
    assert stat_header("best_accuracy", "best %", [5]) == "best %"


def test_finite_keeps_finite_numbers_only():
    assert finite(3) == 3.0 and isinstance(finite(3), float)
    assert finite(-0.5) == -0.5
    for value in (True, False, None, "1", float("inf"), float("-inf"), float("nan"), [1]):
        assert finite(value) is None


def test_mean_std_is_the_mean_and_sample_std_of_the_finite_values():
    assert mean_std([]) == (None, None)
    assert mean_std([None, "x", float("nan")]) == (None, None)
    assert mean_std([2.0]) == (2.0, None)
    assert mean_std([1, 3]) == (2.0, pytest.approx(2**0.5))
    assert mean_std([1, None, 2, True, 3, float("inf")]) == (2.0, 1.0)


def test_summary_value_adds_up_and_down_bytes():
    def run(**summary):
        return {"summary": summary}

    assert summary_value(run(bytes_up=3, bytes_down=4), "bytes_up_down") == 7.0
    assert summary_value(run(bytes_up=3), "bytes_up_down") == 3.0
    assert summary_value(run(bytes_down=4, bytes_up=None), "bytes_up_down") == 4.0
    assert summary_value(run(), "bytes_up_down") is None
    assert summary_value(run(best_accuracy=0.5), "best_accuracy") == 0.5
    assert summary_value(run(), "best_accuracy") is None


# ---------------------------------------------------------------------------- curves

CURVE = [0.1 * (i % 7) + 0.01 * i for i in range(70)]  # no two windows share a mean


@pytest.mark.parametrize("length", [70, 61, 60, 59, 40, 7, 2, 1])
def test_settled_is_the_mean_from_round_30_or_over_the_second_half(length):
    curve = CURVE[:length]
    start = 29 if length >= 60 else length // 2
    assert curve_value(curve, "settled") == pytest.approx(statistics.fmean(curve[start:]))


def test_curve_statistics_are_their_windows_aggregate():
    c = CURVE[:12]
    assert curve_value(c, "best") == max(c)
    assert curve_value(c, "last5") == pytest.approx(statistics.fmean(c[-5:]))
    assert curve_value(c, "last20") == pytest.approx(statistics.fmean(c))
    assert curve_value(c, "from3") == pytest.approx(statistics.fmean(c[2:]))
    assert curve_value(c, "from1") == pytest.approx(statistics.fmean(c))
    assert curve_value(c, "min_last4") == min(c[-4:])
    assert curve_value(c, "max_last4") == max(c[-4:])
    assert curve_value(c, "max_from2") == max(c[1:])
    deltas = [abs(b - a) for a, b in pairwise(c[-4:])]
    assert curve_value(c, "absdelta_last4") == pytest.approx(statistics.fmean(deltas))
    deltas = [abs(b - a) for a, b in pairwise(c[9:])]
    assert curve_value(c, "absdelta_from10") == pytest.approx(statistics.fmean(deltas))
    assert curve_value(c, "absdelta_last1") is None  # one round: no change
    assert curve_value(c, "from13") is None  # an empty window
    assert curve_value(c, "last0") is None and curve_value(c, "median") is None
    assert curve_value([], "best") is None


def test_is_curve_names_the_curve_statistics():
    for name in ("best", "settled", "last5", "from10", "min_last10", "absdelta_from2"):
        assert is_curve(name)
    for name in ("final_accuracy", "last", "bestx", "mean_last5"):
        assert not is_curve(name)


# ---------------------------------------------------------------------------- a cell's value


def a_run() -> dict:
    history = [
        {"round": 2, "accuracy": 0.4, "wall_time_s": 3.0, "per_class_accuracy": [0.1, 0.2, 0.3]},
        {"round": 4, "accuracy": 0.6, "test_db": 1.5, "wall_time_s": 10.0},
        {"round": 6, "accuracy": None, "test_db": 2.5, "per_class_accuracy": [0.5, 0.7, 0.9]},
        {"round": 8, "accuracy": 0.6, "per_class_accuracy": []},
    ]
    summary = {
        "final_accuracy": 0.6,
        "bytes_up": 1000,
        "bytes_down": 3000,
        "bytes_peer": None,
        "mds_std": True,
        "per_client": [1, 2],
    }
    return {"summary": summary, "history": history, "config": {"partition": {}}}


def test_cell_value_reads_summary_keys_scaled_and_in_percent():
    run = a_run()
    assert cell_value(run, "final_accuracy") == 0.6
    assert cell_value(run, "final_accuracy%") == pytest.approx(60.0)
    assert cell_value(run, "bytes_sent") == 4000.0
    assert cell_value(run, "bytes_sent/1e3") == pytest.approx(4.0)
    assert cell_value(run, "bytes_sent/8") == pytest.approx(500.0)
    assert cell_value(run, "final_accuracy/2%") == pytest.approx(30.0)
    assert cell_value(run, "mds_std") is None  # a bool is no number
    assert cell_value(run, "missing%") is None and cell_value(run, "missing/2") is None


def test_cell_value_reads_curve_statistics_over_the_evaluated_rounds():
    run = a_run()
    assert cell_value(run, "best") == 0.6
    assert cell_value(run, "last2") == pytest.approx(0.6)  # round 6 has no accuracy
    assert cell_value(run, "from1") == pytest.approx((0.4 + 0.6 + 0.6) / 3)
    assert cell_value(run, "test_db") == 2.5  # the last round that records the key
    assert cell_value(run, "nothing") is None


def test_best_round_is_the_first_round_of_the_best_accuracy():
    run = a_run()
    assert cell_value(run, "best_round") == 4.0
    run["history"][0]["accuracy"] = 0.7
    assert cell_value(run, "best_round") == 2.0
    assert cell_value({**run, "history": [{"round": 1, "accuracy": None}]}, "best_round") is None


def test_seconds_per_round_is_the_last_timed_rounds_time_over_its_round():
    run = a_run()
    assert cell_value(run, "seconds_per_round") == pytest.approx(2.5)  # round 4: 10 s
    assert cell_value({**run, "history": [{"round": 1}]}, "seconds_per_round") is None


def test_target_label_accuracy_averages_the_last_per_class_record_over_the_targets():
    run = a_run()
    assert cell_value(run, "target_label_accuracy") is None  # no target labels
    run["config"]["partition"]["target_labels"] = [0, 2]
    assert cell_value(run, "target_label_accuracy") == pytest.approx(0.7)  # round 6's
    run["config"]["partition"]["target_labels"] = []
    assert cell_value(run, "target_label_accuracy") is None
    run["config"]["partition"]["target_labels"] = [1]
    run["history"] = [{"round": 1, "per_class_accuracy": []}]
    assert cell_value(run, "target_label_accuracy") is None


def test_bytes_sent_sums_up_down_and_peer():
    assert bytes_sent({"bytes_up": 1, "bytes_down": 2, "bytes_peer": 4}) == 7.0
    assert bytes_sent({"bytes_up": 1}) == 1.0
    assert bytes_sent({"bytes_down": 2}) is None  # no upload count: no byte count at all
    assert _run_list({"summary": {"a": [1, 2]}}, "a") == [1.0, 2.0]
    assert _run_list({"summary": {"a": 3}}, "a") == []
    assert _run_list({"summary": {}}, "a") == []


# ---------------------------------------------------------------------------- over the seeds


def test_a_cells_statistics_over_its_seeds():
    item = Measured("t", "c", "m", "final_accuracy", values=[0.5, 0.7], seeds=[0, 1])
    item.stats = [{"best": 0.6, "x": 1.0}, {"best": 0.8}]
    assert item.n == 2
    assert item.mean_std == (pytest.approx(0.6), pytest.approx(0.02**0.5))
    assert item.stat("best") == {"mean": pytest.approx(0.7), "std": pytest.approx(0.02**0.5)}
    assert item.stat("x") == 1.0  # one seed: its value, no std
    assert item.stat("none") is None
    assert item.per_seed() == [0.5, 0.7] and item.per_seed("x") == [1.0, None]
    item.lists = {"acc": [[1.0, 2.0, 3.0], [3.0, 4.0]]}
    assert item.element_stats("acc") == [
        (2.0, pytest.approx(2**0.5), 2),
        (3.0, pytest.approx(2**0.5), 2),
        (3.0, None, 1),
    ]
    assert item.element_stats("other") == []


def test_a_stored_summary_stands_for_all_its_seeds():
    item = Measured("t", "c", "m", "final_accuracy", values=[0.5], seeds=[0, 1, 2])
    item.stored = (0.4, 0.1)
    item.stored_stats = {"best": {"min": 0.3, "max": 0.5}}
    assert item.n == 3
    assert item.mean_std == (0.4, 0.1)
    assert item.stat("best") == {"min": 0.3, "max": 0.5}
