"""`clients.models=[…]`: clients with their own architectures (issue 45 §1).

Small models (feature width 16) on digits keep these runs short: three architectures, client
k gets `models[k mod 3]`.
"""

import warnings

import pytest
import torch

from fedshare.config import CheckpointConfig, ClientsConfig, EvalConfig, SimulationConfig
from fedshare.config.api import init_model
from fedshare.config.assemble import assemble
from fedshare.config.compose import check_command_line, compose_member, run_values
from fedshare.config.defaults import resolve_train
from fedshare.engine.architectures import model_entries
from fedshare.engine.flat import FlatState
from fedshare.engine.simulation import Simulation
from fedshare.errors import FedshareError
from fedshare.run import config_dir
from fedshare.strategies import make_strategy
from fedshare.strategies._personal import PERSONAL
from fedshare.strategies.fedproto import FedProto
from helpers import DIGITS_TRAIN, digits_federation, run_preset, without_wall_time
from test_distributed import outcome, run_ranks

WIDTH = 16
RUN_MODEL = {"channels": [8], "hidden": WIDTH}
MODELS = [
    {"name": "cnn_small", "channels": [8], "hidden": WIDTH},
    {"name": "cnn4", "channels": [4, 8], "padding": 2},
    {"name": "resnet8", "width": 0.25},
]
FAMILY = ("local_only", "fedproto", "fd", "lg_fedavg", "fedgh", "fedtgp", "fml", "fedkd", "fedmrl")
SMALL = {"fedtgp": {"server_epochs": 2}}
ARCHITECTURES = {0: "conv1 fc head", 1: "conv1 conv2 fc head", 2: "stem layer1"}
"""Client k's architecture (k mod 3) by the start of its blocks' names."""


def simulation(
    name: str = "fedproto",
    models: list | None = None,
    rounds: int = 2,
    clients: int = 5,
    run_dir=None,
    group=None,
    batched: int = 1,
    params: dict | None = None,
    memory_format: str = "auto",
    model_of: object = "cyclic",
) -> Simulation:
    """`name` on digits, Dir(0.3) over `clients` clients, 4 a round, the three small
    architectures (the run's model a small cnn_small of width 16)."""
    data = digits_federation({"name": "dirichlet", "alpha": 0.3}, clients)
    strategy = make_strategy(name, params)
    config = SimulationConfig(
        rounds=rounds,
        seed=0,
        device="cpu",
        progress=False,
        clients=ClientsConfig(
            num=clients,
            per_round=4,
            models=MODELS if models is None else models,
            model_of=model_of,
        ),
        train=resolve_train({**DIGITS_TRAIN, "batched": batched}, strategy, "digits"),
        eval=EvalConfig(personal_size=30),
        checkpoint=CheckpointConfig(every=0 if run_dir is None else 1),
        memory_format=memory_format,
    )
    model = init_model("cnn_small", data, 0, RUN_MODEL)
    return Simulation(strategy, data, model, config, run_dir, group=group)


def class_name(module: torch.nn.Module) -> str:
    """The architecture of a built model, told by its blocks (every model is a BlockModel)."""
    names = " ".join(module.block_names)
    return next(arch for arch in ARCHITECTURES.values() if names.startswith(arch))


# ---------------------------------------------------------------- the key
def test_entries_are_names_or_mappings_and_a_bad_one_is_named():
    assert model_entries(["cnn4", {"name": "resnet8", "width": 0.5}]) == [
        ("cnn4", {}),
        ("resnet8", {"width": 0.5}),
    ]
    with pytest.raises(FedshareError, match=r"clients.models\[1\]=3 is not valid.*cnn4"):
        model_entries(["cnn4", 3])


def test_an_unknown_model_name_is_refused_in_one_sentence():
    with pytest.raises(FedshareError, match="nosuchnet") as err:
        simulation(models=["cnn_small", "nosuchnet"])
    assert "\n" not in str(err.value)


def test_a_strategy_sharing_whole_models_is_refused():
    with pytest.raises(FedshareError, match=r"strategy fedavg cannot take clients with") as err:
        simulation("fedavg")
    assert "fedproto" in str(err.value) and "\n" not in str(err.value)


def test_an_architecture_of_another_feature_width_is_refused_before_round_0():
    wide = [MODELS[0], {"name": "cnn4", "padding": 2, "feature_dim": 32}]
    with pytest.raises(FedshareError, match=r"'cnn4' has 32-d .* feature_dim=16"):
        simulation(models=wide)


def test_an_unset_feature_dim_takes_the_run_models_width():
    sim = simulation()
    assert [feature(m) for m in sim.architectures.models.models] == [WIDTH] * 3


def feature(model: torch.nn.Module) -> int:
    return model.features(torch.zeros(1, 1, 8, 8)).shape[1]


# ---------------------------------------------------------------- who gets what
def test_client_k_gets_a_reused_worker_of_models_k_mod_len():
    sim = simulation()
    assert sim.architectures.models.names == ("cnn_small", "cnn4", "resnet8")
    workers = [sim.architectures.worker_of(k, sim.worker) for k in range(5)]
    assert [class_name(w) for w in workers] == [ARCHITECTURES[k % 3] for k in range(5)]
    assert workers[0] is workers[3] and workers[1] is workers[4]  # one worker per architecture
    assert all(
        w is not m
        for w, m in zip(sim.architectures.workers, sim.architectures.models.models, strict=True)
    )


def test_an_empty_list_keeps_one_worker_for_everyone():
    sim = simulation(models=[])
    assert (
        sim.architectures.models is None
        and sim.architectures.worker_of(4, sim.worker) is sim.worker
    )


def test_each_client_trains_and_the_server_shows_its_own_architecture(monkeypatch):
    sim = simulation(rounds=1)
    seen: dict[int, str] = {}
    step = type(sim.strategy).client_update

    def spy(self, client, message):
        seen[client.id] = class_name(client.model)
        return step(self, client, message)

    monkeypatch.setattr(type(sim.strategy), "client_update", spy)
    result = sim.run()
    assert seen and all(arch == ARCHITECTURES[k % 3] for k, arch in seen.items())
    for k in seen:  # the server's module of the client's architecture holds its kept weights
        state = sim.client_states.checkout(k, sim.device)
        model = sim.strategy.personal_model(k, state)
        assert class_name(model) == ARCHITECTURES[k % 3]
        assert torch.equal(FlatState(model).flatten(model), state[PERSONAL])
    shown = result.summary["shown_client"]
    assert class_name(sim.strategy.global_model()) == ARCHITECTURES[shown % 3]


def test_personal_accuracy_is_reported_per_architecture():
    result = simulation(rounds=1).run()
    record = result.history[-1]
    for arch in ("cnn_small", "cnn4", "resnet8"):
        assert 0 <= record[f"personal_accuracy_min/{arch}"] <= record[f"personal_accuracy/{arch}"]
        assert result.summary[f"personal_accuracy/{arch}"] == record[f"personal_accuracy/{arch}"]
    # the overall mean weighs clients equally: cnn_small and cnn4 have two of the five
    per_arch = [record[f"personal_accuracy/{a}"] for a in ("cnn_small", "cnn4", "resnet8")]
    expected = (2 * per_arch[0] + 2 * per_arch[1] + per_arch[2]) / 5
    assert record["personal_accuracy"] == pytest.approx(expected)
    assert record["personal_accuracy_min"] == min(
        record[f"personal_accuracy_min/{a}"] for a in ("cnn_small", "cnn4", "resnet8")
    )
    assert result.summary["clients_per_model"] == {"cnn_small": 2, "cnn4": 2, "resnet8": 1}


@pytest.mark.parametrize("name", FAMILY)
def test_every_personal_model_method_runs_with_three_architectures(name):
    sim = simulation(name, rounds=2, params=SMALL.get(name))
    record = sim.run().history[-1]
    assert {f"personal_accuracy/{a}" for a in ("cnn_small", "cnn4", "resnet8")} <= set(record)
    sizes = {k: len(sim.client_states.checkout(k, sim.device)[PERSONAL]) for k in range(5)}
    assert sizes[0] == sizes[3] and sizes[1] == sizes[4]  # kept in its architecture's shape
    assert len({sizes[0], sizes[1], sizes[2]}) == 3


def test_fedmrl_wraps_each_architecture_with_its_projector():
    sim = simulation("fedmrl", rounds=1)
    sim.run()
    for k in range(3):
        model = sim.strategy.personal_model(k, sim.client_states.checkout(k, sim.device))
        assert class_name(model.personal.local) == ARCHITECTURES[k]


# ---------------------------------------------------------------- executors and resume
def batched_run(name: str = "fedproto", **options) -> Simulation:
    """`simulation` with 4 clients stacked at a time (contiguous memory: channels-last
    BatchNorm rounds differently under vmap, and resnet8's first steps magnify it)."""
    return simulation(name, batched=4, memory_format="contiguous", **options)


def assert_close_runs(got: dict, expected: dict) -> None:
    """The same traffic, and weights, client states and metrics equal up to the rounding of
    vmapped kernels: 1e-4, within `tests/test_batched.py`'s 2e-3 for two rounds (FedGen's
    resnet8 client moves 1.6e-5 apart, the others < 1e-6)."""
    assert got["traffic"] == expected["traffic"]
    torch.testing.assert_close(got["weights"], expected["weights"], rtol=1e-4, atol=1e-4)
    assert got["client_states"].keys() == expected["client_states"].keys()
    for cid, state in expected["client_states"].items():
        torch.testing.assert_close(
            got["client_states"][cid][PERSONAL], state[PERSONAL], rtol=1e-4, atol=1e-4
        )
    for a, b in zip(got["history"], expected["history"], strict=True):
        assert a["personal_accuracy"] == pytest.approx(b["personal_accuracy"], abs=1.0)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)


@pytest.mark.parametrize("name", FAMILY)
def test_batched_runs_stack_each_architecture_and_match_serial(name):
    """Every method of the family steps batched with three architectures (no serial
    fallback, so no warning) and ends where the serial run ends."""
    params = SMALL.get(name)
    serial = outcome(simulation(name, params=params, memory_format="contiguous"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = outcome(batched_run(name, params=params))
    assert_close_runs(batched, serial)


def test_each_stack_holds_one_architecture_and_the_server_gets_cohort_order(monkeypatch):
    stacks: list[list[int]] = []
    absorbed: list[int] = []
    step, absorb = FedProto.batched_update, FedProto.absorb

    def spy_step(self, clients, message):
        stacks.append([c.id for c in clients])
        assert len({class_name(c.model) for c in clients}) == 1
        return step(self, clients, message)

    def spy_absorb(self, update):
        absorbed.append(update.client_id)
        absorb(self, update)

    monkeypatch.setattr(FedProto, "batched_update", spy_step)
    monkeypatch.setattr(FedProto, "absorb", spy_absorb)
    monkeypatch.setattr(FedProto, "client_update", None)  # a serial step would fail
    sim = batched_run(rounds=1, clients=6)
    sim.run()
    assert absorbed == sim.sampler.cohort(0) and len(absorbed) == 4
    assert sorted(c for s in stacks for c in s) == sorted(absorbed)
    assert all(len({c % 3 for c in s}) == 1 for s in stacks)  # one architecture per stack
    assert len(stacks) == len({c % 3 for c in absorbed})  # and one stack per architecture


def test_two_processes_give_the_serial_numbers():
    one = outcome(simulation())
    ranks = run_ranks(lambda group: simulation(group=group))
    for got in ranks:
        assert "error" not in got, got.get("error")
        assert got["history"] == one["history"]
        assert torch.equal(got["weights"], one["weights"])
        for cid, state in one["client_states"].items():
            assert torch.equal(got["client_states"][cid][PERSONAL], state[PERSONAL])


def test_two_processes_of_batched_clients_match_the_serial_run():
    serial = outcome(simulation(memory_format="contiguous"))
    ranks = run_ranks(lambda group: batched_run(group=group))
    for got in ranks:
        assert "error" not in got, got.get("error")
        assert_close_runs(got, serial)


def test_a_batched_heterogeneous_run_resumes_exactly(tmp_path):
    full = outcome(batched_run(rounds=3, run_dir=tmp_path / "full"))
    outcome(batched_run(rounds=2, run_dir=tmp_path / "cut"))
    resumed = outcome(batched_run(rounds=3, run_dir=tmp_path / "cut"), resume=True)
    assert resumed["history"] == full["history"]
    assert torch.equal(resumed["weights"], full["weights"])
    for cid, state in full["client_states"].items():
        assert torch.equal(resumed["client_states"][cid][PERSONAL], state[PERSONAL])


def test_a_heterogeneous_run_resumes_exactly(tmp_path):
    full = simulation(rounds=3, run_dir=tmp_path / "full").run()
    simulation(rounds=2, run_dir=tmp_path / "cut").run()
    resumed = simulation(rounds=3, run_dir=tmp_path / "cut").run(resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    assert resumed.summary["shown_client"] == full.summary["shown_client"]


def test_the_api_takes_clients_models():
    data = digits_federation({"name": "dirichlet", "alpha": 0.3}, 3)
    sim = assemble(
        make_strategy("local_only"),
        data,
        "cnn_small",
        rounds=1,
        seed=0,
        train=DIGITS_TRAIN,
        clients=ClientsConfig(num=3, models=MODELS),
        eval=EvalConfig(personal_size=30),
        checkpoint=CheckpointConfig(),
        device="cpu",
        model_params=RUN_MODEL,
    )
    assert [class_name(sim.architectures.worker_of(k, sim.worker)) for k in range(3)] == list(
        ARCHITECTURES.values()
    )


# ---------------------------------------------------------------- the preset
def test_the_preset_composes_three_architectures_and_switches_strategy():
    assert check_command_line(["experiment=hetero/cpu"], config_dir()) == 1
    values = run_values(compose_member(["experiment=hetero/cpu"], str(config_dir())))
    assert values["strategy"]["name"] == "fedproto" and values["data"]["name"] == "digits"
    assert [m["name"] for m in values["clients"]["models"]] == ["cnn_small", "cnn4", "resnet8"]
    assert check_command_line(["experiment=hetero/cpu", "strategy=fedgh"], config_dir()) == 1


def test_the_preset_runs_from_the_command_line(tmp_path):
    """One round of the preset through `python -m fedshare.run` (the YAML's mapping entries)."""
    summary = run_preset(["experiment=hetero/cpu", "rounds=1", "clients.num=3"], tmp_path / "run")
    assert summary["clients_per_model"] == {"cnn_small": 1, "cnn4": 1, "resnet8": 1}
    assert {f"personal_accuracy/{a}" for a in ("cnn_small", "cnn4", "resnet8")} <= set(summary)
    assert summary["bytes_up"] > 0
