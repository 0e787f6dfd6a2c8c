"""`memory_format`: channels-last weights by default for convolutional models, the same run up to
floating-point rounding, and the same bytes on the wire (docs/performance.md)."""

import pytest
import torch

from fedshare import simulate
from fedshare.engine.simulation import uses_channels_last
from fedshare.errors import FedshareError
from fedshare.models import build_model
from helpers import DIGITS_TRAIN, digits_federation


def run(memory_format: str):
    fed = digits_federation("iid", 4)
    return simulate(
        "fedavg", fed, "cnn_small", rounds=2, train=DIGITS_TRAIN, memory_format=memory_format
    )


def test_channels_last_is_the_same_run_up_to_rounding():
    fast, plain = run("auto"), run("contiguous")
    conv2 = fast.strategy.model.blocks["conv2"][0].weight
    assert conv2.is_contiguous(memory_format=torch.channels_last)
    assert not conv2.is_contiguous()
    assert plain.strategy.model.blocks["conv2"][0].weight.is_contiguous()
    pairs = zip(fast.strategy.model.parameters(), plain.strategy.model.parameters(), strict=True)
    for a, b in pairs:
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for key in ("bytes_up", "bytes_down"):
        assert fast.summary[key] == plain.summary[key]


def test_auto_picks_models_with_convolutions_and_bad_values_are_named():
    assert uses_channels_last(build_model("cnn_small", (1, 8, 8), 10), "auto")
    assert not uses_channels_last(build_model("mlp", (64,), 10), "auto")
    assert not uses_channels_last(build_model("cnn_small", (1, 8, 8), 10), "contiguous")
    with pytest.raises(FedshareError, match="memory_format='nhwc' is not a memory format"):
        uses_channels_last(build_model("mlp", (64,), 10), "nhwc")
