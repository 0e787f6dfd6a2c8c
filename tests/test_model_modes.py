"""Model modes (issue 46 §3): every forward pass of a BatchNorm/Dropout model runs in the mode
its step needs.

- Evaluation (global, personal) runs in eval mode: BatchNorm's running statistics are read and
  never moved, dropout is off; the model is handed back in the mode it came in.
- What a strategy extracts to share or to score (FLea's activations, the prototypes of
  FedProto/FedTGP/FedGH/ReBaFL, FD's per-label logits, CCVR's statistics, the one-shot heads'
  features, nearest-prototype accuracy) is computed in eval mode after training, and the mode
  is restored. Sources: FLea's code extracts in eval mode (`extract_bn_mode`, whose `train`
  option is checked below); FedGH's extraction follows HtFLlib's `collect_protos` (eval);
  CCVR's statistics are taken on the trained model in eval mode (its docstring); FedProto and
  FD state a deviation from HtFLlib, which averages the features or logits seen during
  training (train mode), and compute them after training in eval mode.
- Local and server training steps run in train mode.

A probe layer inside a BatchNorm + Dropout model logs (mode, grad enabled, calling function)
of each forward pass; every registered strategy runs on it. A pass without gradients is an
inference (evaluation, extraction, a teacher's output) and must be in eval mode; a pass that
builds a graph trains and must be in train mode, except the passes through a model that is
frozen on purpose (`FROZEN_WITH_GRAD`).
"""

import copy
import traceback
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import test_every_strategy as matrix
from fedshare.config import CheckpointConfig, ClientsConfig, EvalConfig, SimulationConfig
from fedshare.config.defaults import resolve_rounds, resolve_train
from fedshare.data import federate, load_dataset
from fedshare.engine.evaluation import evaluate_batches
from fedshare.engine.personal_eval import correct_on
from fedshare.engine.simulation import Simulation
from fedshare.functional.logit_sharing import label_logits
from fedshare.functional.prototype_losses import nearest_prototype
from fedshare.functional.prototypes import class_means, feature_prototypes
from fedshare.models.base import HEAD, MODELS, BlockModel
from fedshare.strategies import STRATEGIES, make_strategy
from fedshare.strategies._feature_heads import extract
from fedshare.strategies.fedproto import prototype_accuracy
from fedshare.strategies.flea import FLea

SRC = Path(__file__).resolve().parents[1] / "src" / "fedshare"

PASSES: list[tuple[bool, bool, str, frozenset[str]]] = []
"""(training, grad enabled, calling function, every fedshare function on the stack) of each
probe pass."""


class ModeProbe(nn.Module):
    """Identity that logs the mode it runs in and the fedshare functions it was called from."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        callers = []
        for frame in traceback.extract_stack()[:-1]:
            path = Path(frame.filename).resolve()
            if path.is_relative_to(SRC) and path.parent.name != "models":
                callers.append(f"{path.relative_to(SRC).as_posix()}:{frame.name}")
        caller = callers[-1] if callers else "test"
        PASSES.append((self.training, torch.is_grad_enabled(), caller, frozenset(callers)))
        return x


def probe_model(dropout: float = 0.5, channels: int = 4) -> BlockModel:
    """A digits (1×8×8) CNN with BatchNorm in its first block and Dropout in its second."""
    torch.manual_seed(0)
    return BlockModel(
        [
            (
                "conv1",
                nn.Sequential(
                    nn.Conv2d(1, channels, 3, padding=1),
                    nn.BatchNorm2d(channels),
                    ModeProbe(),
                    nn.ReLU(),
                    nn.MaxPool2d(2),
                ),
            ),
            (
                "fc",
                nn.Sequential(
                    nn.Flatten(),
                    nn.Linear(16 * channels, 16),
                    nn.ReLU(),
                    nn.Dropout(dropout),
                    ModeProbe(),
                ),
            ),
            (HEAD, nn.Linear(16, 10)),
        ],
        share_layer=2,
        flea_layer=1,
    )


FROZEN_WITH_GRAD = {
    "fedaa": {"functional/fooling.py:summed_loss"},
    "fedavg_ft": {"strategies/_central.py:step_loss"},
    "fedgen_input": {"strategies/fedgen_input.py:train_generator"},
}
"""Passes that build a graph through a model held in eval mode on purpose: FedAA's fooling
inputs are optimised against the frozen trained model (Sec. 3.3, Eq. 4); FedAvg-FT trains the
head on a frozen body, BatchNorm statistics included (ReBaFL's Fig. 1); FedGen's input-space
generator learns against the frozen global model (its L_G)."""

FULL_COHORT = {"fedpft_chain", "kd"}
"""Chains that need every client each round; the others run 3 of 4 clients a round."""


HEADS_ON_FIXED_FEATURES = {
    "dp_fedpft",
    "ensemble",
    "fedbe",
    "fedkt",
    "fedpft",
    "fedpft_chain",
    "kd",
    "oneshot_avg",
}
"""One-shot methods that train heads on the body's fixed features: the body never trains."""


def probe_run(
    name: str, params: dict | None = None, models: list | None = None, **train_options: object
) -> Counter:
    """The passes of a short run of strategy `name` on the probe model: 4 digits clients,
    2 rounds (1 for a one-shot method), global and personal evaluation every round."""
    data = load_dataset({"name": "digits", "train_subset": 400, "test_subset": 200})
    strategy = make_strategy(name, {**matrix.SHORT_BUDGET.get(name, {}), **(params or {})})
    partition = matrix.server_partition(data) if name in matrix.NEEDS_SERVER else "iid"
    server_size = len(data.y_train) // 10 if name in matrix.NEEDS_SERVER_DATA else 0
    fed = federate(data, partition, 4, 0, server_size=server_size)
    train = resolve_train({}, strategy, data.name)
    train.local_epochs = 1
    for key, value in train_options.items():
        setattr(train, key, value)
    config = SimulationConfig(
        rounds=resolve_rounds(None if strategy.one_shot else 2, strategy),
        seed=0,
        device="cpu",
        progress=False,
        clients=ClientsConfig(
            num=4, per_round=None if name in FULL_COHORT else 3, models=models or []
        ),
        train=train,
        eval=EvalConfig(personal=True, personal_size=20),
        checkpoint=CheckpointConfig(every=0),
    )
    PASSES.clear()
    Simulation(strategy, fed, probe_model(), config).run()
    return Counter(PASSES)


def wrong_modes(passes: Counter, allowed: set[str]) -> dict:
    """Passes whose mode is not the one their gradient says (`allowed`: callers exempt)."""
    return {k: n for k, n in passes.items() if k[0] != k[1] and k[2] not in allowed}


@pytest.mark.parametrize("name", sorted(STRATEGIES.names()))
def test_every_strategy_infers_in_eval_mode_and_trains_in_train_mode(name):
    passes = probe_run(name)
    assert not wrong_modes(passes, FROZEN_WITH_GRAD.get(name, set())), wrong_modes(passes, set())
    evaluated = set().union(*(k[3] for k in passes if not k[0] and not k[1]))
    assert "engine/evaluation.py:evaluate_batches" in evaluated
    assert "engine/personal_eval.py:correct_on" in evaluated
    assert any(k[0] and k[1] for k in passes) or name in HEADS_ON_FIXED_FEATURES


def test_batched_clients_train_in_train_mode():
    passes = probe_run("fedavg", batched=2)
    assert not wrong_modes(passes, set())
    assert any(k[0] and k[1] for k in passes)


@pytest.mark.parametrize("name", ["fd", "fedproto", "fml"])
def test_clients_of_two_architectures_are_evaluated_and_trained_in_their_modes(name, monkeypatch):
    """Clients of their own architectures (`clients.models`): the per-architecture personal
    evaluation runs in eval mode too."""
    MODELS.names()  # the built-in models first
    for model_name, channels in (("probe_modes_a", 4), ("probe_modes_b", 8)):
        factory = lambda shape, classes, channels=channels: probe_model(channels=channels)  # noqa: E731
        monkeypatch.setitem(MODELS._items, model_name, factory)
    passes = probe_run(name, models=["probe_modes_a", "probe_modes_b"])
    assert not wrong_modes(passes, set())
    evaluated = set().union(*(k[3] for k in passes if not k[0] and not k[1]))
    assert "engine/personal_eval.py:correct_on" in evaluated
    assert any(k[0] and k[1] for k in passes)


def test_flea_extracts_in_train_mode_only_when_asked():
    """`extract_bn_mode=train` (BatchNorm's batch statistics, a documented option) is the one
    no-grad pass in train mode, and only FLea's extraction makes it."""
    passes = probe_run("flea", {"extract_bn_mode": "train"})
    assert {k[2] for k in wrong_modes(passes, set())} == {"strategies/flea.py:_extract"}


# ----------------------------------------------------------------- exact numbers in eval mode
def trained_probe(dropout: float) -> tuple[BlockModel, torch.Tensor, torch.Tensor]:
    """The probe model with BatchNorm running statistics away from (0, 1), in train mode,
    and 64 digits inputs with their labels."""
    data = load_dataset({"name": "digits"})
    x, y = data.prepare(data.x_train[:64]), data.y_train[:64]
    model = probe_model(dropout)
    with torch.no_grad():
        model.blocks["conv1"][1].running_mean.uniform_(-1, 1)
        model.blocks["conv1"][1].running_var.uniform_(0.5, 2)
    return model.train(), x, y


def buffers(model: nn.Module) -> list[torch.Tensor]:
    return [b.detach().clone() for b in model.buffers()]


def eval_mode_reference(model: nn.Module, fn):
    """`fn(model)` computed in eval mode on a copy of the model, by hand."""
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        return fn(reference)


def assert_untouched(model: nn.Module, before: list[torch.Tensor], training: bool) -> None:
    assert model.training is training
    assert all(m.training is training for m in model.modules())
    for a, b in zip(before, buffers(model), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("training", [True, False])
def test_evaluation_is_the_eval_mode_loss_and_moves_no_batchnorm_statistic(training):
    model, x, y = trained_probe(dropout=0.9)
    model.train(training)
    data = load_dataset({"name": "digits"})
    raw, labels = data.x_train[:64], data.y_train[:64]
    before = buffers(model)
    result = evaluate_batches(model, data, [(raw[:40], labels[:40]), (raw[40:], labels[40:])])
    assert_untouched(model, before, training)
    logits = eval_mode_reference(model, lambda m: m(x))
    assert result["loss"] == pytest.approx(float(F.cross_entropy(logits, y)), abs=1e-6)
    hits = (logits.argmax(1) == y).float().mean()
    assert result["accuracy"] == pytest.approx(100 * float(hits), abs=1e-9)
    with torch.no_grad():
        train_loss = float(F.cross_entropy(model.train()(x), y))
    assert abs(train_loss - result["loss"]) > 1e-3  # the modes differ on this model


@pytest.mark.parametrize("training", [True, False])
def test_personal_evaluation_runs_in_eval_mode_and_restores_the_mode(training):
    model, _, _ = trained_probe(dropout=0.9)
    model.train(training)
    data = load_dataset({"name": "digits"})
    data.x_test, data.y_test = data.x_train[:64], data.y_train[:64]
    before = buffers(model)
    hits = correct_on(model, data, torch.arange(64), batch_size=25)
    assert_untouched(model, before, training)
    logits = eval_mode_reference(model, lambda m: m(data.prepare(data.x_train[:64])))
    assert torch.equal(hits, logits.argmax(1) == data.y_train[:64])


def flea_activations(model: BlockModel, x: torch.Tensor) -> torch.Tensor:
    flea = FLea()
    flea.split = 1
    out = flea._extract(model, x)
    model.train()  # FLea leaves the worker to the next local step, which sets train mode
    return out


EXTRACTORS = {
    "prototypes (FedProto, FedGH, ReBaFL)": (
        lambda m, x, y: feature_prototypes(m, x, y, 10)[0],
        lambda m, x, y: class_means(m.features(x), y, 10)[0],
    ),
    "per-label logits (FD)": (
        lambda m, x, y: label_logits(m, x, y, 10)[0],
        lambda m, x, y: class_means(m(x), y, 10)[0],
    ),
    "features (one-shot heads)": (
        lambda m, x, y: extract(m, x),
        lambda m, x, y: m.features(x).flatten(1),
    ),
    "activations (FLea)": (
        lambda m, x, y: flea_activations(m, x),
        lambda m, x, y: m.encode(x, 1),
    ),
    "nearest-prototype accuracy (FedProto)": (
        lambda m, x, y: torch.tensor(prototype_accuracy(m, x, y, *prototypes())),
        lambda m, x, y: 100 * (nearest_prototype(m.features(x), *prototypes()) == y).float().mean(),
    ),
}


@cache
def prototypes() -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed prototypes for the nearest-prototype accuracy: the class means of the probe's
    eval-mode features."""
    model, x, y = trained_probe(dropout=0.9)
    means, counts = eval_mode_reference(model, lambda m: class_means(m.features(x), y, 10))
    return means, counts > 0


@pytest.mark.parametrize("what", sorted(EXTRACTORS))
def test_shared_values_are_computed_in_eval_mode_and_the_mode_is_restored(what):
    shared, by_hand = EXTRACTORS[what]
    model, x, y = trained_probe(dropout=0.9)
    before = buffers(model)
    torch.manual_seed(1)
    got = shared(model, x, y)
    assert_untouched(model, before, True)
    expected = eval_mode_reference(model, lambda m: by_hand(m, x, y))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    with torch.no_grad():
        in_train_mode = by_hand(model, x, y)
    assert not torch.allclose(in_train_mode, expected, atol=1e-3)  # a wrong mode would show
