"""The checked narrowings the type checker relies on: a registered model is a `BlockModel`, and
a message or update the protocol always fills carries its weights."""

import pytest
import torch
from torch import nn

from fedshare.engine.flat import FlatState
from fedshare.engine.messages import Message, Update
from fedshare.models.base import as_block_model, build_model, feature_width
from fedshare.strategies import make_strategy
from fedshare.strategies.base import sent_weights


def test_as_block_model_returns_the_same_model_and_refuses_another_module():
    model = build_model("mlp", (8,), 3)
    assert as_block_model(model) is model
    with pytest.raises(TypeError, match=r"BlockModel \(a registered model\), got Linear"):
        as_block_model(nn.Linear(8, 3))


def test_feature_width_probes_the_head_input():
    assert feature_width(build_model("mlp", (8,), 3, {"hidden": [5]}), (8,)) == 5
    with pytest.raises(TypeError, match="BlockModel"):
        feature_width(nn.Linear(8, 3), (8,))


def test_sent_weights_returns_them_and_names_what_lacks_them():
    weights = torch.arange(3.0)
    assert sent_weights(Message(weights=weights)) is weights
    assert sent_weights(Update(0, 1, weights=weights)) is weights
    with pytest.raises(ValueError, match="Update carries no weights"):
        sent_weights(Update(0, 1))


def test_load_weights_copies_in_place_and_refuses_a_message_without_weights():
    strategy = make_strategy("fedavg")
    model = build_model("mlp", (8,), 3)
    strategy.flat = FlatState(model)
    flat = torch.ones(strategy.flat.numel)
    assert strategy.load_weights(model, flat) is model
    assert all(bool((p == 1).all()) for p in model.parameters())
    with pytest.raises(ValueError, match="fedavg: the message carries no weights"):
        strategy.load_weights(model, None)
