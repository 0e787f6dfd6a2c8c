"""Small CNNs for MNIST-sized images: `cnn_small` (generic) and `cnn_mnist` (XorMixFL)."""

from collections.abc import Sequence

from torch import nn

from fedshare.models.base import (
    HEAD,
    BlockModel,
    conv_out,
    input_error,
    register_model,
    require_input,
    require_widths,
)


@register_model("cnn_small")
def cnn_small(
    input_shape: Sequence[int],
    num_classes: int,
    channels: Sequence[int] = (32, 64),
    hidden: int = 128,
    share_layer: int = 1,
    batchnorm: bool = False,
) -> BlockModel:
    """conv blocks (3×3 conv, ReLU, 2×2 max-pool) per entry of `channels`, an FC block, a head.

    Blocks: `conv1`, `conv2`, ..., `fc`, `head`. Needs C×H×W inputs with H, W >= 2**len(channels).
    FLea's split (`flea_layer`) is after `conv1`. `batchnorm=True` adds BatchNorm after each conv,
    before the ReLU (FedBN's local layers). None after the FC layer: a BatchNorm1d there fails
    on a last mini-batch of one sample, which small clients have.
    """
    require_input("cnn_small", input_shape, 3, "C×H×W images")
    require_widths("cnn_small", channels=channels, hidden=hidden)
    c, h, w = input_shape
    blocks: list[tuple[str, nn.Module]] = []
    for i, out in enumerate(channels):
        blocks.append(
            (
                f"conv{i + 1}",
                nn.Sequential(
                    nn.Conv2d(c, out, 3, padding=1),
                    *([nn.BatchNorm2d(out)] if batchnorm else []),
                    nn.ReLU(),
                    nn.MaxPool2d(2),
                ),
            )
        )
        c, h, w = out, h // 2, w // 2
    if h < 1 or w < 1:
        what = f"C×H×W images big enough for {len(channels)} pooling blocks"
        raise input_error("cnn_small", input_shape, what)
    blocks.append(("fc", nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, hidden), nn.ReLU())))
    blocks.append((HEAD, nn.Linear(hidden, num_classes)))
    return BlockModel(blocks, share_layer=share_layer, flea_layer=1)


@register_model("cnn_mnist")
def cnn_mnist(
    input_shape: Sequence[int],
    num_classes: int,
    dropout: bool = True,
    share_layer: int | None = None,
) -> BlockModel:
    """An MNIST CNN for XorMixFL, whose paper gives no model (1,199,882 parameters on 1×28×28).

    conv3×3-32 → ReLU | conv3×3-64 → ReLU → max-pool 2 → dropout 0.25 | flatten → FC-128 → ReLU
    → dropout 0.5 | FC head. Blocks: `conv1`, `conv2`, `fc1` (128-d features), `head`; the
    default `share_layer` is the penultimate split (`features(x)`); `flea_layer` is after conv1.
    """
    what = "C×H×W images of at least 6×6"
    require_input("cnn_mnist", input_shape, 3, what)
    c, h, w = input_shape
    h, w = (conv_out(conv_out(conv_out(s, 3), 3), 2, 2) for s in (h, w))
    if h < 1 or w < 1:
        raise input_error("cnn_mnist", input_shape, what)
    drop1, drop2 = (nn.Dropout(p) if dropout else nn.Identity() for p in (0.25, 0.5))
    blocks: list[tuple[str, nn.Module]] = [
        ("conv1", nn.Sequential(nn.Conv2d(c, 32, 3), nn.ReLU())),
        ("conv2", nn.Sequential(nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), drop1)),
        ("fc1", nn.Sequential(nn.Flatten(), nn.Linear(64 * h * w, 128), nn.ReLU(), drop2)),
        (HEAD, nn.Linear(128, num_classes)),
    ]
    share = len(blocks) - 1 if share_layer is None else share_layer
    return BlockModel(blocks, share_layer=share, flea_layer=1)
