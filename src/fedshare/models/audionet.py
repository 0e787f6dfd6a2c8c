"""FLea's AudioNet for 2×64×344 log-mel spectrograms (Xia et al., App. C.2, Table 4): 25,602
parameters.

Blocks: `conv1` ... `conv4` (conv → ReLU → BN, in that order), `pool` (global average + flatten,
64-d features), `head`. FLea shares the output of block 2, 16×16×86, i.e. `encode(x, upto=2)`.
"""

from collections.abc import Sequence

from torch import nn

from fedshare.models.base import HEAD, BlockModel, register_model, require_input, scaled

FLEA_LAYER = 2  # FLea: after conv2, 16×16×86 (FLea's code, `--layer 1`)
# (out channels, kernel, stride, padding), FLea's Table 4 and its code's paddings.
LAYERS: tuple[tuple[int, int, int, int], ...] = (
    (8, 5, 2, 2),
    (16, 3, 2, 1),
    (32, 3, 2, 1),
    (64, 3, 2, 1),
)


@register_model("audionet")
def audionet(
    input_shape: Sequence[int],
    num_classes: int,
    width: float = 1.0,
    share_layer: int = 2,
) -> BlockModel:
    """Four strided conv blocks, global average pooling and a linear head on C×F×T inputs.

    Conv weights are Kaiming-normal (a = 0.1) with zero bias, as in FLea's code.
    """
    require_input("audionet", input_shape, 3, "C×F×T spectrograms (2×64×344 for UrbanSound8K)")
    blocks: list[tuple[str, nn.Module]] = []
    c_in = input_shape[0]
    for i, (out, kernel, stride, padding) in enumerate(LAYERS):
        c_out = scaled(out, width)
        conv = nn.Conv2d(c_in, c_out, kernel, stride, padding)
        nn.init.kaiming_normal_(conv.weight, a=0.1)
        if conv.bias is not None:  # always, for nn.Conv2d's default bias=True
            nn.init.zeros_(conv.bias)
        blocks.append((f"conv{i + 1}", nn.Sequential(conv, nn.ReLU(), nn.BatchNorm2d(c_out))))
        c_in = c_out
    blocks += [
        ("pool", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())),
        (HEAD, nn.Linear(c_in, num_classes)),
    ]
    return BlockModel(blocks, share_layer=share_layer, flea_layer=FLEA_LAYER)
