"""torchvision ResNet-18/50 backbones as `BlockModel`s, with the user's weights if given.

Blocks: `stem` (optional resize, conv1, bn1, ReLU, max-pool), `layer1` ... `layer4`, `pool`
(global average + flatten: 512-d / 2048-d features), `head`; FLea's split (`flea_layer`) is
after `layer1`. Weights come only from a local file (`weights: <path>` to a torchvision state
dict, e.g. `resnet50-0676ba61.pth`); nothing is downloaded. Without weights the model is
randomly initialised (a log note says so). FedPFT (Beitollahi et al., 2024, Section 5.1) uses an
ImageNet ResNet-50 frozen, on inputs resized to 224 with ImageNet mean/std:
`weights=<file> freeze=true resize=224`.
"""

import logging
from collections.abc import Sequence

from torch import nn

from fedshare.errors import FedshareError
from fedshare.models.base import HEAD, BlockModel, register_model, require_input
from fedshare.models.weights import load_into, load_state_file, resolve_weights

log = logging.getLogger(__name__)


def wrap_resnet(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    weights: str | None,
    freeze: bool,
    resize: int | None,
    share_layer: int | None,
) -> BlockModel:
    """Build torchvision's `name`, load `weights` into it, and regroup it into named blocks."""
    from torchvision import models as tv  # imported here: keeps `import fedshare` light

    require_input(name, input_shape, 3, "C×H×W images")
    # weights=None: random init, never a download
    net: tv.ResNet = getattr(tv, name)(num_classes=num_classes)
    if weights is not None:
        if input_shape[0] != 3:
            raise FedshareError(
                f"model {name!r} with weights needs 3-channel images, but the data has shape "
                f"{tuple(input_shape)}"
            )
        path = resolve_weights(name, weights, "", None)
        state = load_state_file(path)
        head = state.get("fc.weight")
        # A head for another number of classes (e.g. ImageNet's 1000) stays randomly initialised.
        skip_head = head is None or head.shape[0] != num_classes
        load_into(net, state, path, skip=lambda k: skip_head and k.startswith("fc."))
    else:
        log.warning("model %r: no weights given, random initialisation", name)
    if input_shape[0] != 3:
        net.conv1 = nn.Conv2d(input_shape[0], 64, 7, 2, 3, bias=False)
    upsample = [nn.Upsample(size=(resize, resize), mode="bilinear")] if resize else []
    blocks: list[tuple[str, nn.Module]] = [
        ("stem", nn.Sequential(*upsample, net.conv1, net.bn1, net.relu, net.maxpool)),
        ("layer1", net.layer1),
        ("layer2", net.layer2),
        ("layer3", net.layer3),
        ("layer4", net.layer4),
        ("pool", nn.Sequential(net.avgpool, nn.Flatten())),
        (HEAD, net.fc),
    ]
    share = len(blocks) - 1 if share_layer is None else share_layer
    model = BlockModel(blocks, share, flea_layer=2)  # FLea: stem + layer1
    if freeze:
        model.freeze()
    return model


@register_model("resnet18")
def resnet18(
    input_shape: Sequence[int],
    num_classes: int,
    weights: str | None = None,
    freeze: bool = False,
    resize: int | None = None,
    share_layer: int | None = None,
) -> BlockModel:
    """torchvision ResNet-18 (512-d features); see the module docstring for the options."""
    return wrap_resnet("resnet18", input_shape, num_classes, weights, freeze, resize, share_layer)


@register_model("resnet50")
def resnet50(
    input_shape: Sequence[int],
    num_classes: int,
    weights: str | None = None,
    freeze: bool = False,
    resize: int | None = None,
    share_layer: int | None = None,
) -> BlockModel:
    """torchvision ResNet-50 (2048-d features); see the module docstring for the options."""
    return wrap_resnet("resnet50", input_shape, num_classes, weights, freeze, resize, share_layer)
