"""The server side against Flower's own strategies (`flwr.server.strategy`): the sample-weighted
mean against `aggregate`, FedAvg against `FedAvg.aggregate_fit`, and FedAdagrad, FedAdam, FedYogi
and FedAvgM over several rounds of the same client models. Flower starts v at 0 (fedshare's
`v0=0`) and FedAdam scales η by Adam's bias correction √(1 − β2^(t+1))/(1 − β1^(t+1)), which
Reddi et al.'s Alg. 2 has not: fedshare's η is set to that value each round to compare the rest."""

import numpy as np
import pytest
import torch
from torch import nn

from fedshare.strategies import FedAdagrad, FedAdam, FedAvg, FedAvgM, FedYogi
from fedshare.strategies.base import SetupContext, Update

pytestmark = pytest.mark.peers
pytest.importorskip("flwr", reason="Flower is not installed (the `bench` extra)")

from flwr.common import (  # noqa: E402
    Code,
    FitRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.strategy import FedAdagrad as FlowerFedAdagrad  # noqa: E402
from flwr.server.strategy import FedAdam as FlowerFedAdam  # noqa: E402
from flwr.server.strategy import FedAvg as FlowerFedAvg  # noqa: E402
from flwr.server.strategy import FedAvgM as FlowerFedAvgM  # noqa: E402
from flwr.server.strategy import FedYogi as FlowerFedYogi  # noqa: E402
from flwr.server.strategy.aggregate import aggregate  # noqa: E402

SIZES = (10, 30, 17)
ROUNDS = 4
ETA, BETA1, BETA2, TAU = 0.05, 0.9, 0.99, 1e-3


def setup(strategy):
    """`strategy` on a model without buffers (Flower steps every array; fedshare steps the
    parameters and averages buffers, docs/baselines.md)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    strategy.setup(SetupContext(model, None, None, torch.device("cpu")))
    return model


def arrays(strategy, flat_weights: torch.Tensor) -> list[np.ndarray]:
    """A flat state as Flower's list of per-tensor arrays."""
    views = strategy.flat.views(flat_weights)
    return [views[name].numpy().copy() for name in strategy.flat.names]


def fit_results(strategy, clients: list[torch.Tensor]) -> list:
    return [
        (None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays(strategy, w)), n, {}))
        for w, n in zip(clients, SIZES, strict=True)
    ]


def client_rounds(x: torch.Tensor, generator: torch.Generator) -> list[torch.Tensor]:
    return [x + 0.1 * torch.randn(x.shape, generator=generator) for _ in SIZES]


def compare_over_rounds(ours, make_flower, eta_of_round=None) -> None:
    """Both servers aggregate the same clients for `ROUNDS` rounds from the same start (Flower's
    strategy built by `make_flower` from the initial arrays); each round's clients are
    perturbations of fedshare's current model."""
    model = setup(ours)
    initial = arrays(ours, ours.flat.flatten(model))
    flower = make_flower(initial)
    g = torch.Generator().manual_seed(3)
    for server_round in range(1, ROUNDS + 1):
        clients = client_rounds(ours.flat.flatten(model), g)
        if eta_of_round is not None:
            ours.eta = eta_of_round(server_round)
        ours.aggregate(iter(updates(clients)), server_round - 1)
        theirs, _ = flower.aggregate_fit(server_round, fit_results(ours, clients), [])
        expected = torch.cat(
            [torch.from_numpy(a).reshape(-1) for a in parameters_to_ndarrays(theirs)]
        ).float()  # Flower's FedAdam turns float64 through its np.float64 η
        torch.testing.assert_close(ours.flat.flatten(model), expected, rtol=0, atol=1e-6)


def updates(clients: list[torch.Tensor]) -> list[Update]:
    return [Update(k, n, weights=w) for k, (w, n) in enumerate(zip(clients, SIZES, strict=True))]


def test_weighted_mean_equals_flowers_aggregate():
    ours = FedAvg()
    model = setup(ours)
    clients = client_rounds(ours.flat.flatten(model), torch.Generator().manual_seed(0))
    mean = ours.average_weights(
        iter([Update(k, n, weights=w) for k, (w, n) in enumerate(zip(clients, SIZES, strict=True))])
    )
    theirs = aggregate([(arrays(ours, w), n) for w, n in zip(clients, SIZES, strict=True)])
    torch.testing.assert_close(
        mean, torch.cat([torch.from_numpy(a).reshape(-1) for a in theirs]), rtol=0, atol=1e-6
    )


def test_fedavg_equals_flowers_fedavg():
    compare_over_rounds(FedAvg(), lambda initial: FlowerFedAvg())


def flower(cls, **kwargs):
    return lambda initial: cls(initial_parameters=ndarrays_to_parameters(initial), **kwargs)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (
            lambda: FedAdagrad(eta=ETA, beta1=0.0, tau=TAU, v0=0.0),  # Flower fixes β1 = 0
            flower(FlowerFedAdagrad, eta=ETA, tau=TAU),
        ),
        (
            lambda: FedYogi(eta=ETA, beta1=BETA1, beta2=BETA2, tau=TAU, v0=0.0),
            flower(FlowerFedYogi, eta=ETA, beta_1=BETA1, beta_2=BETA2, tau=TAU),
        ),
    ],
    ids=["fedadagrad", "fedyogi"],
)
def test_adaptive_servers_equal_flowers_with_v0_zero(ours, theirs):
    compare_over_rounds(ours(), theirs)


FLOWER_ADAM = flower(FlowerFedAdam, eta=ETA, beta_1=BETA1, beta_2=BETA2, tau=TAU)


def flower_adam_eta(t: int) -> float:
    """Flower's `eta_norm` of server round t: η·√(1 − β2^(t+1))/(1 − β1^(t+1))."""
    return ETA * np.sqrt(1 - BETA2 ** (t + 1)) / (1 - BETA1 ** (t + 1))


def test_fedadam_equals_flowers_once_its_bias_correction_is_applied_to_eta():
    fedadam = FedAdam(eta=ETA, beta1=BETA1, beta2=BETA2, tau=TAU, v0=0.0)
    compare_over_rounds(fedadam, FLOWER_ADAM, eta_of_round=flower_adam_eta)


def test_fedadam_without_the_correction_differs_from_flowers():
    """The comparison can fail: Alg. 2's plain η is not Flower's FedAdam."""
    fedadam = FedAdam(eta=ETA, beta1=BETA1, beta2=BETA2, tau=TAU, v0=0.0)
    with pytest.raises(AssertionError):
        compare_over_rounds(fedadam, FLOWER_ADAM)


def test_fedyogi_default_v0_differs_from_flowers_zero():
    """fedshare's default v0 = 1e-6 (FedPFT's setting) is not Flower's v = 0 start."""
    fedyogi = FedYogi(eta=ETA, beta1=BETA1, beta2=BETA2, tau=TAU)
    with pytest.raises(AssertionError):
        compare_over_rounds(
            fedyogi, flower(FlowerFedYogi, eta=ETA, beta_1=BETA1, beta_2=BETA2, tau=TAU)
        )


@pytest.mark.parametrize(("server_lr", "momentum"), [(1.0, 0.9), (0.7, 0.5)])
def test_fedavgm_equals_flowers(server_lr, momentum):
    compare_over_rounds(
        FedAvgM(server_lr=server_lr, momentum=momentum),
        flower(FlowerFedAvgM, server_learning_rate=server_lr, server_momentum=momentum),
    )
