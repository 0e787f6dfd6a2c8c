"""SCAFFOLD (option II) and FedDyn: their update equations checked exactly on a tiny model,
SCAFFOLD without control updates equals FedAvg, client state kept and checkpointed, and a
small real-data comparison on digits with a pathological 2-class split."""

from collections.abc import Iterable, Iterator

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch import nn

from fedshare import simulate
from fedshare.config import SimulationConfig
from fedshare.config.api import init_model
from fedshare.config.defaults import DATASET_TRAIN, resolve_train
from fedshare.errors import FedshareError
from fedshare.paper.compare import entries, method_overrides
from fedshare.run import config_dir, group_params
from fedshare.strategies import FedAvg, FedDyn, Scaffold, make_strategy
from fedshare.strategies.base import SetupContext, Update
from helpers import (
    DIGITS_TRAIN,
    FULL_BATCH,
    client_data,
    digits_federation,
    flat,
    full_gradient,
    tiny_run,
    without_wall_time,
)

BYTES = {"bytes_up", "bytes_down", "bytes_shared", "bytes_shared_round"}
PLAIN_SGD = {**DIGITS_TRAIN, "momentum": 0.0}
"""Option II's (x − y)/(K·η) assumes plain SGD (SCAFFOLD refuses momentum): with momentum 0.9
the local steps are about 10× longer than K·η and SCAFFOLD diverged (lr 0.05, Dir(0.1))."""


def no_bytes(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in BYTES} for r in without_wall_time(records)]


def param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


# ---------------------------------------------------------------- exact math on a tiny model
def clipped(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """torch's `clip_grad_norm_` on one flat gradient (0: off)."""
    return g * min(1.0, max_norm / (float(g.norm()) + 1e-6)) if max_norm else g


def scaffold_by_hand(
    fed,
    start,
    cohorts,
    lr_global,
    momentum=0.0,
    after_step=False,
    steps=3,
    clip_norm=0.0,
    by_fraction=True,
):
    """Option II (Karimireddy et al. 2020, Algorithm 1 with option II of Eq. 4) with the
    server's c += Σ_S (n_i/n)·Δc_i (`by_fraction`; else the cohort's n_i-weighted mean of
    Δc_i); local SGD on clip(g) − c_i + c, or (after_step) SGD with momentum on clip(g)
    followed by y −= η(c − c_i), as ReBaFL's code; K = `steps` full-batch steps."""
    eta, n = 0.1, sum(fed.client_sizes)
    data = client_data(fed)
    x, c = flat(start), torch.zeros(650)
    c_i = [torch.zeros(650) for _ in data]
    for cohort in cohorts:
        ys, dcs, n_s = [], [], 0
        for k in cohort:
            (xb, yb), n_k = data[k]
            y, buf = x.clone(), None
            for _ in range(steps):
                g = clipped(full_gradient(y, xb, yb), clip_norm)
                if not after_step:
                    g = g - c_i[k] + c
                buf = g if buf is None else momentum * buf + g
                y = y - eta * buf
                if after_step:
                    y = y - eta * (c - c_i[k])
            new = c_i[k] - c + (x - y) / (steps * eta)
            ys.append(y * n_k)
            dcs.append((new - c_i[k]) * n_k)
            n_s += n_k
            c_i[k] = new
        x = x + lr_global * (sum(ys) / n_s - x)
        c = c + sum(dcs) / (n if by_fraction else n_s)
    return x, c


@pytest.mark.parametrize(
    ("params", "train"),
    [
        ({"lr_global": 0.5}, {}),
        ({"lr_global": 0.5}, {"batched": 2}),
        ({"clip_norm": 0.5, "scale_c_by_fraction": False}, {"local_epochs": 1}),
        ({"clip_norm": 0.5, "scale_c_by_fraction": False}, {"local_epochs": 1, "batched": 2}),
    ],
    ids=["serial", "batched", "clipped-cohort-mean-one-step", "clipped-batched"],
)
def test_scaffold_option_ii_equations_exactly(params, train):
    """x and c after three rounds equal option II written out by hand, serial and batched;
    also with the gradient clipped (ReBaFL's setting), c moved by the cohort's mean Δc_i, and
    K = 1 local step (the control update must not need more)."""
    train = {**FULL_BATCH, **train}
    fed, start, result, cohorts = tiny_run(Scaffold(**params), train)
    x, c = scaffold_by_hand(
        fed,
        start,
        cohorts,
        params.get("lr_global", 1.0),
        steps=train["local_epochs"],
        clip_norm=params.get("clip_norm", 0.0),
        by_fraction=params.get("scale_c_by_fraction", True),
    )
    got = result.strategy
    assert torch.allclose(flat(got.model.parameters()).detach(), x, atol=1e-5)
    assert torch.allclose(got.c, c, atol=1e-4)
    assert c.norm() > 0.1  # the controls moved
    if params.get("clip_norm"):  # the clip acted: the first raw gradient is longer
        assert full_gradient(flat(start), *client_data(fed)[cohorts[0][0]][0]).norm() > 1.0


def test_scaffold_without_control_updates_keeps_c_zero_and_is_fedavg():
    """`update_controls=false`: no client or server control moves, the rounds are FedAvg's
    (the paper's SCAFFOLD with c = c_i = 0) bit for bit: with lr_global = 1 the server takes
    the mean itself, not x + 1·(ȳ − x)."""
    fed, start, result, cohorts = tiny_run(Scaffold(update_controls=False))
    got = result.strategy
    assert torch.equal(got.c, torch.zeros_like(got.c))
    x, _ = scaffold_by_hand(fed, start, cohorts, 1.0)
    fedavg_x = flat(tiny_run(FedAvg())[2].strategy.model.parameters()).detach()
    assert torch.equal(flat(got.model.parameters()).detach(), fedavg_x)
    assert not torch.allclose(fedavg_x, x, atol=1e-4)  # SCAFFOLD's controls would differ


def test_scaffold_after_step_correction_is_rebafls_code_exactly():
    """ReBaFL's form with momentum 0.5: the optimizer steps on the raw gradient, then
    y −= η(c − c_i); option II's c_i⁺ as before."""
    train = {**FULL_BATCH, "momentum": 0.5}
    fed, start, result, cohorts = tiny_run(Scaffold(correction="after_step"), train)
    x, c = scaffold_by_hand(fed, start, cohorts, 1.0, momentum=0.5, after_step=True)
    got = result.strategy
    assert torch.allclose(flat(got.model.parameters()).detach(), x, atol=1e-5)
    assert torch.allclose(got.c, c, atol=1e-4)
    assert c.norm() > 0.1  # the correction acted


def test_scaffold_after_step_equals_the_gradient_form_for_plain_sgd():
    a = tiny_run(Scaffold())[2].strategy
    b = tiny_run(Scaffold(correction="after_step"))[2].strategy
    assert torch.allclose(flat(a.model.parameters()), flat(b.model.parameters()), atol=1e-5)


@pytest.mark.parametrize(
    ("params", "train", "refused"),
    [
        ({}, {"optimizer": "adam", "lr": 1e-3}, "train.optimizer=adam"),
        ({}, {"momentum": 0.9}, "train.momentum=0.9"),
        ({"correction": "after_step"}, {"optimizer": "adam", "lr": 1e-3}, "train.optimizer=adam"),
    ],
    ids=["adam", "momentum", "after-step-adam"],
)
def test_scaffold_refuses_an_optimizer_option_ii_is_not_defined_for(params, train, refused):
    with pytest.raises(FedshareError, match=f"needs train.optimizer=sgd.*{refused}"):
        simulate(Scaffold(**params), digits_federation("iid", 2), "mlp", rounds=1, train=train)
    with pytest.raises(
        FedshareError, match=r"strategy\.correction='momentum' is not valid: .* one of"
    ):
        Scaffold(correction="momentum")


@pytest.mark.parametrize("dataset", sorted(DATASET_TRAIN))
def test_scaffold_trains_with_plain_sgd_by_default_on_every_dataset(dataset):
    train = resolve_train({}, Scaffold, dataset)
    assert (train.optimizer, train.momentum, train.lr) == ("sgd", 0.0, 0.05)


@pytest.mark.parametrize("table", ["rebafl_table1", "rebafl_table3"])
def test_rebafl_tables_name_the_forms_their_momentum_needs(table):
    """The ReBaFL presets train with SGD momentum 0.5 (ReBaFL's code): the tables' SCAFFOLD
    names the code's after-step correction, which SCAFFOLD accepts before round 0, and its
    FedDyn the code's α = 1e-4; without the named form SCAFFOLD refuses the preset."""
    preset = next(e.preset for e in entries(table) if e.method == "scaffold")
    fed = digits_federation("iid", 2)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for method in ("scaffold", "feddyn"):
            overrides = method_overrides(table, method)
            cfg = compose("config", overrides=[f"experiment={preset}", *overrides])
            name, params = group_params(cfg.strategy)
            strategy = make_strategy(name, params)
            train = resolve_train(OmegaConf.to_container(cfg.train), strategy, "fmnist")
            assert (train.optimizer, train.momentum) == ("sgd", 0.5)
            context = SetupContext(
                init_model("mlp", fed, 0), fed, SimulationConfig(train=train), torch.device("cpu")
            )
            strategy.setup(context)  # accepted
            if method == "feddyn":
                assert strategy.alpha == 1e-4
                continue
            assert strategy.correction == "after_step"
            plain = make_strategy(name, {**params, "correction": "gradient"})
            with pytest.raises(FedshareError, match=r"train\.momentum=0\.5"):
                plain.setup(context)


@pytest.mark.parametrize("batched", [0, 2], ids=["serial", "batched"])
@pytest.mark.parametrize("mean", ["samples", "plain"])
def test_feddyn_equations_exactly(mean, batched):
    """θ and h after three rounds equal FedDyn's Algorithm 1 (Acar et al. 2021) written out by
    hand: local steps on ∇L_k − ∇L_k(θ_k^{t−1}) + α(θ − θ^{t−1}), the state update, h and the
    server model, with the cohort's mean weighted by samples or plain."""
    alpha = 0.1
    fed, start, result, cohorts = tiny_run(
        FedDyn(alpha=alpha, mean=mean), {**FULL_BATCH, "batched": batched}
    )
    eta, steps, m = 0.1, 3, 5
    data = client_data(fed)
    theta, h = flat(start), torch.zeros(650)
    grads = [torch.zeros(650) for _ in data]
    for cohort in cohorts:
        locals_, weights, drift = [], [], torch.zeros(650)
        for k in cohort:
            (xb, yb), n_k = data[k]
            t = theta.clone()
            for _ in range(steps):
                t = t - eta * (full_gradient(t, xb, yb) - grads[k] + alpha * (t - theta))
            grads[k] = grads[k] - alpha * (t - theta)
            weight = n_k if mean == "samples" else 1
            locals_.append(t * weight)
            weights.append(weight)
            drift += t - theta
        h = h - alpha / m * drift
        theta = sum(locals_) / sum(weights) - h / alpha
    got = result.strategy
    assert torch.allclose(flat(got.model.parameters()).detach(), theta, atol=1e-5)
    assert torch.allclose(got.h, h, atol=1e-7)


def test_feddyn_defaults_to_alpha_1e_2_and_refuses_an_unknown_mean():
    assert FedDyn().alpha == 1e-2
    with pytest.raises(FedshareError, match=r"strategy\.mean='median' is not valid: .* one of"):
        FedDyn(mean="median")


def test_feddyn_refuses_alpha_zero():
    """α = 0 would divide h by zero (θ = mean − h/α); FedDyn without its terms is not a case
    the method defines, so the FedAvg reduction is checked for SCAFFOLD only."""
    with pytest.raises(Exception, match="alpha"):
        FedDyn(alpha=0.0)


# ---------------------------------------------------------------- FedAvg reduction, traffic
def test_scaffold_without_control_updates_is_fedavg_exactly_and_doubles_traffic():
    fed = digits_federation("iid", 10)
    common = {"rounds": 3, "train": PLAIN_SGD, "clients": {"fraction": 0.5}}
    avg = simulate(FedAvg(), fed, "cnn_small", **common)
    off = simulate(Scaffold(update_controls=False), fed, "cnn_small", **common)
    assert no_bytes(off.history) == no_bytes(avg.history)
    model_bytes = param_bytes(avg.strategy.model)  # cnn_small has no buffers
    assert avg.summary["bytes_down"] == 3 * 5 * model_bytes
    # c goes down and Δc up as payloads beside the weights: twice FedAvg's traffic
    assert off.summary["bytes_down"] == 2 * avg.summary["bytes_down"]
    assert off.summary["bytes_up"] == 2 * avg.summary["bytes_up"]
    assert off.summary["bytes_shared"] == avg.summary["bytes_down"] + avg.summary["bytes_up"]


# ---------------------------------------------------------------- client state, resume
def run(strategy, tmp=None, rounds=4, resume=False):
    return simulate(
        strategy,
        digits_federation("iid", 10),
        "cnn_small",
        rounds=rounds,
        train=PLAIN_SGD,
        clients={"fraction": 0.2},
        run_dir=tmp,
        resume=resume,
    )


@pytest.mark.parametrize("make", [Scaffold, lambda: FedDyn(alpha=0.01)], ids=["scaffold", "feddyn"])
def test_client_state_is_kept_checkpointed_and_resumed_exactly(tmp_path, make):
    strategy = make()
    seen: set[int] = set()
    own_aggregate = strategy.aggregate

    def recording(updates: Iterable[Update], round_idx: int) -> None:
        def noting() -> Iterator[Update]:
            for update in updates:
                seen.add(update.client_id)
                yield update

        own_aggregate(noting(), round_idx)

    strategy.aggregate = recording
    full = run(strategy, tmp_path / "full")
    assert 2 <= len(seen) < 10  # some clients never took part and hold no state
    expected = len(seen) * param_bytes(full.strategy.model)
    assert full.summary["client_state_bytes"] == expected
    run(make(), tmp_path / "cut", rounds=2)
    resumed = run(make(), tmp_path / "cut", rounds=4, resume=True)
    assert without_wall_time(resumed.history) == without_wall_time(full.history)
    assert resumed.summary["client_state_bytes"] == expected
    key = "c" if isinstance(strategy, Scaffold) else "h"
    assert torch.equal(getattr(resumed.strategy, key), getattr(full.strategy, key))


# ---------------------------------------------------------------- small real-data check
PATHOLOGICAL = {"name": "pathological", "classes_per_client": 2, "per_class": 80}


def final_accuracy(strategy_factory, seed: int) -> float:
    result = simulate(
        strategy_factory(),
        digits_federation(PATHOLOGICAL, 10, seed=seed),
        "cnn_small",
        rounds=20,
        seed=seed,
        train=PLAIN_SGD,
        clients={"fraction": 0.5},
    )
    return result.history[-1]["accuracy"]


def test_scaffold_and_feddyn_beat_fedavg_on_a_pathological_split():
    """Digits, 10 clients with 2 classes each (160 samples), half of them a round, 20 rounds,
    SGD lr 0.05 without momentum. Measured over seeds 0-2 (final accuracy, %): FedAvg 45.1,
    SCAFFOLD 54.5, FedDyn (α = 1e-2, the default) 81.5."""
    seeds = range(3)
    mean = {
        name: sum(final_accuracy(factory, s) for s in seeds) / 3
        for name, factory in {"fedavg": FedAvg, "scaffold": Scaffold, "feddyn": FedDyn}.items()
    }
    assert mean["scaffold"] >= mean["fedavg"] + 3, mean
    assert mean["feddyn"] >= mean["fedavg"] + 20, mean
