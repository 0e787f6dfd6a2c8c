"""DSFL (FedPFT's multi-round baseline, specs/fedpft.md §4.3): the sparse upload's encoding and
bytes, keep = 1 is FedAvg, error feedback keeps what was dropped."""

import math

import pytest
import torch

from fedshare import simulate
from fedshare.functional.sparse import pack, top_k_mask, unpack
from fedshare.strategies import make_strategy
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
