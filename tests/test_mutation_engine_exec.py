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
import json
import linecache
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
from fedshare.engine import distributed, run_folder
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.batched import StackedOptimizer, StackedRun, clip_rows
from fedshare.engine.client import Client
from fedshare.engine.client_side import ClientSetup, ClientWallError, client_side, on_client_side
from fedshare.engine.distributed import Failed, RankGroup, assign, blocks, from_bytes, to_bytes
from fedshare.engine.executors import (
    BatchedExecutor,
    Executor,
    RankedExecutor,
    RoundStats,
    make_executor,
)
from fedshare.engine.messages import Message, Update
from fedshare.engine.optim import make_optimizer
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.engine.run_folder import cut_metrics
from fedshare.engine.simulation import Simulation
from fedshare.engine.training import fit, shuffled_positions
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


@pytest.mark.parametrize("probe, split", [(ProbeList, assign), (ProbeMean, blocks)])
def test_each_rank_runs_the_clients_its_split_gives_it(probe, split):
    """Whole updates: balanced by size (`assign`); a passed-on mean: contiguous (`blocks`)."""
    boards: list[dict] = []

    def run(sim):
        boards.append(sim.executor.group.board)
        sim.run_round(0)
        return sim.sampler.cohort(0), [
            len(sim.data.client_indices[c]) for c in sim.sampler.cohort(0)
        ]

    (cohort, sizes), _ = replayed(lambda: simulation(probe()), 2, run)
    owners = split(sizes, 2)
    assert owners != blocks(sizes, 2) if split is assign else owners != assign(sizes, 2)
    board = boards[0]
    for rank in range(2):
        ran, _ = from_bytes(board[0, rank], "cpu")
        assert [item[0] for item in ran] == [
            c for c, o in zip(cohort, owners, strict=True) if o == rank
        ]


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
    with pytest.raises(RuntimeError) as err:
        sim.run_round(0)
    assert str(err.value).endswith(
        f"a peer message to client {receiver}, which does not exist (clients 0…4)"
    )


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


def test_batched_chunks_see_the_peer_messages_of_earlier_chunks_as_serial_clients_do():
    def make(batched: int) -> Simulation:
        return simulation(ProbeBatched(peer=NUM_CLIENTS - 1), NUM_CLIENTS, batched)

    serial = without_chunks(outcome(make(1), rounds=1))
    assert serial["seen"][-1][2] == 1 + 2 + 3 + 4  # client 4 got clients 0-3's messages
    assert without_chunks(outcome(make(2), rounds=1)) == serial


@dataclass
class ProbeShort(ProbeBatched):
    """A batched step that loses its chunk's last update (a bug the engine must catch)."""

    name: ClassVar[str] = "probe_short"

    def client_update(self, client, message: Message) -> Update:
        return super().client_update(client, message)

    def batched_update(self, clients, message: Message) -> list[Update]:
        return super().batched_update(clients, message)[:-1]


def test_a_batched_step_that_returns_fewer_updates_than_clients_is_refused():
    sim = simulation(ProbeShort(), batched=2)
    with pytest.raises(ValueError, match="zip"):
        sim.run_round(0)


def test_a_training_phase_without_a_batched_step_warns_once_and_runs_serially():
    sim = simulation(ProbeList(), batched=2)
    assert isinstance(sim.executor, BatchedExecutor) and sim.executor.chunk == 2
    with pytest.warns(UserWarning, match="train.batched=2: probe_list's 'train' step") as said:
        sim.run_round(0)
    # the warning names the engine's loop over the steps, not the line that warns
    assert said[0].filename.endswith("executors.py")
    assert "self.steps(" in linecache.getline(said[0].filename, said[0].lineno)
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
        self.sync = threading.Barrier(world, timeout=60)
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
            assert self.lock.wait_for(lambda: self.mail.get((src, self.rank)), timeout=60)
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
    for differs, first in ((lambda r: r // 2, 2), (lambda r: min(r, 1), 1)):
        results = on_ranks(monkeypatch, 3, lambda g, d=differs: g.check_same("seed", d(g.rank)))
        for result in results:
            assert isinstance(result, FedshareError)
            assert str(result) == (
                f"process rank {first} of this run has another seed than rank 0; every "
                f"process of a run must start with the same command line"
            )


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


def test_the_random_state_crosses_with_its_snapshot(monkeypatch):
    touched: list = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda *a: touched.append(a))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *a: touched.append(a))
    torch.manual_seed(5)
    snapshot = distributed.rng_snapshot(torch.device("cpu"))
    expected = torch.rand(3)
    torch.manual_seed(6)
    distributed.restore_rng(from_bytes(to_bytes(snapshot), "cpu"), torch.device("cpu"))
    assert torch.equal(torch.rand(3), expected)
    assert set(snapshot) == {"cpu"}
    # a CPU run ignores a device state it was sent
    distributed.restore_rng({**snapshot, "cuda": torch.zeros(1)}, torch.device("cpu"))
    assert torch.equal(torch.rand(3), expected)
    assert touched == []  # (torch.cuda's calls are queued, not refused, without a GPU)


class JoinDist:
    """`torch.distributed`'s set-up calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def is_initialized(self) -> bool:
        return False

    def init_process_group(self, backend, timeout) -> None:
        self.calls.append(("init", backend, timeout))

    def new_group(self, backend) -> str:
        self.calls.append(("new_group", backend))
        return "objects"


@pytest.mark.parametrize("device, local, backend", [("cpu", "1", "gloo"), ("cuda:1", "2", "nccl")])
def test_joining_sets_up_the_runs_group_and_a_gloo_group_for_objects(
    monkeypatch, device, local, backend
):
    from datetime import timedelta

    fake = JoinDist()
    monkeypatch.setattr(distributed, "dist", fake)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    chosen: list = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.delenv(distributed.LAUNCHER_PID, raising=False)
    env = dict(RANK="1", WORLD_SIZE="3", LOCAL_RANK="0", MASTER_ADDR="h", MASTER_PORT="1")
    for key, value in {**env, "LOCAL_WORLD_SIZE": local}.items():
        monkeypatch.setenv(key, value)
    group = RankGroup.join(device, timeout_s=5.0)
    assert (group.rank, group.world, group.local_rank) == (1, 3, 0)
    assert fake.calls[0] == ("init", backend, timedelta(seconds=5.0))
    if backend == "gloo":
        assert group.group is None and len(fake.calls) == 1 and chosen == []
    else:
        assert group.group == "objects" and fake.calls[1] == ("new_group", "gloo")
        assert chosen == [torch.device("cuda:1")]
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    if device == "cpu":
        RankGroup.join(device)
        assert fake.calls[-1] == ("init", "gloo", timedelta(seconds=1800.0))


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
    assert distributed._failure_code(ChildFailed({0: Failure(1), 1: Failure(1)}), 2) == 1
    assert capsys.readouterr().err == ""  # each rank said why
    assert distributed._failure_code(ChildFailed({0: Failure(2), 1: Failure(1)}), 2) == 1
    assert "process rank 0 of 2 (pid 11) exited with code 2, so the run stopped" in (
        capsys.readouterr().err
    )
    assert distributed._failure_code(ChildFailed({1: Failure(-9)}), 3) == 1
    assert "process rank 1 of 3 (pid 11) was killed by SIGKILL" in capsys.readouterr().err
    assert distributed._failure_code(ChildFailed({1: Failure(-1), 0: Failure(0)}), 2) == 1
    assert "process rank 0 of 2 (pid 11) exited with code 0" in capsys.readouterr().err
    assert distributed._failure_code(ChildFailed({2: Failure(-1)}), 3) == 1
    assert "process rank 2 of 3 (pid 11) was killed by SIGHUP" in capsys.readouterr().err
    assert distributed._failure_code(ChildFailed({1: Failure(0), 0: Failure(0)}), 2) == 1


def test_nccl_only_where_each_local_process_has_a_gpu_of_its_own(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert distributed.process_group_backend("cuda:0", 2) == "nccl"
    assert distributed.process_group_backend("cuda:1", 1) == "nccl"
    assert distributed.process_group_backend("cuda:0", 3) == "gloo"
    assert distributed.process_group_backend("cpu", 1) == "gloo"


# ---------------------------------------------------------------------------- batched training
def test_clip_rows_is_clip_grad_norm_per_row():
    """Norms of about 1e-4, where clip_grad_norm_'s 1e-6 counts."""
    gen = torch.Generator().manual_seed(1)
    grads = {"a": torch.randn(3, 2, 2, generator=gen), "b": torch.randn(3, 5, generator=gen)}
    grads = {n: g * 1e-4 for n, g in grads.items()}
    grads["a"][1] *= 0.01
    grads["b"][1] *= 0.01
    clipped = clip_rows(grads, 1.5e-4)
    for i in range(3):
        row = [grads["a"][i].clone().requires_grad_(), grads["b"][i].clone().requires_grad_()]
        for p in row:
            p.grad = p.detach().clone()
        torch.nn.utils.clip_grad_norm_(row, 1.5e-4)
        torch.testing.assert_close(clipped["a"][i], row[0].grad, rtol=1e-6, atol=0)
        torch.testing.assert_close(clipped["b"][i], row[1].grad, rtol=1e-6, atol=0)
    assert torch.equal(clipped["a"][1], grads["a"][1])  # under the norm: unchanged


@pytest.mark.parametrize(
    "settings",
    [
        {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 0.1},
        {"optimizer": "sgd"},
        {"optimizer": "adam", "betas": [0.8, 0.9], "weight_decay": 0.1},
        {"optimizer": "adam", "optimizer_reset_each_step": True},
        {"optimizer": "sgd", "momentum": 0.5, "optimizer_reset_each_step": True},
    ],
)
def test_the_stacked_optimizer_steps_each_row_as_torch_steps_that_client(settings):
    train = TrainConfig(**settings)
    gen = torch.Generator().manual_seed(2)
    start = torch.randn(3, 4, generator=gen)
    grads = torch.randn(4, 3, 4, generator=gen)
    plan = [slice(None), torch.tensor([0, 2]), torch.tensor([2]), slice(None)]
    stacked = {"w": start.clone().requires_grad_()}
    optimizer = StackedOptimizer(train, 0.05)
    for grad, rows in zip(grads, plan, strict=True):
        stacked["w"].grad = grad.clone()
        optimizer.step(stacked, rows)
    for i in range(3):
        w = torch.nn.Parameter(start[i].clone())
        serial = make_optimizer([w], train, 0.05)
        for grad, rows in zip(grads, plan, strict=True):
            if isinstance(rows, slice) or i in rows.tolist():
                w.grad = grad[i].clone()
                serial.step()
        torch.testing.assert_close(stacked["w"][i], w.detach(), rtol=1e-5, atol=1e-6)


def test_stacked_adam_adds_its_epsilon_where_gradients_are_that_small():
    train = TrainConfig(optimizer="adam")
    start, grad = torch.zeros(2, 3), torch.full((2, 3), 1e-8)
    stacked = {"w": start.clone().requires_grad_()}
    stacked["w"].grad = grad.clone()
    StackedOptimizer(train, 0.1).step(stacked, slice(None))
    w = torch.nn.Parameter(start[0].clone())
    w.grad = grad[0].clone()
    make_optimizer([w], train, 0.1).step()
    torch.testing.assert_close(stacked["w"][0], w.detach(), rtol=1e-5, atol=0)
    assert w.detach()[0].item() == pytest.approx(-0.05, rel=1e-3)  # g / (|g| + eps), eps = g


def bn_model() -> nn.Module:
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    model[3].bias.requires_grad_(False)  # a frozen parameter stays one shared copy
    return model


def client_batches(seed: int, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(n, 3, generator=gen), torch.randint(0, 2, (n,), generator=gen)) for n in sizes
    ]


def test_a_stacked_run_trains_each_client_as_it_trains_alone():
    """Clients of different batch counts and shapes (groups of equal shapes step together), a
    per-client input, a per-row gradient hook, statistics summed per client, BatchNorm."""
    train = TrainConfig(momentum=0.9, weight_decay=0.01)
    streams = [client_batches(0, [4, 4, 4, 2]), client_batches(1, [4, 4]), client_batches(2, [3])]
    weights = torch.tensor([1.0, 2.0, 0.5])
    factor = torch.tensor([1.0, 3.0, 2.0])

    def loss_fn(model, x, y, w):
        loss = w * nn.functional.cross_entropy(model(x), y)
        return loss, torch.stack([torch.ones(()), x.sum()])

    def hook(params, grads, rows):
        return {n: g * factor[rows].view(-1, *[1] * (g.dim() - 1)) for n, g in grads.items()}

    clients = [SimpleNamespace(amp_device=None, train=train, lr=0.1, device=torch.device("cpu"))]
    clients *= 3
    start = nn.Linear(3, 4)
    model = bn_model()
    run = StackedRun(clients, model, loss_fn, hook, weights, [iter(s) for s in streams])
    run.start_row(1, replace_first_layer(bn_model(), start))
    losses = run.run()
    assert run.aux is not None
    for i, stream in enumerate(streams):
        assert run.aux[i].tolist() == pytest.approx(
            [len(stream), sum(float(x.sum()) for x, _ in stream)], rel=1e-5
        )
        alone = replace_first_layer(bn_model(), start) if i == 1 else bn_model()
        mean = train_alone(
            alone, train, stream, lambda m, x, y, w=weights[i]: loss_fn(m, x, y, w)[0], factor[i]
        )
        assert losses[i].item() == pytest.approx(mean.item(), rel=1e-5)
        trained = run.load_client(i)
        alone_state = alone.state_dict()
        for name, a in trained.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            torch.testing.assert_close(a, alone_state[name], rtol=1e-5, atol=1e-6)


def train_alone(model: nn.Module, train: TrainConfig, stream, loss_fn, factor) -> torch.Tensor:
    """`fit` of one client with torch's optimizer, its gradients scaled by `factor`."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, train, 0.1)

    def scale() -> None:
        for p in params:
            p.grad.mul_(factor)

    return fit(optimizer, stream, lambda b: loss_fn(model, *b), scale)


def replace_first_layer(model: nn.Module, layer: nn.Linear) -> nn.Module:
    with torch.no_grad():
        model[0].weight.copy_(layer.weight)
        model[0].bias.copy_(layer.bias)
        model[1].running_mean.fill_(0.5)
    return model


def test_a_stacked_run_without_batches_returns_zero_losses():
    clients = [SimpleNamespace(amp_device=None, train=TrainConfig(), lr=0.1, device="cpu")] * 2
    model = bn_model()
    run = StackedRun(clients, model, lambda m, x, y: m(x).sum(), streams=[iter([]), iter([])])
    assert [loss.item() for loss in run.run()] == [0.0, 0.0]
    assert run.aux is None


def test_a_stacked_run_defaults_to_the_clients_batches():
    batches = client_batches(3, [2, 2])
    client = SimpleNamespace(
        amp_device=None, train=TrainConfig(), lr=0.1, device="cpu", batches=lambda: iter(batches)
    )
    model = bn_model()
    run = StackedRun([client], model, lambda m, x, y: nn.functional.cross_entropy(m(x), y))
    (loss,) = run.run()
    alone = bn_model()
    optimizer = make_optimizer(
        [p for p in alone.parameters() if p.requires_grad], TrainConfig(), 0.1
    )
    mean = fit(optimizer, batches, lambda b: nn.functional.cross_entropy(alone(b[0]), b[1]))
    assert loss.item() == pytest.approx(mean.item(), rel=1e-6)


# ---------------------------------------------------------------------------- the client
def a_client(train: TrainConfig | None = None, round_idx: int = 2, **kwargs) -> Client:
    data = tiny_data()
    data.scale = 0.5
    return Client(
        7,
        round_idx,
        torch.tensor([5, 1, 9, 3, 30]),
        data,
        nn.Linear(4, 3),
        train or TrainConfig(batch_size=2, local_epochs=2),
        11,
        "share",
        **kwargs,
    )


def test_a_client_reaches_its_own_samples_by_position():
    client = a_client()
    data = tiny_data()
    own = torch.tensor([5, 1, 9, 3, 30])
    assert client.num_samples == 5 and client.num_classes == 3 and client.scale == 0.5
    assert client.device == torch.device("cpu")
    x, y = client.raw(torch.tensor([4, 0]))
    assert torch.equal(x, data.x_train[[30, 5]]) and torch.equal(y, data.y_train[[30, 5]])
    x, y = client.raw()
    assert torch.equal(x, data.x_train[own])
    x, y = client.data(torch.tensor([1]))
    assert torch.equal(x, data.x_train[[1]] * 0.5) and torch.equal(y, data.y_train[[1]])
    assert torch.equal(client.labels, data.y_train[own])
    assert torch.equal(client.prepare(torch.ones(1, 4)), torch.full((1, 4), 0.5))


def test_a_clients_defaults_and_its_copies_of_what_it_was_given():
    kept, inbox = {"pool": 1}, ["m"]
    client = a_client(kept=kept, inbox=inbox, personal="p")
    assert client.state == {} and client.personal == "p"
    assert client.kept == kept and client.kept is not kept
    assert client.inbox == inbox and client.inbox is not inbox
    assert (client.id, client.round, client.seed, client.phase) == (7, 2, 11, "share")
    assert a_client().kept == {} and a_client().inbox == [] and a_client().personal is None
    state = {"s": torch.ones(1)}
    assert a_client(state=state).state is state


def test_a_clients_streams_learning_rate_optimizer_and_autocast():
    train = TrainConfig(lr=0.2, lr_schedule="step", lr_step=1, lr_decay=0.5, amp=True)
    client = a_client(train, round_idx=2)
    assert client.lr == pytest.approx(0.05) and client.amp_device == "cpu"
    assert a_client().amp_device is None
    expected = torch_generator(11, "share/probe", 2, 7, device=torch.device("cpu"))
    assert torch.equal(
        torch.rand(3, generator=client.rng("probe")), torch.rand(3, generator=expected)
    )
    optimizer = client.make_optimizer()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    assert len(optimizer.param_groups[0]["params"]) == 2
    only = client.make_optimizer([client.model.bias])
    assert only.param_groups[0]["params"] == [client.model.bias]


def expected_batches(client: Client, x: torch.Tensor, y: torch.Tensor, epochs: int, size: int):
    gen = torch_generator(11, "share/batches", client.round, 7, device=torch.device("cpu"))
    positions = shuffled_positions(len(y), size, gen, torch.device("cpu"), epochs, False)
    return [(x[p] * 0.5, y[p]) for p in positions]


def test_batches_shuffle_the_clients_samples_and_the_extra_ones_it_received():
    client = a_client()
    data = tiny_data()
    own = torch.tensor([5, 1, 9, 3, 30])
    got = list(client.batches())
    want = expected_batches(client, data.x_train[own], data.y_train[own], 2, 2)
    assert len(got) == len(want) == 6
    for (gx, gy), (wx, wy) in zip(got, want, strict=True):
        assert torch.equal(gx, wx) and torch.equal(gy, wy)
    extra = (torch.full((2, 4), 4.0), torch.tensor([2, 2]))
    got = list(client.batches(epochs=1, batch_size=3, extra=extra))
    x = torch.cat([data.x_train[own], extra[0]])
    y = torch.cat([data.y_train[own], extra[1]])
    want = expected_batches(client, x, y, 1, 3)
    assert len(got) == 3
    for (gx, gy), (wx, wy) in zip(got, want, strict=True):
        assert torch.equal(gx, wx) and torch.equal(gy, wy)


# ---------------------------------------------------------------------------- the client's wall
@dataclass
class Walled(Strategy):
    name: ClassVar[str] = "walled"
    rate: float = 0.5

    def client_setup(self, ctx: ClientSetup) -> None:
        super().client_setup(ctx)
        self.noise = torch.rand(2)  # module inits draw here: the run's stream stays

    def client_update(self, client, message):
        return self.rate


def setup_of() -> ClientSetup:
    return ClientSetup(nn.Linear(2, 2), TrainConfig(), 0, torch.device("cpu"), 3, (2,), 4)


def test_the_client_side_is_a_sealed_copy_set_up_without_moving_the_runs_stream():
    strategy, setup = Walled(rate=0.25), setup_of()
    torch.manual_seed(9)
    replica = client_side(strategy, setup)
    after = torch.rand(1)
    torch.manual_seed(9)
    assert torch.equal(after, torch.rand(1))
    assert replica is not strategy and replica.rate == 0.25 and replica.num_clients == 4
    assert isinstance(replica, Walled) and type(replica) is not Walled
    assert type(replica).__qualname__ == "Walled.client_side"
    assert type(replica).__module__ == Walled.__module__
    assert type(client_side(Walled(), setup_of())) is type(replica)  # one sealed class
    with pytest.raises(ClientWallError) as err:
        _ = replica.model
    assert str(err.value).startswith("walled: client-side code read self.model, which only")
    with pytest.raises(ClientWallError, match=r"walled: a client step wrote self\.rate"):
        replica.rate = 1.0
    with pytest.raises(AttributeError) as plain:
        _ = replica.__missing_dunder__
    assert type(plain.value) is AttributeError
    assert on_client_side(strategy.client_update, strategy, replica)(None, None) == 0.25


def test_a_client_step_that_is_not_the_strategys_method_is_refused():
    strategy, other = Walled(), Walled()
    replica = client_side(strategy, setup_of())
    with pytest.raises(TypeError, match="a phase's client_step must be a method of the strategy"):
        on_client_side(other.client_update, strategy, replica)
    with pytest.raises(TypeError):
        on_client_side(lambda c, m: None, strategy, replica)


# ---------------------------------------------------------------------------- the run folder
def test_cut_metrics_keeps_the_whole_lines_up_to_the_round(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [b'{"round": 1}\n', b'{"round": 2, "a": 1}\n', b'{"round": 3}\n']
    path.write_bytes(b"".join(lines))
    cut_metrics(path, 2)
    assert path.read_bytes() == b"".join(lines[:2])
    cut_metrics(path, 0)
    assert path.read_bytes() == b""
    for tail in (b'{"round": 2}', b'{"round": "2"}\n', b"[2]\n", b"{cut\n"):
        path.write_bytes(lines[0] + tail + lines[2])
        cut_metrics(path, 5)
        assert path.read_bytes() == lines[0], tail


def folder_simulation(run_dir, rounds: int = 2, overwrite: bool = False, **changes) -> Simulation:
    data = federate(tiny_data(), {"name": "dirichlet", "alpha": 0.5}, NUM_CLIENTS, 0)
    config = SimulationConfig(
        rounds=rounds,
        seed=3,
        device="cpu",
        progress=False,
        clients=ClientsConfig(num=NUM_CLIENTS, per_round=3),
        checkpoint=CheckpointConfig(every=1),
        **changes,
    )
    torch.manual_seed(0)
    return Simulation(ProbeList(), data, nn.Linear(4, 3), config, run_dir, overwrite=overwrite)


@pytest.fixture
def no_pictures(monkeypatch):
    drawn: list[str] = []
    monkeypatch.setattr(run_folder, "plot_partition", lambda p, path: drawn.append(path.name))
    monkeypatch.setattr(run_folder, "plot_learning_curve", lambda h, path, t: drawn.append(t))
    return drawn


def run_state(sim: Simulation) -> dict[str, Any]:
    return {
        "history": [{k: v for k, v in r.items() if not k.endswith("_s")} for r in sim.history],
        "traffic": sim.traffic.as_dict(),
        "states": {
            cid: {k: v.tolist() for k, v in s.items()} for cid, s in sim.client_states.items()
        },
        "weights": [p.tolist() for p in sim.strategy.model.parameters()],
        "seen": sim.strategy.seen,
    }


def test_a_resumed_run_continues_exactly_and_a_finished_one_runs_nothing(tmp_path, no_pictures):
    whole = folder_simulation(None, rounds=3)
    whole.run()
    first = folder_simulation(tmp_path, rounds=2)
    result = first.run()
    assert result.summary["status"] == "completed"
    assert (tmp_path / "model.pt").exists()
    assert no_pictures == ["partition.png", "None on None/None, seed 3"]
    again = folder_simulation(tmp_path, rounds=2).run(resume=True)
    assert again.summary["nothing_to_do"] and again.summary["rounds_completed"] == 2
    resumed = folder_simulation(tmp_path, rounds=3)
    resumed.run(resume=True)
    got, want = run_state(resumed), run_state(whole)
    assert got["seen"] == want["seen"][len(first.strategy.seen) :]
    assert {k: v for k, v in got.items() if k != "seen"} == {
        k: v for k, v in want.items() if k != "seen"
    }
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in lines] == [r["round"] for r in whole.history]


def test_a_checkpoint_is_finished_only_with_every_round_and_a_completed_summary(
    tmp_path, no_pictures
):
    folder_simulation(tmp_path, rounds=2).run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    for changed in ({"status": "stopped"}, {"rounds_completed": 1}):
        (tmp_path / "summary.json").write_text(json.dumps({**summary, **changed}))
        state = folder_simulation(tmp_path, rounds=2).folder._open(True)
        assert state is not None and run_folder.FINISHED not in state
    (tmp_path / "summary.json").write_text("[1]")
    assert folder_simulation(tmp_path).folder._stored_summary() == {}
    (tmp_path / "summary.json").write_text("{cut")
    assert folder_simulation(tmp_path).folder._stored_summary() == {}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    state = folder_simulation(tmp_path, rounds=2).folder._open(True)
    assert state[run_folder.FINISHED] == summary


def test_a_used_folder_is_refused_unless_overwritten_and_a_resume_needs_one(tmp_path, no_pictures):
    folder_simulation(tmp_path, rounds=1).run()
    assert (tmp_path / "model.pt").exists()
    with pytest.raises(FedshareError) as err:
        folder_simulation(tmp_path, rounds=1).run()
    assert str(err.value).startswith(f"run_dir {tmp_path} already holds a run (")
    result = folder_simulation(tmp_path, rounds=1, overwrite=True).run()
    assert result.summary["status"] == "completed"
    with pytest.raises(FedshareError, match="resume=true needs the run directory"):
        folder_simulation(None).run(resume=True)
    assert folder_simulation(None).folder._open(False) is None


def test_a_resume_on_another_partition_is_refused(tmp_path, no_pictures):
    folder_simulation(tmp_path, rounds=1).run()
    sim = folder_simulation(tmp_path, rounds=2)
    sim.data.partition = replace_fingerprint(sim.data.partition, "other")
    with pytest.raises(FedshareError) as err:
        sim.run(resume=True)
    assert str(err.value).endswith(", not other; resume with the same data and partition")


def replace_fingerprint(partition, fingerprint: str):
    return SimpleNamespace(
        fingerprint=fingerprint, summary=partition.summary, groups=partition.groups
    )


def test_a_write_failure_says_what_the_folder_keeps(tmp_path):
    sim = folder_simulation(tmp_path)
    err = OSError(28, "No space left on device")
    assert str(sim.folder.write_failure(err)) == (
        f"cannot write the run's files in {tmp_path} (No space left on device); no checkpoint "
        f"was saved yet, and every file keeps its last complete version"
    )
    sim.folder.checkpoint_round = 3
    assert "; checkpoint.pt of round 3 is intact (resume=true continues" in str(
        sim.folder.write_failure(err)
    )


@dataclass
class FailingFirst(ProbeList):
    name: ClassVar[str] = "failing_first"

    def client_update(self, client, message):
        raise ValueError("no")


def test_a_run_that_failed_before_a_round_keeps_no_model_and_says_why(tmp_path, no_pictures):
    sim = folder_simulation(tmp_path, rounds=1)
    sim.strategy = FailingFirst()
    with pytest.raises(ValueError):
        sim.run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 0
    assert not (tmp_path / "model.pt").exists() and (tmp_path / "metrics.jsonl").read_text() == ""


def test_partition_json_is_written_and_a_resume_rewrites_only_a_cut_off_one(tmp_path, no_pictures):
    folder_simulation(tmp_path, rounds=1).run()
    path = tmp_path / "partition.json"
    whole = path.read_text()
    assert json.loads(whole)["fingerprint"]
    path.write_text(whole[:10])
    folder_simulation(tmp_path, rounds=2).run(resume=True)
    assert path.read_text() == whole
    stamp = path.stat().st_mtime_ns
    folder_simulation(tmp_path, rounds=3).run(resume=True)
    assert path.stat().st_mtime_ns == stamp
