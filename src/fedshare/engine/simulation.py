"""The simulated-round engine: clients run one after another on one device (or several at once,
`train.batched`)."""

import contextlib
import copy
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fedshare.config import MEMORY_FORMATS, SimulationConfig
from fedshare.data.federated import FederatedData
from fedshare.data.partition_plot import plot_partition
from fedshare.defaults import resolve_rounds
from fedshare.engine.accounting import Traffic
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.allocator import steady_malloc
from fedshare.engine.callbacks import (
    Callback,
    Checkpoints,
    MetricsLog,
    ProgressBar,
    RoundFunction,
    as_callback,
)
from fedshare.engine.checkpoint import (
    load_checkpoint,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from fedshare.engine.client import Client
from fedshare.engine.client_side import ClientSetup, client_side, on_client_side
from fedshare.engine.client_state import ClientStates
from fedshare.engine.distributed import (
    Failed,
    RankGroup,
    assign,
    blocks,
    detached,
    restore_rng,
    rng_snapshot,
)
from fedshare.engine.evaluation import evaluate
from fedshare.engine.kept_messages import Inboxes, KeptMessages
from fedshare.engine.memory import cpu_seconds, peak_memory
from fedshare.engine.optim import learning_rate
from fedshare.engine.personal_eval import personal_metrics, personal_test_splits
from fedshare.engine.resume import check_same_run, check_saved_rounds
from fedshare.engine.rng import seed_global_torch
from fedshare.engine.sampling import CohortSampler, availability_per_client, cohort_size
from fedshare.engine.separability import davies_bouldin, has_features, penultimate
from fedshare.engine.state_log import ClientStateLog
from fedshare.errors import FedshareError, NonFiniteLossError, error_sentence
from fedshare.models.base import prepare_for_device
from fedshare.params import params_of
from fedshare.privacy.context import check_run_attack, run_attack_summary
from fedshare.results.atomic import clean_temporaries, png_complete
from fedshare.results.machine import machine
from fedshare.results.model_file import MODEL_FILE, save_model
from fedshare.results.plots import plot_learning_curve
from fedshare.results.rundir import RunDirectory, summarize
from fedshare.strategies.base import Message, Phase, SetupContext, Strategy, Update
from fedshare.validation import check_simulation_config

Delivery = tuple[Message | None, list[Message]]
"""A client's personal message (or None) and its inbox, taken out for one step."""

RoundCallback = Callback | RoundFunction
"""A `Callback`, or a plain function `(sim, rounds_completed, record) -> stop?` run after
every round."""


def uses_channels_last(model: nn.Module, memory_format: str) -> bool:
    """Whether `memory_format` puts `model`'s 4-d weights channels-last (`auto`: if it has any)."""
    if memory_format not in MEMORY_FORMATS:
        raise FedshareError(
            f"memory_format={memory_format!r} is not a memory format; valid: "
            f"{', '.join(MEMORY_FORMATS)}"
        )
    if memory_format == "auto":
        return any(p.dim() == 4 for p in model.parameters())
    return memory_format == "channels_last"


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise FedshareError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FedshareError(f"device={name!r} was asked for but no CUDA device is available")
    return device


@dataclass
class RunResult:
    """What a run returns: the evaluated-round history and the summary."""

    history: list[dict[str, Any]]
    summary: dict[str, Any]
    strategy: Strategy
    run_dir: Path | None = None

    @property
    def accuracies(self) -> list[float]:
        return [r["accuracy"] for r in self.history]

    @property
    def final_accuracy(self) -> float:
        return self.summary["final_accuracy"]

    @property
    def best_accuracy(self) -> float:
        return self.summary["best_accuracy"]


@dataclass
class _RoundStats:
    """Client metrics averaged over a round, kept on the device until the round is logged."""

    sums: dict[str, torch.Tensor | float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, metrics: Mapping[str, Any]) -> None:
        for key, value in metrics.items():
            if isinstance(value, torch.Tensor):
                value = value.detach().float()
            self.sums[key] = self.sums.get(key, 0.0) + value
            self.counts[key] = self.counts.get(key, 0) + 1

    def means(self) -> dict[str, float]:
        return {k: float(v) / self.counts[k] for k, v in self.sums.items()}


class Simulation:
    """Runs `strategy` on `data` for `config.rounds` synchronous rounds.

    Per round: sample the cohort (fraction/per_round, then availability), run each of the
    strategy's phases (broadcast -> every client in turn -> aggregate), evaluate every
    `eval.every` rounds and at the last, log, checkpoint.
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
        check_simulation_config(config)  # every key's type and range (fedshare.validation)
        resolve_rounds(config.rounds, strategy)  # a one-shot strategy refuses rounds != 1
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
        self.strategy = strategy
        self.meta = dict(meta or {})
        self.callbacks = list(callbacks or [])
        self.group = group
        writes = group is None or group.is_writer
        self.dir = RunDirectory(run_dir) if run_dir is not None and writes else None
        self.state_log = ClientStateLog(self.dir.path) if self.dir is not None else None
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
        self.checkpoint_round = 0
        """The round of the checkpoint in the run folder (0: none)."""
        """Rounds whose end every callback has seen (logged, checkpointed)."""
        self.error: str | None = None
        self._elapsed_before = 0.0
        self._start = time.perf_counter()
        self._cpu_before: float | None = 0.0
        """CPU seconds of the rounds before a resume (None: its checkpoint did not record them)."""
        self._cpu_start = cpu_seconds()
        self.status = "running"
        self.context_summary: dict[str, Any] = {}
        self._said_serial: set[str] = set()
        self._active_callbacks: list[Callback] = []
        self._clients_done = self._phase_clients = 0
        self._phase_name = ""
        self.model_spec: tuple[str, dict[str, Any]] = (type(model).__name__, {})
        """(registry name, options) of the model, for `model.pt` (`fedshare.load_model`)."""

    # ------------------------------------------------------------------ one round
    def _client_updates(
        self,
        phase: Phase,
        message: Message,
        cohort: list[int],
        round_idx: int,
        stats: _RoundStats,
        measure_local: bool = False,
    ) -> Iterator[Update]:
        """The cohort's updates, each routed and counted as it arrives (one process)."""
        steps = self._steps(phase, message, cohort, round_idx, measure_local)
        for client, update, measured in steps:
            stats.add(measured)
            yield self._received(client.id, client.state, update, stats)

    def _steps(
        self,
        phase: Phase,
        message: Message,
        cids: list[int],
        round_idx: int,
        measure_local: bool,
        delivered: Mapping[int, Delivery] | None = None,
    ) -> Iterator[tuple[Client, Update, dict[str, float]]]:
        """Run the client step of `phase` for `cids` (serially, or batched): each client with
        its update and, with `measure_local`, its local separability."""
        chunk = self._batch_chunk(phase, measure_local)
        if chunk > 1:
            step = on_client_side(phase.batched_step, self.strategy, self.client_side)
            for start in range(0, len(cids), chunk):
                clients = [
                    self._client(phase, cid, round_idx, delivered) for cid in cids[start:][:chunk]
                ]
                for client, update in zip(clients, step(clients, message), strict=True):
                    yield client, update, {}
            return
        step = on_client_side(phase.client_step, self.strategy, self.client_side)
        for cid in cids:
            client = self._client(phase, cid, round_idx, delivered)
            update = step(client, message)
            yield client, update, self._local_separability(client) if measure_local else {}

    def _batch_chunk(self, phase: Phase, measure_local: bool) -> int:
        """How many clients of `phase` train together (`train.batched`; 1 = serially)."""
        asked = self.config.train.batched
        if asked <= 1 or measure_local:
            return 1
        if phase.batched_step is None:
            if phase.trains and phase.name not in self._said_serial:
                self._said_serial.add(phase.name)
                warnings.warn(
                    f"train.batched={asked}: {self.strategy.name}'s {phase.name!r} step is not "
                    f"plain local training, so its clients run one after another",
                    stacklevel=2,
                )
            return 1
        return asked

    def _deliver(self, phase: Phase, cid: int, round_idx: int) -> Delivery:
        """What waits for client `cid` in `phase`: its personal message (counted here) and
        the peer messages in its inbox (taken out)."""
        personal = phase.personal(round_idx, cid) if phase.personal is not None else None
        if personal is not None:
            self.traffic.sent_personal(personal.weights, personal.payload)
        return personal, self.inboxes.collect(cid)

    def _client(
        self,
        phase: Phase,
        cid: int,
        round_idx: int,
        delivered: Mapping[int, Delivery] | None = None,
    ) -> Client:
        """Client `cid` for one step of `phase`: its data, state, messages and seeded streams
        (`delivered`: its personal message and inbox, already taken out for it)."""
        seed_global_torch(self.config.seed, f"client/{phase.name}", round_idx, cid)
        if delivered is None:
            personal, inbox = self._deliver(phase, cid, round_idx)
        else:
            personal, inbox = delivered[cid]
        return Client(
            cid,
            round_idx,
            self.data.client_indices[cid],
            self.data.dataset,
            self.worker,
            self.config.train,
            self.config.seed,
            phase.name,
            state=self.client_states.checkout(cid, self.device),
            personal=personal,
            kept=self.kept.of(cid),
            inbox=inbox,
        )

    def _received(
        self, cid: int, state: Mapping[str, torch.Tensor], update: Update, stats: _RoundStats
    ) -> Update:
        """Count and route what client `cid` sent (peer messages, its upload), keep its state."""
        for receiver, sent in update.to_peers.items():
            if not 0 <= receiver < self.data.num_clients:
                raise RuntimeError(
                    f"client {cid} sent a peer message to client {receiver}, which does "
                    f"not exist (clients 0…{self.data.num_clients - 1})"
                )
            self.traffic.sent_peer(sent.weights, sent.payload)
            self.inboxes.post(receiver, sent)
        update.to_peers = {}
        self.client_states.checkin(cid, state)
        self.traffic.sent_up(update.weights, update.payload)
        stats.add(update.metrics)
        self._clients_done += 1
        self.stage(f"{self._phase_name}: {self._clients_done}/{self._phase_clients} clients")
        return update

    def stage(self, text: str) -> None:
        """Tell the callbacks the round's current stage (the progress line shows it)."""
        for callback in self._active_callbacks:
            callback.on_stage(self, text)

    def _shared_updates(
        self,
        phase: Phase,
        message: Message,
        members: list[int],
        round_idx: int,
        stats: _RoundStats,
        measure_local: bool,
        kept: list[tuple[torch.Tensor, float]] | None = None,
    ) -> Iterator[Update]:
        """The cohort's updates when several processes share it (`fedshare.engine.distributed`):
        this rank runs its share, the ranks exchange the results, and every rank routes and
        counts all of them in cohort order. With `kept` (a phase with `weights_mean`) the
        shares are contiguous blocks of the cohort, this rank appends its uploads' weights and
        aggregation weights to `kept` in cohort order, and the updates cross without their
        weights (each yielded with a stand-in of the same size on the meta device, counted as
        traffic and never read)."""
        group = self.group
        assert group is not None
        sizes = [len(self.data.client_indices[cid]) for cid in members]
        owners = (assign if kept is None else blocks)(sizes, group.world)
        delivered = {cid: self._deliver(phase, cid, round_idx) for cid in members}
        mine = [cid for cid, owner in zip(members, owners, strict=True) if owner == group.rank]
        try:
            ran = []
            for client, update, measured in self._steps(
                phase, message, mine, round_idx, measure_local, delivered
            ):
                shape = None
                if kept is not None and update.weights is not None:
                    kept.append((update.weights.detach().clone(), update.aggregation_weight))
                    shape = (update.weights.shape, update.weights.dtype)
                    update = replace(update, weights=None)
                ran.append((client.id, detached(update), detached(client.state), measured, shape))
            sent: Any = (ran, rng_snapshot(self.device) if mine else None)
        except Exception as err:  # every rank raises it after the exchange
            sent = Failed(err)
        gathered = group.gather(sent, self.device)
        results = {cid: rest for ran, _ in gathered for cid, *rest in ran}
        if members:  # the random state the cohort's last client left, as in one process
            restore_rng(gathered[owners[-1]][1], self.device)
        later = set(members)
        for cid in members:
            later.discard(cid)
            update, state, measured, shape = results[cid]
            if shape is not None:
                update.weights = torch.empty(shape[0], dtype=shape[1], device="meta")
            if later.intersection(update.to_peers):
                raise RuntimeError(
                    f"{self.strategy.name}: client {cid} sent a peer message to a later client "
                    f"of the same {phase.name!r} step, which several processes cannot split; "
                    f"the strategy must set clients_in_order = True"
                )
            stats.add(measured)
            yield self._received(cid, state, update, stats)

    def _shared_mean(
        self,
        phase: Phase,
        message: Message,
        members: list[int],
        round_idx: int,
        stats: _RoundStats,
        measure_local: bool,
    ) -> None:
        """A `weights_mean` phase across processes: every update routed and counted, then the
        running mean of the weights passed from rank to rank in cohort order (the additions
        one process makes, in its order) into `phase.weights_mean`."""
        assert self.group is not None and phase.weights_mean is not None
        kept: list[tuple[torch.Tensor, float]] = []
        for _ in self._shared_updates(
            phase, message, members, round_idx, stats, measure_local, kept
        ):
            pass

        def add_mine(mean: RunningMean | None) -> RunningMean:
            mean = RunningMean() if mean is None else mean
            for weights, weight in kept:
                mean.add(weights, weight)
            return mean

        phase.weights_mean(self.group.pass_along(add_mine, self.device), round_idx)

    def run_round(self, round_idx: int) -> dict[str, Any]:
        cohort = self.sampler.cohort(round_idx)
        stats = _RoundStats()
        shared_before = self.traffic.bytes_shared
        measure = self.config.eval.davies_bouldin and has_features(self.worker)
        for i, phase in enumerate(self.strategy.phases()):
            members = (
                cohort if phase.participants is None else phase.participants(round_idx, cohort)
            )
            message = phase.broadcast(round_idx)
            self.traffic.sent_down(message.weights, message.payload, len(members))
            if phase.keep:
                self.kept.keep(phase.name, message, members)
            self._clients_done, self._phase_clients = 0, len(members)
            self._phase_name = phase.name
            self.stage(f"{phase.name}: 0/{len(members)} clients")
            shared = self.group is not None and not phase.in_order
            local = measure and i == 0
            if shared and phase.weights_mean is not None:
                self._shared_mean(phase, message, members, round_idx, stats, local)
                continue
            client_updates = self._shared_updates if shared else self._client_updates
            updates = client_updates(phase, message, members, round_idx, stats, local)
            phase.aggregate(updates, round_idx)
            if next(updates, None) is not None:
                raise RuntimeError(
                    f"{type(self.strategy).__name__}.{phase.name} aggregate did not consume "
                    f"every client update"
                )
        return {
            "clients": len(cohort),
            "lr": learning_rate(self.config.train, round_idx),
            "bytes_shared_round": self.traffic.bytes_shared - shared_before,
            **stats.means(),
            **self.strategy.round_metrics,
        }

    # ------------------------------------------------------------------ the loop
    def _default_record(self) -> dict[str, Any]:
        strategy = {"name": self.strategy.name, **params_of(self.strategy)}
        return {**self.meta, **asdict(self.config), "strategy": strategy}

    def _open_dir(self, resume: bool) -> dict[str, Any] | None:
        """Check the run directory before writing anything: a resume must match the
        checkpoint's config and partition, a new run needs an unused folder (or `overwrite`).
        Returns the checkpoint to resume from."""
        if self.dir is None:
            if resume:
                raise FedshareError("resume=true needs the run directory of the run to resume")
            return None
        clean_temporaries(self.dir.path)
        if resume:
            state = load_checkpoint(self.dir.checkpoint_path)
            check_same_run(state.get("config"), self.record, self.dir.checkpoint_path)
            check_saved_rounds(
                state, self.config.rounds, self.config.eval.every, self.dir.checkpoint_path
            )
            if state["fingerprint"] != self.data.partition.fingerprint:
                raise FedshareError(
                    f"the checkpoint in {self.dir.path} was made with partition "
                    f"{state['fingerprint']}, not {self.data.partition.fingerprint}; resume "
                    f"with the same data and partition"
                )
            return state
        used = self.dir.run_files()
        if used and not self.overwrite:
            raise FedshareError(
                f"run_dir {self.dir.path} already holds a run ({', '.join(used)}); pass "
                f"resume=true to continue it, overwrite=true to replace it, or another run_dir"
            )
        self.dir.clear()
        assert self.state_log is not None
        self.state_log.clear()
        self.dir.mark()
        return None

    def _setup(self, state: dict[str, Any] | None) -> None:
        self.strategy.setup(
            SetupContext(self.model, self.data, self.config, self.device, self.stage)
        )
        dataset = self.data.dataset
        if self.config.eval.context_attack:
            check_run_attack(
                self.strategy.context_view(),
                self.strategy.name,
                dataset.input_shape,
                self.config.eval.context_attack,
            )
        self.client_side = client_side(
            self.strategy,
            ClientSetup(
                self.worker,
                self.config.train,
                self.config.seed,
                self.device,
                dataset.num_classes,
                dataset.input_shape,
                self.data.num_clients,
            ),
        )
        if self.dir is not None:
            self.dir.write_config(self.record)
            fingerprint = self.data.partition.fingerprint
            if state is None or not self.dir.partition_written(fingerprint):
                self.dir.write_partition(self.data.partition.summary())
        if state is None:
            if self.dir is not None:
                self.dir.rewrite_metrics([])
            return
        self.strategy.load_state_dict(state["strategy"])
        self.history = list(state["history"])
        self.rounds_completed = self.rounds_recorded = int(state["rounds_completed"])
        self.checkpoint_round = self.rounds_completed
        self.traffic = Traffic(**state["traffic"])
        assert self.state_log is not None
        if "client_state_segments" in state:
            assert self.state_log is not None
            self.client_states.load_state_dict(self.state_log.load(state["client_state_segments"]))
        else:  # checkpoints before incremental client state held it inline: no segment has it
            self.client_states.load_state_dict(state.get("client_states", {}))
            self.client_states.mark_all_changed()
        self.kept.load_state_dict(state.get("kept_messages", {}), self.device)
        self.inboxes.load_state_dict(state.get("inboxes", {}), self.device)
        self._elapsed_before = float(state["wall_time_s"])
        cpu = state.get("cpu_time_s")  # absent from checkpoints written before it was kept
        self._cpu_before = None if cpu is None else float(cpu)
        restore_rng_state(state["rng"])
        if self.dir is not None:
            self.dir.rewrite_metrics(self.history)

    def save_checkpoint(self) -> None:
        """The state a resumed run continues from, with the config it must match."""
        assert self.dir is not None and self.state_log is not None
        segments = self.state_log.save(self.client_states, self.rounds_completed)
        save_checkpoint(
            self.dir.checkpoint_path,
            {
                "rounds_completed": self.rounds_completed,
                "strategy": self.strategy.state_dict(),
                "history": self.history,
                "traffic": self.traffic.as_dict(),
                "client_state_segments": segments,
                "kept_messages": self.kept.state_dict(),
                "inboxes": self.inboxes.state_dict(),
                "wall_time_s": self.elapsed(),
                "cpu_time_s": self.cpu_time(),
                "rng": rng_state(),
                "fingerprint": self.data.partition.fingerprint,
                "config": self.record,
            },
        )
        self.state_log.prune()
        self.checkpoint_round = self.rounds_completed

    def summary(self, elapsed: float) -> dict[str, Any]:
        return summarize(
            self.history,
            **self.meta,
            seed=self.config.seed,
            status=self.status,
            **({"error": self.error} if self.error else {}),
            rounds_completed=self.rounds_completed,
            rounds=self.config.rounds,
            num_clients=self.data.num_clients,
            wall_time_s=round(elapsed, 3),
            **self._cpu_summary(),
            **self.traffic.as_dict(),
            partition_fingerprint=self.data.partition.fingerprint,
            data_source=self.data.dataset.source,
            device=str(self.device),
            machine=machine(str(self.device)),
            bytes_shared_per_round=self.traffic.bytes_shared / max(self.rounds_completed, 1),
            client_state_bytes=(
                self.client_states.bytes_held + self.kept.bytes_held + self.inboxes.bytes_held
            ),
            **peak_memory(self.device),
            **self._processes(),
            **self.strategy.summary_metrics(),
            **self.context_summary,
        )

    def run(self, resume: bool = False) -> RunResult:
        """Run (or, with `resume`, continue) the rounds; with a run directory, hold its lock
        and check it before anything is written."""
        steady_malloc()
        if self.dir is None:
            return self._run(self._opened(resume))
        with self.dir.locked():
            return self._run(self._opened(resume))

    def _opened(self, resume: bool) -> dict[str, Any] | None:
        """`_open_dir` (rank 0 alone with several processes, whose ranks must agree on the
        run's config; every rank gets its checkpoint, client states inline)."""
        if self.group is None:
            return self._open_dir(resume)
        self.group.check_same("config", self.record)
        return self.group.from_writer(lambda: self._states_inline(self._open_dir(resume)))

    def _states_inline(self, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """A checkpoint with its client states read from the state log into it."""
        if state is None or "client_state_segments" not in state:
            return state
        assert self.state_log is not None
        inline = {k: v for k, v in state.items() if k != "client_state_segments"}
        inline["client_states"] = self.state_log.load(state["client_state_segments"])
        return inline

    def _evaluate(self, info: Mapping[str, Any]) -> dict[str, Any]:
        result = evaluate(
            self.strategy.global_model(),
            self.data.dataset,
            self.config.eval.batch_size,
            self.config.eval.per_class,
        )
        if self.config.eval.personal:
            result.update(self._personal_metrics())
        model = self.strategy.global_model()
        if self.config.eval.davies_bouldin and has_features(model):
            dataset = self.data.dataset
            test = penultimate(model, dataset.x_test, dataset.prepare)
            result["test_davies_bouldin"] = davies_bouldin(test, dataset.y_test)
        return {
            "round": self.rounds_completed,
            **result,
            "wall_time_s": round(self.elapsed(), 3),
            **self.traffic.as_dict(),
            **info,
        }

    def _shared_evaluation(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """`_evaluate` (on rank 0 alone with several processes, which send the record and the
        random state the evaluation left to the others)."""
        if self.group is None:
            return self._evaluate(info)
        record, rng = self.group.from_writer(
            lambda: (self._evaluate(info), rng_snapshot(self.device)), self.device
        )
        restore_rng(rng, self.device)
        return record

    def _gather_process_stats(self) -> None:
        """Every process's peak memory and CPU seconds (`*_per_process`) and the bytes all
        processes sent each other (`interprocess_bytes`), for `summary.json`."""
        assert self.group is not None
        sent = self.group.bytes_sent
        peaks = self.group.gather({**peak_memory(self.device), **self._cpu_summary()})
        self.process_summary = {
            "interprocess_bytes": sum(self.group.gather(sent)),
            **{f"{key}_per_process": [peak[key] for peak in peaks] for key in peaks[0]},
        }

    def _local_separability(self, client: Client) -> dict[str, float]:
        """Davies–Bouldin of the client's trained model (the worker after its step) on its own
        data and on the test set: measurement, not traffic."""
        x, y = client.data()
        dataset = self.data.dataset
        test = penultimate(self.worker, dataset.x_test, dataset.prepare)
        return {
            "local_train_davies_bouldin": davies_bouldin(penultimate(self.worker, x), y),
            "local_test_davies_bouldin": davies_bouldin(test, dataset.y_test),
        }

    def _context_attack(self) -> None:
        """`eval.context_attack` on what the finished run shared (once, for `summary.json`)."""
        sizes = self.config.eval.context_attack
        view = self.strategy.context_view()
        if sizes and view is not None:
            self.context_summary = run_attack_summary(
                view, self.data.dataset, sizes, self.config.seed
            )

    def _count_final_download(self) -> None:
        """Every client downloads the one-shot result once (counted when the run completes)."""
        final = self.strategy.final_download()
        if final is not None:
            self.traffic.sent_down(final.weights, final.payload, self.data.num_clients)

    def _personal_metrics(self) -> dict[str, float]:
        if not hasattr(self, "_personal_splits"):
            self._personal_splits = personal_test_splits(
                np.asarray(self.data.partition.class_counts),
                self.data.dataset.y_test,
                self.config.eval.personal_size,
                self.config.seed,
            )
        states = self.client_states
        return personal_metrics(
            self._personal_splits,
            self.data.dataset,
            lambda k: self.strategy.personal_model(k, states.checkout(k, self.device)),
        )

    def _write_results(self) -> None:
        """summary.json, curves.png and model.pt, also for a run that stopped early or failed."""
        if self.dir is None:
            return
        self.dir.write_summary(self.summary(self.elapsed()))
        picture = self.dir.path / "partition.png"
        # drawn here, not before round 1 (matplotlib takes ~1 s to import); a resume redraws a
        # cut-off one
        if not png_complete(picture):
            plot_partition(self.data.partition, picture)
        if self.rounds_completed > 0:
            name, params = self.model_spec
            model = self.strategy.global_model()
            save_model(self.dir.path / MODEL_FILE, model, name, params, self.data)
        meta = self.meta
        title = f"{meta.get('strategy')} on {meta.get('data')}/{meta.get('partition')}"
        plot_learning_curve(
            self.history, self.dir.path / "curves.png", f"{title}, seed {self.config.seed}"
        )

    def _stopped(self, status: str, err: BaseException) -> None:
        """A run ended early: its status and error, and its records cut back to the rounds
        whose end was recorded (metrics line, checkpoint), so that summary.json,
        metrics.jsonl and the checkpoint agree."""
        self.status = status
        if status != "interrupted":
            self.error = error_sentence(err)
        self.rounds_completed = self.rounds_recorded
        self.history = [r for r in self.history if r["round"] <= self.rounds_recorded]
        if self.dir is not None and self.dir.metrics_path.exists():
            with contextlib.suppress(OSError):  # a full disk keeps the lines written before
                self.dir.rewrite_metrics(self.history)

    def _write_failure(self, err: OSError) -> FedshareError:
        """A file of the run could not be written (a full disk, a read-only folder)."""
        assert self.dir is not None
        saved = self.checkpoint_round
        kept = (
            f"checkpoint.pt of round {saved} is intact (resume=true continues from it once the "
            f"folder is writable)"
            if saved
            else "no checkpoint was saved yet"
        )
        return FedshareError(
            f"cannot write the run's files in {self.dir.path} "
            f"({err.strerror or error_sentence(err)}); {kept}, and every file keeps its last "
            f"complete version"
        )

    def elapsed(self) -> float:
        """Seconds of run time so far, across resumes."""
        return self._elapsed_before + time.perf_counter() - self._start

    def cpu_time(self) -> float | None:
        """CPU seconds this process (and its ended children) spent on the rounds so far, over
        the span of `elapsed`, across resumes; None after a resume from a checkpoint that did
        not record them."""
        if self._cpu_before is None:
            return None
        return self._cpu_before + cpu_seconds() - self._cpu_start

    def _cpu_summary(self) -> dict[str, float]:
        cpu = self.cpu_time()
        return {} if cpu is None else {"cpu_time_s": round(cpu, 3)}

    def _processes(self) -> dict[str, Any]:
        """With several processes: how many, the bytes they exchanged (beside the simulated
        network's traffic, which does not count them) and each one's peak memory and CPU
        seconds."""
        if self.group is None:
            return {}
        return {"workers": self.group.world, **getattr(self, "process_summary", {})}

    def _run(self, state: dict[str, Any] | None) -> RunResult:
        try:
            return self._run_rounds(state)
        except OSError as err:
            if self.dir is None:
                raise
            raise self._write_failure(err) from None

    def _run_rounds(self, state: dict[str, Any] | None) -> RunResult:
        self._setup(state)
        cfg = self.config
        self._start = time.perf_counter()
        self._cpu_start = cpu_seconds()
        saver = Checkpoints(cfg.checkpoint.every)
        callbacks = [MetricsLog(), saver]
        callbacks += [ProgressBar()] if self.group is None or self.group.is_writer else []
        callbacks += [as_callback(c) for c in self.callbacks]
        self._active_callbacks = callbacks
        try:
            for callback in callbacks:
                callback.on_begin(self)
            for round_idx in range(self.rounds_completed, cfg.rounds):
                info = self.run_round(round_idx)
                self.rounds_completed = round_idx + 1
                record = None
                if self.rounds_completed % cfg.eval.every == 0 or round_idx == cfg.rounds - 1:
                    record = self._shared_evaluation(info)
                    self.history.append(record)
                stops = []
                for callback in callbacks:
                    stops.append(callback.on_round_end(self, record))
                    if callback is saver:  # the round's metrics line and checkpoint are written
                        self.rounds_recorded = self.rounds_completed
                stop = any(stops)
                if self.group is not None:  # rank 0's callbacks decide for every rank
                    stop = self.group.from_writer(lambda stop=stop: stop)
                if stop:
                    self.status = "stopped"
                    break
            else:
                self.status = "completed"
                self._count_final_download()
                if self.group is None or self.group.is_writer:
                    self._context_attack()
                if self.group is not None:
                    self._gather_process_stats()
        except NonFiniteLossError as err:
            self._stopped("diverged", err)
            raise
        except Exception as err:
            self._stopped("failed", err)
            raise
        except BaseException as err:  # KeyboardInterrupt (SIGINT, SIGTERM), SystemExit
            self._stopped("interrupted", err)
            raise
        finally:
            for callback in callbacks:
                callback.on_end(self)
            self._write_results()
        return RunResult(
            self.history,
            self.summary(self.elapsed()),
            self.strategy,
            self.dir.path if self.dir else None,
        )
