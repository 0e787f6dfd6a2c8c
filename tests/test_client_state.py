"""Engine v2 pieces: per-client persistent state, messages to one client, the one-shot final
download."""

from dataclasses import dataclass
from typing import ClassVar

import torch

from fedshare import simulate
from fedshare.engine.client import Client
from fedshare.strategies.base import Message, Phase, Update
from fedshare.strategies.fedavg import FedAvg
from helpers import DIGITS_TRAIN, digits_federation, without_wall_time


@dataclass
class CountVisits(FedAvg):
    """FedAvg whose clients count their own participations in `client.state` and receive
    their id in a personal message."""

    def phases(self) -> list[Phase]:
        return [
            Phase("train", self.broadcast, self.client_update, self.aggregate, None, self.personal)
        ]

    def personal(self, round_idx: int, client_id: int) -> Message:
        return Message(payload={"id": torch.tensor([client_id])})

    def client_update(self, client: Client, message: Message) -> Update:
        assert int(client.personal.payload["id"]) == client.id
        visits = client.state.get("visits", torch.zeros((), dtype=torch.int64)) + 1
        client.state["visits"] = visits
        update = super().client_update(client, message)
        update.metrics["visits"] = float(visits)
        return update


def run(tmp_path=None, rounds=4, resume=False, strategy=None):
    return simulate(
        strategy or CountVisits(),
        digits_federation("iid", 6),
        "cnn_small",
        rounds=rounds,
        train=DIGITS_TRAIN,
        clients={"fraction": 0.5},
        run_dir=tmp_path,
        resume=resume,
    )


def test_state_persists_between_participations_and_is_reported():
    result = run()
    sim_states = result.summary["client_state_bytes"]
    # every client that took part holds one int64 counter
    assert sim_states % 8 == 0 and 8 <= sim_states <= 6 * 8
    assert result.summary["bytes_down_personal"] == 4 * 3 * 8  # 3 clients a round, 8 bytes each


def test_state_is_checkpointed_and_a_resume_equals_the_uninterrupted_run(tmp_path):
    full = run(tmp_path / "full")
    run(tmp_path / "cut", rounds=2)
    resumed = run(tmp_path / "cut", rounds=4, resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    assert resumed.summary["client_state_bytes"] == full.summary["client_state_bytes"]


@dataclass
class OneShotAverage(FedAvg):
    one_shot: ClassVar[bool] = True


def test_the_one_shot_result_is_downloaded_by_every_client_once():
    fed = digits_federation("iid", 6)
    one = simulate(OneShotAverage(), fed, "cnn_small", train=DIGITS_TRAIN)
    model_bytes = sum(p.numel() * 4 for p in one.strategy.global_model().parameters())
    # the broadcast of round 0, then the trained model to all six clients at the end
    assert one.summary["bytes_down"] == 6 * model_bytes + 6 * model_bytes
    assert one.history[-1]["bytes_down"] == 6 * model_bytes
