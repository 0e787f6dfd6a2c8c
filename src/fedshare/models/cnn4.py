"""The 4-layer CNN of the heterogeneous-FL literature (HtFLlib's `FedAvgCNN`, McMahan et al.'s
MNIST/CIFAR CNN): two 5×5 conv blocks and two fully connected layers."""

from collections.abc import Sequence

from torch import nn

from fedshare.errors import FedshareError
from fedshare.models.base import (
    HEAD,
    BlockModel,
    conv_out,
    input_error,
    register_model,
    require_input,
    require_widths,
)


@register_model("cnn4")
def cnn4(
    input_shape: Sequence[int],
    num_classes: int,
    channels: Sequence[int] = (32, 64),
    feature_dim: int = 512,
    padding: int = 0,
    share_layer: int | None = None,
) -> BlockModel:
    """conv5×5-32 → ReLU → max-pool 2 | conv5×5-64 → ReLU → max-pool 2 | FC-`feature_dim` → ReLU |
    head.

    Blocks: `conv1`, `conv2`, `fc` (the `feature_dim`-wide penultimate features), `head`. The FC
    layer is the projection to `feature_dim`, so every input size meets the shared width.
    `padding=0` is HtFLlib's layer (28×28 → 4×4×64 = 1,024 inputs to the FC layer); `padding=2`
    keeps the size through each conv, for images as small as 4×4 (digits' 8×8). Default
    `share_layer`: the penultimate split; `flea_layer`: after `conv1`.
    """
    what = "C×H×W images big enough for two 5×5 convolutions and two 2×2 poolings"
    require_input("cnn4", input_shape, 3, "C×H×W images")
    require_widths("cnn4", channels=channels, feature_dim=feature_dim)
    if len(channels) != 2:
        raise FedshareError(
            f"model 'cnn4' parameter channels={list(channels)!r} is not valid: it needs two "
            f"widths, one per conv block"
        )
    c, h, w = input_shape
    for _ in range(2):
        h, w = (conv_out(conv_out(s, 5, padding=padding), 2, 2) for s in (h, w))
    if h < 1 or w < 1:
        raise input_error("cnn4", input_shape, what)
    c1, c2 = channels
    blocks: list[tuple[str, nn.Module]] = [
        ("conv1", nn.Sequential(nn.Conv2d(c, c1, 5, padding=padding), nn.ReLU(), nn.MaxPool2d(2))),
        ("conv2", nn.Sequential(nn.Conv2d(c1, c2, 5, padding=padding), nn.ReLU(), nn.MaxPool2d(2))),
        ("fc", nn.Sequential(nn.Flatten(), nn.Linear(c2 * h * w, feature_dim), nn.ReLU())),
        (HEAD, nn.Linear(feature_dim, num_classes)),
    ]
    share = len(blocks) - 1 if share_layer is None else share_layer
    return BlockModel(blocks, share_layer=share, flea_layer=1)
