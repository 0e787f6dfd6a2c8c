"""FedAA's classification CNN (its Section 4.1; the layer sizes the paper leaves open chosen).

The paper gives F = "two convolutional layers with 64 and 256 filters, followed by two fully
connected layers" and T = one FC layer; read here as: 5×5 conv (no padding) → ReLU →
2×2 max-pool, twice, then FC 384 → ReLU → FC 192 → ReLU (the FedAvg-era CIFAR CNN's widths),
and a linear head. 2,948,554 parameters on 3×32×32 with 10 classes; d_F = 192.

Blocks: `conv1`, `conv2`, `fc` (both FC layers, the 192-d features F(x)), `head`. FLea's split
is after `conv1`; the default `share_layer` is the penultimate split (F's output, what FedAA's
identifier and MOON's representation use). `batchnorm=True` adds BatchNorm after conv1, conv2
and the first FC layer (for the FedBN baseline of FedAA's Section 4; the paper never mentions
BN). Training-mode BN of a single sample is undefined, and a client of n ≡ 1 (mod batch size)
samples gets such a last batch: the FC layer's BN (`OneSampleSafeBatchNorm1d`) then normalises
that batch with its running statistics, as in evaluation, and leaves them unchanged.
`channels` and `hidden` scale the model down for CPU checks.
"""

from collections.abc import Sequence

import torch
from torch import nn

from fedshare.errors import FedshareError
from fedshare.models.base import (
    HEAD,
    BlockModel,
    conv_out,
    input_error,
    register_model,
    require_input,
)

KERNEL = 5


class OneSampleSafeBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d that treats a training batch of one sample as evaluation (running stats)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] == 1:
            self.eval()
            try:
                return super().forward(x)
            finally:
                self.train()
        return super().forward(x)


@register_model("fedaa_cnn")
def fedaa_cnn(
    input_shape: Sequence[int],
    num_classes: int,
    channels: Sequence[int] = (64, 256),
    hidden: Sequence[int] = (384, 192),
    batchnorm: bool = False,
    share_layer: int | None = None,
) -> BlockModel:
    """Two 5×5 conv + pool blocks, an FC block of `hidden` widths (F), a linear head (T)."""
    what = "C×H×W images"
    require_input("fedaa_cnn", input_shape, 3, what)
    if len(channels) != 2 or len(hidden) != 2:
        raise FedshareError(
            f"model fedaa_cnn needs two conv widths and two FC widths, got "
            f"channels={list(channels)}, hidden={list(hidden)}"
        )
    c, h, w = input_shape
    blocks: list[tuple[str, nn.Module]] = []
    for i, out in enumerate(channels):
        norm = [nn.BatchNorm2d(out)] if batchnorm else []
        conv = nn.Conv2d(c, out, KERNEL)
        blocks.append((f"conv{i + 1}", nn.Sequential(conv, *norm, nn.ReLU(), nn.MaxPool2d(2))))
        c = out
        h, w = (conv_out(conv_out(s, KERNEL), 2, 2) for s in (h, w))
        if h < 1 or w < 1:
            raise input_error("fedaa_cnn", input_shape, f"{what} of at least 16×16")
    fc1, fc2 = hidden
    fc: list[nn.Module] = [nn.Flatten(), nn.Linear(c * h * w, fc1)]
    fc += [OneSampleSafeBatchNorm1d(fc1)] if batchnorm else []
    fc += [nn.ReLU(), nn.Linear(fc1, fc2), nn.ReLU()]
    blocks += [("fc", nn.Sequential(*fc)), (HEAD, nn.Linear(fc2, num_classes))]
    penultimate = len(blocks) - 1
    return BlockModel(
        blocks, share_layer=penultimate if share_layer is None else share_layer, flea_layer=1
    )
