"""Experiment-tracking loggers (issue 34 item 4), each read back from its real library:
the TensorBoard event file, the W&B offline run file, the MLflow local file store."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fedshare
from fedshare.errors import FedshareError
from fedshare.tracking import MLflowLogger, TensorBoardLogger, WandbLogger, make_loggers
from helpers import digits_federation

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")


def short_run(tmp_path: Path, *callbacks) -> fedshare.RunResult:
    fed = digits_federation(num_clients=2)
    return fedshare.simulate(
        "fedavg", fed, rounds=2, run_dir=tmp_path / "run", callbacks=list(callbacks)
    )


def test_tensorboard_event_file_holds_every_rounds_metrics(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = short_run(tmp_path, TensorBoardLogger())
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    for key in ("accuracy", "loss", "bytes_up"):
        scalars = events.Scalars(key)
        assert [s.step for s in scalars] == [1, 2]
        expected = [r[key] for r in result.history]
        assert [s.value for s in scalars] == pytest.approx(expected, rel=1e-6)


def items(entries) -> dict:
    """A W&B record's key/value items as a dict (keys may be given as `nested_key`)."""
    return {e.key or "/".join(e.nested_key): json.loads(e.value_json) for e in entries}


def wandb_records(path: Path):
    """The protobuf records of a W&B run file (a LevelDB-style log after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    raw, pos, block, pending = path.read_bytes(), 7, 32768, b""
    assert raw[:4] == b":W&B"
    while pos + 7 <= len(raw):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(raw[pos + 4 : pos + 6], "little"), raw[pos + 6]
        chunk, pos = raw[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def test_wandb_offline_run_holds_config_history_and_summary(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = short_run(tmp_path, WandbLogger(project="fedshare-test"))
    [path] = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    history, summary, config = [], {}, {}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append(items(record.history.item) | {"step": record.history.step.num})
        elif kind == "summary":
            summary.update(items(record.summary.update))
        elif kind == "run":
            config.update(items(record.run.config.update))
    assert [h["step"] for h in history] == [1, 2]
    assert [h["accuracy"] for h in history] == pytest.approx(result.accuracies)
    assert summary["status"] == "completed"
    assert summary["final_accuracy"] == pytest.approx(result.final_accuracy)
    assert config["strategy"] == {"name": "fedavg"} and config["rounds"] == 2


def test_mlflow_file_store_holds_params_metrics_and_status(tmp_path):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    result = short_run(tmp_path, MLflowLogger(tracking_uri=uri, experiment="fedshare-test"))
    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("fedshare-test").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert run.data.params["strategy.name"] == "fedavg"
    assert run.data.params["rounds"] == "2"
    history = client.get_metric_history(run.info.run_id, "accuracy")
    assert [(m.step, m.value) for m in history] == [
        (r["round"], pytest.approx(r["accuracy"])) for r in result.history
    ]
    assert run.data.metrics["summary.final_accuracy"] == pytest.approx(result.final_accuracy)


def test_logger_names_are_checked():
    assert [type(x) for x in make_loggers("tensorboard")] == [TensorBoardLogger]
    assert make_loggers(None) == [] and make_loggers([]) == []
    with pytest.raises(
        FedshareError,
        match=r"unknown logger 'tensorbord' \(did you mean 'tensorboard'\?\); valid choices: ml",
    ):
        make_loggers(["tensorbord"])


def test_cli_runs_several_loggers_at_once(tmp_path):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    env = {**__import__("os").environ, "MLFLOW_TRACKING_URI": (tmp_path / "ml").as_uri()}
    command = [
        sys.executable, "-m", "fedshare.run", "experiment=digits_quickstart", "rounds=1",
        "logger=[tensorboard,mlflow]", "progress=false", f"run_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert list((tmp_path / "ml").glob("*/*/metrics/accuracy"))
    bad = subprocess.run([*command[:5], "logger=tensorbord"], capture_output=True, text=True)
    assert (
        bad.returncode == 2
        and "logger='tensorbord' is not valid (did you mean 'tensorboard'?)" in bad.stderr
    )
