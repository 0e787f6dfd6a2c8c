"""A small CNN for MNIST-sized (or smaller) images."""

from collections.abc import Sequence

from torch import nn

from fedshare.models.base import HEAD, BlockModel, register_model, require_input


@register_model("cnn_small")
def cnn_small(
    input_shape: Sequence[int],
    num_classes: int,
    channels: Sequence[int] = (32, 64),
    hidden: int = 128,
    share_layer: int = 1,
) -> BlockModel:
    """conv blocks (3×3 conv, ReLU, 2×2 max-pool) per entry of `channels`, an FC block, a head.

    Blocks: `conv1`, `conv2`, ..., `fc`, `head`. Needs C×H×W inputs with H, W >= 2**len(channels).
    """
    require_input("cnn_small", input_shape, 3, "C×H×W image")
    c, h, w = input_shape
    blocks: list[tuple[str, nn.Module]] = []
    for i, out in enumerate(channels):
        blocks.append(
            (
                f"conv{i + 1}",
                nn.Sequential(nn.Conv2d(c, out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
            )
        )
        c, h, w = out, h // 2, w // 2
    if h < 1 or w < 1:
        raise ValueError(f"input {tuple(input_shape)} too small for {len(channels)} pooling blocks")
    blocks.append(("fc", nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, hidden), nn.ReLU())))
    blocks.append((HEAD, nn.Linear(hidden, num_classes)))
    return BlockModel(blocks, share_layer=share_layer)
