"""The model zoo: every model is a `BlockModel` with named blocks and split points."""

from fedshare.models import cnn, mlp  # noqa: F401  (registers the models)
from fedshare.models.base import MODELS, BlockModel, build_model, register_model

__all__ = ["MODELS", "BlockModel", "build_model", "register_model"]
