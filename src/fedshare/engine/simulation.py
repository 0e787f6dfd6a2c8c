"""The round loop (docs/engine.md): sample a cohort, deliver the strategy's messages, collect
the clients' updates, aggregate, call the callbacks.

How a phase's clients run (one after another, batched under vmap, shared among processes) is
the executor's business (`fedshare.engine.executors`), chosen once when the simulation is
built; the run folder (checks, checkpoints, final files) is `fedshare.engine.run_folder`'s;
evaluation, metrics lines, checkpoints, progress and the experiment trackers are callbacks
(`fedshare.engine.evaluation`, `fedshare.engine.callbacks`, `fedshare.tracking`).
"""

import copy
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from torch import nn

from fedshare.config import SimulationConfig
from fedshare.config.params import params_of
from fedshare.config.validation import check_simulation_config
from fedshare.data.federated import FederatedData
from fedshare.engine.accounting import Traffic
from fedshare.engine.architectures import client_architectures
from fedshare.engine.callbacks import (
    Callback,
    Checkpoints,
    MetricsLog,
    ProgressBar,
    ResultFiles,
    RoundFunction,
    as_callback,
    round_record,
)
from fedshare.engine.client_state import ClientStates
from fedshare.engine.clock import RunClock
from fedshare.engine.device import resolve_device, uses_channels_last
from fedshare.engine.distributed import RankGroup
from fedshare.engine.evaluation import Evaluation
from fedshare.engine.executors import PhaseRun, RoundStats, make_executor
from fedshare.engine.kept_messages import Inboxes, KeptMessages
from fedshare.engine.optim import learning_rate
from fedshare.engine.result import RunResult
from fedshare.engine.run_folder import FINISHED, RunFolder
from fedshare.engine.sampling import CohortSampler, availability_per_client, cohort_size
from fedshare.engine.setup import set_up
from fedshare.engine.signals import held_signals
from fedshare.engine.summary import run_summary
from fedshare.errors import FedshareError, NonFiniteLossError, error_sentence
from fedshare.models.base import prepare_for_device
from fedshare.results.rundir import RunDirectory
from fedshare.runtime import steady_malloc
from fedshare.strategies.base import Strategy

RoundCallback = Callback | RoundFunction
"""A `Callback`, or a plain function `(sim, rounds_completed, record) -> stop?` run after
every round."""


class Simulation:
    """Runs `strategy` on `data` for `config.rounds` synchronous rounds.

    Per round: sample the cohort (fraction/per_round, then availability), run each of the
    strategy's phases (broadcast -> the members' client steps -> aggregate), then the
    callbacks (evaluation when due, metrics line, checkpoint, progress, the user's).
    """

    def __init__(
        self,
        strategy: Strategy,
        data: FederatedData,
        model: nn.Module,
        config: SimulationConfig,
        run_dir: str | Path | None = None,
        meta: Mapping[str, Any] | None = None,
        callbacks: list[RoundCallback] | None = None,
        record: Mapping[str, Any] | None = None,
        overwrite: bool = False,
        group: RankGroup | None = None,
    ) -> None:
        """`record` is the resolved config that `config.yaml` records and a resume must match
        (default: the simulation settings, `meta` and the strategy's parameters); with
        `overwrite`, a previous run's files in `run_dir` are deleted instead of refused.
        `group`: this process's place in a run across several processes
        (`fedshare.engine.distributed`); only its rank 0 writes `run_dir`."""
        check_simulation_config(config)  # every key's type and range (fedshare.config.validation)
        if len(data.dataset.y_test) == 0:
            raise FedshareError(
                f"the test set of {data.dataset.name} is empty: an accuracy over zero samples is "
                f"not a result; give the data a test set"
            )
        self.config = config
        self.device = resolve_device(config.device)
        self.data = data.to(self.device)
        self.model = prepare_for_device(
            model, self.device, uses_channels_last(model, config.memory_format)
        )
        self.worker = copy.deepcopy(self.model)  # the one reused client model
        if config.train.compile:
            self.worker.compile()  # in place: same module, parameters and state_dict keys
        self.architectures = client_architectures(
            strategy, config, self.model, self.data.dataset, self.data.num_clients
        )
        self.strategy = strategy
        self.meta = dict(meta or {})
        self.callbacks = list(callbacks or [])
        self.group = group
        self.executor = make_executor(self, config.train.batched, group)
        self.dir = RunDirectory(run_dir) if run_dir is not None and self.executor.writes else None
        self.folder = RunFolder(self)
        self.record = dict(record) if record is not None else self._default_record()
        self.overwrite = overwrite
        clients = config.clients
        probs = availability_per_client(
            clients.availability, data.partition.groups, data.num_clients
        )
        per_round = cohort_size(data.num_clients, clients.fraction, clients.per_round)
        self.sampler = CohortSampler(
            data.num_clients, per_round, probs, config.seed, clients.availability_period
        )
        self.traffic = Traffic()
        self.client_states = ClientStates()
        self.kept = KeptMessages()
        self.inboxes = Inboxes()
        self.history: list[dict[str, Any]] = []
        self.rounds_completed = 0
        self.rounds_recorded = 0
        """Rounds whose end every callback has seen (logged, checkpointed)."""
        self.error: str | None = None
        self.status = "running"
        self.clock = RunClock()
        self.measure_local = False
        """Measure each client of a round's first phase after its step (the evaluation's
        `eval.davies_bouldin` switches it on)."""
        self.completed_summary: dict[str, Any] = {}
        """What the callbacks add to `summary.json` when every round ran."""
        self._active_callbacks: list[Callback] = []
        self.model_spec: tuple[str, dict[str, Any]] = (type(model).__name__, {})
        """(registry name, options) of the model, for `model.pt` (`fedshare.load_model`)."""

    # ------------------------------------------------------------------ one round
    def run_round(self, round_idx: int) -> dict[str, Any]:
        """One round: sample the cohort, then per phase of the strategy broadcast, run the
        members' client steps and aggregate (the executor); the round's info record."""
        cohort = self.sampler.cohort(round_idx)
        stats = RoundStats()
        shared_before = self.traffic.bytes_shared
        for i, phase in enumerate(self.strategy.phases()):
            members = (
                cohort if phase.participants is None else phase.participants(round_idx, cohort)
            )
            message = phase.broadcast(round_idx)
            self.traffic.sent_down(message.weights, message.payload, len(members))
            if phase.keep:
                self.kept.keep(phase.name, message, members)
            run = PhaseRun(phase, message, members, round_idx, stats, self.measure_local and i == 0)
            self.executor.run_phase(run)
        return {
            "clients": len(cohort),
            "lr": learning_rate(self.config.train, round_idx),
            "bytes_shared_round": self.traffic.bytes_shared - shared_before,
            **stats.means(),
            **self.strategy.round_metrics,
        }

    def stage(self, text: str) -> None:
        """Tell the callbacks the round's current stage (the progress line shows it)."""
        for callback in self._active_callbacks:
            callback.on_stage(self, text)

    # ------------------------------------------------------------------ the run
    def run(self, resume: bool = False) -> RunResult:
        """Run (or, with `resume`, continue) the rounds; with a run directory, hold its lock
        and check it before anything is written."""
        steady_malloc()
        if self.dir is None:
            return self._run(self.folder.open(resume, self.group))
        with self.dir.locked():
            return self._run(self.folder.open(resume, self.group))

    def _run(self, state: dict[str, Any] | None) -> RunResult:
        try:
            if state is not None and FINISHED in state:
                return self._finished(state)
            return self._rounds(state)
        except OSError as err:
            if self.dir is None:
                raise
            raise self.folder.write_failure(err) from None

    def _setup(self) -> None:
        self.client_side = set_up(self)

    def _finished(self, state: dict[str, Any]) -> RunResult:
        """A resume of a run that has all its rounds and its results: nothing runs and no
        file is written; the result is the folder's, its summary marked `nothing_to_do`."""
        self._setup()
        self.strategy.load_state_dict(state["strategy"])
        self.history = list(state["history"])
        self.rounds_completed = self.rounds_recorded = int(state["rounds_completed"])
        self.status = "completed"
        self.executor.settle()
        summary = {**state[FINISHED], "nothing_to_do": True}
        return RunResult(self.history, summary, self.strategy, self.dir.path if self.dir else None)

    def _rounds(self, state: dict[str, Any] | None) -> RunResult:
        self._setup()
        self.folder.begin(state)
        cfg = self.config
        self.clock.start()
        saver = Checkpoints(cfg.checkpoint.every)
        callbacks: list[Callback] = [Evaluation(), MetricsLog(), saver]
        callbacks += [ProgressBar()] if self.executor.writes else []
        callbacks += [*(as_callback(c) for c in self.callbacks), ResultFiles()]
        self._active_callbacks = callbacks
        try:
            for callback in callbacks:
                callback.on_begin(self)
            for round_idx in range(self.rounds_completed, cfg.rounds):
                info = self.run_round(round_idx)
                self.rounds_completed = round_idx + 1
                record = round_record(self, info, callbacks)
                if record is not None:
                    self.history.append(record)
                stops = []
                for callback in callbacks:
                    stops.append(callback.on_round_end(self, record))
                    if callback is saver:  # the round's metrics line and checkpoint are written
                        self.rounds_recorded = self.rounds_completed
                if self.executor.agree(any(stops)):
                    self.status = "stopped"
                    break
            else:
                self._completed()
        except NonFiniteLossError as err:
            self._stopped("diverged", err)
            raise
        except Exception as err:
            self._stopped("failed", err)
            raise
        except BaseException as err:  # KeyboardInterrupt (SIGINT, SIGTERM), SystemExit
            self.executor.stopping()
            self._stopped("interrupted", err)
            raise
        finally:
            self.clock.stop()  # summary.json, the returned summary and trackers agree
            with held_signals():  # a stop now ends no differently from what the files say
                for callback in callbacks:
                    callback.on_end(self)
        self.executor.settle()
        summary = self.summary(self.elapsed())
        return RunResult(self.history, summary, self.strategy, self.dir.path if self.dir else None)

    def _completed(self) -> None:
        """Every round ran: every client downloads a one-shot result once, the callbacks add
        their last measures (the context attack), the processes report their measurements."""
        self.status = "completed"
        final = self.strategy.final_download()
        if final is not None:
            self.traffic.sent_down(final.weights, final.payload, self.data.num_clients)
        for callback in self._active_callbacks:
            self.completed_summary.update(callback.on_complete(self))
        self.executor.finish()

    def _stopped(self, status: str, err: BaseException) -> None:
        """A run ended early: its status and error, and its records cut back to the rounds
        whose end was recorded (metrics line, checkpoint), so that summary.json,
        metrics.jsonl and the checkpoint agree."""
        self.status = status
        if status != "interrupted":
            self.error = error_sentence(err)
        self.rounds_completed = self.rounds_recorded
        self.history = [r for r in self.history if r["round"] <= self.rounds_recorded]
        self.folder.cut_back(self.rounds_recorded)

    # ------------------------------------------------------------------ what it reports
    def save_checkpoint(self) -> None:
        """The state a resumed run continues from (`Checkpoints` calls it)."""
        self.folder.save_checkpoint()

    def elapsed(self) -> float:
        """Seconds of the rounds so far (with their evaluations and checkpoints, not the
        start-up or the final files), across resumes."""
        return self.clock.elapsed()

    def cpu_time(self) -> float | None:
        """CPU seconds of the rounds so far, across resumes (None: not recorded)."""
        return self.clock.cpu_time()

    def cpu_summary(self) -> dict[str, float]:
        cpu = self.cpu_time()
        return {} if cpu is None else {"cpu_time_s": round(cpu, 3)}

    def summary(self, elapsed: float) -> dict[str, Any]:
        """summary.json's content with `elapsed` seconds of rounds."""
        return run_summary(self, elapsed)

    def _default_record(self) -> dict[str, Any]:
        strategy = {"name": self.strategy.name, **params_of(self.strategy)}
        return {**self.meta, **asdict(self.config), "strategy": strategy}
