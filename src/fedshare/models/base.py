"""Models as stacks of named blocks, so "the first l blocks" and "the rest" are slices.

Device options: `prepare_for_device(model, device, channels_last=True)` moves a model and
stores its 4-d weights channels-last (convolutions then run NHWC on a GPU). Every model here is
plain conv/BN/linear, so it runs under `torch.autocast` unchanged; autocast belongs to the
training loop (the engine), not to the model.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

import torch
from torch import nn

from fedshare.config.params import check_params
from fedshare.errors import FedshareError
from fedshare.registry import Registry

HEAD = "head"


class BlockModel(nn.Module):
    """An ordered stack of named blocks; the last one is the classifier `head`.

    `encode(x, upto=l)` runs blocks [0, l); `decode(f, start=l)` runs blocks [l, end), so
    `decode(encode(x, l), l) == forward(x)` for every split point l. `features(x)` is the
    penultimate representation (the input of the head). `share_layer` is the default split
    point of the methods that work on it (e.g. ReBaFL's penultimate features); `flea_layer` is
    FLea's split, an early block (None: the model has no FLea split, e.g. `linear`).
    """

    def __init__(
        self,
        blocks: Sequence[tuple[str, nn.Module]],
        share_layer: int = 1,
        flea_layer: int | None = None,
    ) -> None:
        super().__init__()
        names = [name for name, _ in blocks]
        if not names or names[-1] != HEAD:
            raise ValueError(f"the last block must be named {HEAD!r}, got {names}")
        self.blocks = nn.ModuleDict(dict(blocks))
        if not 0 <= share_layer < len(names):
            raise FedshareError(
                f"share_layer={share_layer} is not a split point of this model; valid: "
                f"0..{len(names) - 1} (blocks: {', '.join(names)})"
            )
        if flea_layer is not None and not 0 <= flea_layer < len(names):
            raise ValueError(f"flea_layer={flea_layer} is not a split point of blocks {names}")
        self.share_layer = share_layer
        self.flea_layer = flea_layer
        self.frozen_upto = 0

    @property
    def block_names(self) -> list[str]:
        return list(self.blocks.keys())

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def penultimate(self) -> int:
        """The split whose activations are the head's input (`features(x)`)."""
        return self.num_blocks - 1

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

    def freeze(self, upto: int | None = None) -> Self:
        """Freeze blocks [0, upto) (default: all but the head) as a fixed feature extractor.

        Their parameters stop requiring gradients and they stay in eval mode (BatchNorm keeps
        its running statistics) even when `train()` is called on the whole model.
        """
        stop = self.num_blocks - 1 if upto is None else upto
        if not 0 <= stop <= self.num_blocks:
            raise FedshareError(f"cannot freeze {stop} blocks of a {self.num_blocks}-block model")
        for i, block in enumerate(self.blocks.values()):
            block.requires_grad_(i >= stop)
        self.frozen_upto = stop
        return self.train(self.training)

    def train(self, mode: bool = True) -> Self:
        super().train(mode)
        for block in list(self.blocks.values())[: getattr(self, "frozen_upto", 0)]:
            block.eval()
        return self


def require_body(model: nn.Module, strategy: str) -> BlockModel:
    """`model`; refused if it has nothing before its head, for a method that trains or reads a
    body."""
    if not isinstance(model, BlockModel) or model.num_blocks < 2:
        raise FedshareError(
            f"strategy {strategy} needs a model with a feature extractor before its head; "
            f"{getattr(model, 'block_names', type(model).__name__)} has none (use e.g. model=mlp)"
        )
    return model


def as_block_model(model: nn.Module) -> BlockModel:
    """`model` as the `BlockModel` every registered model is (`build_model`), for code handed
    a plain `nn.Module` (a client's worker model) that calls `encode`, `features` or `head`."""
    if not isinstance(model, BlockModel):
        raise TypeError(f"expected a BlockModel (a registered model), got {type(model).__name__}")
    return model


def feature_width(model: nn.Module, input_shape: Sequence[int]) -> int:
    """The size of `model.features` for one input of `input_shape` (probed in eval mode)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        probe = torch.zeros((1, *input_shape), device=next(model.parameters()).device)
        width = as_block_model(model).features(probe).flatten(1).shape[1]
    model.train(was_training)
    return int(width)


def prepare_for_device(
    model: nn.Module, device: torch.device | str | None = None, channels_last: bool = False
) -> nn.Module:
    """Move `model` to `device` (in place) and, if asked, store its 4-d weights channels-last.

    Channels-last pays off for convolutions on a GPU (tensor cores, especially under autocast
    with float16/bfloat16); outputs are the same up to floating-point rounding.
    """
    if channels_last:
        # `memory_format` is a keyword `Module.to` takes at run time but not in torch's stubs
        return model.to(device=device, memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model.to(device=device)


ModelFactory = Callable[..., BlockModel]
MODELS: Registry[ModelFactory] = Registry("model", builtins="fedshare.models")


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


def require_widths(name: str, **widths: int | Sequence[int]) -> None:
    """Refuse a layer width (or list of widths) below 1, naming the model parameter."""
    for key, value in widths.items():
        values = [value] if isinstance(value, int) else list(value)
        if any(v < 1 for v in values):
            raise FedshareError(
                f"model {name!r} parameter {key}={value!r} is not valid: layer widths must be "
                f"at least 1"
            )


def require_input(
    name: str,
    input_shape: Sequence[int],
    ndim: int,
    what: str,
    exact: Sequence[int | None] | None = None,
) -> None:
    """Raise a clear error when a model cannot take inputs of `input_shape`.

    `what` names the inputs the model takes (e.g. "C×H×W images"); `ndim` is the number of
    dimensions without the batch; `exact`, if given, fixes some of them (None = any size), e.g.
    `(None, 32, 32)` for C×32×32 images.
    """
    fits = len(input_shape) == ndim
    if fits and exact is not None:
        fits = all(e is None or e == s for e, s in zip(exact, input_shape, strict=True))
    if not fits:
        raise input_error(name, input_shape, what)


def input_error(name: str, input_shape: Sequence[int], what: str) -> FedshareError:
    """The one-sentence error for data whose per-sample shape a model cannot take."""
    return FedshareError(
        f"model {name!r} expects {what}, but the data has shape "
        f"{tuple(input_shape)}; choose a model that fits this dataset (model=auto picks the "
        f"dataset's default)"
    )


def conv_out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output length of a convolution or pooling along one axis."""
    return (size + 2 * padding - kernel) // stride + 1


def scaled(channels: int, width: float) -> int:
    """`channels` times the width multiplier, rounded, at least 1."""
    if width <= 0:
        raise FedshareError(f"model width multiplier must be positive, got {width}")
    return max(1, round(channels * width))
