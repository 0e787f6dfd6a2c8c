"""Short digits runs of the heterogeneous family, and a server-side strategy for unit tests."""

from typing import Any

import numpy as np
import torch

from fedshare import simulate
from fedshare.config import SimulationConfig
from fedshare.data.federated import FederatedData
from fedshare.models import build_model
from fedshare.strategies import make_strategy
from fedshare.strategies.base import SetupContext, Strategy
from helpers import DIGITS_TRAIN, digits_federation

CLIENTS = 4


def digits_run(
    name: str,
    rounds: int = 3,
    params: dict[str, Any] | None = None,
    partition: object = "iid",
    model: str = "cnn_small",
    **options: Any,
):
    """`name` on digits: 4 clients, the tests' digits training settings, on the CPU."""
    data = digits_federation(partition, CLIENTS)
    return simulate(
        name,
        data,
        model,
        rounds,
        strategy_params=params,
        train=DIGITS_TRAIN,
        device="cpu",
        **options,
    )


def chance_bound(data: FederatedData) -> float:
    """The majority class's test share plus 3 binomial standard deviations (percent): a model
    at chance stays below it."""
    y = data.dataset.y_test
    base = float(torch.bincount(y).max() / len(y) * 100)
    return base + 3 * float(np.sqrt(base * (100 - base) / len(y)))


def server_side(name: str, params: dict[str, Any] | None = None) -> tuple[Strategy, Any]:
    """Strategy `name` set up on the server for 4 digits clients (the unit tests' server)."""
    data = digits_federation("iid", CLIENTS)
    torch.manual_seed(0)
    model = build_model("cnn_small", data.dataset.input_shape, data.dataset.num_classes)
    strategy = make_strategy(name, params)
    strategy.setup(SetupContext(model, data, SimulationConfig(device="cpu"), torch.device("cpu")))
    return strategy, data
