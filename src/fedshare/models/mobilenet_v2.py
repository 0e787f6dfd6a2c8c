"""FLea's CIFAR MobileNetV2 (Xia et al., App. C.2, Table 3): 2,296,922 parameters at width 1.

Blocks: `stem`, `block1` ... `block17` (one per inverted-residual block), `conv_last`, `pool`,
`head`. FLea shares the output of the stem + first inverted-residual block (16×32×32), i.e.
`encode(x, upto=2)` (FLea's code: `--layer 0`, the stem always included).
"""

from collections.abc import Sequence

import torch
from torch import nn

from fedshare.models.base import HEAD, BlockModel, register_model, require_input, scaled

FLEA_LAYER = 2  # FLea: stem + first inverted residual, 16×32×32 (FLea's code, `--layer 0`)

# (expansion, out channels, repeats, stride of the first block), FLea's Table 3: the CIFAR
# variant keeps the second stage at stride 1.
STAGES: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 1),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def conv_bn(
    c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1
) -> list[nn.Module]:
    """A bias-free conv (padding keeps the size at stride 1) followed by BatchNorm."""
    conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False)
    return [conv, nn.BatchNorm2d(c_out)]


class InvertedResidual(nn.Module):
    """1×1 expand + BN + ReLU, 3×3 depthwise (stride s) + BN + ReLU, 1×1 project + BN.

    The residual is added only at stride 1; when the channel count changes it passes through a
    1×1 conv + BN (FLea's code). 2,296,922 parameters need exactly this.
    """

    def __init__(self, c_in: int, c_out: int, expansion: int, stride: int) -> None:
        super().__init__()
        hidden = c_in * expansion
        self.body = nn.Sequential(
            *conv_bn(c_in, hidden, 1),
            nn.ReLU(),
            *conv_bn(hidden, hidden, 3, stride, groups=hidden),
            nn.ReLU(),
            *conv_bn(hidden, c_out, 1),
        )
        # No shortcut module at all at stride 2 (it would be unused and change the count).
        self.shortcut: nn.Module | None = None
        if stride == 1:
            self.shortcut = (
                nn.Sequential(*conv_bn(c_in, c_out, 1)) if c_in != c_out else nn.Identity()
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return out if self.shortcut is None else out + self.shortcut(x)


@register_model("mobilenetv2_cifar")
def mobilenetv2_cifar(
    input_shape: Sequence[int],
    num_classes: int,
    width: float = 1.0,
    share_layer: int = 2,
) -> BlockModel:
    """FLea's MobileNetV2 for C×32×32 images; `width` scales every channel count."""
    require_input(
        "mobilenetv2_cifar", input_shape, 3, "C×32×32 (CIFAR-sized) images", (None, 32, 32)
    )
    stem_channels, last_channels = scaled(32, width), scaled(1280, width)
    blocks: list[tuple[str, nn.Module]] = [
        (
            "stem",
            nn.Sequential(*conv_bn(input_shape[0], stem_channels, 3), nn.ReLU()),
        )
    ]
    c_in = stem_channels
    for expansion, out, repeats, first_stride in STAGES:
        c_out = scaled(out, width)
        for r in range(repeats):
            stride = first_stride if r == 0 else 1
            name = f"block{len(blocks)}"
            blocks.append((name, InvertedResidual(c_in, c_out, expansion, stride)))
            c_in = c_out
    blocks += [
        ("conv_last", nn.Sequential(*conv_bn(c_in, last_channels, 1), nn.ReLU())),
        ("pool", nn.Sequential(nn.AvgPool2d(4), nn.Flatten())),
        (HEAD, nn.Linear(last_channels, num_classes)),
    ]
    return BlockModel(blocks, share_layer=share_layer, flea_layer=FLEA_LAYER)
