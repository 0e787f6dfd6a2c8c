"""The client wall: a client step sees its client, its message and the parameters, nothing of the
server; messages a client keeps are stored once and survive a resume."""

from dataclasses import dataclass

import pytest
import torch

from fedshare import simulate
from fedshare.engine.client import Client
from fedshare.engine.client_side import ClientWallError
from fedshare.strategies.base import Message, Phase, Update
from fedshare.strategies.fedavg import FedAvg
from helpers import DIGITS_TRAIN, digits_federation, without_wall_time


def run(strategy, rounds=1, **kwargs):
    return simulate(
        strategy,
        digits_federation("iid", 4),
        "cnn_small",
        rounds=rounds,
        train=DIGITS_TRAIN,
        **kwargs,
    )


@dataclass
class PeeksAtServer(FedAvg):
    def client_update(self, client: Client, message: Message) -> Update:
        self.model  # the server's global model: not on the client side  # noqa: B018
        return super().client_update(client, message)


@dataclass
class RemembersInSelf(FedAvg):
    def client_update(self, client: Client, message: Message) -> Update:
        self.last_client = client.id  # would leak to the next client
        return super().client_update(client, message)


@dataclass
class KnowsItsOwnData(FedAvg):
    """Checks, in every client step, that the client reaches exactly its own samples."""

    def client_update(self, client: Client, message: Message) -> Update:
        x, y = client.raw()
        assert len(x) == len(y) == client.num_samples
        assert torch.equal(client.labels, y)
        assert not hasattr(client, "dataset") and not hasattr(client, "indices")
        assert self.num_classes == client.num_classes  # what every client knows
        return super().client_update(client, message)


def test_reading_server_state_in_a_client_step_is_refused():
    with pytest.raises(ClientWallError, match=r"read self\.model, which only the server holds"):
        run(PeeksAtServer())


def test_writing_to_self_in_a_client_step_is_refused():
    with pytest.raises(ClientWallError, match=r"wrote self\.last_client.*client\.state"):
        run(RemembersInSelf())


def test_a_client_reaches_its_own_samples_only():
    run(KnowsItsOwnData())


def test_a_client_step_must_be_a_method_of_the_strategy():
    @dataclass
    class Lambda(FedAvg):
        def phases(self) -> list[Phase]:
            return [Phase("train", self.broadcast, lambda c, m: Update(c.id, 0), self.aggregate)]

    with pytest.raises(TypeError, match="must be a method of the strategy"):
        run(Lambda())


@dataclass
class KeepsGreeting(FedAvg):
    """Round 0 sends every client a 'pool' it keeps; later client steps read it back."""

    def phases(self) -> list[Phase]:
        return [
            Phase("greet", self.greet, self.ack, self.drain, self.first_round, keep=True),
            Phase("train", self.broadcast, self.client_update, self.aggregate),
        ]

    def first_round(self, round_idx: int, cohort: list[int]) -> list[int]:
        return list(range(self.data.num_clients)) if round_idx == 0 else []

    def greet(self, round_idx: int) -> Message:
        return Message(payload={"pool": torch.arange(1000.0)})

    def ack(self, client: Client, message: Message) -> Update:
        return Update(client.id, client.num_samples)

    def drain(self, updates, round_idx: int) -> None:
        for _ in updates:
            pass

    def client_update(self, client: Client, message: Message) -> Update:
        pool = client.kept["greet"].payload["pool"]
        assert torch.equal(pool, torch.arange(1000.0))
        update = super().client_update(client, message)
        update.metrics["pool_sum"] = float(pool.sum())
        return update


def test_a_kept_message_is_stored_once_and_counted_once_per_receiver():
    result = run(KeepsGreeting(), rounds=2)
    assert result.summary["client_state_bytes"] == 4000  # one float32 pool for 4 clients
    assert result.summary["bytes_shared"] == 4 * 4000  # sent to each of the 4 once
    assert result.history[-1]["pool_sum"] == pytest.approx(999 * 1000 / 2)


def test_kept_messages_survive_a_resume(tmp_path):
    full = run(KeepsGreeting(), rounds=3, run_dir=tmp_path / "full")
    run(KeepsGreeting(), rounds=1, run_dir=tmp_path / "part")
    resumed = run(KeepsGreeting(), rounds=3, run_dir=tmp_path / "part", resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    assert resumed.summary["client_state_bytes"] == full.summary["client_state_bytes"]
