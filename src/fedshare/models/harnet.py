"""FLea's HARNet for 1×128×3 inertial windows (Xia et al., App. C.2, Table 6): 691,974 parameters.

Blocks: `conv1` ... `conv4` (k×1 conv over time → BN → ReLU, padding 1 on both axes so the
channel axis grows 3→5→7→9→11), `flatten` (8448-d features), `head`. FLea shares the output of
block 2, 128×20×7, i.e. `encode(x, upto=2)`. CPU checks run it at ¼ width (`width: 0.25`).
"""

from collections.abc import Sequence

from torch import nn

from fedshare.models.base import (
    HEAD,
    BlockModel,
    conv_out,
    input_error,
    register_model,
    require_input,
    scaled,
)

FLEA_LAYER = 2  # FLea: after conv2, 128×20×7 (FLea's code, `--layer 1`)
# (out channels, kernel along time, stride along time), FLea's Table 6.
LAYERS: tuple[tuple[int, int, int], ...] = ((64, 3, 3), (128, 6, 2), (256, 6, 2), (256, 6, 2))
WHAT = "1×T×S inertial windows with T >= 64 (1×128×3 for UCI-HAR)"


@register_model("harnet")
def harnet(
    input_shape: Sequence[int],
    num_classes: int,
    width: float = 1.0,
    share_layer: int = 2,
) -> BlockModel:
    """Four (k×1)-kernel conv blocks over the time axis, flatten, and a linear head."""
    require_input("harnet", input_shape, 3, WHAT)
    c_in, time, sensors = input_shape
    blocks: list[tuple[str, nn.Module]] = []
    for i, (out, kernel, stride) in enumerate(LAYERS):
        c_out = scaled(out, width)
        conv = nn.Conv2d(c_in, c_out, (kernel, 1), (stride, 1), padding=1)
        blocks.append((f"conv{i + 1}", nn.Sequential(conv, nn.BatchNorm2d(c_out), nn.ReLU())))
        c_in, time, sensors = c_out, conv_out(time, kernel, stride, 1), sensors + 2
        if time < 1:
            raise input_error("harnet", input_shape, WHAT)
    blocks += [
        ("flatten", nn.Flatten()),
        (HEAD, nn.Linear(c_in * time * sensors, num_classes)),
    ]
    return BlockModel(blocks, share_layer=share_layer, flea_layer=FLEA_LAYER)
