"""ReBaFL's "LeNet-like" CNNs (Xu et al., Section 5.1): leaky ReLU (slope 0.01), 2×2 max-pooling.

`lenet_fmnist` (117,066 parameters on 1×28×28): `conv1`, `conv2`, `fc1` (128-d features h),
`head` (with bias). `lenet_cifar` (107,680 parameters on 3×32×32): `conv1`, `conv2`, `conv3`,
`fc1` (128-d h, no activation, as in the code), `head` (no bias). ReBaFL works on h, the input
of the head, so the default `share_layer` is the penultimate split (`features(x)`); FLea's
split (`flea_layer`) is after `conv1`.
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

SLOPE = 0.01


def lenet(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    convs: Sequence[tuple[int, int, int]],
    hidden: int,
    fc1_activation: bool,
    classifier_bias: bool,
    width: float,
    share_layer: int | None,
) -> BlockModel:
    """conv(k, pad) → leaky ReLU → max-pool per (channels, kernel, padding), then fc1, head."""
    what = "C×H×W images"
    require_input(name, input_shape, 3, what)
    c, h, w = input_shape
    blocks: list[tuple[str, nn.Module]] = []
    for i, (out, kernel, padding) in enumerate(convs):
        c_out = scaled(out, width)
        layers = [nn.Conv2d(c, c_out, kernel, padding=padding), nn.LeakyReLU(SLOPE)]
        blocks.append((f"conv{i + 1}", nn.Sequential(*layers, nn.MaxPool2d(2))))
        c = c_out
        h, w = (conv_out(conv_out(s, kernel, 1, padding), 2, 2) for s in (h, w))
        if h < 1 or w < 1:
            raise input_error(
                name, input_shape, f"{what} big enough for {len(convs)} conv+pool stages"
            )
    width_h = scaled(hidden, width)
    fc1: list[nn.Module] = [nn.Flatten(), nn.Linear(c * h * w, width_h)]
    if fc1_activation:
        fc1.append(nn.LeakyReLU(SLOPE))
    blocks += [
        ("fc1", nn.Sequential(*fc1)),
        (HEAD, nn.Linear(width_h, num_classes, bias=classifier_bias)),
    ]
    default_share = len(blocks) - 1
    share = default_share if share_layer is None else share_layer
    return BlockModel(blocks, share, flea_layer=1)  # FLea: after conv1


@register_model("lenet_fmnist")
def lenet_fmnist(
    input_shape: Sequence[int],
    num_classes: int,
    classifier_bias: bool = True,
    width: float = 1.0,
    share_layer: int | None = None,
) -> BlockModel:
    """ReBaFL's FMNIST CNN: conv 16 (k5), conv 32 (k5, pad 1), fc 128 + leaky ReLU, head."""
    convs = ((16, 5, 0), (32, 5, 1))
    return lenet(
        "lenet_fmnist",
        input_shape,
        num_classes,
        convs,
        128,
        True,
        classifier_bias,
        width,
        share_layer,
    )


@register_model("lenet_cifar")
def lenet_cifar(
    input_shape: Sequence[int],
    num_classes: int,
    classifier_bias: bool = False,
    fc1_activation: bool = False,
    width: float = 1.0,
    share_layer: int | None = None,
) -> BlockModel:
    """ReBaFL's CIFAR CNN: conv 16 (k5), conv 32 (k5, pad 1), conv 64 (k3, pad 1), fc 128, head."""
    convs = ((16, 5, 0), (32, 5, 1), (64, 3, 1))
    return lenet(
        "lenet_cifar",
        input_shape,
        num_classes,
        convs,
        128,
        fc1_activation,
        classifier_bias,
        width,
        share_layer,
    )
