"""Models as stacks of named blocks, so "the first l blocks" and "the rest" are slices."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from fedshare.errors import FedshareError
from fedshare.params import check_params
from fedshare.registry import Registry

HEAD = "head"


class BlockModel(nn.Module):
    """An ordered stack of named blocks; the last one is the classifier `head`.

    `encode(x, upto=l)` runs blocks [0, l); `decode(f, start=l)` runs blocks [l, end), so
    `decode(encode(x, l), l) == forward(x)` for every split point l. `features(x)` is the
    penultimate representation (the input of the head). `share_layer` is the default split
    point for methods that share activations (FLea's l).
    """

    def __init__(self, blocks: Sequence[tuple[str, nn.Module]], share_layer: int = 1) -> None:
        super().__init__()
        names = [name for name, _ in blocks]
        if not names or names[-1] != HEAD:
            raise ValueError(f"the last block must be named {HEAD!r}, got {names}")
        self.blocks = nn.ModuleDict(blocks)
        if not 0 <= share_layer < len(names):
            raise ValueError(f"share_layer={share_layer} outside 0..{len(names) - 1}")
        self.share_layer = share_layer

    @property
    def block_names(self) -> list[str]:
        return list(self.blocks.keys())

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def head(self) -> nn.Module:
        return self.blocks[HEAD]

    def block_index(self, name: str) -> int:
        try:
            return self.block_names.index(name)
        except ValueError:
            raise FedshareError(
                f"model has no block {name!r}; blocks: {', '.join(self.block_names)}"
            ) from None

    def encode(self, x: torch.Tensor, upto: int | None = None) -> torch.Tensor:
        """Run the first `upto` blocks (default: all but the head)."""
        stop = self.num_blocks - 1 if upto is None else upto
        for block in list(self.blocks.values())[:stop]:
            x = block(x)
        return x

    def decode(self, f: torch.Tensor, start: int) -> torch.Tensor:
        """Run blocks `start` to the end on the activations `f` of block `start`."""
        for block in list(self.blocks.values())[start:]:
            f = block(f)
        return f

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate features: the input of the classifier head."""
        return self.encode(x, self.num_blocks - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks.values():
            x = block(x)
        return x


ModelFactory = Callable[..., BlockModel]
MODELS: Registry[ModelFactory] = Registry("model")


def register_model(name: str) -> Callable[[ModelFactory], ModelFactory]:
    return MODELS.register(name)


def build_model(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    params: Mapping[str, Any] | None = None,
) -> BlockModel:
    """Build model `name` for inputs of `input_shape` (without batch) and `num_classes`."""
    factory = MODELS.get(name)
    kwargs = check_params(factory, dict(params or {}), "model", name, skip=2)
    return factory(tuple(input_shape), num_classes, **kwargs)


def require_input(name: str, input_shape: Sequence[int], ndim: int, what: str) -> None:
    """Raise a clear error when a model cannot take inputs of `input_shape`."""
    if len(input_shape) != ndim:
        raise FedshareError(
            f"model {name!r} expects {what} inputs, but the data has shape "
            f"{tuple(input_shape)}; choose a model that fits this dataset"
        )
