"""DSFL (FedPFT's multi-round baseline, FedPFT's App. D.1): the sparse upload's encoding and
bytes, keep = 1 is FedAvg, error feedback keeps what was dropped."""

import math
from types import SimpleNamespace

import pytest
import torch

from fedshare import simulate
from fedshare.functional.sparse import pack, top_k_mask, unpack
from fedshare.strategies import make_strategy
from fedshare.strategies.base import Message, Update
from helpers import DIGITS_TRAIN, digits_federation


@pytest.mark.parametrize("n", [1, 7, 8, 13, 1000])
def test_pack_round_trips_the_top_k_entries(n):
    gen = torch.Generator().manual_seed(n)
    v = torch.randn(n, generator=gen)
    k = max(1, n // 3)
    mask = top_k_mask(v, k)
    assert int(mask.sum()) == k
    if k < n:
        assert float(v[mask].abs().min()) >= float(v[~mask].abs().max())
    blob = pack(v, mask)
    assert blob.dtype == torch.uint8 and blob.numel() == math.ceil(n / 8) + 4 * k
    assert torch.equal(unpack(blob, n), torch.where(mask, v, torch.zeros_like(v)))


def run(params, rounds=2):
    return simulate(
        make_strategy("dsfl", params),
        digits_federation("dirichlet", 5),
        "cnn_small",
        rounds=rounds,
        train=DIGITS_TRAIN,
    )


def test_uploads_are_the_packed_sparse_updates_and_keep_one_is_fedavg():
    half = run({"keep": 0.5}, rounds=3)
    n = half.strategy.flat.numel
    k = math.ceil(0.5 * n)
    first = half.history[0]["bytes_up"]
    assert first == 5 * (math.ceil(n / 8) + 4 * k) and first < 0.54 * 5 * 4 * n  # 53 % of dense
    full = run({"keep": 1.0}, rounds=1)
    fedavg = simulate(
        "fedavg", digits_federation("dirichlet", 5), "cnn_small", rounds=1, train=DIGITS_TRAIN
    )
    a = full.strategy.flat.flatten(full.strategy.model)
    b = fedavg.strategy.flat.flatten(fedavg.strategy.model)
    assert torch.allclose(a, b, atol=1e-6)
    assert half.history[-1]["accuracy"] > 25.0  # it learns from half the update


def test_error_feedback_keeps_the_dropped_part_per_client():
    result = run({"keep": 0.1, "error_feedback": True}, rounds=2)
    n = result.strategy.flat.numel
    # every client that took part holds one residual vector of the model's size
    assert result.summary["client_state_bytes"] == 5 * 4 * n
    with pytest.raises(Exception, match=r"strategy\.keep=0"):
        make_strategy("dsfl", {"keep": 0.0})


def test_error_feedback_adds_the_dropped_part_to_the_next_update():
    """Round 1 uploads the top-K of Δ1 and keeps r1 = Δ1 − sent1; round 2 uploads the top-K
    of Δ2 + r1. What was sent plus what is kept is always everything trained so far."""
    dsfl = make_strategy("dsfl", {"keep": 0.25, "error_feedback": True})
    client = SimpleNamespace(state={})
    theta = torch.zeros(8)
    delta1 = torch.tensor([8.0, -7.0, 6.0, 5.0, -4.0, 3.0, 2.0, 1.0])
    delta2 = torch.tensor([0.5, 0.5, 0.5, 0.5, 0.5, -4.0, 0.5, 0.5])

    def step(delta: torch.Tensor) -> torch.Tensor:
        update = Update(0, 10, weights=theta + delta)
        return unpack(dsfl.sparsify(client, update, Message(weights=theta)).weights, 8)

    sent1 = step(delta1)
    assert torch.equal(sent1, torch.tensor([8.0, -7.0, 0, 0, 0, 0, 0, 0]))
    assert torch.equal(client.state["residual"], delta1 - sent1)
    sent2 = step(delta2)
    # Δ2 + r1 = [.5, .5, 6.5, 5.5, −3.5, −1, 2.5, 1.5]: the kept 6 and 5 go up now
    assert torch.equal(sent2, torch.tensor([0, 0, 6.5, 5.5, 0, 0, 0, 0]))
    torch.testing.assert_close(sent1 + sent2 + client.state["residual"], delta1 + delta2)
