"""How a phase's clients run: one after another (`Executor`), several at once under vmap
(`BatchedExecutor`, `train.batched`), or shared among processes (`RankedExecutor`, `workers`).
The round loop (`fedshare.engine.simulation`) chooses one at assembly (`make_executor`) and
calls only `run_phase`: every executor hands the phase's `aggregate` the same updates in the
same order, routed and counted the same way, so the choice changes how fast a round runs,
not what it computes (exactly for the serial and ranked ones on one CPU thread, within float
tolerance for vmap's batched arithmetic).
"""

import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from fedshare.engine.aggregation import RunningMean
from fedshare.engine.client import Client
from fedshare.engine.client_side import on_client_side
from fedshare.engine.distributed import (
    Failed,
    RankGroup,
    assign,
    blocks,
    detached,
    ignore_further_stops,
    restore_rng,
    rng_snapshot,
)
from fedshare.engine.memory import peak_memory
from fedshare.engine.rng import seed_global_torch
from fedshare.metrics.separability import davies_bouldin, penultimate
from fedshare.strategies.base import Message, Phase, Update

if TYPE_CHECKING:
    from fedshare.engine.simulation import Simulation

Delivery = tuple[Message | None, list[Message]]
"""A client's personal message (or None) and its inbox, taken out for one step."""

T = TypeVar("T")

Step = tuple[Client, Update, dict[str, float]]
"""A client after its step, its update and its measurements."""


@dataclass
class RoundStats:
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


@dataclass
class PhaseRun:
    """One phase of one round as the loop hands it to an executor."""

    phase: Phase
    message: Message
    members: list[int]
    round_idx: int
    stats: RoundStats
    measure_local: bool = False
    """Measure each client's local separability after its step (`eval.davies_bouldin`)."""


class Executor:
    """Runs a phase's clients one after another in this process (the reference executor; the
    others reuse its client steps, delivery and routing)."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self._done = self._total = 0
        self._phase_name = ""

    writes = True
    """Whether this process writes the run folder and shows progress (rank 0 of several)."""

    def agree(self, stop: bool) -> bool:
        """Whether the run stops after this round (several processes: rank 0's callbacks
        decide for every rank)."""
        return stop

    def on_writer(self, make: Callable[[], T]) -> T:
        """`make()` (several processes: on rank 0 alone, which sends its value and the random
        state it left to the others)."""
        return make()

    def stopping(self) -> None:
        """The run is being interrupted."""

    def finish(self) -> None:
        """The run completed every round (several processes: each one's measurements)."""

    def processes(self) -> dict[str, Any]:
        """summary.json's record of the processes that ran the run (none for one)."""
        return {}

    def settle(self) -> None:
        """The run's files are written (several processes: they part together)."""

    def run_phase(self, run: PhaseRun) -> None:
        """Every member's client step, each update routed and counted as it arrives, all of
        them handed to the phase's `aggregate` in cohort order."""
        self._begin(run)
        updates = self._updates(run)
        run.phase.aggregate(updates, run.round_idx)
        if next(updates, None) is not None:
            raise RuntimeError(
                f"{type(self.sim.strategy).__name__}.{run.phase.name} aggregate did not consume "
                f"every client update"
            )

    def _begin(self, run: PhaseRun) -> None:
        self._done, self._total, self._phase_name = 0, len(run.members), run.phase.name
        self.sim.stage(f"{run.phase.name}: 0/{len(run.members)} clients")

    def _updates(self, run: PhaseRun) -> Iterator[Update]:
        for client, update, measured in self.steps(run, run.members):
            run.stats.add(measured)
            yield self.received(client.id, client.state, update, run.stats)

    def steps(
        self, run: PhaseRun, cids: list[int], delivered: Mapping[int, Delivery] | None = None
    ) -> Iterator[Step]:
        """The client step of `run.phase` for `cids`, one after another (`delivered`: their
        messages, already taken out for them)."""
        sim = self.sim
        step = on_client_side(run.phase.client_step, sim.strategy, sim.client_side)
        for cid in cids:
            client = self.client(run, cid, delivered)
            update = step(client, run.message)
            yield client, update, self._local_separability(client) if run.measure_local else {}

    def deliver(self, phase: Phase, cid: int, round_idx: int) -> Delivery:
        """What waits for client `cid` in `phase`: its personal message (counted here) and
        the peer messages in its inbox (taken out)."""
        personal = phase.personal(round_idx, cid) if phase.personal is not None else None
        if personal is not None:
            self.sim.traffic.sent_personal(personal.weights, personal.payload)
        return personal, self.sim.inboxes.collect(cid)

    def client(
        self, run: PhaseRun, cid: int, delivered: Mapping[int, Delivery] | None = None
    ) -> Client:
        """Client `cid` for one step of `run.phase`: its data, state, messages and seeded
        streams (`delivered`: its personal message and inbox, already taken out for it)."""
        sim, phase = self.sim, run.phase
        seed_global_torch(sim.config.seed, f"client/{phase.name}", run.round_idx, cid)
        if delivered is None:
            personal, inbox = self.deliver(phase, cid, run.round_idx)
        else:
            personal, inbox = delivered[cid]
        return Client(
            cid,
            run.round_idx,
            sim.data.client_indices[cid],
            sim.data.dataset,
            sim.architectures.worker_of(cid, sim.worker),
            sim.config.train,
            sim.config.seed,
            phase.name,
            state=sim.client_states.checkout(cid, sim.device),
            personal=personal,
            kept=sim.kept.of(cid),
            inbox=inbox,
        )

    def received(
        self, cid: int, state: Mapping[str, torch.Tensor], update: Update, stats: RoundStats
    ) -> Update:
        """Count and route what client `cid` sent (peer messages, its upload), keep its state."""
        sim = self.sim
        for receiver, sent in update.to_peers.items():
            if not 0 <= receiver < sim.data.num_clients:
                raise RuntimeError(
                    f"client {cid} sent a peer message to client {receiver}, which does "
                    f"not exist (clients 0…{sim.data.num_clients - 1})"
                )
            sim.traffic.sent_peer(sent.weights, sent.payload)
            sim.inboxes.post(receiver, sent)
        update.to_peers = {}
        sim.client_states.checkin(cid, state)
        sim.traffic.sent_up(update.weights, update.payload)
        stats.add(update.metrics)
        self._done += 1
        sim.stage(f"{self._phase_name}: {self._done}/{self._total} clients")
        return update

    def _local_separability(self, client: Client) -> dict[str, float]:
        """Davies–Bouldin of the client's trained model (the worker after its step) on its own
        data and on the test set: measurement, not traffic."""
        x, y = client.data()
        worker, dataset = client.model, self.sim.data.dataset
        test = penultimate(worker, dataset.x_test, dataset.prepare)
        return {
            "local_train_davies_bouldin": davies_bouldin(penultimate(worker, x), y),
            "local_test_davies_bouldin": davies_bouldin(test, dataset.y_test),
        }


class BatchedExecutor(Executor):
    """Trains `chunk` clients at once, their models stacked under vmap (`train.batched`), in
    the phases whose step is plain local training (`Phase.batched_step`); the others run one
    after another. Clients with different architectures (`clients.models`) are stacked by
    architecture: each chunk holds clients of one architecture, and the steps come back in
    cohort order."""

    def __init__(self, sim: "Simulation", chunk: int) -> None:
        super().__init__(sim)
        self.chunk = chunk
        self._said_serial: set[str] = set()

    def steps(
        self, run: PhaseRun, cids: list[int], delivered: Mapping[int, Delivery] | None = None
    ) -> Iterator[Step]:
        phase, sim = run.phase, self.sim
        if run.measure_local or phase.batched_step is None:
            if not run.measure_local and phase.trains and phase.name not in self._said_serial:
                self._said_serial.add(phase.name)
                warnings.warn(
                    f"train.batched={self.chunk}: {sim.strategy.name}'s {phase.name!r} step "
                    f"is not plain local training, so its clients run one after another",
                    stacklevel=2,
                )
            yield from super().steps(run, cids, delivered)
            return
        step = on_client_side(phase.batched_step, sim.strategy, sim.client_side)
        groups = self._by_architecture(cids)
        done: dict[int, Step] = {}
        for group in groups:
            for start in range(0, len(group), self.chunk):
                clients = [self.client(run, cid, delivered) for cid in group[start:][: self.chunk]]
                for client, update in zip(clients, step(clients, run.message), strict=True):
                    if len(groups) == 1:  # one architecture: each step goes on as it is done
                        yield client, update, {}
                    else:
                        done[client.id] = (client, update, {})
        for cid in cids:
            if cid in done:
                yield done.pop(cid)

    def _by_architecture(self, cids: list[int]) -> list[list[int]]:
        """`cids` split by architecture, each group in cohort order; the group of the cohort's
        last client runs last, so the random state a phase leaves is that of its last client
        seeded, as serially."""
        models = self.sim.architectures.models
        if models is None or not cids:
            return [cids]
        groups: dict[int, list[int]] = {}
        for cid in cids:
            groups.setdefault(models.index(cid), []).append(cid)
        last = groups.pop(models.index(cids[-1]))
        return [*groups.values(), last]


class RankedExecutor(Executor):
    """Shares each phase's clients among the run's processes (`fedshare.engine.distributed`):
    this rank runs its share with `local`'s steps, the ranks exchange the results, and every
    rank routes and counts all of them in cohort order. Phases that must run in order
    (`Phase.in_order`) run whole on every rank."""

    def __init__(self, sim: "Simulation", local: Executor, group: RankGroup) -> None:
        super().__init__(sim)
        self.local, self.group = local, group
        self.writes = group.is_writer
        self._measured: dict[str, Any] = {}

    def agree(self, stop: bool) -> bool:
        return self.group.from_writer(lambda: stop)

    def on_writer(self, make: Callable[[], T]) -> T:
        device = self.sim.device
        value, rng = self.group.from_writer(lambda: (make(), rng_snapshot(device)), device)
        restore_rng(rng, device)
        return value

    def stopping(self) -> None:
        ignore_further_stops()

    def finish(self) -> None:
        """Every process's peak memory and CPU seconds (`*_per_process`) and the bytes all
        processes sent each other (`interprocess_bytes`)."""
        sim, group = self.sim, self.group
        sent = group.bytes_sent
        peaks = group.gather({**peak_memory(sim.device), **sim.cpu_summary()})
        self._measured = {
            "interprocess_bytes": sum(group.gather(sent)),
            **{f"{key}_per_process": [peak[key] for peak in peaks] for key in peaks[0]},
        }

    def processes(self) -> dict[str, Any]:
        """How many processes, the bytes they exchanged (beside the simulated network's
        traffic, which does not count them) and each one's peak memory and CPU seconds."""
        return {"workers": self.group.world, **self._measured}

    def settle(self) -> None:
        self.group.settle()

    def run_phase(self, run: PhaseRun) -> None:
        if run.phase.in_order:
            self.local.run_phase(run)
        elif run.phase.weights_mean is not None:
            self._begin(run)
            self._shared_mean(run)
        else:
            super().run_phase(run)

    def _updates(self, run: PhaseRun) -> Iterator[Update]:
        return self._shared_updates(run)

    def _shared_updates(
        self, run: PhaseRun, kept: list[tuple[torch.Tensor, float]] | None = None
    ) -> Iterator[Update]:
        """The cohort's updates, this rank running its share. With `kept` (a phase with
        `weights_mean`) the shares are contiguous blocks of the cohort, this rank appends its
        uploads' weights and aggregation weights to `kept` in cohort order, and the updates
        cross without their weights (each yielded with a stand-in of the same size on the
        meta device, counted as traffic and never read)."""
        sim, group, members = self.sim, self.group, run.members
        sizes = [len(sim.data.client_indices[cid]) for cid in members]
        owners = (assign if kept is None else blocks)(sizes, group.world)
        delivered = {cid: self.deliver(run.phase, cid, run.round_idx) for cid in members}
        mine = [cid for cid, owner in zip(members, owners, strict=True) if owner == group.rank]
        try:
            ran = []
            for client, update, measured in self.local.steps(run, mine, delivered):
                shape = None
                if kept is not None and update.weights is not None:
                    kept.append((update.weights.detach().clone(), update.aggregation_weight))
                    shape = (update.weights.shape, update.weights.dtype)
                    update = replace(update, weights=None)
                ran.append((client.id, detached(update), detached(client.state), measured, shape))
            sent: Any = (ran, rng_snapshot(sim.device) if mine else None)
        except Exception as err:  # every rank raises it after the exchange
            sent = Failed(err)
        gathered = group.gather(sent, sim.device)
        results = {cid: rest for ran, _ in gathered for cid, *rest in ran}
        if members:  # the random state the cohort's last client left, as in one process
            restore_rng(gathered[owners[-1]][1], sim.device)
        later = set(members)
        for cid in members:
            later.discard(cid)
            update, state, measured, shape = results[cid]
            if shape is not None:
                update.weights = torch.empty(shape[0], dtype=shape[1], device="meta")
            if later.intersection(update.to_peers):
                raise RuntimeError(
                    f"{sim.strategy.name}: client {cid} sent a peer message to a later client "
                    f"of the same {run.phase.name!r} step, which several processes cannot "
                    f"split; the strategy must set clients_in_order = True"
                )
            run.stats.add(measured)
            yield self.received(cid, state, update, run.stats)

    def _shared_mean(self, run: PhaseRun) -> None:
        """A `weights_mean` phase: every update routed and counted, then the running mean of
        the weights passed from rank to rank in cohort order (the additions one process
        makes, in its order) into `phase.weights_mean`."""
        assert run.phase.weights_mean is not None
        kept: list[tuple[torch.Tensor, float]] = []
        for _ in self._shared_updates(run, kept):
            pass

        def add_mine(mean: RunningMean | None) -> RunningMean:
            mean = RunningMean() if mean is None else mean
            for weights, weight in kept:
                mean.add(weights, weight)
            return mean

        run.phase.weights_mean(self.group.pass_along(add_mine, self.sim.device), run.round_idx)


def make_executor(sim: "Simulation", batched: int, group: RankGroup | None) -> Executor:
    """The executor of a run: serial, or batched by `batched` > 1 clients, inside a ranked
    one when several processes share the run (`group`)."""
    local = BatchedExecutor(sim, batched) if batched > 1 else Executor(sim)
    return local if group is None else RankedExecutor(sim, local, group)
