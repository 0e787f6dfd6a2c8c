"""Models for clients with different architectures: a shared penultimate width."""

import pytest
import torch

from fedshare.errors import FedshareError
from fedshare.models import build_model
from fedshare.models.feature_dim import require_feature_dim


@pytest.mark.parametrize(
    ("name", "shape", "params"),
    [
        ("cnn4", (1, 28, 28), {}),
        ("cnn4", (3, 32, 32), {}),
        ("cnn4", (1, 8, 8), {"padding": 2}),
        ("resnet8", (1, 8, 8), {}),
        ("resnet8", (3, 32, 32), {"width": 0.5}),
    ],
)
@pytest.mark.parametrize("feature_dim", [32, 100])
def test_new_models_meet_any_feature_dim(name, shape, params, feature_dim):
    model = build_model(name, shape, 7, {**params, "feature_dim": feature_dim}).eval()
    x = torch.randn(2, *shape)
    assert model.features(x).shape == (2, feature_dim)
    assert model.head.in_features == feature_dim and model(x).shape == (2, 7)


def test_cnn4_matches_htfllib_fc_input_on_mnist():
    """HtFLlib's FedAvgCNN on 1×28×28: 1,024 inputs to the FC layer (`dim=1024`)."""
    model = build_model("cnn4", (1, 28, 28), 10)
    assert model.blocks["fc"][1].in_features == 1024


def test_cnn4_refuses_images_too_small_without_padding():
    with pytest.raises(FedshareError, match=r"model 'cnn4' expects .*\(1, 8, 8\)"):
        build_model("cnn4", (1, 8, 8), 10)


def test_shared_width_is_found_and_a_different_one_refused():
    shape = (1, 8, 8)
    models = {
        "cnn4": build_model("cnn4", shape, 10, {"padding": 2, "feature_dim": 64}),
        "resnet8": build_model("resnet8", shape, 10, {"feature_dim": 64}),
        "cnn_small": build_model("cnn_small", shape, 10, {"hidden": 64}),
    }
    assert require_feature_dim(models, shape) == 64
    models["mlp"] = build_model("mlp", shape, 10, {"hidden": [200]})
    with pytest.raises(FedshareError, match=r"model 'mlp' has 200-d .* feature_dim=64"):
        require_feature_dim(models, shape)
    with pytest.raises(FedshareError, match=r"model 'cnn4' has 64-d .* feature_dim=32"):
        require_feature_dim(models, shape, feature_dim=32)


def test_a_model_without_a_feature_extractor_is_refused():
    with pytest.raises(FedshareError, match="model 'linear' has no feature extractor"):
        require_feature_dim({"linear": build_model("linear", (12,), 3)}, (12,))
