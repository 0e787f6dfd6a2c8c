"""Callbacks around the rounds: user hooks, early stopping, a time budget."""

import json

from fedshare import simulate
from fedshare.engine.callbacks import Callback, EarlyStopping, TimeBudget
from fedshare.results.rundir import read_metrics
from fedshare.strategies import FedAvg
from helpers import DIGITS_TRAIN, digits_federation


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_begin(self, sim) -> None:
        self.events.append(f"begin@{sim.rounds_completed}")

    def on_round_end(self, sim, record) -> None:
        self.events.append(f"round{sim.rounds_completed}:{record is not None}")

    def on_end(self, sim) -> None:
        self.events.append(f"end:{sim.status}")


def run(tmp_path, callbacks, rounds=4, **kwargs):
    return simulate(
        FedAvg(),
        digits_federation("iid", 4),
        "cnn_small",
        rounds=rounds,
        train=DIGITS_TRAIN,
        run_dir=tmp_path / "r",
        callbacks=callbacks,
        **kwargs,
    )


def test_hooks_run_in_order_and_see_every_round(tmp_path):
    recorder = Recorder()
    result = run(tmp_path, [recorder], eval={"every": 2})
    assert recorder.events == [
        "begin@0",
        "round1:False",
        "round2:True",
        "round3:False",
        "round4:True",
        "end:completed",
    ]
    assert [r["round"] for r in read_metrics(tmp_path / "r" / "metrics.jsonl")] == [2, 4]
    assert result.summary["status"] == "completed"


def test_a_callback_can_stop_the_run_and_the_run_resumes(tmp_path):
    stop_after_two = lambda sim, done, record: done == 2  # noqa: E731
    result = run(tmp_path, [stop_after_two])
    assert result.summary["status"] == "stopped" and result.summary["rounds_completed"] == 2
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "stopped"
    resumed = run(tmp_path, [], resume=True)
    assert resumed.summary["status"] == "completed" and resumed.summary["rounds_completed"] == 4


def test_early_stopping_and_time_budget(tmp_path):
    patient = EarlyStopping(patience=1, min_delta=100.0)  # no round can improve by 100 points
    assert run(tmp_path / "a", [patient]).summary["rounds_completed"] == 2
    assert run(tmp_path / "b", [TimeBudget(0.0)]).summary["rounds_completed"] == 1


def test_evaluation_is_a_callback_and_a_users_measure_joins_the_record(tmp_path):
    class Norm(Callback):
        def measure(self, sim):
            model = sim.strategy.global_model()
            return lambda: {"weight_norm": sum(float(p.norm()) for p in model.parameters())}

    recorder = Recorder()
    result = run(tmp_path, [Norm(), recorder], eval={"every": 2}, progress=True)
    records = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2, 3, 4]
    assert all(r["weight_norm"] > 0 for r in records)
    assert ["accuracy" in r for r in records] == [False, True, False, True]
    assert recorder.events[1:5] == [f"round{k}:True" for k in (1, 2, 3, 4)]
    assert result.summary["final_accuracy"] == records[-1]["accuracy"]
