"""A CPU-sized ResNet-8 for heterogeneous clients: the CIFAR ResNet (He et al. 2016) with one
basic block per stage, for images of any size, projected to a chosen feature width."""

from collections.abc import Sequence

from torch import nn

from fedshare.models.base import (
    HEAD,
    BlockModel,
    register_model,
    require_input,
    require_widths,
    scaled,
)
from fedshare.models.resnet_cifar import STAGES, BasicBlock


@register_model("resnet8")
def resnet8(
    input_shape: Sequence[int],
    num_classes: int,
    feature_dim: int = 512,
    width: float = 1.0,
    share_layer: int | None = None,
) -> BlockModel:
    """Stem conv3×3 + BN + ReLU; three stages of one basic block (16, 32, 64 channels times
    `width`; the second and third at stride 2); global average pooling; a linear projection to
    `feature_dim`; head. 1 + 3·2 + 1 = 8 weight layers before the projection.

    Blocks: `stem`, `layer1`, `layer2`, `layer3`, `pool`, `proj` (the `feature_dim`-wide
    penultimate features), `head`. HtFLlib pools the ResNets' features to `feature_dim` with a
    parameter-free `AdaptiveAvgPool1d`, which can only shrink; a linear projection meets any
    width. Global pooling takes any image of at least 1×1. Default `share_layer`: the
    penultimate split; `flea_layer`: after `layer1`.
    """
    require_input("resnet8", input_shape, 3, "C×H×W images")
    require_widths("resnet8", feature_dim=feature_dim)
    c_in = input_shape[0]
    widths = [scaled(c, width) for c in STAGES]
    blocks: list[tuple[str, nn.Module]] = [
        (
            "stem",
            nn.Sequential(
                nn.Conv2d(c_in, widths[0], 3, 1, 1, bias=False),
                nn.BatchNorm2d(widths[0]),
                nn.ReLU(),
            ),
        )
    ]
    c = widths[0]
    for i, c_out in enumerate(widths):
        blocks.append((f"layer{i + 1}", BasicBlock(c, c_out, 2 if i > 0 else 1)))
        c = c_out
    blocks += [
        ("pool", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())),
        ("proj", nn.Linear(c, feature_dim)),
        (HEAD, nn.Linear(feature_dim, num_classes)),
    ]
    share = len(blocks) - 1 if share_layer is None else share_layer
    return BlockModel(blocks, share_layer=share, flea_layer=2)
