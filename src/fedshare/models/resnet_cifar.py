"""The CIFAR ResNet-20 of He et al. (2016), option-A shortcuts, with its pretrained weights.

Stem 3×3 conv 16 + BN + ReLU; three stages of 3 basic blocks (16, 32, 64 channels; the second
and third start at stride 2); global average pooling to 64-d features; `linear` head. Shortcuts
have no parameters: stride-2 subsampling plus zero channel padding (270K parameters).
Blocks: `stem`, `layer1`, `layer2`, `layer3`, `pool`, `head`.

`pretrained` loads the CIFAR-10 checkpoint `resnet20-12fca82f.th` (from
akamaster/pytorch_resnet_cifar10; 91.5% on the 1,000 sample test images). That checkpoint was
trained on RGB in [0, 1] normalised with the ImageNet mean/std (`PRETRAINED_MEAN`,
`PRETRAINED_STD`): give the data those statistics.
"""

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.errors import FedshareError
from fedshare.models.base import HEAD, BlockModel, register_model, require_input
from fedshare.models.weights import load_into, load_state_file, resolve_weights

PRETRAINED_FILE = "pretrained/cifar10_resnet20/resnet20-12fca82f.th"
PRETRAINED_MEAN = (0.485, 0.456, 0.406)
PRETRAINED_STD = (0.229, 0.224, 0.225)
STAGES = (16, 32, 64)


class PadShortcut(nn.Module):
    """Option-A shortcut: subsample by `stride`, then zero-pad the channels evenly."""

    def __init__(self, stride: int, extra_channels: int) -> None:
        super().__init__()
        self.stride = stride
        self.pad = (extra_channels // 2, extra_channels - extra_channels // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x[:, :, :: self.stride, :: self.stride], (0, 0, 0, 0, *self.pad))


class BasicBlock(nn.Module):
    """conv3×3 (stride) + BN + ReLU, conv3×3 + BN, add the shortcut, ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = PadShortcut(stride, c_out - c_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def checkpoint_key(key: str) -> str:
    """Checkpoint key (`module.` stripped) -> ours: conv1/bn1 -> stem, linear -> head."""
    for old, new in (("conv1.", "stem.0."), ("bn1.", "stem.1."), ("linear.", f"{HEAD}.")):
        if key.startswith(old):
            return f"blocks.{new}{key.removeprefix(old)}"
    return f"blocks.{key}"


@register_model("resnet20_cifar")
def resnet20_cifar(
    input_shape: Sequence[int],
    num_classes: int,
    pretrained: bool | str = False,
    data_root: str | None = None,
    freeze: bool = False,
    blocks_per_stage: int = 3,
    share_layer: int | None = None,
) -> BlockModel:
    """ResNet-(6n+2) for CIFAR with n = `blocks_per_stage` (3: ResNet-20).

    `pretrained`: False (random init), True (the checkpoint under the data root: `data_root`,
    $FEDSHARE_DATA or the default cache) or a path (file, or a root folder holding it). With
    `num_classes` other than 10 the backbone loads and the head stays random. `freeze` fixes
    everything but the head (a frozen feature extractor). Default `share_layer`: the 64-d
    penultimate features; `flea_layer`: after `layer1` (16×32×32).
    """
    require_input("resnet20_cifar", input_shape, 3, "C×32×32 (CIFAR-sized) images", (None, 32, 32))
    c_in = input_shape[0]
    blocks: list[tuple[str, nn.Module]] = [
        (
            "stem",
            nn.Sequential(
                nn.Conv2d(c_in, STAGES[0], 3, 1, 1, bias=False),
                nn.BatchNorm2d(STAGES[0]),
                nn.ReLU(),
            ),
        )
    ]
    c = STAGES[0]
    for i, c_out in enumerate(STAGES):
        stage = [
            BasicBlock(c if b == 0 else c_out, c_out, 2 if (i > 0 and b == 0) else 1)
            for b in range(blocks_per_stage)
        ]
        blocks.append((f"layer{i + 1}", nn.Sequential(*stage)))
        c = c_out
    blocks += [
        ("pool", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())),
        (HEAD, nn.Linear(c, num_classes)),
    ]
    share = len(blocks) - 1 if share_layer is None else share_layer
    model = BlockModel(blocks, share, flea_layer=2)  # FLea: stem + layer1, 16×32×32
    for module in model.modules():
        if isinstance(module, nn.Conv2d | nn.Linear):
            nn.init.kaiming_normal_(module.weight)
    if pretrained is not False:
        if c_in != 3 or blocks_per_stage != 3:
            raise FedshareError(
                f"pretrained ResNet-20 weights need 3-channel images and blocks_per_stage=3, "
                f"got input shape {tuple(input_shape)} and blocks_per_stage={blocks_per_stage}"
            )
        path = resolve_weights("resnet20_cifar", pretrained, PRETRAINED_FILE, data_root)
        state = load_state_file(path)
        skip_head = (
            num_classes != state["linear.weight"].shape[0] if "linear.weight" in state else False
        )
        load_into(
            model,
            state,
            path,
            checkpoint_key,
            lambda k: skip_head and k.startswith(f"blocks.{HEAD}."),
        )
    if freeze:
        model.freeze()
    return model
