"""Context-identification attack on shared items (FLea's Section 4.4 and App. D,
Fig. 9(d)).

An attacker who knows a "context" (a 5×5 square stamped near the top-left corner of channel 0,
a broken-camera spot: pixels [2:7, 2:7] at full intensity, FLea's illustration) trains a binary
classifier to tell, from what a client shares, whether the client's images carry it. It can
make any number of positive/negative examples: half of its training images get the marker,
half of the held-out test images too. What it sees depends on the method:

* `raw` — the images themselves (FedData);
* `average` — means of `group` images that all carry the marker or none (FedMix's averages,
  in the model's input space);
* `features` — single-image activations at a frozen model's split l (FLea's shared features).

Classifier: MLP in → 512 → 256 → 128 → 2 with ReLU (the paper: "4 linear layers", widths not
given), Adam 1e-3. The result is the test accuracy for each attacker training-set size; Fig.
9(d) reads off how many samples reach 90 % (FedMix ≈ 300, FLea at c = 0.4 ≈ 10,000).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.data.dataset import Dataset
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.engine.training import fit, shuffled_positions
from fedshare.errors import FedshareError
from fedshare.privacy.reconstruction import activations

VIEWS = ("raw", "average", "features")
MARKER = (slice(2, 7), slice(2, 7))


def check_images(input_shape: Sequence[int]) -> None:
    if len(input_shape) != 3 or input_shape[1] < 7 or input_shape[2] < 7:
        raise FedshareError(
            f"the context attack stamps a 5×5 marker at [2:7, 2:7] and needs C×H×W images of at "
            f"least 7×7, got {tuple(input_shape)}"
        )


def stamp(stored: torch.Tensor, dataset: Dataset) -> torch.Tensor:
    """Stored images with the marker at full intensity (255 for uint8, 1/scale otherwise)."""
    check_images(stored.shape[1:])
    marked = stored.clone()
    full = 255 if stored.dtype == torch.uint8 else 1.0 / dataset.scale
    marked[:, 0, MARKER[0], MARKER[1]] = full
    return marked


@dataclass
class ContextAttack:
    """Test accuracy (%) of the attacker for each training-set size."""

    accuracy: dict[int, float]

    def samples_for(self, target: float = 90.0) -> int | None:
        """The smallest measured training-set size reaching `target` %, None if none does."""
        return next((n for n, acc in sorted(self.accuracy.items()) if acc >= target), None)


def classifier(in_features: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(in_features, 512),
        nn.ReLU(),
        nn.Linear(512, 256),
        nn.ReLU(),
        nn.Linear(256, 128),
        nn.ReLU(),
        nn.Linear(128, 2),
    )


def context_attack(
    dataset: Dataset,
    view: str = "raw",
    model: nn.Module | None = None,
    split: int | None = None,
    sizes: Sequence[int] = (100, 300, 1000, 3000),
    test_size: int = 1000,
    group: int = 10,
    epochs: int = 30,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
) -> ContextAttack:
    """Train the attacker on each of `sizes` examples (half marked) of the training images and
    score it on `test_size` examples of the test images (half marked)."""
    if view not in VIEWS:
        raise FedshareError(f"context attack view {view!r} is not one of: {', '.join(VIEWS)}")
    if view == "features" and model is None:
        raise FedshareError("the context attack's `features` view needs the frozen model")
    represent = _view(dataset, view, model, split)
    gen = torch_generator(seed, "attack/context")
    x_test, y_test = _examples(dataset.x_test, test_size, group, view, dataset, gen)
    f_test = represent(x_test)
    result = {}
    for n in sizes:
        x, y = _examples(dataset.x_train, n, group, view, dataset, gen)
        f = represent(x)
        seed_global_torch(seed, "attack/context_classifier", n)
        net = classifier(f.shape[1]).to(f.device)
        train_classifier(net, f, y, epochs, batch_size, lr, gen)
        with torch.no_grad():
            result[n] = 100.0 * float((net(f_test).argmax(1) == y_test).float().mean())
    return ContextAttack(result)


def train_classifier(
    net: nn.Module,
    f: torch.Tensor,
    y: torch.Tensor,
    epochs: int,
    batch_size: int,
    lr: float,
    gen: torch.Generator,
) -> None:
    """Adam on cross-entropy; `gen` (a CPU generator) shuffles the batches."""
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    batches = (p.to(f.device) for p in shuffled_positions(len(y), batch_size, gen, "cpu", epochs))
    fit(optimizer, batches, lambda pos: F.cross_entropy(net(f[pos]), y[pos]))


def _examples(
    pool: torch.Tensor, n: int, group: int, view: str, dataset: Dataset, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """n examples, the first half marked: images, or groups of `group` images (average view),
    drawn at random from `pool`; labels 1 = marked."""
    per_example = group if view == "average" else 1
    picks = torch.randint(len(pool), (n, per_example), generator=gen).to(pool.device)
    images = pool[picks.flatten()]
    marked = torch.arange(n, device=pool.device) < n // 2
    flags = marked.repeat_interleave(per_example)
    images[flags] = stamp(images[flags], dataset)
    return images.view(n, per_example, *pool.shape[1:]), marked.long()


def _view(
    dataset: Dataset, view: str, model: nn.Module | None, split: int | None
) -> Callable[[torch.Tensor], torch.Tensor]:
    """stored examples (n, k, C, H, W) -> what the attacker sees, flattened (n, d)."""

    def prepared(examples: torch.Tensor) -> torch.Tensor:
        n, k = examples.shape[:2]
        return dataset.prepare(examples.flatten(0, 1)).view(n, k, *examples.shape[2:])

    if view == "raw":
        return lambda e: prepared(e)[:, 0].flatten(1)
    if view == "average":
        return lambda e: prepared(e).mean(dim=1).flatten(1)
    layer = split if split is not None else getattr(model, "flea_layer", None)
    if layer is None or model is None:
        raise FedshareError("the features view needs a block model with a FLea split")
    return lambda e: activations(model, prepared(e)[:, 0], layer).flatten(1)


SHARING = "flea, fedmix, fedbr, feddata, feature_recalibration"


def check_run_attack(
    view: dict[str, Any] | None, strategy: str, input_shape: Sequence[int], sizes: Sequence[int]
) -> None:
    """Refuse `eval.context_attack` before round 0 where it cannot run at the end."""
    if view is None:
        raise FedshareError(
            f"eval.context_attack needs a strategy that shares items derived from inputs "
            f"({SHARING}); strategy={strategy} shares none"
        )
    check_images(input_shape)
    bad = [n for n in sizes if n < 2]
    if bad:
        raise FedshareError(
            f"eval.context_attack={list(sizes)}: every size must be at least 2, not {bad}"
        )


def run_attack_summary(
    view: dict[str, Any], dataset: Dataset, sizes: Sequence[int], seed: int
) -> dict[str, Any]:
    """`summary.json` keys of the attack on a finished run's shared items."""
    result = context_attack(dataset, sizes=sizes, seed=seed, **view)
    return {
        "context_attack_view": view["view"],
        "context_attack_accuracy": {str(n): round(a, 2) for n, a in result.accuracy.items()},
        "context_attack_samples_for_90": result.samples_for(90.0),
    }
