"""The model zoo: every model is a `BlockModel` with named blocks and split points."""

from fedshare.models import (  # noqa: F401  (registers the models)
    audionet,
    cnn,
    cnn4,
    fedaa_cnn,
    harnet,
    lenet,
    mlp,
    mobilenet_v2,
    resnet8,
    resnet_cifar,
    tv_resnet,
)
from fedshare.models.base import (
    MODELS,
    BlockModel,
    build_model,
    prepare_for_device,
    register_model,
)

__all__ = ["MODELS", "BlockModel", "build_model", "prepare_for_device", "register_model"]
