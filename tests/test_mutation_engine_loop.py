"""The engine's round loop and what it records, pinned exactly (docs/mutation.md, `engine_loop`,
`engine_eval`, `engine_records`): the loop's phases, members, bytes and callbacks, how a run
ends (completed, stopped, failed) and what it keeps of its history; evaluation in eval mode,
its batches, per-class accuracy and schedule; the personal test splits and their shared
scoring; the callbacks' conditions; summary.json's sums; kept messages, the client-state
segments and the running weighted mean.

Tiny synthetic data and models: every test runs in milliseconds (no run folder unless the
function under test writes one, and then without its pictures)."""

import datetime
import math
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fedshare.config import SimulationConfig
from fedshare.config.schema import ClientsConfig, EvalConfig, TrainConfig
from fedshare.data.dataset import Dataset
from fedshare.data.federated import federate
from fedshare.engine import callbacks as callbacks_module
from fedshare.engine import evaluation as evaluation_module
from fedshare.engine import run_folder, state_log
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.callbacks import (
    AfterRound,
    Callback,
    Checkpoints,
    EarlyStopping,
    MetricsLog,
    ProgressBar,
    TimeBudget,
    as_callback,
    round_record,
)
from fedshare.engine.client_state import ClientStates
from fedshare.engine.evaluation import Evaluation, evaluate, evaluate_batches, validation_metrics
from fedshare.engine.kept_messages import Inboxes, KeptMessages
from fedshare.engine.messages import Message, Update
from fedshare.engine.personal_eval import (
    correct_on,
    personal_metrics,
    personal_test_splits,
    split_accuracy,
)
from fedshare.engine.rng import numpy_rng
from fedshare.engine.simulation import Simulation
from fedshare.engine.state_log import ClientStateLog
from fedshare.engine.summary import personal_summary, run_summary
from fedshare.errors import FedshareError, NonFiniteLossError
from fedshare.models.base import BlockModel
from fedshare.strategies import FedAvg
from fedshare.strategies.base import Phase


def synthetic(n_train: int = 40, n_test: int = 10, classes: int = 2, seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    return Dataset(
        "syn",
        torch.randn(n_train, 4, generator=g),
        torch.arange(n_train) % classes,
        torch.randn(n_test, 4, generator=g),
        torch.arange(n_test) % classes,
        classes,
    )


def linear(seed: int = 0, classes: int = 2) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(4, classes)


def feature_model() -> BlockModel:
    torch.manual_seed(0)
    return BlockModel(
        [("body", nn.Sequential(nn.Linear(4, 3), nn.ReLU())), ("head", nn.Linear(3, 2))]
    )


def config(rounds: int = 3, **parts) -> SimulationConfig:
    parts.setdefault("train", TrainConfig(batch_size=8, lr=0.1))
    return SimulationConfig(rounds=rounds, progress=False, device="cpu", **parts)


class Still(FedAvg):
    """FedAvg whose clients upload the weights they received: the loop without training (the
    first optimizer of a process imports torch._dynamo, seconds per mutant)."""

    def client_update(self, client, message):
        return Update(client.id, client.num_samples, message.weights.clone(), {}, {"steps": 0})


def simulation(rounds: int = 3, strategy=None, data=None, model=None, **kwargs) -> Simulation:
    parts = {k: kwargs.pop(k) for k in ("clients", "eval", "checkpoint", "train") if k in kwargs}
    return Simulation(
        strategy or Still(),
        data or federate(synthetic(), "iid", 4, 0),
        model or linear(),
        config(rounds, **parts),
        **kwargs,
    )


@pytest.fixture
def no_pictures(monkeypatch):
    """A run folder without its matplotlib pictures (seconds each on this machine)."""
    monkeypatch.setattr(run_folder, "plot_partition", lambda *a, **k: None)
    monkeypatch.setattr(run_folder, "plot_learning_curve", lambda *a, **k: None)


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_begin(self, sim) -> None:
        self.events.append(f"begin@{sim.rounds_completed}")

    def on_round_end(self, sim, record) -> None:
        self.events.append(
            f"round{sim.rounds_completed}:{None if record is None else record['round']}"
        )

    def on_stage(self, sim, text) -> None:
        self.events.append(f"stage:{text}")

    def on_complete(self, sim):
        self.events.append("complete")
        return {"recorder_saw": len(self.events)}

    def on_end(self, sim) -> None:
        self.events.append(f"end:{sim.status}")


# ----------------------------------------------------------------------------- the loop


def test_a_new_simulation_starts_at_round_zero_with_its_given_settings(tmp_path):
    hook = Recorder()
    sim = simulation(meta={"strategy": "x"}, callbacks=[hook], record={"a": 1})
    assert sim.rounds_completed == 0 and sim.rounds_recorded == 0
    assert sim.measure_local is False and sim.overwrite is False
    assert sim.meta == {"strategy": "x"} and sim.callbacks == [hook]
    assert sim.record == {"a": 1}
    assert sim.dir is None
    assert getattr(sim.worker, "_compiled_call_impl", None) is None  # train.compile is off
    default = simulation()
    assert default.meta == {} and default.callbacks == []
    assert default.record["strategy"]["name"] == "fedavg" and default.record["rounds"] == 3
    assert simulation(run_dir=tmp_path / "r").dir.path == tmp_path / "r"


def test_an_empty_test_set_is_refused_and_one_sample_is_enough():
    one = synthetic(n_test=1)
    assert simulation(data=federate(one, "iid", 4, 0)).data.dataset.y_test.shape == (1,)
    empty = synthetic(n_test=0)
    with pytest.raises(FedshareError, match="the test set of syn is empty"):
        simulation(data=federate(empty, "iid", 4, 0))


class RecordingExecutor:
    """Takes each phase run as the loop hands it over and runs nothing."""

    writes = True

    def __init__(self) -> None:
        self.runs: list = []

    def run_phase(self, run) -> None:
        self.runs.append(run)


def scripted(sim: Simulation, phases: list[Phase]) -> RecordingExecutor:
    sim.strategy.phases = lambda: phases
    sim.strategy.round_metrics = {"strategy_says": 7}
    sim.executor = RecordingExecutor()
    return sim.executor


def payload_phase(name: str, **options) -> Phase:
    message = Message(payload={"x": torch.zeros(3)})  # 12 bytes
    return Phase(name, lambda r: message, None, None, **options)


def test_run_round_hands_every_phase_its_members_counts_bytes_and_keeps_messages():
    sim = simulation(clients=ClientsConfig(per_round=3))
    first = payload_phase("share", keep=True)
    second = payload_phase("one", participants=lambda r, cohort: cohort[:1])
    executor = scripted(sim, [first, second])
    info = sim.run_round(0)
    cohort = sim.sampler.cohort(0)
    assert [run.members for run in executor.runs] == [cohort, cohort[:1]]
    assert [run.round_idx for run in executor.runs] == [0, 0]
    assert [run.measure_local for run in executor.runs] == [False, False]
    assert info["clients"] == 3 and info["lr"] == 0.1 and info["strategy_says"] == 7
    assert info["bytes_shared_round"] == 12 * 3 + 12 * 1
    kept = [sim.kept.of(k) for k in range(4)]
    assert [list(k) for k in kept] == [["share"] if k in cohort else [] for k in range(4)]
    info = sim.run_round(1)  # the round's own bytes, not the run's
    assert info["bytes_shared_round"] == 48 and sim.traffic.bytes_shared == 96


def test_only_the_rounds_first_phase_measures_its_clients_when_asked():
    sim = simulation()
    executor = scripted(sim, [payload_phase("a"), payload_phase("b")])
    sim.measure_local = True
    sim.run_round(0)
    assert [run.measure_local for run in executor.runs] == [True, False]


def test_stage_reaches_every_active_callback():
    sim = simulation()
    hooks = [Recorder(), Recorder()]
    sim._active_callbacks = hooks
    sim.stage("train: 1/4 clients")
    assert [h.events for h in hooks] == [["stage:train: 1/4 clients"]] * 2


def test_a_run_calls_every_hook_in_order_and_records_each_evaluated_round():
    hook = Recorder()
    sim = simulation(eval=EvalConfig(every=2), callbacks=[hook])
    result = sim.run()
    assert [e for e in hook.events if not e.startswith("stage:")] == [
        "begin@0",
        "round1:None",
        "round2:2",
        "round3:3",
        "complete",
        "end:completed",
    ]
    assert [r["round"] for r in result.history] == [2, 3]
    assert sim.rounds_completed == sim.rounds_recorded == 3
    assert result.summary["status"] == "completed"
    assert result.summary["recorder_saw"] == len(hook.events) - 1  # all but on_end's
    assert result.run_dir is None and "error" not in result.summary


def test_the_progress_bar_is_a_callback_of_the_writing_process():
    sim = simulation(rounds=1)  # progress=false: a silent bar, but the callback is there
    sim.run()
    assert any(isinstance(c, ProgressBar) for c in sim._active_callbacks)


def test_a_failing_callback_cuts_the_records_back_to_the_last_recorded_round():
    def fail_in_round_two(sim, done, record):
        if done == 2:
            raise RuntimeError("boom")

    sim = simulation(callbacks=[fail_in_round_two])
    with pytest.raises(RuntimeError, match="boom"):
        sim.run()
    assert sim.status == "failed" and "boom" in sim.error
    # the user's callback runs after the checkpoint: round 2 was recorded before it failed
    assert sim.rounds_completed == sim.rounds_recorded == 2
    assert [r["round"] for r in sim.history] == [1, 2]
    summary = sim.summary(0.0)
    assert summary["status"] == "failed" and "boom" in summary["error"]


def test_a_failure_before_the_checkpoint_leaves_that_round_unrecorded(
    tmp_path, no_pictures, monkeypatch
):
    sim = simulation(run_dir=tmp_path / "r")
    real = type(sim.dir).append_metrics

    def append(self, record):
        if record["round"] == 2:
            raise RuntimeError("disk says no")
        real(self, record)

    monkeypatch.setattr(type(sim.dir), "append_metrics", append)
    with pytest.raises(RuntimeError, match="disk says no"):
        sim.run()
    assert sim.rounds_completed == sim.rounds_recorded == 1
    assert [r["round"] for r in sim.history] == [1]


def test_an_interruption_records_no_error_sentence():
    def interrupt(sim, done, record):
        raise KeyboardInterrupt

    sim = simulation(callbacks=[interrupt])
    with pytest.raises(KeyboardInterrupt):
        sim.run()
    assert sim.status == "interrupted" and sim.error is None


def test_an_os_error_without_a_run_folder_is_raised_as_it_is():
    error = OSError(28, "No space left on device")

    def fail(sim, done, record):
        raise error

    with pytest.raises(OSError) as raised:
        simulation(callbacks=[fail]).run()
    assert raised.value is error


def test_an_os_error_with_a_run_folder_becomes_a_sentence(tmp_path, no_pictures):
    def fail(sim, done, record):
        raise OSError(28, "No space left on device")

    with pytest.raises(FedshareError, match=r"cannot write the run's files in .*No space left"):
        simulation(run_dir=tmp_path / "r", callbacks=[fail]).run()


def test_a_run_holds_its_folders_lock_and_a_finished_run_resumes_to_nothing(tmp_path, no_pictures):
    folder = tmp_path / "r"
    seen = []

    def try_the_lock(sim, done, record):
        lock = type(sim.dir)(folder).locked()
        with pytest.raises(FedshareError, match="another fedshare process"), lock:
            pass
        seen.append(done)

    result = simulation(run_dir=folder, callbacks=[try_the_lock]).run()  # resume=False default
    assert seen == [1, 2, 3] and result.run_dir == folder
    again = simulation(run_dir=folder).run(resume=True)
    assert again.summary["nothing_to_do"] is True and again.run_dir == folder
    assert [r["round"] for r in again.history] == [1, 2, 3]


def test_a_stop_ends_the_run_after_that_round():
    sim = simulation(callbacks=[lambda sim, done, record: done == 2])
    result = sim.run()
    assert result.summary["status"] == "stopped" and result.summary["rounds_completed"] == 2
    assert "recorder_saw" not in result.summary  # on_complete runs only for a completed run


def test_cpu_summary_rounds_to_milliseconds_or_says_nothing():
    sim = simulation()
    sim.clock.cpu_time = lambda: 1.23456
    assert sim.cpu_summary() == {"cpu_time_s": 1.235}
    sim.clock.cpu_time = lambda: None
    assert sim.cpu_summary() == {}


# ----------------------------------------------------------------------------- evaluation


def reference(model: nn.Module, dataset: Dataset) -> tuple[float, float, list[float]]:
    """Accuracy, mean CE loss and per-class accuracy in float64, sample by sample."""
    model.eval()
    with torch.no_grad():
        logits = model(dataset.x_test).double()
    y = dataset.y_test
    losses = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    hits = (logits.argmax(1) == y).double()
    per_class = []
    for c in range(dataset.num_classes):
        members = hits[y == c]
        per_class.append(100.0 * float(members.sum()) / max(len(members), 1))
    return 100.0 * float(hits.mean()), float(losses.mean()), per_class


def three_class_data() -> Dataset:
    """Class 0: 6 test samples, class 1: one, class 2: none."""
    ds = synthetic(n_test=7, classes=3, seed=1)
    ds.y_test = torch.tensor([0, 0, 0, 0, 0, 0, 1])
    return ds


def test_evaluate_in_batches_is_the_whole_test_sets_accuracy_and_mean_loss():
    ds = synthetic(n_test=10, seed=3)
    model = linear(seed=5)
    accuracy, loss, _ = reference(model, ds)
    assert accuracy not in (0.0, 50.0, 100.0)
    for batch_size in (1, 3, 10, 1024):
        result = evaluate(model, ds, batch_size)
        assert result["accuracy"] == pytest.approx(accuracy, abs=1e-9)
        assert result["loss"] == pytest.approx(loss, rel=1e-6)
        assert "per_class_accuracy" not in result


def test_per_class_accuracy_is_rounded_and_an_absent_class_scores_zero():
    ds = three_class_data()
    model = linear(seed=0, classes=3)
    _, _, per_class = reference(model, ds)
    assert per_class[1] == 100.0  # the class of one sample: a floor of 2 would halve it
    result = evaluate(model, ds, 4, per_class=True)
    assert result["per_class_accuracy"] == [round(a, 4) for a in per_class]
    assert per_class[0] not in (0.0, 100.0) and per_class[2] == 0.0
    assert round(per_class[0], 4) != round(per_class[0], 3)  # 4 decimals matter
    batches = [(ds.x_test, ds.y_test)]
    assert "per_class_accuracy" not in evaluate_batches(model, ds, batches)


def test_evaluation_runs_in_eval_mode_and_restores_the_models_mode():
    ds = synthetic(n_test=10, seed=3)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    model.train()
    for _ in range(3):  # running statistics away from their initial values
        model(torch.randn(16, 4) * 3 + 1)
    accuracy, loss, _ = reference(model, ds)
    model.train()
    result = evaluate(model, ds, 3)
    assert model.training
    assert result["accuracy"] == pytest.approx(accuracy) and result["loss"] == pytest.approx(loss)
    hits = correct_on(model, ds, torch.arange(10), batch_size=3)
    assert model.training
    model.eval()
    expected = model(ds.x_test).argmax(1) == ds.y_test
    assert torch.equal(hits, expected)
    assert not model.training and evaluate(model, ds)["accuracy"] == accuracy
    assert not model.training


@pytest.mark.parametrize("n_test, batch_size", [(0, 4), (10, 0)])
def test_evaluate_refuses_an_empty_test_set_or_batch_size(n_test, batch_size):
    with pytest.raises(FedshareError, match=f"cannot evaluate on {n_test} test samples"):
        evaluate(linear(), synthetic(n_test=n_test), batch_size)


def test_evaluate_takes_one_test_sample_in_batches_of_one():
    ds = synthetic(n_test=1)
    assert evaluate(linear(), ds, 1)["accuracy"] in (0.0, 100.0)


def test_validation_metrics_are_none_without_a_split_and_the_splits_otherwise():
    ds = synthetic(seed=3)
    model = linear(seed=5)
    assert validation_metrics(federate(ds, "iid", 4, 0), model, 8) == {}
    data = federate(ds, "iid", 4, 0, val_fraction=0.25)
    ix = data.val_indices
    with torch.no_grad():
        logits = model(ds.x_train[ix])
    expected = 100.0 * float((logits.argmax(1) == ds.y_train[ix]).float().mean())
    metrics = validation_metrics(data, model, 3)
    assert metrics["val_accuracy"] == pytest.approx(expected)
    assert set(metrics) == {"val_accuracy", "val_loss"}


def fake_sim(**eval_options) -> SimpleNamespace:
    return SimpleNamespace(
        config=SimpleNamespace(eval=EvalConfig(**eval_options), rounds=7, seed=0),
        rounds_completed=0,
    )


def test_evaluation_is_due_every_eval_every_rounds_and_after_the_last():
    sim, evaluation = fake_sim(every=3), Evaluation()
    due = []
    for done in range(1, 8):
        sim.rounds_completed = done
        if evaluation.measure(sim) is not None:
            due.append(done)
    assert due == [3, 6, 7]


def test_local_separability_is_measured_only_when_asked_and_the_model_has_features():
    for asked, model, expected in [
        (True, feature_model(), True),
        (False, feature_model(), False),
        (True, linear(), False),
    ]:
        sim = SimpleNamespace(
            config=SimpleNamespace(eval=EvalConfig(davies_bouldin=asked)),
            worker=model,
            architectures=SimpleNamespace(models=None),
        )
        Evaluation().on_begin(sim)
        assert sim.measure_local is expected


def test_a_non_finite_test_loss_stops_the_run_as_diverged():
    model = linear()
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    sim = simulation(rounds=1, model=model)
    sim.strategy.phases = lambda: []  # no training: the NaN weights reach the evaluation
    with pytest.raises(NonFiniteLossError, match="test loss after round 1 is nan"):
        sim.run()
    assert sim.status == "diverged"


def test_the_global_models_measures_add_personal_and_separability_only_when_asked():
    plain = simulation(rounds=1, model=feature_model()).run().history[0]
    assert not any(k.startswith("personal") for k in plain) and "test_davies_bouldin" not in plain
    asked = (
        simulation(
            rounds=1, model=feature_model(), eval=EvalConfig(personal=True, davies_bouldin=True)
        )
        .run()
        .history[0]
    )
    assert 0 <= asked["personal_accuracy_min"] <= asked["personal_accuracy"] <= 100
    assert math.isfinite(asked["test_davies_bouldin"])


def test_the_context_attack_runs_only_for_the_writer_with_sizes_and_a_view(monkeypatch):
    monkeypatch.setattr(
        evaluation_module, "run_attack_summary", lambda view, data, sizes, seed: {"attacked": view}
    )
    asked = []

    def sim_of(sizes, writes, view):
        def context_view():
            asked.append(view)
            return view

        return SimpleNamespace(
            config=SimpleNamespace(eval=EvalConfig(context_attack=sizes), seed=0),
            executor=SimpleNamespace(writes=writes),
            strategy=SimpleNamespace(context_view=context_view),
            data=SimpleNamespace(dataset=None),
        )

    evaluation = Evaluation()
    assert evaluation.on_complete(sim_of([], True, "v")) == {}
    assert evaluation.on_complete(sim_of([4], False, "v")) == {}
    assert asked == []
    assert evaluation.on_complete(sim_of([4], True, None)) == {}
    assert evaluation.on_complete(sim_of([4], True, "v")) == {"attacked": "v"}
    assert asked == [None, "v"]


# ----------------------------------------------------------------------------- personal splits


PERSONAL_LABELS = torch.tensor([0] * 4 + [1] * 20 + [2] * 10)
"""Test labels: 4 of class 0 (fewer than a client asks for), 20 of class 1, 10 of class 2."""


def test_personal_splits_follow_each_clients_label_mix_by_largest_remainder():
    counts = np.array([[5, 3, 0], [0, 0, 5], [1, 2, 4], [0, 1, 0]])
    splits = personal_test_splits(counts, PERSONAL_LABELS, 10, seed=3)
    per_class = [np.bincount(PERSONAL_LABELS[s].numpy(), minlength=3).tolist() for s in splits]
    # [6.25, 3.75, 0] -> [6, 4, 0], class 0 has only 4; [1.43, 2.86, 5.71] -> [1, 3, 6]
    assert per_class == [[4, 4, 0], [0, 0, 10], [1, 3, 6], [0, 10, 0]]
    assert splits[1].tolist() == list(range(24, 34))  # all of class 2, each once
    for client, split in enumerate(splits):
        assert torch.equal(split, split.sort().values) and len(set(split.tolist())) == len(split)
        rng = numpy_rng(3, "personal_test", client)
        take = per_class[client]
        pools = [np.flatnonzero(PERSONAL_LABELS.numpy() == c) for c in range(3)]
        wanted = [[6, 4, 0], [0, 0, 10], [1, 3, 6], [0, 10, 0]][client]
        drawn = [
            rng.choice(p, min(n, len(p)), replace=False)
            for p, n in zip(pools, wanted, strict=True)
            if n
        ]
        assert split.tolist() == sorted(np.concatenate(drawn).tolist()), client
        assert sum(take) == min(10, sum(min(n, len(p)) for p, n in zip(pools, wanted, strict=True)))


def test_personal_splits_depend_on_the_seed_only_through_the_clients_stream():
    counts = np.array([[1, 2, 4], [1, 2, 4]])
    a = personal_test_splits(counts, PERSONAL_LABELS, 7, seed=0)
    b = personal_test_splits(counts, PERSONAL_LABELS, 7, seed=1)
    assert a[0].tolist() != a[1].tolist() and a[0].tolist() != b[0].tolist()


def scored_data() -> Dataset:
    ds = synthetic(n_test=34, classes=3, seed=4)
    ds.y_test = PERSONAL_LABELS.clone()
    return ds


class Counting(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x):
        self.calls += 1
        return self.inner(x)


def test_split_accuracy_and_correct_on_score_each_sample_in_any_batch_size():
    ds, model = scored_data(), linear(seed=1, classes=3)
    ix = torch.tensor([0, 5, 9, 24, 30, 31, 33])
    expected = model(ds.x_test[ix]).argmax(1) == ds.y_test[ix]
    assert 0 < int(expected.sum()) < len(ix)
    for batch_size in (1, 2, 3, 200):
        assert torch.equal(correct_on(model, ds, ix, batch_size), expected)
    assert split_accuracy(model, ds, ix) == pytest.approx(100.0 * float(expected.float().mean()))
    empty = correct_on(model, ds, torch.tensor([], dtype=torch.long))
    assert empty.shape == (0,) and empty.dtype == torch.bool


def test_clients_sharing_one_unchanged_model_are_scored_in_one_pass():
    ds = scored_data()
    model = Counting(linear(seed=1, classes=3))
    splits = [torch.tensor(s) for s in ([0, 5, 24], [1, 25, 26, 30], [2, 3, 31], [27, 33])]
    result = personal_metrics(splits, ds, lambda k: model)
    each = [split_accuracy(model.inner, ds, s) for s in splits]
    assert len(set(each)) > 1 and max(each) > 0
    assert result == {"personal_accuracy": np.mean(each), "personal_accuracy_min": min(each)}
    assert model.calls == 2  # the first client's split, then every other split's samples at once


def test_a_model_reloaded_in_place_for_each_client_is_scored_per_client():
    ds = scored_data()
    model = linear(seed=1, classes=3)
    weights = [linear(seed=s, classes=3).state_dict() for s in (1, 2, 3, 4)]
    splits = [torch.arange(0, 34, 2), torch.arange(1, 34, 2)] * 2

    def model_of(k):
        model.load_state_dict(weights[k])
        return model

    each = []
    for k, s in enumerate(splits):
        each.append(split_accuracy(model_of(k), ds, s))
    assert len(set(each)) == 4
    assert personal_metrics(splits, ds, model_of)["personal_accuracy"] == pytest.approx(
        np.mean(each)
    )


def test_personal_accuracy_per_group_is_the_mean_and_min_of_its_members():
    ds = scored_data()
    models = [linear(seed=s, classes=3) for s in (1, 2, 3)]
    splits = [torch.arange(0, 34, 3), torch.arange(1, 34, 3), torch.arange(2, 34, 3)]
    each = [split_accuracy(m, ds, s) for m, s in zip(models, splits, strict=True)]
    assert len(set(each)) == 3
    result = personal_metrics(splits, ds, lambda k: models[k], ["a", "b", "a"])
    assert result["personal_accuracy/a"] == pytest.approx((each[0] + each[2]) / 2)
    assert result["personal_accuracy_min/a"] == min(each[0], each[2])
    assert result["personal_accuracy/b"] == result["personal_accuracy_min/b"] == each[1]
    assert result["personal_accuracy"] == pytest.approx(np.mean(each))


# ----------------------------------------------------------------------------- callbacks


def test_as_callback_keeps_a_callback_and_wraps_a_function():
    hook = Recorder()
    assert as_callback(hook) is hook
    wrapped = as_callback(lambda sim, done, record: (done, record))
    assert isinstance(wrapped, AfterRound)
    assert wrapped.on_round_end(SimpleNamespace(rounds_completed=4), {"r": 1}) == (4, {"r": 1})


class Measures(Callback):
    def __init__(self, values) -> None:
        self.values = values

    def measure(self, sim):
        return None if self.values is None else (lambda: dict(self.values))


def record_sim() -> SimpleNamespace:
    return SimpleNamespace(
        rounds_completed=5,
        elapsed=lambda: 1.23456,
        traffic=SimpleNamespace(as_dict=lambda: {"bytes_up": 8}),
        executor=SimpleNamespace(on_writer=lambda make: make()),
    )


def test_a_round_is_recorded_when_some_callback_measures_it():
    sim = record_sim()
    assert round_record(sim, {"clients": 3}, [Measures(None), Measures(None)]) is None
    record = round_record(sim, {"clients": 3}, [Measures(None), Measures({"accuracy": 50.0})])
    assert record == {
        "round": 5,
        "accuracy": 50.0,
        "wall_time_s": 1.235,
        "bytes_up": 8,
        "clients": 3,
    }


def test_metrics_lines_are_written_for_measured_rounds_with_a_folder():
    lines = []
    folder = SimpleNamespace(append_metrics=lines.append)
    MetricsLog().on_round_end(SimpleNamespace(dir=folder), None)
    MetricsLog().on_round_end(SimpleNamespace(dir=None), {"round": 1})
    MetricsLog().on_round_end(SimpleNamespace(dir=folder), {"round": 2})
    assert lines == [{"round": 2}]


@pytest.mark.parametrize(
    "every, has_dir, saved",
    [(2, True, [2, 4]), (1, True, [1, 2, 3, 4, 5]), (0, True, []), (2, False, [])],
)
def test_checkpoints_are_saved_every_k_rounds_with_a_folder(every, has_dir, saved):
    done = []
    sim = SimpleNamespace(dir=object() if has_dir else None, rounds_completed=0)
    sim.save_checkpoint = lambda: done.append(sim.rounds_completed)
    saver = Checkpoints(every)
    for r in range(1, 6):
        sim.rounds_completed = r
        saver.on_round_end(sim, None)
    assert done == saved


class FakeBar:
    def __init__(self) -> None:
        self.calls: list = []

    def stage(self, text):
        self.calls.append(("stage", text))

    def update(self, *args):
        self.calls.append(("update", *args))

    def close(self):
        self.calls.append(("close",))


def test_the_progress_bar_shows_stages_and_the_bytes_sent_both_ways():
    bar = ProgressBar()
    sim = SimpleNamespace(rounds_completed=2, traffic=SimpleNamespace(bytes_up=3, bytes_down=5))
    bar.on_stage(sim, "early")  # before on_begin: nothing to show, no error
    bar.on_end(sim)
    bar.bar = FakeBar()
    bar.on_stage(sim, "train")
    bar.on_round_end(sim, {"round": 2})
    bar.on_end(sim)
    assert bar.bar.calls == [("stage", "train"), ("update", 2, {"round": 2}, 8), ("close",)]


def test_early_stopping_counts_evaluations_without_an_improvement_beyond_min_delta():
    def stops(rule, accuracies):
        return [rule.on_round_end(None, None if a is None else {"accuracy": a}) for a in accuracies]

    assert stops(EarlyStopping(1), [50, 50.5, 50.5]) == [False, False, True]
    assert stops(EarlyStopping(1, min_delta=1.0), [50, 50.5]) == [False, True]
    assert stops(EarlyStopping(1, min_delta=1.0), [50, 51.5, 52]) == [False, False, True]
    assert stops(EarlyStopping(2), [50, 49, 51, 50, 50]) == [False, False, False, False, True]
    assert stops(EarlyStopping(3), [50, 49, 48, 47]) == [False, False, False, True]
    assert stops(EarlyStopping(2), [float("nan"), float("nan")]) == [False, True]
    rule = EarlyStopping(1)
    assert stops(rule, [None]) == [False] and rule.on_round_end(None, {"round": 1}) is False
    assert rule.waited == 0


def test_early_stopping_refuses_a_patience_below_one():
    assert EarlyStopping(1).patience == 1
    with pytest.raises(FedshareError, match="patience=0 must be at least 1"):
        EarlyStopping(0)


def test_the_time_budget_stops_once_its_seconds_have_run(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(callbacks_module, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    budget = TimeBudget(5.0)
    budget.on_begin(None)
    now[0] = 104.9
    assert budget.on_round_end(None, None) is False
    now[0] = 105.0
    assert budget.on_round_end(None, None) is True


# ----------------------------------------------------------------------------- summary.json


class Architectures:
    names = ("a", "b")

    def name_of(self, k):
        return "ab"[k % 2]


def test_the_personal_summary_counts_clients_per_model_and_takes_the_last_record():
    plain = SimpleNamespace(architectures=SimpleNamespace(models=None))
    assert personal_summary(plain) == {}
    sim = SimpleNamespace(
        architectures=SimpleNamespace(models=Architectures()),
        data=SimpleNamespace(num_clients=5),
        history=[{"personal_accuracy": p, "accuracy": 1} for p in (10.0, 20.0, 30.0)],
    )
    assert personal_summary(sim) == {
        "clients_per_model": {"a": 3, "b": 2},
        "personal_accuracy": 30.0,
    }
    sim.history = []
    assert personal_summary(sim) == {"clients_per_model": {"a": 3, "b": 2}}


def test_the_summary_sums_the_held_state_and_shares_bytes_per_round():
    sim = simulation()
    sim.client_states.checkin(0, {"x": torch.zeros(4)})  # 16 bytes
    sim.kept.keep("share", Message(torch.zeros(2)), [1])  # 8 bytes
    sim.inboxes.post(2, Message(payload={"y": torch.zeros(3)}))  # 12 bytes
    sim.traffic.bytes_shared = 600
    summary = run_summary(sim, 1.23456)
    assert summary["client_state_bytes"] == 36
    assert summary["wall_time_s"] == 1.235
    assert summary["bytes_shared_per_round"] == 600  # no round completed: divided by one
    sim.rounds_completed = 3
    assert run_summary(sim, 0.0)["bytes_shared_per_round"] == 200
    assert "error" not in summary


# ----------------------------------------------------------------------------- kept messages


def test_kept_messages_go_to_their_receivers_and_unheld_ones_are_forgotten():
    kept = KeptMessages()
    first, second = Message(torch.ones(2)), Message(torch.ones(3))
    kept.keep("share", first, [])
    assert kept.of(0) == {} and kept.bytes_held == 0
    kept.keep("share", first, [0, 1])
    kept.keep("share", second, [1, 2])
    assert kept.of(0)["share"] is first and kept.of(1)["share"] is second
    assert kept.of(2)["share"] is second and kept.of(3) == {}
    assert kept.bytes_held == 8 + 12
    kept.keep("share", second, [0])
    assert kept.bytes_held == 12 + 12  # `first` held by nobody now: forgotten
    assert kept.of(0)["share"] is second


def test_kept_messages_and_inboxes_round_trip_through_their_state():
    kept = KeptMessages()
    kept.keep("a", Message(None, {"p": torch.arange(3.0)}), [0])
    kept.keep("b", Message(torch.arange(2.0)), [0, 1])
    restored = KeptMessages()
    restored.load_state_dict(kept.state_dict(), "cpu")
    assert restored.of(0)["a"].weights is None
    assert torch.equal(restored.of(0)["a"].payload["p"], torch.arange(3.0))
    assert torch.equal(restored.of(1)["b"].weights, torch.arange(2.0))
    inboxes = Inboxes()
    inboxes.post(1, Message(torch.ones(1)))
    copy = Inboxes()
    copy.load_state_dict(inboxes.state_dict(), "cpu")
    assert torch.equal(copy.collect(1)[0].weights, torch.ones(1)) and copy.collect(1) == []


# ----------------------------------------------------------------------------- state segments


def state(value: float) -> dict[str, torch.Tensor]:
    return {"x": torch.full((4,), float(value))}  # 16 bytes


def test_segments_hold_the_changes_until_they_outgrow_twice_the_live_state(tmp_path, monkeypatch):
    monkeypatch.setattr(state_log, "COMPACT_SLACK", 4)  # compaction once segments > 2·16 + 4
    log, states = ClientStateLog(tmp_path), ClientStates()
    assert log.folder == tmp_path / "client_states"
    names = []
    for r in range(1, 6):
        states.checkin(0, state(r))
        names.append(log.save(states, r))
    assert names == [
        ["delta_000001.pt"],
        ["delta_000001.pt", "delta_000002.pt"],
        ["delta_000001.pt", "delta_000002.pt", "delta_000003.pt"],
        ["full_000004.pt"],
        ["full_000004.pt", "delta_000005.pt"],
    ]
    assert log.save(states, 6) == names[-1]  # nothing changed: no new segment
    log.prune()
    assert sorted(p.name for p in log.folder.iterdir()) == sorted(names[-1])
    loaded = ClientStateLog(tmp_path).load(names[-1])
    assert torch.equal(loaded[0]["x"], state(5)["x"])


def test_a_removed_state_is_written_as_none_and_loading_drops_it(tmp_path):
    log, states = ClientStateLog(tmp_path), ClientStates()
    states.checkin(0, state(1))
    states.checkin(1, state(2))
    first = log.save(states, 1)
    states.checkin(0, {})
    names = log.save(states, 2)
    assert names == [*first, "delta_000002.pt"]
    again = ClientStateLog(tmp_path)
    loaded = again.load(names)
    assert list(loaded) == [1] and torch.equal(loaded[1]["x"], state(2)["x"])
    assert again.segments == {"delta_000001.pt": 32, "delta_000002.pt": 0}


def test_prune_and_clear_handle_missing_folders_and_stale_files(tmp_path):
    log = ClientStateLog(tmp_path)
    log.prune()
    log.clear()
    states = ClientStates()
    states.checkin(0, state(1))
    names = log.save(states, 1)
    (log.folder / "delta_000009.pt").write_bytes(b"stale")
    log.prune()
    assert sorted(p.name for p in log.folder.iterdir()) == names
    log.clear()
    assert not log.folder.exists() and log.segments == {}


def test_loading_a_segment_unpickles_tensors_only(tmp_path):
    log = ClientStateLog(tmp_path)
    log.folder.mkdir()
    torch.save({0: {"when": datetime.date(2020, 1, 1)}}, log.folder / "delta_000001.pt")
    with pytest.raises(pickle.UnpicklingError):
        log.load(["delta_000001.pt"])


# ----------------------------------------------------------------------------- running mean


def test_running_mean_is_the_weighted_mean_of_what_was_added():
    mean = RunningMean()
    assert mean.empty
    mean.add(torch.tensor([1.0, 2.0]), 3.0)
    mean.add(torch.tensor([5.0, -2.0]), 1.0)
    assert mean.total_weight == 4.0 and not mean.empty
    assert torch.equal(mean.value(), torch.tensor([2.0, 1.0]))


def test_running_mean_accumulates_half_precision_in_float32_and_float64_in_float64():
    mean = RunningMean()
    mean.add(torch.tensor([1.0], dtype=torch.float16), 2.0)
    assert mean.value().dtype == torch.float32
    wide = RunningMean()
    wide.add(torch.tensor([1.0], dtype=torch.float64), 2.0)
    assert wide.value().dtype == torch.float64


def test_running_mean_refuses_negative_weights_and_an_empty_or_weightless_mean():
    mean = RunningMean()
    with pytest.raises(ValueError, match="no updates"):
        mean.value()
    with pytest.raises(ValueError, match=r"non-negative, got -0\.5"):
        mean.add(torch.ones(1), -0.5)
    mean.add(torch.ones(1), 0.0)
    assert mean.empty
    with pytest.raises(ValueError, match="no updates"):
        mean.value()
    mean.add(torch.ones(1), 0.5)
    assert not mean.empty and torch.equal(mean.value(), torch.ones(1))


def test_an_updates_aggregation_weight_is_its_weight_or_its_sample_count():
    assert Update(0, 7).aggregation_weight == 7.0
    assert Update(0, 7, weight=2.5).aggregation_weight == 2.5
