"""Feature datasets: run a frozen backbone once over an image dataset and cache the features.

FedPFT (Beitollahi et al., 2024): a frozen foundation-model extractor f (Section 3), the
backbones and their feature sizes d (Section 5.1, App. D.1); inputs get the backbone's own
resize and mean/std.

`data=<name> data.features=<backbone>` loads the dataset as usual (subsets included), then
replaces its inputs by f(x) (float32, N×d) and picks `model=linear` as the default model. The
features are computed once and cached under `$FEDSHARE_CACHE` (`fedshare.data.cache`), keyed by
the backbone, its options and weights file, and a digest of the input tensors.

Backbones (`data.features_weights` is the weights file; `data.features_options` the rest):
- `resnet20_cifar`: the pretrained CIFAR-10 ResNet-20 (64-d); weights default to
  `<data root>/pretrained/cifar10_resnet20/resnet20-12fca82f.th`; RGB in [0, 1] normalised with
  the ImageNet mean/std, at the input's own size.
- `resnet18`, `resnet50` (512-d, 2048-d) and `vit_b_16` (768-d CLS token): torchvision
  architectures with the user's weights file (required; nothing is downloaded); inputs resized
  to `resize` (224) and normalised with the ImageNet mean/std (the paper's ResNet-50 / ViT-B/16).
- `random_relu`: a fixed random projection to `dim` features followed by ReLU (seed `seed`),
  on inputs scaled to [0, 1]: a CPU stand-in extractor for digits.
Common options: `batch_size` (256) and `device` (auto: CUDA when available).
CLIP and other foundation models: extract the features yourself and load them with
`data=features_file` (`fedshare.data.feature_files`).
"""

import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.params import check_params
from fedshare.data.cache import cached
from fedshare.data.dataset import Dataset
from fedshare.data.datasets import LoadRequest
from fedshare.errors import FedshareError
from fedshare.models.base import as_block_model
from fedshare.registry import Registry

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
VERSION = 1


@dataclass
class Extractor:
    """A frozen module from prepared inputs to (n, d) features, and how to prepare them."""

    module: nn.Module
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    channels: int | None = None
    """Input channels the backbone needs (grey images are repeated to match)."""
    resize: int | None = None
    sources: list[Path] = field(default_factory=list)
    """Weights files: their size and mtime are part of the cache key."""

    def prepare(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        x = x.float() * scale
        if self.channels is not None and x.dim() == 4 and x.shape[1] != self.channels:
            if x.shape[1] != 1:
                raise FedshareError(
                    f"the feature backbone needs {self.channels}-channel images, got "
                    f"{x.shape[1]} channels"
                )
            x = x.expand(-1, self.channels, -1, -1)
        if self.resize is not None and x.dim() == 4:
            x = F.interpolate(x, size=(self.resize, self.resize), mode="bilinear")
        if self.mean is not None and self.std is not None:
            shape = (1, -1) + (1,) * (x.dim() - 2)
            x = (x - torch.tensor(self.mean, device=x.device).view(shape)) / torch.tensor(
                self.std, device=x.device
            ).view(shape)
        return x


BackboneFactory = Callable[..., Extractor]
BACKBONES: Registry[BackboneFactory] = Registry("feature backbone")


def register_backbone(name: str) -> Callable[[BackboneFactory], BackboneFactory]:
    return BACKBONES.register(name)


def _require_weights(name: str, weights: str | None, what: str) -> str:
    if not weights:
        raise FedshareError(
            f"feature backbone {name!r} needs data.features_weights=<path to {what}>; nothing "
            f"is downloaded"
        )
    return str(weights)


@register_backbone("resnet20_cifar")
def resnet20_backbone(
    input_shape: Sequence[int], weights: str | None, root: str | None
) -> Extractor:
    """The pretrained CIFAR-10 ResNet-20 (`fedshare.models.resnet_cifar`), 64-d features."""
    from fedshare.models.base import build_model
    from fedshare.models.resnet_cifar import (
        PRETRAINED_FILE,
        PRETRAINED_MEAN,
        PRETRAINED_STD,
    )
    from fedshare.models.weights import resolve_weights

    spec: bool | str = weights if weights else True
    path = resolve_weights("resnet20_cifar", spec, PRETRAINED_FILE, root)
    shape = (3, *tuple(input_shape)[1:])
    model = build_model("resnet20_cifar", shape, 10, {"pretrained": str(path)})
    return Extractor(_Features(model), PRETRAINED_MEAN, PRETRAINED_STD, channels=3, sources=[path])


def _torchvision_resnet(
    name: str, input_shape: Sequence[int], weights: str | None, resize: int
) -> Extractor:
    from fedshare.models.base import build_model

    path = Path(_require_weights(name, weights, f"a torchvision {name} state dict")).expanduser()
    shape = (3, *tuple(input_shape)[1:])
    model = build_model(name, shape, 1000, {"weights": str(path)})
    return Extractor(
        _Features(model), IMAGENET_MEAN, IMAGENET_STD, channels=3, resize=resize, sources=[path]
    )


@register_backbone("resnet18")
def resnet18_backbone(
    input_shape: Sequence[int], weights: str | None, root: str | None, resize: int = 224
) -> Extractor:
    """torchvision ResNet-18 with the user's weights, 512-d pooled features."""
    return _torchvision_resnet("resnet18", input_shape, weights, resize)


@register_backbone("resnet50")
def resnet50_backbone(
    input_shape: Sequence[int], weights: str | None, root: str | None, resize: int = 224
) -> Extractor:
    """torchvision ResNet-50 with the user's weights, 2048-d pooled features (FedPFT's
    Section 5.1)."""
    return _torchvision_resnet("resnet50", input_shape, weights, resize)


@register_backbone("vit_b_16")
def vit_b16_backbone(
    input_shape: Sequence[int], weights: str | None, root: str | None, resize: int = 224
) -> Extractor:
    """torchvision ViT-B/16 with the user's weights, the 768-d CLS token (FedPFT's Section 5.1)."""
    from torchvision import models as tv

    from fedshare.models.weights import load_into, load_state_file

    path = Path(_require_weights("vit_b_16", weights, "a torchvision ViT-B/16 state dict"))
    path = path.expanduser()
    net = tv.vit_b_16(image_size=resize)
    state = load_state_file(path)
    load_into(net, state, path, skip=lambda k: k.startswith("heads."))
    net.heads = nn.Identity()
    return Extractor(net, IMAGENET_MEAN, IMAGENET_STD, channels=3, resize=resize, sources=[path])


@register_backbone("random_relu")
def random_relu_backbone(
    input_shape: Sequence[int],
    weights: str | None,
    root: str | None,
    dim: int = 128,
    seed: int = 1234,
) -> Extractor:
    """ReLU(W x) with a fixed W ~ N(0, 1/D_in) of shape D_in × `dim` (a CPU stand-in for a
    backbone)."""
    if dim < 1:
        raise FedshareError(f"data.features_options.dim={dim} must be at least 1")
    width = math.prod(input_shape)
    gen = torch.Generator().manual_seed(seed)
    linear = nn.Linear(width, dim, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(dim, width, generator=gen) / math.sqrt(width))
    return Extractor(nn.Sequential(nn.Flatten(), linear, nn.ReLU()))


class _Features(nn.Module):
    """A `BlockModel`'s penultimate features as a module."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = as_block_model(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.features(x)


def tensor_digest(*tensors: torch.Tensor) -> str:
    """sha256 of the tensors' dtypes, shapes and bytes (the cache key of the inputs)."""
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
        digest.update(np.ascontiguousarray(t.detach().cpu().numpy()).data)
    return digest.hexdigest()[:24]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@torch.no_grad()
def run_backbone(
    extractor: Extractor, x: torch.Tensor, scale: float, batch_size: int, device: torch.device
) -> torch.Tensor:
    """f(x) for stored inputs `x`, batch by batch on `device`; float32 on the CPU."""
    module = extractor.module.to(device).eval()
    out = []
    for start in range(0, len(x), batch_size):
        batch = extractor.prepare(x[start : start + batch_size].to(device), scale)
        out.append(module(batch).flatten(1).float().cpu())
    return torch.cat(out) if out else torch.zeros(0, 0)


def backbone_options(
    backbone: str, options: Mapping[str, Any] | None
) -> tuple[int, str, dict[str, Any]]:
    """(batch size, device, the backbone's own parameters) of `data.features_options`, each
    checked: the common `batch_size` (a whole number >= 1) and `device` (a name), the rest
    against backbone `backbone`'s parameters (the pre-run check calls this too)."""
    factory = BACKBONES.get(backbone)
    rest = dict(options or {})
    batch_size = rest.pop("batch_size", 256)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise FedshareError(
            f"data.features_options.batch_size={batch_size!r} is not valid: it must be a whole "
            f"number of at least 1"
        )
    device = rest.pop("device", "auto")
    if not isinstance(device, str):
        raise FedshareError(
            f"data.features_options.device={device!r} is not valid: it must be a device name "
            f"(auto, cpu, cuda or cuda:N)"
        )
    return batch_size, device, check_params(factory, rest, "feature backbone", backbone, skip=3)


def extract_features(data: Dataset, cfg: Mapping[str, Any], request: LoadRequest) -> Dataset:
    """`data` with its inputs replaced by the cached features of backbone `cfg["features"]`."""
    backbone = str(cfg["features"])
    factory = BACKBONES.get(backbone)
    batch_size, device_name, options = backbone_options(backbone, cfg.get("features_options"))
    device = resolve_device(device_name)
    weights = cfg.get("features_weights")
    extractor = factory(
        data.input_shape, None if weights is None else str(weights), request.root, **options
    )
    key = {
        "backbone": backbone,
        "options": options,
        "version": VERSION,
        "inputs": tensor_digest(data.x_train, data.x_test),
        "scale": data.scale,
    }

    def build() -> dict[str, Any]:
        start = time.perf_counter()
        train = run_backbone(extractor, data.x_train, data.scale, batch_size, device)
        test = run_backbone(extractor, data.x_test, data.scale, batch_size, device)
        log.info(
            "features of %s by %s: %s in %.1fs",
            data.name,
            backbone,
            tuple(train.shape),
            time.perf_counter() - start,
        )
        return {"x_train": train, "x_test": test}

    payload = cached(
        f"{data.name}-features-{backbone}", key, extractor.sources, build, request.cache
    )
    return Dataset(
        f"{data.name}+{backbone}",
        payload["x_train"],
        data.y_train,
        payload["x_test"],
        data.y_test,
        num_classes=data.num_classes,
        class_names=data.class_names,
        default_model="linear",
        source=data.source,
    )
