"""Engine v2 pieces: per-client persistent state, messages to one client, the one-shot final
download."""

from dataclasses import dataclass
from typing import ClassVar

import torch

from fedshare import simulate
from fedshare.engine.client import Client
from fedshare.engine.client_state import ClientStates
from fedshare.engine.state_log import COMPACT_SLACK, FOLDER, ClientStateLog
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


def test_each_checkpoint_writes_only_the_states_that_changed(tmp_path):
    """checkpoint.pt lists segment files; each holds the clients checked in since the
    previous checkpoint (the round's cohort), and read in order they give every state."""
    result = run(tmp_path, rounds=4)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert "client_states" not in checkpoint
    names = checkpoint["client_state_segments"]
    assert names == [f"delta_{r:06d}.pt" for r in range(1, 5)]
    segments = [torch.load(tmp_path / FOLDER / n, weights_only=True) for n in names]
    assert [len(s) for s in segments] == [3, 3, 3, 3]  # fraction 0.5 of 6 clients
    latest: dict[int, int] = {}
    for segment in segments:
        latest.update({cid: int(state["visits"]) for cid, state in segment.items()})
    assert sum(latest.values()) == 4 * 3  # every participation counted once
    assert sorted(p.name for p in (tmp_path / FOLDER).iterdir()) == names
    assert result.summary["client_state_bytes"] == 8 * len(latest)


def test_segments_are_compacted_and_unlisted_files_deleted(tmp_path):
    states, log = ClientStates(), ClientStateLog(tmp_path)
    big = {"w": torch.zeros(1 << 18)}  # 1 MiB
    written = []
    for step in range(12):
        states.checkin(step % 2, {"w": big["w"] + step})
        written.append(log.save(states, step))
        log.prune()
        on_disk = sum(p.stat().st_size for p in (tmp_path / FOLDER).iterdir())
        assert on_disk <= 3 * states.bytes_held + COMPACT_SLACK + 4096 * len(written[-1])
    assert any(names[0].startswith("full_") for names in written)  # it compacted
    restored = ClientStateLog(tmp_path).load(written[-1])
    assert torch.equal(restored[0]["w"], big["w"] + 10)
    assert torch.equal(restored[1]["w"], big["w"] + 11)
    (tmp_path / FOLDER / "delta_000099.pt").write_bytes(b"from a run stopped mid-checkpoint")
    states.checkin(0, {})  # a removed state is written as None
    names = log.save(states, 12)
    log.prune()
    assert not (tmp_path / FOLDER / "delta_000099.pt").exists()
    assert 0 not in ClientStateLog(tmp_path).load(names)


def test_overwrite_deletes_the_previous_runs_client_states(tmp_path):
    run(tmp_path, rounds=2)
    simulate(
        CountVisits(),
        digits_federation("iid", 6),
        "cnn_small",
        rounds=1,
        train=DIGITS_TRAIN,
        clients={"fraction": 0.5},
        run_dir=tmp_path,
        overwrite=True,
    )
    assert sorted(p.name for p in (tmp_path / FOLDER).iterdir()) == ["delta_000001.pt"]


def test_a_checkpoint_with_inline_client_state_resumes_and_keeps_every_state(tmp_path):
    """Checkpoints written before segments held the states inline: a resume from one writes
    them all to the next checkpoint's segments, so a second resume still has every client."""
    full = run(tmp_path / "full")
    old = tmp_path / "old"
    run(old, rounds=2)
    checkpoint = torch.load(old / "checkpoint.pt", weights_only=True)
    log = ClientStateLog(old)
    checkpoint["client_states"] = log.load(checkpoint.pop("client_state_segments"))
    torch.save(checkpoint, old / "checkpoint.pt")
    log.clear()  # the folder as an older version left it: no client_states/
    run(old, rounds=3, resume=True)
    resumed = run(old, rounds=4, resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    assert resumed.summary["client_state_bytes"] == full.summary["client_state_bytes"]
