"""Multi-layer perceptrons and a linear head, for feature vectors or flattened images."""

import math
from collections.abc import Sequence

from torch import nn

from fedshare.models.base import HEAD, BlockModel, register_model, require_widths


@register_model("mlp")
def mlp(
    input_shape: Sequence[int],
    num_classes: int,
    hidden: Sequence[int] = (200, 200),
    share_layer: int | None = None,
) -> BlockModel:
    """Flatten, then `len(hidden)` Linear+ReLU blocks (`fc1`, `fc2`, ...), then a linear head.

    Default `share_layer`: after `fc1` (0, the raw input, when there are no hidden layers);
    `flea_layer`: after `fc1` (None without hidden layers).
    """
    require_widths("mlp", hidden=hidden)
    width = math.prod(input_shape)
    blocks: list[tuple[str, nn.Module]] = []
    for i, h in enumerate(hidden):
        layers: list[nn.Module] = [nn.Flatten()] if i == 0 else []
        blocks.append((f"fc{i + 1}", nn.Sequential(*layers, nn.Linear(width, h), nn.ReLU())))
        width = h
    head: nn.Module = nn.Linear(width, num_classes)
    if not hidden:
        head = nn.Sequential(nn.Flatten(), head)
    if share_layer is None:
        share_layer = min(1, len(hidden))
    flea = 1 if hidden else None  # FLea: after fc1
    return BlockModel([*blocks, (HEAD, head)], share_layer=share_layer, flea_layer=flea)


@register_model("linear")
def linear(input_shape: Sequence[int], num_classes: int, bias: bool = True) -> BlockModel:
    """A single linear classifier on flattened inputs (e.g. a head on frozen features)."""
    head = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes, bias=bias))
    return BlockModel([(HEAD, head)], share_layer=0)
