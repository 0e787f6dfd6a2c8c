"""An in-memory dataset on the run device, with batch-level preprocessing and augmentation."""

import functools
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Augmentation:
    """Batch augmentation applied on the device during local training."""

    crop_padding: int = 0
    """Random crop of the original size after zero-padding by this many pixels (0 = off)."""
    horizontal_flip: bool = False

    @property
    def active(self) -> bool:
        return self.crop_padding > 0 or self.horizontal_flip


@dataclass
class Dataset:
    """Train and test tensors plus how to turn a gathered batch into model input.

    Inputs stay in their stored dtype (uint8 images stay uint8) until a batch is taken; a batch
    is scaled by `scale`, augmented if asked, then normalised per channel with `mean`/`std`.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    scale: float = 1.0
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    augmentation: Augmentation = field(default_factory=Augmentation)
    class_names: list[str] | None = None
    default_model: str = "mlp"
    source: str | None = None
    """Which variant of the data was read, in a few words (e.g. "rebuilt from HAPT")."""

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def device(self) -> torch.device:
        return self.x_train.device

    def to(self, device: torch.device | str) -> "Dataset":
        return replace(
            self,
            x_train=self.x_train.to(device),
            y_train=self.y_train.to(device),
            x_test=self.x_test.to(device),
            y_test=self.y_test.to(device),
        )

    def prepare(
        self, x: torch.Tensor, augment: bool = False, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Raw stored inputs -> float model inputs (scaled, optionally augmented, normalised)."""
        x = x.float()
        if self.scale != 1.0:
            x = x * self.scale
        if augment and self.augmentation.active:
            x = augment_batch(x, self.augmentation, generator)
        if self.mean is not None and self.std is not None:
            mean = channel_constant(tuple(self.mean), x.device, x.dtype, x.dim())
            std = channel_constant(tuple(self.std), x.device, x.dtype, x.dim())
            x = (x - mean) / std
        return x

    def train_batch(
        self, idx: torch.Tensor, augment: bool = False, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.prepare(self.x_train[idx], augment, generator), self.y_train[idx]


@functools.cache
def channel_constant(
    values: tuple[float, ...], device: torch.device, dtype: torch.dtype, dims: int
) -> torch.Tensor:
    """Per-channel `values` shaped to broadcast over a `dims`-dimensional N×C×… batch, made
    once per device and dtype (made per batch, it would be a host copy, a synchronisation, at
    every training step on a GPU)."""
    shape = (1, -1) + (1,) * (dims - 2)
    return torch.tensor(values, device=device, dtype=dtype).view(shape)


def augment_batch(
    x: torch.Tensor, aug: Augmentation, generator: torch.Generator | None
) -> torch.Tensor:
    """Random crop with zero padding and horizontal flip on an N×C×H×W batch, on its device."""
    n, _, h, w = x.shape
    if aug.crop_padding > 0:
        p = aug.crop_padding
        padded = F.pad(x, (p, p, p, p))
        offsets = torch.randint(0, 2 * p + 1, (2, n), generator=generator, device=x.device)
        rows = (offsets[0][:, None] + torch.arange(h, device=x.device))[:, None, :, None]
        cols = (offsets[1][:, None] + torch.arange(w, device=x.device))[:, None, None, :]
        batch = torch.arange(n, device=x.device)[:, None, None, None]
        chans = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
        x = padded[batch, chans, rows, cols]
    if aug.horizontal_flip:
        flip = torch.rand(n, generator=generator, device=x.device) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    return x
