"""`train.batched`: several clients trained as one vmapped step equal the serial run up to
floating-point rounding (same batches from the same streams); other strategies say so and
run serially (fedshare.engine.batched)."""

import warnings

import pytest
import torch

from conftest import load_real
from fedshare import simulate
from fedshare.config import TrainConfig
from fedshare.config.api import init_model
from fedshare.data import federate
from fedshare.engine.batched import StackedOptimizer, StackedRun, clip_rows
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.optim import make_optimizer
from fedshare.errors import FedshareError
from fedshare.strategies import make_strategy
from fedshare.strategies._local import cross_entropy_loss, train_local
from fedshare.strategies.base import Message
from helpers import without_wall_time

SGD = {
    "local_epochs": 2,
    "batch_size": 16,
    "optimizer": "sgd",
    "lr": 0.05,
    "momentum": 0.9,
    "optimizer_reset_each_step": False,
    "lr_schedule": "constant",
}
"""In full: `simulate` fills unset keys from the strategy's training defaults, as the command
line does (FLea's would be a new Adam each step with a linear decay)."""
ADAM = {"local_epochs": 2, "batch_size": 16, "optimizer": "adam", "lr": 1e-3}
MODELS = {"cnn_small": {}, "lenet_fmnist": {}}


@pytest.fixture(params=[1, pytest.param(2, marks=pytest.mark.slow)], ids=["1-epoch", "2-epochs"])
def sgd(request: pytest.FixtureRequest) -> dict:
    """`SGD` with one local epoch a round (default tier) or its two (slow): the settings of
    each strategy's own batched-vs-serial check. Two epochs a round, batched against serial,
    stay in the default tier through FedAvg's and FedProx's runs
    (`test_batched_runs_match_serial_runs`, `test_batched_clients_honour_amp`)."""
    return {**SGD, "local_epochs": request.param}


@pytest.fixture(scope="module")
def fed():
    mnist = load_real("mnist", train_subset=300, test_subset=100)
    return federate(mnist, {"name": "dirichlet", "alpha": 0.5}, 6, seed=0)  # unequal sizes


@pytest.fixture(scope="module")
def fedavg_loss(fed):
    """FedAvg's final training loss (batched, `cnn_small`) under `train`: the run each
    strategy's own term must move away from, computed once per training setting."""
    losses: dict[tuple, float] = {}

    def loss(train: dict) -> float:
        key = tuple(sorted(train.items()))
        if key not in losses:
            losses[key] = run(fed, "fedavg", "cnn_small", train, 5).history[-1]["train_loss"]
        return losses[key]

    return loss


def run(fed, strategy: str, model: str, train: dict, batched: int, **params: object):
    net = init_model(model, fed, 0, MODELS[model])
    return simulate(
        make_strategy(strategy, params),
        fed,
        net,
        rounds=2,
        train={**train, "batched": batched},
        clients={"per_round": 5},
        eval={"every": 2},
        memory_format="contiguous",  # the stacked weights' layout; channels-last BN rounds apart
    )


def assert_same_run(a, b, atol: float = 2e-5) -> None:
    states = a.strategy.model.state_dict().items(), b.strategy.model.state_dict().items()
    pairs = zip(*states, strict=True)
    for (name, x), (_, y) in pairs:
        if x.is_floating_point():
            torch.testing.assert_close(
                x, y, rtol=1e-4, atol=atol, msg=lambda m, n=name: f"{n}: {m}"
            )
    assert a.summary["bytes_up"] == b.summary["bytes_up"]
    assert a.history[-1]["train_loss"] == pytest.approx(b.history[-1]["train_loss"], rel=1e-3)


def test_stacked_clients_take_the_serial_steps():
    """Each stacked client ends where serial training ends, up to rounding: clients of
    different sizes (their steps grouped by batch shape, finished ones dropped) and a BN model
    (statistics per client)."""
    torch.manual_seed(0)
    mnist = load_real("mnist", train_subset=300, test_subset=100)
    fed = federate(mnist, {"name": "dirichlet", "alpha": 0.5}, 6, seed=0)
    train = TrainConfig(batch_size=16, local_epochs=1, lr=0.05, momentum=0.9)
    for options in ({}, {"batchnorm": True}):
        model = init_model("cnn_small", fed, 0, options)
        flat = FlatState(model)
        start = flat.flatten(model)
        clients = [
            Client(k, 0, fed.client_indices[k], fed.dataset, model, train, 0) for k in range(5)
        ]
        serial = []
        for client in clients:
            flat.load_(model, start)
            train_local(client, model)
            serial.append(flat.flatten(model))
        flat.load_(model, start)
        stacked = StackedRun(clients, model, cross_entropy_loss)
        stacked.run()
        for k, expected in enumerate(serial):
            trained = flat.flatten(stacked.load_client(k))
            torch.testing.assert_close(trained, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("strategy", "model", "train", "params"),
    [
        ("fedavg", "cnn_small", SGD, {}),
        # slow: Adam's rows (test_stacked_optimizer_is_torchs_per_row) and FedProx's plain
        # norm batched (test_fedprox_rounds_equal_the_proximal_sgd_written_out) are pinned below
        pytest.param("fedavg", "lenet_fmnist", ADAM, {}, marks=pytest.mark.slow),
        ("fedprox", "cnn_small", ADAM, {"mu": 0.1}),
        pytest.param(
            "fedprox", "lenet_fmnist", SGD, {"mu": 0.1, "norm": "plain"}, marks=pytest.mark.slow
        ),
    ],
    ids=["fedavg-cnn-sgd", "fedavg-lenet-adam", "fedprox-adam", "fedprox-plain"],
)
def test_batched_runs_match_serial_runs(fed, strategy, model, train, params):
    """Through the engine, two rounds. Rounding differs between vmapped and serial kernels, and
    non-smooth points (max-pool ties, ReLU at 0) or Adam's division by a tiny gradient can turn
    it into a jump of a fraction of lr in a few weights (measured up to 6e-4), so this compares
    at 2·lr; the steps themselves are checked at rounding above and below. (A BN model is left
    to the test above: its running statistics magnify such a jump tenfold.)"""
    atol = 2 * train["lr"] if train.get("optimizer") == "adam" else 2e-3
    serial = run(fed, strategy, model, train, 0, **params)
    assert_same_run(run(fed, strategy, model, train, 5, **params), serial, atol)
    assert_same_run(run(fed, strategy, model, train, 2, **params), serial, atol)  # chunks 2, 2, 1


def test_batched_clients_honour_amp(fed, fedavg_loss):
    """`train.amp` runs the stacked losses under bf16 autocast too: the run moves away from
    the float32 batched run as the serial amp run does, and stays close to it."""
    amp = run(fed, "fedavg", "cnn_small", {**SGD, "amp": True}, 5)
    serial_amp = run(fed, "fedavg", "cnn_small", {**SGD, "amp": True}, 0)
    loss = [fedavg_loss(SGD), *(r.history[-1]["train_loss"] for r in (amp, serial_amp))]
    assert loss[1] != loss[0]
    assert loss[1] == pytest.approx(loss[2], rel=0.05)


@pytest.mark.parametrize(
    ("strategy", "params"),
    [
        ("fedlc", {"tau": 1.0}),
        ("fedrs", {"alpha": 0.5}),
        ("bsm_fedavg", {}),
        ("fedntd", {"beta": 1.0}),
        ("fedmix", {"mean_size": 5}),
        ("fedmix", {"mean_size": 5, "beta_per_sample": True, "local_ce_weight": 0.5}),
        ("feddata", {"share_fraction": 0.1}),
        # generator_steps=0: the generator stays as initialised, so the client step is compared
        # alone (server-side Adam on the generator would amplify round 1's rounding)
        ("fedgen_input", {"warmup_rounds": 1, "generator_steps": 0}),
        ("fedgen", {"generator_steps": 0}),
    ],
    ids=[
        "fedlc",
        "fedrs",
        "bsm_fedavg",
        "fedntd",
        "fedmix",
        "fedmix-local-ce",
        "feddata",
        "fedgen_input",
        "fedgen",
    ],
)
def test_strategies_with_their_own_local_loss_run_batched(fed, fedavg_loss, sgd, strategy, params):
    """Losses calibrated by each client's class counts (FedLC, FedRS, BSM-FedAvg: one row of
    `client_inputs` per client), distillation from the frozen global model (FedNTD), batches
    mixed with the shared means (FedMix: each client's own stream of mixed batches), local
    data joined with the shared pool (FedData) and samples of the received generator drawn
    from each client's own stream (FedGen's latents from round 1, the input-space form after
    its one-round warm-up): equal to the serial
    run, and not FedAvg's (the loss or data is applied). Chunks of 2, 2 and 1 clients: a
    chunk of one is a stacked step too."""
    serial = run(fed, strategy, "cnn_small", sgd, 0, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # batched, not the serial fallback's warning
        batched = run(fed, strategy, "cnn_small", sgd, 2, **params)
    assert_same_run(batched, serial, 2e-3)
    assert fedavg_loss(sgd) != pytest.approx(batched.history[-1]["train_loss"])


def test_fedbabu_runs_batched_with_its_head_frozen(fed, sgd):
    """FedBABU stacks only the body: equal to the serial run, and the head stays initial (up
    to the rounding of averaging equal heads)."""
    serial = run(fed, "fedbabu", "cnn_small", sgd, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = run(fed, "fedbabu", "cnn_small", sgd, 5)
    assert_same_run(batched, serial, 2e-3)
    initial = init_model("cnn_small", fed, 0, {}).head.state_dict()
    for name, value in batched.strategy.model.head.state_dict().items():
        torch.testing.assert_close(value, initial[name], rtol=0, atol=1e-6, msg=name)


def test_fedbn_rows_start_from_each_clients_own_bn(fed, sgd):
    """FedBN batched: each row starts from its client's own BN state (`starts`), so three
    rounds (clients return with the BN they kept) equal the serial run: the global model,
    and the personal models built from the BN states the clients keep; and the BN is local
    (not FedAvg's run)."""

    def fedbn(strategy: str, batched: int):
        net = init_model("cnn_small", fed, 0, {"batchnorm": True})
        return simulate(
            make_strategy(strategy, {}),
            fed,
            net,
            rounds=3,
            train={**sgd, "batched": batched},
            clients={"per_round": 5},
            eval={"every": 1, "personal": True},
            memory_format="contiguous",
        )

    serial = fedbn("fedbn", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = fedbn("fedbn", 5)
    assert_same_run(batched, serial, 2e-3)
    for a, b in zip(batched.history, serial.history, strict=True):
        assert a["personal_accuracy"] == pytest.approx(b["personal_accuracy"], abs=1.5)
    fedavg = fedbn("fedavg", 5)
    assert [r["personal_accuracy"] for r in fedavg.history] != pytest.approx(
        [r["personal_accuracy"] for r in batched.history], abs=1.5
    )


def test_feddecorr_batched_step_follows_its_serial_step(fed):
    """FedDecorr batched, checked one local epoch at a time: it divides each feature by
    sqrt(var + 1e-8), so a dead ReLU feature multiplies rounding by up to 1e4 and whole runs
    drift apart chaotically (2 rounds: 2e-2 in one head weight). One epoch of its loss ends
    ≤ 5.2e-4 apart batched vs serial here, where the same loss with eps = 1e-2, or plain CE,
    ends ≤ 1e-7 apart (measured)."""
    train = TrainConfig(batch_size=16, local_epochs=1, lr=0.05, momentum=0.9)
    model = init_model("cnn_small", fed, 0, {})
    loss = make_strategy("feddecorr", {"beta": 0.5}).local_loss(model, Message())
    flat = FlatState(model)
    start = flat.flatten(model)
    clients = [Client(k, 0, fed.client_indices[k], fed.dataset, model, train, 0) for k in range(5)]
    serial = []
    for client in clients:
        flat.load_(model, start)
        train_local(client, model, loss)
        serial.append(flat.flatten(model))
    flat.load_(model, start)
    stacked = StackedRun(clients, model, loss)
    stacked.run()
    for k, expected in enumerate(serial):
        assert (flat.flatten(stacked.load_client(k)) - expected).abs().max() < 2e-3
        assert (expected - start).abs().max() > 2e-2  # it trained


@pytest.mark.parametrize(
    ("strategy", "params"),
    [
        ("scaffold", {}),
        # slow: clipped rows batched are pinned by test_scaffold_option_ii_equations_exactly
        pytest.param(
            "scaffold", {"clip_norm": 0.5, "scale_c_by_fraction": False}, marks=pytest.mark.slow
        ),
        ("feddyn", {"alpha": 0.1}),
        ("moon", {"mu": 1.0}),
        ("moon", {"mu": 1.0, "projection_dim": 8}),
        ("rebafl", {"mu": 0.5, "eps": 0.1}),
        ("rebafl", {"mu": 0.5, "eps": 0.0, "refresh_own_prototypes": False, "lam": 0.5}),
        ("dsfl", {"keep": 0.3, "error_feedback": True}),
    ],
    ids=[
        "scaffold",
        "scaffold-clipped",
        "feddyn",
        "moon",
        "moon-projection",
        "rebafl",
        "rebafl-bsm",
        "dsfl-error-feedback",
    ],
)
def test_strategies_with_per_client_state_run_batched(fed, fedavg_loss, sgd, strategy, params):
    """SCAFFOLD (each row clipped on its own norm, corrected by its own c − c_i, K counted per
    client), FedDyn (each row's own ∇L_k), MOON (each client's previous model gives its
    negatives), DSFL (each client's top-K of its own update plus the residual it kept) and
    ReBaFL (each client's prior, prototypes and augmentation weight, from the
    second round on with the prototypes the first uploaded): equal to the serial run over two
    rounds, so the second round starts from the states the first left; and the term acts (not
    FedAvg)."""
    train = {**sgd, "momentum": 0.0}
    serial = run(fed, strategy, "cnn_small", train, 0, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = run(fed, strategy, "cnn_small", train, 2, **params)  # chunks 2, 2, 1
    assert_same_run(batched, serial, 2e-3)
    assert fedavg_loss(train) != pytest.approx(batched.history[-1]["train_loss"])


@pytest.mark.parametrize(
    "params",
    [{}, {"kd_input": "mixed", "beta_per_sample": True, "local_ce_weight": 0.5}],
    ids=["flea", "flea-mixed-kd"],
)
def test_flea_runs_batched(fed, sgd, params):
    """FLea: round 0 is the warm-up, round 1 mixes with the shared buffer; each client's buffer
    batches and Beta draws come from its own streams, dCor is summed per client as an
    auxiliary output of the vectorised loss. Equal to the serial run, dCor included."""
    serial = run(fed, "flea", "lenet_fmnist", sgd, 0, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = run(fed, "flea", "lenet_fmnist", sgd, 5, **params)
    assert_same_run(batched, serial, 2e-3)
    assert batched.history[-1]["train_dcor"] == pytest.approx(
        serial.history[-1]["train_dcor"], rel=1e-4
    )
    assert batched.history[-1]["buffer_size"] > 0  # the second round mixed with the buffer


def test_clip_rows_is_torchs_clip_per_row():
    torch.manual_seed(0)
    grads = {"a": torch.randn(3, 4, 5), "b": torch.randn(3, 7)}
    grads["a"][2] *= 1e-2  # row 2 under the norm: left as it is
    grads["b"][2] *= 1e-2
    clipped = clip_rows(grads, 1.0)
    for i in range(3):
        row = [grads["a"][i].clone(), grads["b"][i].clone()]
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in row]
        for p, g in zip(params, row, strict=True):
            p.grad = g
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        torch.testing.assert_close(clipped["a"][i], params[0].grad)
        torch.testing.assert_close(clipped["b"][i], params[1].grad)
    torch.testing.assert_close(clipped["a"][2], grads["a"][2])
    assert clipped["a"][0].norm() < grads["a"][0].norm()


def test_a_strategy_without_a_batched_step_says_so_and_runs_serially(fed, sgd):
    with pytest.warns(UserWarning, match="fedbr's 'train' step is not plain local training"):
        batched = run(fed, "fedbr", "cnn_small", sgd, 5)
    assert_same_run(batched, run(fed, "fedbr", "cnn_small", sgd, 0))


def test_upload_only_phases_run_serially_without_the_warning(fed):
    """Where clients only upload and the server trains (Centralized, the XorMixFL family),
    there is no local training to batch and nothing to warn about."""
    assert not make_strategy("xormixfl", {}).phases()[0].trains
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = run(fed, "centralized", "cnn_small", SGD, 5)
    serial = run(fed, "centralized", "cnn_small", SGD, 0)
    assert without_wall_time(batched.history) == without_wall_time(serial.history)


def test_a_negative_chunk_is_refused(fed):
    with pytest.raises(FedshareError, match=r"train\.batched=-1 is not valid"):
        run(fed, "fedavg", "cnn_small", SGD, -1)


@pytest.mark.parametrize(
    "train",
    [
        TrainConfig(lr=0.05, momentum=0.9, weight_decay=1e-2),
        TrainConfig(optimizer="adam", lr=1e-2, weight_decay=1e-2),
        TrainConfig(optimizer="adam", lr=1e-2, optimizer_reset_each_step=True),
    ],
    ids=["sgd-momentum-wd", "adam-wd", "adam-reset"],
)
def test_stacked_optimizer_is_torchs_per_row(train):
    """Row 1 steps every time, row 0 every other time: each follows torch's optimizer."""
    torch.manual_seed(0)
    start, grads = torch.randn(2, 30), torch.randn(6, 2, 30)
    stacked = {"w": start.clone().requires_grad_()}
    stepper = StackedOptimizer(train, train.lr)
    rows = [start[i].clone().requires_grad_() for i in range(2)]
    torch_opts = [make_optimizer([w], train, train.lr) for w in rows]
    for k, g in enumerate(grads):
        moving = [0, 1] if k % 2 == 0 else [1]
        stacked["w"].grad = g.clone()
        stepper.step(stacked, slice(None) if k % 2 == 0 else torch.tensor(moving))
        for i in moving:
            rows[i].grad = g[i].clone()
            torch_opts[i].step()
    for i in range(2):
        torch.testing.assert_close(stacked["w"][i], rows[i], rtol=1e-6, atol=1e-6)
