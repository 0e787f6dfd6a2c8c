"""`model.pt`: the run's final global model, apart from the resume checkpoint.

The file holds plain types and tensors only, so `torch.load(path, weights_only=True)` reads
it: the registry name of the model, its options, the input shape and class count it was built
for, how raw inputs become model inputs (the dataset's scale, per-channel mean and std), and
its `state_dict`. `load_model(run_dir)` rebuilds the model from the registry, loads the
weights and wraps it so that it takes the dataset's raw inputs, as stored in `x_test`.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedshare.errors import FedshareError

MODEL_FILE = "model.pt"


def save_model(
    path: Path, model: nn.Module, name: str, params: Mapping[str, Any] | None, data: Any
) -> None:
    """Write `model` (built as registry model `name` with `params` for `data`'s dataset)
    atomically to `path`, with the dataset's input preparation."""
    dataset = data.dataset
    state = {
        "model": name,
        "params": dict(params or {}),
        "input_shape": list(dataset.input_shape),
        "num_classes": int(dataset.num_classes),
        "input": {
            "scale": float(dataset.scale),
            "mean": None if dataset.mean is None else [float(m) for m in dataset.mean],
            "std": None if dataset.std is None else [float(s) for s in dataset.std],
        },
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


class RawInputModel(nn.Module):
    """A trained network behind its dataset's input preparation: `model(x)` takes raw stored
    inputs (e.g. uint8 images, `FederatedData.dataset.x_test`) and returns logits.

    The preparation is the one the run trained and evaluated with (`Dataset.prepare` without
    augmentation): the input as float, times `scale`, minus the per-channel `mean`, over the
    per-channel `std`. `network` is the bare model, which takes prepared inputs, e.g. for
    `fedshare.engine.evaluation.evaluate(model.network, dataset)`.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self,
        network: nn.Module,
        scale: float,
        mean: list[float] | None,
        std: list[float] | None,
    ) -> None:
        super().__init__()
        self.network = network
        self.scale = scale
        self.normalised = mean is not None and std is not None
        self.register_buffer("mean", torch.tensor(mean if self.normalised else []))
        self.register_buffer("std", torch.tensor(std if self.normalised else []))

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """Raw inputs -> the network's inputs, bit for bit as the run prepared them."""
        x = x.float()
        if self.scale != 1.0:
            x = x * self.scale
        if self.normalised:
            shape = (1, -1) + (1,) * (x.dim() - 2)
            x = (x - self.mean.to(x.dtype).view(shape)) / self.std.to(x.dtype).view(shape)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(self.prepare(x))


def load_model(run_dir: str | Path, device: str = "cpu") -> RawInputModel:
    """The final global model of the run in `run_dir` (its `model.pt`), in eval mode, taking
    the dataset's raw inputs.

    >>> model = fedshare.load_model(result.run_dir)
    >>> accuracy = (model(data.dataset.x_test).argmax(1) == data.dataset.y_test).float().mean()

    gives the run's final accuracy; `model.network` is the bare network (prepared inputs).
    """
    from fedshare.models.base import MODELS, build_model

    path = Path(run_dir) / MODEL_FILE
    if not path.exists():
        raise FedshareError(f"{path} does not exist; is {run_dir} the folder of a finished run?")
    state = torch.load(path, map_location=device, weights_only=True)
    if state["model"] not in MODELS:
        raise FedshareError(
            f"{path} holds a {state['model']!r}, which is not a registered model; load its "
            f"state_dict into your own module: torch.load(path, weights_only=True)['state_dict']"
        )
    if "input" not in state:
        raise FedshareError(
            f"{path} was written before model files recorded their input preparation; rerun "
            f"the run, or load its state_dict and feed it the dataset's prepared inputs: "
            f"torch.load(path, weights_only=True)['state_dict'], dataset.prepare(x)"
        )
    network = build_model(
        state["model"], tuple(state["input_shape"]), state["num_classes"], state["params"]
    )
    network.load_state_dict(state["state_dict"])
    prep = state["input"]
    return RawInputModel(network, prep["scale"], prep["mean"], prep["std"]).to(device).eval()
