"""Exact unit tests of the engine's executors, the ranks' exchange and merge, batched training,
the client and its wall, and the run folder (docs/mutation.md, entries `engine_exec`,
`engine_distributed`, `engine_batched`, `engine_client`).

The executors run a probe strategy on a tiny simulation (a linear model, five clients of
unequal size): its client step draws from the global stream, keeps a count in its state, sends
a peer message and uploads weights and a payload that depend on the client and the draw, and
its server records what it received, in which order, and the random state the phase left. A run
across several processes is played in this one process, rank after rank (`ReplayGroup`): every
collective takes the other ranks' bytes from a board their earlier tries wrote, and a try that
finds one missing stops and is started again from scratch, so each rank computes exactly what it
computes in its own process. The collectives themselves (`RankGroup`'s exchange, gather, pass
along) run on threads over a stand-in of `torch.distributed` (`ThreadedDist`).
"""

import contextlib
import threading
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from fedshare.config import CheckpointConfig, ClientsConfig, SimulationConfig, TrainConfig
from fedshare.data.dataset import Dataset
from fedshare.data.federated import federate
from fedshare.engine import distributed
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.distributed import Failed, RankGroup, from_bytes, to_bytes
from fedshare.engine.executors import (
    BatchedExecutor,
    Executor,
    RankedExecutor,
    RoundStats,
    make_executor,
)
from fedshare.engine.messages import Message, Update
from fedshare.engine.rng import seed_global_torch
from fedshare.engine.simulation import Simulation
from fedshare.errors import FedshareError, RankFailure
from fedshare.strategies.base import Phase, Strategy

NUM_CLIENTS = 5


# ---------------------------------------------------------------------------- the probe
@dataclass
class Probe(Strategy):
    """A client step whose every output depends on the client, its draw and its state; the
    server records the updates in the order it gets them and the random state after them."""

    name: ClassVar[str] = "probe"
    peer: int | None = 0
    """Each client sends a peer message to this client (None: none)."""

    def setup(self, ctx) -> None:
        super().setup(ctx)
        self.seen: list[tuple] = []
        self.after: list[float] = []

    def client_update(self, client, message: Message) -> Update:
        draw = self._draw(client)
        count = client.state.get("count", torch.zeros(())) + 1
        client.state["count"] = count
        inbox = sum(float(m.payload["from"].sum()) for m in client.inbox)
        assert message.weights is not None
        to_peers = {}
        if self.peer is not None:
            to_peers = {self.peer: Message(payload={"from": torch.tensor([client.id + 1.0])})}
        return Update(
            client.id,
            client.num_samples,
            weights=message.weights * 0 + draw + client.id,
            payload={"draw": draw.reshape(1), "inbox": torch.tensor([float(inbox)])},
            metrics={"cid": float(client.id), "count": float(count)},
            to_peers=to_peers,
        )

    def _draw(self, client) -> torch.Tensor:
        return torch.rand(())  # the global stream, seeded per (phase, round, client)

    def _record(self, update: Update) -> None:
        weights = None if update.weights is None else update.weights.sum().item()
        self.seen.append(
            (
                update.client_id,
                update.payload["draw"].item(),
                update.payload["inbox"].item(),
                weights,
                update.metrics["count"],
            )
        )


@dataclass
class ProbeList(Probe):
    """Its own aggregate: every update, in order (the ranks exchange whole updates)."""

    name: ClassVar[str] = "probe_list"

    def aggregate(self, updates, round_idx: int) -> None:
        mean = RunningMean()
        for update in updates:
            self._record(update)
            assert update.weights is not None
            mean.add(update.weights, update.aggregation_weight)
        self.after.append(torch.rand(()).item())
        self.load_weights(self.model, mean.value())


@dataclass
class ProbeMean(Probe):
    """Strategy's aggregate kept (`Phase.weights_mean`): the ranks pass the running mean on."""

    name: ClassVar[str] = "probe_mean"

    def load_mean(self, mean: RunningMean, round_idx: int) -> None:
        self.seen.append(("mean", round(mean.value().sum().item(), 4)))
        self.after.append(torch.rand(()).item())
        super().load_mean(mean, round_idx)


@dataclass
class ProbeBatched(ProbeList):
    """A batched step: the client step of each client, its chunk's first client in its state."""

    name: ClassVar[str] = "probe_batched"

    def client_update(self, client, message: Message) -> Update:
        return super().client_update(client, message)

    def _draw(self, client) -> torch.Tensor:
        """The client's own stream: a chunk's clients are all seeded before they step."""
        return torch.rand((), generator=client.rng("probe"))

    def batched_update(self, clients, message: Message) -> list[Update]:
        for client in clients:
            client.state["chunk"] = torch.tensor(float(clients[0].id * 10 + len(clients)))
        return [self.client_update(client, message) for client in clients]


def tiny_data() -> Dataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 4, generator=gen)
    y = torch.arange(60) % 3
    return Dataset("tiny", x, y, x[:12], y[:12], num_classes=3)


def simulation(strategy: Strategy, per_round: int = 4, batched: int = 1) -> Simulation:
    data = federate(tiny_data(), {"name": "dirichlet", "alpha": 0.5}, NUM_CLIENTS, 0)
    config = SimulationConfig(
        rounds=2,
        seed=3,
        device="cpu",
        progress=False,
        clients=ClientsConfig(num=NUM_CLIENTS, per_round=per_round),
        train=TrainConfig(batched=batched),
        checkpoint=CheckpointConfig(every=0),
    )
    torch.manual_seed(0)
    sim = Simulation(strategy, data, nn.Linear(4, 3), config)
    sim._setup()
    return sim


def outcome(sim: Simulation, rounds: int = 2) -> dict[str, Any]:
    infos = [sim.run_round(r) for r in range(rounds)]
    strategy = sim.strategy
    return {
        "seen": strategy.seen,
        "after": strategy.after,
        "infos": infos,
        "traffic": sim.traffic.as_dict(),
        "states": {
            cid: {k: v.tolist() for k, v in s.items()} for cid, s in sim.client_states.items()
        },
        "weights": torch.cat([p.detach().flatten() for p in strategy.model.parameters()]).tolist(),
    }


# ---------------------------------------------------------------------------- replayed ranks
class Pending(Exception):
    """Another rank's bytes for this collective are not on the board yet."""


class ReplayGroup(RankGroup):
    """Rank `rank` of `world`, played in this process: the k-th exchange writes this rank's
    bytes to `board[k, rank]` and reads the others' from it (`Pending` where one is missing)."""

    def __init__(self, rank: int, world: int, board: dict) -> None:
        super().__init__(rank, world, rank)
        self.board = board
        self.calls = 0

    def _take(self, k: int, rank: int) -> bytes:
        if (k, rank) not in self.board:
            raise Pending
        return self.board[k, rank]

    def _exchange(self, data):
        k, self.calls = self.calls, self.calls + 1
        self.board[k, self.rank] = bytes(data)
        others = [None if r == self.rank else self._take(k, r) for r in range(self.world)]
        return [None if b is None else memoryview(b) for b in others]

    def pass_along(self, step, device="cpu"):
        k, self.calls = self.calls, self.calls + 1
        value = step(None if self.rank == 0 else from_bytes(self._take(k, self.rank - 1), device))
        self.board[k, self.rank] = bytes(to_bytes(value))
        last = self.world - 1
        return value if self.rank == last else from_bytes(self._take(k, last), device)


def replayed(make, world: int, run, batched: int = 1) -> list[Any]:
    """`run(sim)` on every rank of `world` (each a fresh `make()` with a ranked executor)."""
    board: dict = {}
    results: dict[int, Any] = {}
    for _ in range(40 * world):
        for rank in range(world):
            if rank in results:
                continue
            sim = make()
            sim.executor = make_executor(sim, batched, ReplayGroup(rank, world, board))
            with contextlib.suppress(Pending):
                results[rank] = run(sim)
        if len(results) == world:
            return [results[rank] for rank in range(world)]
    raise AssertionError(f"the ranks did not finish: {sorted(results)} of {world}")


# ---------------------------------------------------------------------------- executors
def test_round_stats_average_each_key_over_the_clients_that_reported_it():
    stats = RoundStats()
    stats.add({"a": torch.tensor(1.0, requires_grad=True), "b": 4})
    stats.add({"a": 2.0})
    stats.add({"a": torch.tensor(6, dtype=torch.int64)})
    assert stats.means() == {"a": 3.0, "b": 4.0}
    assert stats.counts == {"a": 3, "b": 1}
    assert not stats.sums["a"].requires_grad and stats.sums["a"].dtype == torch.float32


def test_the_serial_executor_routes_counts_and_keeps_in_cohort_order():
    sim = simulation(ProbeList())
    got = outcome(sim)
    cohorts = [sim.sampler.cohort(r) for r in range(2)]
    assert [s[0] for s in got["seen"]] == cohorts[0] + cohorts[1]
    assert cohorts[0] != list(range(NUM_CLIENTS))  # partial participation
    # the client step's draw is the stream seeded for (phase, round, client)
    for (cid, draw, _, weights, _), r in zip(got["seen"], [0] * 4 + [1] * 4, strict=True):
        seed_global_torch(3, "client/train", r, cid)
        assert draw == torch.rand(()).item()
        assert weights == pytest.approx(15 * (draw + cid), rel=1e-6)
    # the phase leaves the random state of its last client: the server's next draw follows it
    for r, cohort in enumerate(cohorts):
        seed_global_torch(3, "client/train", r, cohort[-1])
        torch.rand(())
        assert got["after"][r] == torch.rand(()).item()
    # peer messages reach client 0 at its next step, taken out once
    second = [s for s in got["seen"][4:] if s[0] == 0]
    if 0 in cohorts[1]:
        assert second[0][2] == sum(c + 1 for c in cohorts[0]) + sum(
            c + 1 for c in cohorts[1][: cohorts[1].index(0)]
        )
    # each state counts its client's participations; metrics are averaged per round
    for cid in range(NUM_CLIENTS):
        times = sum(cid in c for c in cohorts)
        assert got["states"].get(cid, {"count": 0})["count"] == times
    for r, cohort in enumerate(cohorts):
        assert got["infos"][r]["cid"] == pytest.approx(sum(cohort) / 4)
        assert got["infos"][r]["clients"] == 4
    # bytes: 15 floats down to 4 clients, 15 floats + two 1-float payloads up, one peer float
    traffic = got["traffic"]
    assert traffic["bytes_down"] == 2 * 4 * 60
    assert traffic["bytes_up"] == 2 * 4 * (60 + 8)
    assert traffic["bytes_peer"] == 2 * 4 * 4
    assert traffic["bytes_shared"] == 2 * 4 * (8 + 4)


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("probe", [ProbeList, ProbeMean])
def test_ranks_give_the_one_process_result_exactly(world, probe):
    one = outcome(simulation(probe()))
    ranks = replayed(lambda: simulation(probe()), world, outcome)
    for got in ranks:
        assert got == one


def test_a_rank_with_no_client_of_the_phase_follows_the_last_clients_random_state():
    one = outcome(simulation(ProbeMean(), per_round=1), rounds=2)
    for got in replayed(lambda: simulation(ProbeMean(), per_round=1), 3, outcome):
        assert got == one


def without_chunks(got: dict[str, Any]) -> dict[str, Any]:
    states = {cid: {k: v for k, v in s.items() if k != "chunk"} for cid, s in got["states"].items()}
    return {**got, "states": states}


def test_batched_ranks_give_the_batched_one_process_result():
    one = without_chunks(outcome(simulation(ProbeBatched(), batched=3)))
    for got in replayed(lambda: simulation(ProbeBatched(), batched=3), 2, outcome, batched=3):
        assert without_chunks(got) == one


def test_a_peer_message_to_a_later_client_of_the_step_is_refused_across_ranks():
    def make():
        return simulation(ProbeList(peer=NUM_CLIENTS - 1), per_round=NUM_CLIENTS)

    outcome(make())  # one process: delivered at the next step
    with pytest.raises(RuntimeError, match="client 0 sent a peer message to a later client"):
        replayed(make, 2, outcome)


@pytest.mark.parametrize("receiver", [-1, NUM_CLIENTS])
def test_a_peer_message_to_a_client_that_does_not_exist_is_refused(receiver):
    sim = simulation(ProbeList(peer=receiver))
    with pytest.raises(RuntimeError, match=f"to client {receiver}, which does not exist"):
        sim.run_round(0)


def test_the_last_client_may_send_a_peer_message_to_the_last_client():
    sim = simulation(ProbeList(peer=NUM_CLIENTS - 1))
    sim.run_round(0)
    assert sim.traffic.bytes_peer == 4 * 4


@dataclass
class ProbeLazy(ProbeList):
    name: ClassVar[str] = "probe_lazy"

    def aggregate(self, updates, round_idx: int) -> None:
        next(iter(updates))


def test_an_aggregate_that_leaves_updates_unread_is_refused():
    sim = simulation(ProbeLazy())
    with pytest.raises(RuntimeError, match=r"ProbeLazy\.train aggregate did not consume"):
        sim.run_round(0)


def test_the_progress_line_counts_the_clients_received():
    sim = simulation(ProbeList())
    texts: list[str] = []
    sim._active_callbacks = [SimpleNamespace(on_stage=lambda s, text: texts.append(text))]
    sim.run_round(0)
    assert texts == [f"train: {i}/4 clients" for i in range(5)]


@dataclass
class ProbePersonal(ProbeList):
    """A personal message to the odd clients, echoed back in the upload."""

    name: ClassVar[str] = "probe_personal"

    def phases(self) -> list[Phase]:
        def personal(round_idx: int, cid: int) -> Message | None:
            return Message(payload={"p": torch.tensor([cid * 2.0, 1.0])}) if cid % 2 else None

        return [replace_phase(self.train_phase(), personal=personal)]

    def client_update(self, client, message: Message) -> Update:
        update = super().client_update(client, message)
        mine = client.personal.payload["p"][0] if client.personal is not None else -1.0
        update.payload["inbox"] = torch.tensor([float(mine)])
        return update


def replace_phase(phase: Phase, **changes) -> Phase:
    from dataclasses import replace

    return replace(phase, **changes)


def test_personal_messages_are_counted_for_their_receiver_and_handed_to_it():
    one = outcome(simulation(ProbePersonal()))
    odd = [s for s in one["seen"] if s[0] % 2]
    assert odd and all(s[2] == 2 * s[0] for s in odd)
    assert all(s[2] == -1.0 for s in one["seen"] if s[0] % 2 == 0)
    assert one["traffic"]["bytes_down_personal"] == len(odd) * 8
    assert one["traffic"]["bytes_down"] == 2 * 4 * 60 + len(odd) * 8
    for got in replayed(lambda: simulation(ProbePersonal()), 2, outcome):
        assert got == one


def test_batched_chunks_hold_chunk_clients_in_cohort_order():
    sim = simulation(ProbeBatched(), per_round=NUM_CLIENTS, batched=2)
    sim.run_round(0)
    chunks = {cid: int(s["chunk"]) for cid, s in sim.client_states.items()}
    assert chunks == {0: 2, 1: 2, 2: 22, 3: 22, 4: 41}
    assert [s[0] for s in sim.strategy.seen] == list(range(NUM_CLIENTS))


def test_batched_steps_come_back_in_cohort_order_routed_and_counted_as_serial_ones():
    serial = without_chunks(outcome(simulation(ProbeBatched())))
    batched = without_chunks(outcome(simulation(ProbeBatched(), batched=2)))
    assert batched == serial


def test_a_training_phase_without_a_batched_step_warns_once_and_runs_serially():
    sim = simulation(ProbeList(), batched=2)
    assert isinstance(sim.executor, BatchedExecutor) and sim.executor.chunk == 2
    with pytest.warns(UserWarning, match="train.batched=2: probe_list's 'train' step"):
        sim.run_round(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim.run_round(1)
    assert outcome(simulation(ProbeList()), 2)["seen"][:4] == sim.strategy.seen[:4]


def test_a_phase_that_does_not_train_runs_serially_without_a_warning():
    strategy = ProbeList()
    sim = simulation(strategy, batched=2)
    sim.strategy.phases = lambda: [replace_phase(strategy.train_phase(), trains=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim.run_round(0)


def test_make_executor_picks_serial_batched_and_ranked():
    sim = simulation(ProbeList())
    assert type(make_executor(sim, 1, None)) is Executor
    assert type(make_executor(sim, 2, None)) is BatchedExecutor
    ranked = make_executor(sim, 2, RankGroup(1, 2, 1))
    assert isinstance(ranked, RankedExecutor) and type(ranked.local) is BatchedExecutor
    assert not ranked.writes and make_executor(sim, 1, RankGroup(0, 2, 0)).writes
    assert Executor(sim).writes and Executor(sim).processes() == {}
    assert Executor(sim).agree(True) and not Executor(sim).agree(False)
    assert Executor(sim).on_writer(lambda: 7) == 7


class Models:
    """`clients.models`' `index`: client k's architecture."""

    def __init__(self, of: dict[int, int]) -> None:
        self.of = of

    def index(self, cid: int) -> int:
        return self.of[cid]


def test_clients_are_grouped_by_architecture_the_last_clients_group_last():
    executor = BatchedExecutor(SimpleNamespace(architectures=SimpleNamespace(models=None)), 2)
    assert executor._by_architecture([3, 1]) == [[3, 1]]
    models = Models({0: 0, 1: 1, 2: 0, 3: 2, 4: 1})
    executor.sim = SimpleNamespace(architectures=SimpleNamespace(models=models))
    assert executor._by_architecture([]) == [[]]
    assert executor._by_architecture([0, 1, 2, 3, 4]) == [[0, 2], [3], [1, 4]]
    assert executor._by_architecture([4, 0, 3, 1]) == [[0], [3], [4, 1]]


def test_batched_steps_of_several_architectures_come_back_in_cohort_order():
    sim = simulation(ProbeBatched(), per_round=NUM_CLIENTS, batched=2)
    models = Models({0: 1, 1: 0, 2: 1, 3: 0, 4: 0})
    sim.architectures = SimpleNamespace(models=models, worker_of=sim.architectures.worker_of)
    sim.run_round(0)
    chunks = {cid: int(s["chunk"]) for cid, s in sim.client_states.items()}
    assert chunks == {0: 2, 2: 2, 1: 12, 3: 12, 4: 41}
    assert [s[0] for s in sim.strategy.seen] == list(range(NUM_CLIENTS))


def test_the_writer_decides_stops_and_sends_its_value_and_random_state():
    def run(sim):
        torch.manual_seed(100 + sim.executor.group.rank)
        stop = sim.executor.agree(sim.executor.group.rank == 0)
        value = sim.executor.on_writer(lambda: torch.rand(2).tolist())
        return stop, value, torch.rand(()).item()

    (s0, v0, d0), (s1, v1, d1) = replayed(lambda: simulation(ProbeList()), 2, run)
    assert s0 and s1 and v0 == v1 and d0 == d1
    torch.manual_seed(100)
    assert v0 == torch.rand(2).tolist() and d0 == torch.rand(()).item()


def test_finish_gathers_each_processs_measurements(monkeypatch):
    import fedshare.engine.executors as executors

    monkeypatch.setattr(executors, "peak_memory", lambda device: {"peak_mb": 5.0})

    def run(sim):
        rank = sim.executor.group.rank
        sim.cpu_summary = lambda: {"cpu_time_s": float(rank)}
        sim.executor.group.bytes_sent = 10 * (rank + 1)
        sim.executor.finish()
        return sim.executor.processes()

    for got in replayed(lambda: simulation(ProbeList()), 2, run):
        assert got == {
            "workers": 2,
            "interprocess_bytes": 30,
            "peak_mb_per_process": [5.0, 5.0],
            "cpu_time_s_per_process": [0.0, 1.0],
        }


@dataclass
class ProbeInOrder(ProbeList):
    name: ClassVar[str] = "probe_in_order"
    clients_in_order: ClassVar[bool] = True


def test_an_in_order_phase_runs_whole_on_every_rank():
    def make():
        return simulation(ProbeInOrder(peer=NUM_CLIENTS - 1), per_round=NUM_CLIENTS)

    one = outcome(make())
    for got in replayed(make, 2, outcome):
        assert got == one


def test_a_failed_client_step_is_raised_on_every_rank():
    @dataclass
    class Failing(ProbeList):
        name: ClassVar[str] = "failing"

        def client_update(self, client, message):
            if client.id == 4:
                raise ValueError("client four failed")
            return super().client_update(client, message)

    def run(sim):
        try:
            sim.run_round(0)
        except ValueError as err:
            return str(err)
        return "ran"

    got = replayed(lambda: simulation(Failing(), per_round=NUM_CLIENTS), 2, run)
    assert got == ["client four failed", "client four failed"]


# ---------------------------------------------------------------------------- the collectives
class ThreadedDist:
    """The calls of `torch.distributed` that `RankGroup` makes, for `world` threads of this
    process (each thread one rank): tensors copied as gloo copies them, sizes checked."""

    DistBackendError = RuntimeError

    def __init__(self, world: int) -> None:
        self.world = world
        self.local = threading.local()
        self.sync = threading.Barrier(world, timeout=20)
        self.slots: dict[int, torch.Tensor] = {}
        self.mail: dict[tuple[int, int], list[torch.Tensor]] = {}
        self.lock = threading.Condition()
        self.calls: list[tuple[int, str]] = []

    @property
    def rank(self) -> int:
        return self.local.rank

    def all_gather(self, outputs, tensor, group=None) -> None:
        self.calls.append((self.rank, "all_gather"))
        self.slots[self.rank] = tensor.clone()
        self.sync.wait()
        for r, out in enumerate(outputs):
            assert out.shape == self.slots[r].shape
            out.copy_(self.slots[r])
        self.sync.wait()

    def broadcast(self, tensor, src, group=None) -> None:
        if self.rank == src:
            self.slots[src] = tensor.clone()
        self.sync.wait()
        assert tensor.shape == self.slots[src].shape
        tensor.copy_(self.slots[src])
        self.sync.wait()

    def send(self, tensor, dst, group=None) -> None:
        with self.lock:
            self.mail.setdefault((self.rank, dst), []).append(tensor.clone())
            self.lock.notify_all()

    def recv(self, tensor, src, group=None) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: self.mail.get((src, self.rank)), timeout=20)
            got = self.mail[src, self.rank].pop(0)
        assert tensor.shape == got.shape
        tensor.copy_(got)

    def barrier(self, group=None) -> None:
        self.calls.append((self.rank, "barrier"))
        self.sync.wait()


def on_ranks(monkeypatch, world: int, run) -> list[Any]:
    """`run(group)` on `world` threads, each with a `RankGroup` of its rank; each one's result
    (or the exception it raised)."""
    fake = ThreadedDist(world)
    monkeypatch.setattr(distributed, "dist", fake)
    results: list[Any] = [None] * world

    def main(rank: int) -> None:
        fake.local.rank = rank
        try:
            results[rank] = run(RankGroup(rank, world, rank))
        except Exception as err:  # returned to the test
            results[rank] = err

    threads = [threading.Thread(target=main, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_gather_returns_every_ranks_object_in_rank_order_and_counts_the_bytes(monkeypatch):
    objects = [{"r": 0, "t": torch.arange(3)}, "x" * 500, [torch.ones(2, 2), None]]

    def run(group: RankGroup):
        mine = objects[group.rank]
        got = group.gather(mine)
        return got, got[group.rank] is mine, group.bytes_sent

    results = on_ranks(monkeypatch, 3, run)
    for rank, (got, own, sent) in enumerate(results):
        assert own
        assert got[0]["r"] == 0 and torch.equal(got[0]["t"], torch.arange(3))
        assert got[1] == "x" * 500
        assert torch.equal(got[2][0], torch.ones(2, 2)) and got[2][1] is None
        assert sent == len(to_bytes(objects[rank])) * 2


def test_one_rank_exchanges_with_nobody(monkeypatch):
    def run(group: RankGroup):
        return group.gather("only"), group.bytes_sent

    assert on_ranks(monkeypatch, 1, run) == [(["only"], 0)]


def test_a_failure_on_any_rank_is_raised_on_every_rank_the_lowest_ranks_first(monkeypatch):
    def run(group: RankGroup):
        sent = {0: "fine", 1: Failed(ValueError("one")), 2: Failed(KeyError("two"))}
        return group.gather(sent[group.rank])

    for result in on_ranks(monkeypatch, 3, run):
        assert isinstance(result, ValueError) and str(result) == "one"


def test_an_object_that_does_not_pickle_fails_every_rank_naming_its_rank(monkeypatch):
    def run(group: RankGroup):
        if group.rank == 1:
            return group.gather(lambda: 0)
        if group.rank == 2:
            return group.gather(Failed(RuntimeError(lambda: 1)))
        return group.gather("fine")

    results = on_ranks(monkeypatch, 3, run)
    for result in results:
        assert isinstance(result, RuntimeError)
        assert str(result).startswith("rank 1: ") and "lambda" in str(result)
    # a Failed whose error does not pickle: its error, not the pickling's, is named
    results = on_ranks(monkeypatch, 2, lambda g: g.gather(Failed(ValueError(lambda: 1))))
    assert str(results[0]).startswith("rank 0: ValueError(")


def test_pass_along_applies_each_ranks_step_in_rank_order(monkeypatch):
    def run(group: RankGroup):
        value = group.pass_along(lambda prev: [*(prev or []), group.rank * 10])
        return value, group.bytes_sent

    results = on_ranks(monkeypatch, 3, run)
    sizes = [len(to_bytes([0, 10, 20][: r + 1])) for r in range(3)]
    assert [value for value, _ in results] == [[0, 10, 20]] * 3
    assert [sent for _, sent in results] == [sizes[0], sizes[1], sizes[2] * 2]


def test_pass_along_on_one_rank_is_the_step(monkeypatch):
    results = on_ranks(monkeypatch, 1, lambda g: (g.pass_along(lambda p: p), g.bytes_sent))
    assert results == [(None, 0)]


def test_from_writer_runs_on_rank_zero_alone_and_sends_its_value_or_its_error(monkeypatch):
    def run(group: RankGroup):
        def make():
            if group.rank:
                raise AssertionError("ran on another rank")
            return torch.tensor([7.0])

        return group.from_writer(make)

    assert [t.tolist() for t in on_ranks(monkeypatch, 2, run)] == [[7.0], [7.0]]

    def failing(group: RankGroup):
        return group.from_writer(lambda: 1 / 0)

    assert all(isinstance(r, ZeroDivisionError) for r in on_ranks(monkeypatch, 2, failing))


def test_check_same_names_the_first_rank_that_differs(monkeypatch):
    results = on_ranks(monkeypatch, 3, lambda g: g.check_same("config", {"a": 1}))
    assert results == [None, None, None]
    results = on_ranks(monkeypatch, 3, lambda g: g.check_same("config", {"a": g.rank // 2}))
    for result in results:
        assert isinstance(result, FedshareError)
        assert str(result).startswith("process rank 2 of this run has another config than rank 0")


def test_a_lost_process_becomes_rank_failure_with_the_first_line_of_the_reason(monkeypatch):
    def run(group: RankGroup):
        def broken(*args, **kwargs):
            raise RuntimeError("x" * 200 + "\nsecond line")

        monkeypatch.setattr(distributed.dist, "all_gather", broken)
        return group.gather("a")

    (result,) = on_ranks(monkeypatch, 1, run)
    assert isinstance(result, RankFailure)
    assert str(result) == (
        f"a process of this run stopped or lost its connection ({'x' * 160}); rank 0 stops too"
    )

    def empty(group: RankGroup):
        def broken(*args, **kwargs):
            raise RuntimeError("")

        monkeypatch.setattr(distributed.dist, "all_gather", broken)
        return group.gather("a")

    (result,) = on_ranks(monkeypatch, 1, empty)
    assert "(RuntimeError); rank 0" in str(result)


def test_settle_waits_for_every_rank(monkeypatch):
    fake_calls = []

    def run(group: RankGroup):
        group.settle()
        fake_calls.append(group.rank)

    assert on_ranks(monkeypatch, 2, run) == [None, None]
    assert sorted(fake_calls) == [0, 1]
    assert distributed.dist.calls.count((0, "barrier")) == 1


def test_the_random_state_crosses_with_its_snapshot():
    torch.manual_seed(5)
    snapshot = distributed.rng_snapshot(torch.device("cpu"))
    expected = torch.rand(3)
    torch.manual_seed(6)
    distributed.restore_rng(from_bytes(to_bytes(snapshot), "cpu"), torch.device("cpu"))
    assert torch.equal(torch.rand(3), expected)
    assert set(snapshot) == {"cpu"}


def test_bytes_round_trip_onto_the_asked_device():
    obj = {"w": torch.arange(4.0), "n": [1, (2, "x")]}
    back = from_bytes(to_bytes(obj), "meta")
    assert back["n"] == [1, (2, "x")] and back["w"].device.type == "meta"


def test_writer_is_rank_zero():
    assert RankGroup(0, 2, 0).is_writer and not RankGroup(1, 2, 1).is_writer
    assert RankGroup(1, 3, 0).bytes_sent == 0


def test_joining_without_the_launchers_environment_names_what_is_missing(monkeypatch):
    for key in distributed.ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(FedshareError) as err:
        RankGroup.join("cpu")
    assert str(err.value) == (
        "WORLD_SIZE=2 but LOCAL_RANK, MASTER_ADDR, MASTER_PORT is not set; start several "
        "processes with workers=K or torchrun, not by hand"
    )


def test_launched_means_a_world_of_more_than_one(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not distributed.launched()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not distributed.launched()
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert distributed.launched()


def test_local_device_shares_the_gpus_among_the_processes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed.local_device("auto", 3) == "cpu"
    assert distributed.local_device("cpu", 3) == "cpu"
    assert distributed.local_device("cuda", 3) == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert distributed.local_device("auto", 3) == "cuda:1"
    assert distributed.local_device("cuda", 2) == "cuda:0"
    assert distributed.local_device("cuda:1", 0) == "cuda:1"
    assert distributed.local_device("cpu", 1) == "cpu"


@dataclass
class Failure:
    exitcode: int
    pid: int = 11


@dataclass
class ChildFailed:
    failures: dict[int, Failure] = field(default_factory=dict)

    def get_first_failure(self) -> tuple[int, Failure]:
        rank = min(self.failures)
        return rank, self.failures[rank]


def test_the_ranks_exit_code_when_they_all_failed_alike_else_one_sentence(capsys):
    assert distributed._failure_code(ChildFailed({0: Failure(2), 1: Failure(2)}), 2) == 2
    assert capsys.readouterr().err == ""
    assert distributed._failure_code(ChildFailed({0: Failure(2), 1: Failure(1)}), 2) == 1
    assert "process rank 0 of 2 (pid 11) exited with code 2, so the run stopped" in (
        capsys.readouterr().err
    )
    assert distributed._failure_code(ChildFailed({1: Failure(-9)}), 3) == 1
    assert "process rank 1 of 3 (pid 11) was killed by SIGKILL" in capsys.readouterr().err
    assert distributed._failure_code(ChildFailed({1: Failure(0), 0: Failure(0)}), 2) == 1


def test_nccl_only_where_each_local_process_has_a_gpu_of_its_own(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert distributed.process_group_backend("cuda:0", 2) == "nccl"
    assert distributed.process_group_backend("cuda:1", 1) == "nccl"
    assert distributed.process_group_backend("cuda:0", 3) == "gloo"
    assert distributed.process_group_backend("cpu", 1) == "gloo"
