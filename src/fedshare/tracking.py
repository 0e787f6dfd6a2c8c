"""Experiment-tracking loggers as callbacks: TensorBoard, Weights & Biases, MLflow.

Each is an optional extra (`pip install "fedshare[tensorboard]"`, `[wandb]`, `[mlflow]`) and
is imported only when a run asks for it: `logger=tensorboard` on the command line, several at
once with `logger=[tensorboard,mlflow]`, or `simulate(..., callbacks=[TensorBoardLogger(dir)])`.
Every evaluated round logs its numeric metrics (accuracy, loss, bytes, the strategy's round
metrics) at step = the round; the run's resolved config goes in as parameters; the end logs
the summary's numbers and the run's status.

Where they write: TensorBoard `<run folder>/tensorboard/`; W&B `<run folder>/wandb/` (project
`$WANDB_PROJECT` or "fedshare"; `WANDB_MODE=offline` keeps it local, `wandb sync` uploads it
later); MLflow the tracking store `$MLFLOW_TRACKING_URI` (default `./mlruns`, a local file
store, which MLflow 3 accepts with `MLFLOW_ALLOW_FILE_STORE=true`: set for a file store unless
already set), experiment `$MLFLOW_EXPERIMENT_NAME` or "fedshare".
"""

import importlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fedshare.engine.callbacks import Callback, Record
from fedshare.errors import FedshareError, choices_message

if TYPE_CHECKING:
    from fedshare.engine.simulation import Simulation

MLFLOW_STATUS = {"completed": "FINISHED", "stopped": "FINISHED", "interrupted": "KILLED"}
"""A run's `status` as MLflow's run status (anything else, e.g. "diverged", is FAILED)."""


def numeric(values: Mapping[str, Any]) -> dict[str, float]:
    """The plain numbers of a record (no bools, lists or strings)."""
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k != "round"
    }


def flat_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as `a.b.c -> str(value)` (the form MLflow and TensorBoard take)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_params(value, f"{name}."))
        else:
            out[name] = str(value)
    return out


def require(module: str, extra: str) -> ModuleType:
    """Import an optional tracking library, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise FedshareError(
            f"logger={extra} needs the {module.split('.')[0]} package; install it with "
            f'pip install "fedshare[{extra}]"'
        ) from None


def run_name(sim: "Simulation") -> str:
    if sim.dir is not None:
        return sim.dir.path.name
    meta = sim.meta
    return f"{meta.get('strategy')}-{meta.get('data')}-seed{sim.config.seed}"


class TensorBoardLogger(Callback):
    """Scalars per evaluated round into a TensorBoard event file (`torch.utils.tensorboard`)."""

    def __init__(self, log_dir: str | Path | None = None) -> None:
        self.tensorboard = require("torch.utils.tensorboard", "tensorboard")
        self.log_dir = log_dir

    def on_begin(self, sim: "Simulation") -> None:
        log_dir = self.log_dir
        if log_dir is None:
            base = sim.dir.path if sim.dir is not None else Path("runs") / run_name(sim)
            log_dir = base / "tensorboard"
        self.writer = self.tensorboard.SummaryWriter(str(log_dir))
        config = flat_params(sim.record)
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in config.items()))

    def on_round_end(self, sim: "Simulation", record: Record) -> None:
        if record is not None:
            for key, value in numeric(record).items():
                self.writer.add_scalar(key, value, sim.rounds_completed)
            self.writer.flush()

    def on_end(self, sim: "Simulation") -> None:
        if hasattr(self, "writer"):
            self.writer.close()


class WandbLogger(Callback):
    """A Weights & Biases run: the config, the metrics per evaluated round, the summary."""

    def __init__(self, project: str | None = None, directory: str | Path | None = None) -> None:
        self.wandb = require("wandb", "wandb")
        self.project = project or os.environ.get("WANDB_PROJECT", "fedshare")
        self.directory = directory

    def on_begin(self, sim: "Simulation") -> None:
        directory = self.directory or (sim.dir.path if sim.dir is not None else None)
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
        self.run = self.wandb.init(
            project=self.project,
            name=run_name(sim),
            config=dict(sim.record),
            dir=None if directory is None else str(directory),
            reinit="finish_previous",
        )

    def on_round_end(self, sim: "Simulation", record: Record) -> None:
        if record is not None:
            self.run.log(numeric(record), step=sim.rounds_completed)

    def on_end(self, sim: "Simulation") -> None:
        if not hasattr(self, "run"):
            return
        self.run.summary.update({"status": sim.status, **numeric(sim.summary(sim.elapsed()))})
        self.run.finish(exit_code=0 if sim.status in MLFLOW_STATUS else 1)


class MLflowLogger(Callback):
    """An MLflow run: the config as parameters, the metrics per evaluated round, the status."""

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None) -> None:
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        self.experiment = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME", "fedshare")
        self.mlflow = require("mlflow", "mlflow")

    def on_begin(self, sim: "Simulation") -> None:
        uri = self.tracking_uri or Path("mlruns").resolve().as_uri()
        if uri.startswith("file:") or "://" not in uri:
            # MLflow 3 keeps the file store in maintenance and refuses it unless asked for
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.mlflow.set_tracking_uri(uri)
        self.mlflow.set_experiment(self.experiment)
        self.run = self.mlflow.start_run(run_name=run_name(sim))
        params = flat_params(sim.record)
        items = list(params.items())
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params per call
            self.mlflow.log_params(dict(items[start : start + 100]))

    def on_round_end(self, sim: "Simulation", record: Record) -> None:
        if record is not None:
            self.mlflow.log_metrics(numeric(record), step=sim.rounds_completed)

    def on_end(self, sim: "Simulation") -> None:
        if not hasattr(self, "run"):
            return
        summary = numeric(sim.summary(sim.elapsed()))
        self.mlflow.log_metrics({f"summary.{k}": v for k, v in summary.items()})
        self.mlflow.end_run(status=MLFLOW_STATUS.get(sim.status, "FAILED"))


LOGGERS: dict[str, type[Callback]] = {
    "tensorboard": TensorBoardLogger,
    "wandb": WandbLogger,
    "mlflow": MLflowLogger,
}


def make_loggers(names: str | Iterable[str] | None) -> list[Callback]:
    """The loggers of `logger=` (a name, a list of names, or None/empty for none)."""
    if not names:
        return []
    chosen = [names] if isinstance(names, str) else list(names)
    unknown = [n for n in chosen if n not in LOGGERS]
    if unknown:
        raise FedshareError(choices_message("logger", unknown[0], list(LOGGERS)))
    if len(set(chosen)) != len(chosen):
        raise FedshareError(f"logger={chosen} names a logger twice")
    return [LOGGERS[name]() for name in chosen]
