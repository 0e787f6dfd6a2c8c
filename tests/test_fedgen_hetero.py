"""FedGen with clients of their own architectures (`clients.models`): only heads and label
counts travel (the paper's flexible parameter sharing, §3.3), serial, batched and across two
processes alike, resuming exactly."""

import warnings

import torch

from fedshare.engine.messages import Message, Update
from fedshare.strategies import FedGen
from fedshare.strategies._personal import PERSONAL
from test_distributed import outcome, run_ranks
from test_hetero_clients_models import WIDTH, assert_close_runs, batched_run, simulation

PARAMS = {"generator_steps": 3, "hidden": 16, "noise_dim": 8}
CLASSES = 10
HEAD = WIDTH * CLASSES + CLASSES
"""The head's floats, Linear(16 → 10): all a client's model that crosses the network."""


def fedgen(**options):
    return simulation("fedgen", params=PARAMS, memory_format="contiguous", **options)


def test_only_heads_and_label_counts_travel(monkeypatch):
    sent: list[Message] = []
    uploaded: list[Update] = []
    broadcast, aggregate = FedGen.broadcast, FedGen.aggregate

    def spy_broadcast(self, round_idx):
        message = broadcast(self, round_idx)
        sent.append(message)
        return message

    def spy_aggregate(self, updates, round_idx):
        def seen():
            for update in updates:
                uploaded.append(update)
                assert update.weights.numel() == HEAD
                assert set(update.payload) == {"label_counts"}
                yield update

        aggregate(self, seen(), round_idx)

    monkeypatch.setattr(FedGen, "broadcast", spy_broadcast)
    monkeypatch.setattr(FedGen, "aggregate", spy_aggregate)
    sim = fedgen(rounds=2)
    result = sim.run()
    assert [m.weights.numel() for m in sent] == [HEAD, HEAD]
    assert set(sent[0].payload) == set() and set(sent[1].payload) == {"generator", "label_prior"}
    assert len(uploaded) == 8
    # every client keeps its whole model, of its own architecture, in its state
    sizes = {k: len(s[PERSONAL]) for k, s in sim.client_states.items()}
    assert all(size > 5 * HEAD for size in sizes.values()) and len(set(sizes.values())) == 3
    generator = sum(p.numel() for p in sim.strategy.generator.parameters())
    generator += sum(b.numel() for b in sim.strategy.generator.buffers() if b.is_floating_point())
    counts = CLASSES * 4  # int32
    assert result.summary["bytes_up"] == 8 * (HEAD * 4 + counts)
    assert result.summary["bytes_down"] == 8 * HEAD * 4 + 4 * (generator + CLASSES) * 4
    assert result.summary["bytes_shared"] == 8 * counts + 4 * (generator + CLASSES) * 4


def test_the_global_head_is_the_sample_weighted_mean_of_the_uploaded_heads(monkeypatch):
    heads: list[tuple[torch.Tensor, float]] = []
    aggregate = FedGen.aggregate

    def spy_aggregate(self, updates, round_idx):
        def seen():
            for update in updates:
                heads.append((update.weights.clone(), update.aggregation_weight))
                yield update

        aggregate(self, seen(), round_idx)

    monkeypatch.setattr(FedGen, "aggregate", spy_aggregate)
    sim = fedgen(rounds=1)
    sim.run()
    total = sum(w for _, w in heads)
    expected = sum(h * (w / total) for h, w in heads)
    torch.testing.assert_close(sim.strategy.heads.head, expected)
    shown = sim.strategy.global_model()  # the shown client's model wears the global head
    torch.testing.assert_close(shown.head.weight.flatten(), expected[: WIDTH * CLASSES])


def test_serial_batched_and_two_processes_agree():
    serial = outcome(fedgen())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no serial fallback
        batched = outcome(batched_run("fedgen", params=PARAMS))
    assert_close_runs(batched, serial)
    for got in run_ranks(lambda group: fedgen(group=group)):
        assert "error" not in got, got.get("error")
        assert got["history"] == serial["history"]
        assert torch.equal(got["weights"], serial["weights"])


def test_a_heterogeneous_fedgen_run_resumes_exactly(tmp_path):
    full = outcome(fedgen(rounds=3, run_dir=tmp_path / "full"))
    outcome(fedgen(rounds=2, run_dir=tmp_path / "cut"))
    resumed = outcome(fedgen(rounds=3, run_dir=tmp_path / "cut"), resume=True)
    assert resumed["history"] == full["history"]
    assert torch.equal(resumed["weights"], full["weights"])
    for cid, state in full["client_states"].items():
        assert torch.equal(resumed["client_states"][cid][PERSONAL], state[PERSONAL])
