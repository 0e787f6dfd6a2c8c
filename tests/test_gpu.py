"""CUDA paths (docs/performance.md): a run on the GPU matches the CPU run's first round, keeps
its data on the device and does not synchronise with the host at every training step.

Run with `pytest -m gpu` on a machine with a CUDA device; skipped elsewhere."""

import warnings

import pytest
import torch

from fedshare import api
from fedshare.strategies import make_strategy
from helpers import digits_federation

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SGD = {"local_epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9}
FLEA = {"optimizer": "adam", "lr": 1e-3, "local_epochs": 1, "batch_size": 32}


def first_round(strategy: str, device: str, train: dict, **params: object) -> dict:
    run = api.simulate(
        make_strategy(strategy, params),
        digits_federation("iid", num_clients=10),
        "cnn_small",
        rounds=1,
        clients={"per_round": 4},
        train=train,
        device=device,
    )
    return run.history[0]


@pytest.mark.parametrize(("strategy", "train"), [("fedavg", SGD), ("flea", FLEA)])
def test_first_round_on_cuda_matches_cpu(strategy: str, train: dict) -> None:
    """Same seed, same batches: the first round's training loss within float tolerance (cuDNN
    and TF32 round differently from the CPU), and the same number of bytes each way."""
    cpu, cuda = first_round(strategy, "cpu", train), first_round(strategy, "cuda", train)
    assert cuda["train_loss"] == pytest.approx(cpu["train_loss"], rel=1e-2)
    assert cuda["bytes_up"] == cpu["bytes_up"] and cuda["bytes_down"] == cpu["bytes_down"]


def test_data_lives_on_the_device() -> None:
    fed = digits_federation("iid", num_clients=10)
    moved = fed.to(torch.device("cuda"))
    assert moved.dataset.x_train.is_cuda and moved.dataset.y_train.is_cuda
    assert all(ix.is_cuda for ix in moved.client_indices)


def synchronisations(strategy: str, epochs: int, **train: object) -> int:
    """Host/device synchronisations of one round, counted by torch's sync debug mode."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first_round(strategy, "cuda", {**SGD, **train, "local_epochs": epochs})
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in caught)


@pytest.mark.parametrize(
    ("strategy", "train"),
    [
        ("fedavg", {}),
        ("fedprox", {}),
        ("fedavg", {"batched": 4}),
        ("scaffold", {"batched": 4, "momentum": 0.0}),
        ("flea", {"batched": 4}),
    ],
)
def test_no_synchronisation_per_training_step(strategy: str, train: dict) -> None:
    """Four times the local steps, the same synchronisations: none of them is per step."""
    synchronisations(strategy, 1, **train)  # one-off initialisation (cuDNN, allocator) first
    assert synchronisations(strategy, 4, **train) == synchronisations(strategy, 1, **train)
