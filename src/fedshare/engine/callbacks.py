"""Callbacks: what happens around the rounds (evaluation, logging, checkpoints, progress,
stopping).

A callback sees the `Simulation` at the start, after every round and at the end (also after an
error; `sim.status` says how the run ended). After a round, `measure` lets a callback measure
the global model (the evaluation, `fedshare.engine.evaluation`); a round something measured
becomes a record of the history, which every callback's `on_round_end` then receives (None for
a round nothing measured). `on_round_end` returning True stops the run after that round with
status "stopped". The engine's own evaluation, logging, checkpoints and progress bar are
callbacks too; users add theirs with `simulate(..., callbacks=[...])`.
"""

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fedshare.engine.progress import Progress
from fedshare.errors import FedshareError

if TYPE_CHECKING:
    from fedshare.engine.simulation import Simulation

Record = dict[str, Any] | None
Measure = Callable[[], dict[str, Any]]
"""A round's measurement, run by the process that writes the run's files."""
RoundFunction = Callable[["Simulation", int, Record], bool | None]


class Callback:
    """Hooks around a run; override the ones you need."""

    def on_begin(self, sim: "Simulation") -> None:
        """Before the first round to run (after a resume: the first round not yet run)."""

    def measure(self, sim: "Simulation") -> Measure | None:
        """After round `sim.rounds_completed`, before `on_round_end`: the function that
        measures what this callback measures of the round (its keys go into the round's
        record), or None when it measures nothing this round."""
        return None

    def on_round_end(self, sim: "Simulation", record: Record) -> bool | None:
        """After round `sim.rounds_completed`; return True to stop the run here."""
        return None

    def on_stage(self, sim: "Simulation", text: str) -> None:
        """The round's current stage changed (a phase, clients done, a server step)."""

    def on_complete(self, sim: "Simulation") -> dict[str, Any]:
        """Every round ran (before `on_end`): keys this callback adds to `summary.json`."""
        return {}

    def on_end(self, sim: "Simulation") -> None:
        """After the last round, a stop, or an error (`sim.status`)."""


class AfterRound(Callback):
    """A plain function `(sim, rounds_completed, record) -> stop?` as a callback."""

    def __init__(self, function: RoundFunction) -> None:
        self.function = function

    def on_round_end(self, sim: "Simulation", record: Record) -> bool | None:
        return self.function(sim, sim.rounds_completed, record)


def as_callback(item: Callback | RoundFunction) -> Callback:
    return item if isinstance(item, Callback) else AfterRound(item)


def round_record(sim: "Simulation", info: dict[str, Any], callbacks: list[Callback]) -> Record:
    """The record of the round just run when a callback measures it (the evaluation, when
    due), else None: the measures, the time and traffic so far and the round's `info`. The
    measures run on the process that writes (`Executor.on_writer`)."""
    measures = [m for m in (callback.measure(sim) for callback in callbacks) if m is not None]
    if not measures:
        return None

    def make() -> dict[str, Any]:
        measured = {key: value for measure in measures for key, value in measure().items()}
        return {
            "round": sim.rounds_completed,
            **measured,
            "wall_time_s": round(sim.elapsed(), 3),
            **sim.traffic.as_dict(),
            **info,
        }

    return sim.executor.on_writer(make)


class MetricsLog(Callback):
    """One line of metrics.jsonl per evaluated round."""

    def on_round_end(self, sim: "Simulation", record: Record) -> None:
        if record is not None and sim.dir is not None:
            sim.dir.append_metrics(record)


class Checkpoints(Callback):
    """The latest state in checkpoint.pt every `every` rounds (one file, replaced atomically)."""

    def __init__(self, every: int) -> None:
        self.every = every

    def on_round_end(self, sim: "Simulation", record: Record) -> None:
        if sim.dir is not None and self.every > 0 and sim.rounds_completed % self.every == 0:
            sim.save_checkpoint()


class ResultFiles(Callback):
    """summary.json, model.pt and the pictures when the run ends, also when it stopped early
    or failed (`RunFolder.write_results`); the last callback, after the user's."""

    def on_end(self, sim: "Simulation") -> None:
        sim.folder.write_results()


class ProgressBar(Callback):
    """With `progress=true`: the tqdm bar on a terminal, else one line per round on stdout
    (`fedshare.engine.progress`)."""

    def on_begin(self, sim: "Simulation") -> None:
        name = sim.meta.get("strategy", type(sim.strategy).__name__)
        cfg = sim.config
        self.bar = Progress(cfg.rounds, sim.rounds_completed, cfg.progress, name)

    def on_stage(self, sim: "Simulation", text: str) -> None:
        if hasattr(self, "bar"):
            self.bar.stage(text)

    def on_round_end(self, sim: "Simulation", record: Record) -> None:
        traffic = sim.traffic
        self.bar.update(sim.rounds_completed, record, traffic.bytes_up + traffic.bytes_down)

    def on_end(self, sim: "Simulation") -> None:
        if hasattr(self, "bar"):
            self.bar.close()


class EarlyStopping(Callback):
    """Stop when the evaluated accuracy has not improved by `min_delta` points for `patience`
    evaluations in a row."""

    def __init__(self, patience: int, min_delta: float = 0.0) -> None:
        if patience < 1:
            raise FedshareError(f"EarlyStopping patience={patience} must be at least 1")
        self.patience, self.min_delta = patience, min_delta
        self.best, self.waited = float("-inf"), 0

    def on_round_end(self, sim: "Simulation", record: Record) -> bool:
        if record is None or record.get("accuracy") is None:
            return False
        if record["accuracy"] > self.best + self.min_delta:
            self.best, self.waited = record["accuracy"], 0
        else:
            self.waited += 1
        return self.waited >= self.patience


class TimeBudget(Callback):
    """Stop after the round during which `seconds` of this process's run time ran out."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_begin(self, sim: "Simulation") -> None:
        self.start = time.perf_counter()

    def on_round_end(self, sim: "Simulation", record: Record) -> bool:
        return time.perf_counter() - self.start >= self.seconds
