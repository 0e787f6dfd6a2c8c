"""The shared penultimate width of clients with different architectures.

Prototypes, per-label logits and heads are exchangeable across architectures only when every
model's `features(x)` has the same width (`feature_dim`) and its head maps that width to the
classes. `require_feature_dim` refuses, in one sentence, a model that does not.
"""

from collections.abc import Mapping, Sequence

from torch import nn

from fedshare.errors import FedshareError
from fedshare.models.base import BlockModel, feature_width


def require_feature_dim(
    models: Mapping[str, nn.Module], input_shape: Sequence[int], feature_dim: int | None = None
) -> int:
    """The common feature width of `models` (name -> model) on inputs of `input_shape`.

    `feature_dim` None: the first model's width is the one the others must meet. Raises a
    `FedshareError` naming the first model whose width differs, or that has no feature
    extractor before a linear head.
    """
    widths: dict[str, int] = {}
    for name, model in models.items():
        if not isinstance(model, BlockModel) or model.num_blocks < 2:
            raise FedshareError(
                f"model {name!r} has no feature extractor before its head, so it cannot share "
                f"prototypes, logits or heads with other architectures; choose a model with "
                f"one (e.g. cnn4, resnet8, cnn_small, mlp)"
            )
        widths[name] = feature_width(model, input_shape)
    target = next(iter(widths.values())) if feature_dim is None else feature_dim
    for name, width in widths.items():
        if width != target:
            raise FedshareError(
                f"model {name!r} has {width}-d penultimate features, but the clients' models "
                f"must share feature_dim={target}; set its width to {target} (e.g. "
                f"model.feature_dim={target} for cnn4 and resnet8, model.hidden for cnn_small)"
            )
    return target
