"""`clients.model_of`: which of `clients.models` each client has (issue 45 §1's mapping).

The rules are pinned on their own (`assign_architectures`), then a run with a non-cyclic
assignment is checked end to end: each client trains its own architecture, the summary counts
them, serial, batched and two processes agree, and a resumed run is exact.
"""

import pytest
import torch

from fedshare.engine.architectures import assign_architectures
from fedshare.errors import FedshareError
from fedshare.strategies._personal import PERSONAL
from helpers import run_preset
from test_bad_values import fedshare_run
from test_distributed import outcome, run_ranks
from test_hetero_clients_models import (
    ARCHITECTURES,
    assert_close_runs,
    class_name,
    simulation,
)

LABELS = ("cnn_small", "cnn4", "resnet8")
MAPPING = [2, "resnet8", 0, "cnn4", 0]
"""Five clients: two resnet8, two cnn_small, one cnn4 (positions and labels mixed)."""
EXPECTED = (2, 2, 0, 1, 0)


# ---------------------------------------------------------------- the rules
def test_cyclic_gives_client_k_position_k_mod_len():
    assert assign_architectures("cyclic", LABELS, 7, seed=0) == (0, 1, 2, 0, 1, 2, 0)


def test_blocks_gives_contiguous_runs_of_near_equal_size():
    assert assign_architectures("blocks", LABELS, 7, seed=0) == (0, 0, 0, 1, 1, 2, 2)
    assert assign_architectures("blocks", LABELS, 6, seed=0) == (0, 0, 1, 1, 2, 2)


def test_random_keeps_the_cyclic_counts_and_follows_the_seed():
    draws = {seed: assign_architectures("random", LABELS, 30, seed) for seed in range(4)}
    for draw in draws.values():
        assert [draw.count(i) for i in range(3)] == [10, 10, 10]
    assert draws[0] == assign_architectures("random", LABELS, 30, 0)  # seeded
    assert len(set(draws.values())) == 4  # and the seed reaches the draw
    assert draws[0] != assign_architectures("cyclic", LABELS, 30, 0)


def test_one_entry_per_client_takes_positions_and_labels():
    assert assign_architectures(MAPPING, LABELS, 5, seed=0) == EXPECTED


@pytest.mark.parametrize(
    ("model_of", "message"),
    [
        ("modulo", r"clients.model_of='modulo' is not valid: choose cyclic, blocks, random"),
        ([0, 1], r"clients.model_of has 2 entries for 5 clients"),
        ([0, 1, 2, 3, 0], r"clients.model_of\[3\]=3 is not valid: give a position 0-2"),
        ([0, 1, 2, -1, 0], r"clients.model_of\[3\]=-1 is not valid"),
        ([0, 1, True, 0, 0], r"clients.model_of\[2\]=True is not valid"),
        ([0, "lenet", 2, 0, 0], r"clients.model_of\[1\]='lenet' is not valid.*cnn_small, cnn4"),
        (3, r"clients.model_of=3 is not valid"),
    ],
)
def test_a_bad_assignment_is_refused_in_one_sentence(model_of, message):
    with pytest.raises(FedshareError, match=message) as err:
        assign_architectures(model_of, LABELS, 5, seed=0)
    assert "\n" not in str(err.value)


def test_an_assignment_without_architectures_is_refused():
    with pytest.raises(FedshareError, match=r"clients.model_of='blocks' needs clients.models"):
        simulation(models=[], model_of="blocks")


# ---------------------------------------------------------------- a run
def test_each_client_trains_the_architecture_it_was_assigned():
    sim = simulation(model_of=MAPPING, rounds=1)
    assert sim.architectures.models.assignment == EXPECTED
    workers = [class_name(sim.architectures.worker_of(k, sim.worker)) for k in range(5)]
    assert workers == [ARCHITECTURES[i] for i in EXPECTED]
    sim.run()  # the strategy's server-side views follow the same assignment
    assert [sim.strategy._architecture(k) for k in range(5)] == list(EXPECTED)


def test_the_summary_counts_the_clients_of_each_architecture():
    result = simulation(model_of=MAPPING, rounds=1).run()
    assert result.summary["clients_per_model"] == {"cnn_small": 2, "cnn4": 1, "resnet8": 2}


def test_batched_and_two_processes_match_the_serial_run():
    serial = outcome(simulation(model_of=MAPPING, memory_format="contiguous"))
    batched = outcome(simulation(model_of=MAPPING, batched=4, memory_format="contiguous"))
    assert_close_runs(batched, serial)
    ranks = run_ranks(lambda group: simulation(model_of=MAPPING, group=group))
    exact = outcome(simulation(model_of=MAPPING))
    for got in ranks:
        assert "error" not in got, got.get("error")
        assert got["history"] == exact["history"]
        assert torch.equal(got["weights"], exact["weights"])


def test_a_run_with_an_assignment_resumes_exactly(tmp_path):
    full = outcome(simulation(model_of="random", rounds=3, run_dir=tmp_path / "full"))
    outcome(simulation(model_of="random", rounds=2, run_dir=tmp_path / "cut"))
    resumed = outcome(
        simulation(model_of="random", rounds=3, run_dir=tmp_path / "cut"), resume=True
    )
    assert resumed["history"] == full["history"]
    for cid, state in full["client_states"].items():
        assert torch.equal(resumed["client_states"][cid][PERSONAL], state[PERSONAL])


# ---------------------------------------------------------------- the command line
def test_the_command_line_takes_an_assignment(tmp_path):
    summary = run_preset(
        ["experiment=hetero/cpu", "rounds=1", "clients.num=4", "clients.model_of=blocks"],
        tmp_path / "run",
    )
    assert summary["clients_per_model"] == {"cnn_small": 2, "cnn4": 1, "resnet8": 1}


def test_a_bad_assignment_on_the_command_line_exits_2_with_one_line(tmp_path):
    proc = fedshare_run(
        "experiment=hetero/cpu",
        "clients.num=4",
        "clients.model_of=[0,1]",
        f"run_dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "clients.model_of has 2 entries for 4 clients" in proc.stderr
    assert not (tmp_path / "run").exists()
