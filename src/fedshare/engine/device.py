"""The device a run computes on and the memory layout of its model's weights."""

import torch
from torch import nn

from fedshare.config import MEMORY_FORMATS
from fedshare.errors import FedshareError


def uses_channels_last(model: nn.Module, memory_format: str) -> bool:
    """Whether `memory_format` puts `model`'s 4-d weights channels-last (`auto`: if it has any)."""
    if memory_format not in MEMORY_FORMATS:
        raise FedshareError(
            f"memory_format={memory_format!r} is not a memory format; valid: "
            f"{', '.join(MEMORY_FORMATS)}"
        )
    if memory_format == "auto":
        return any(p.dim() == 4 for p in model.parameters())
    return memory_format == "channels_last"


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise FedshareError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FedshareError(f"device={name!r} was asked for but no CUDA device is available")
    return device
