"""`model.pt`: the run's final global model, apart from the resume checkpoint.

The file holds plain types and tensors only, so `torch.load(path, weights_only=True)` reads
it: the registry name of the model, its options, the input shape and class count it was built
for, and its `state_dict`. `load_model(run_dir)` rebuilds the model from the registry and
loads the weights.
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
    atomically to `path`."""
    state = {
        "model": name,
        "params": dict(params or {}),
        "input_shape": list(data.dataset.input_shape),
        "num_classes": int(data.dataset.num_classes),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_model(run_dir: str | Path, device: str = "cpu") -> nn.Module:
    """The final global model of the run in `run_dir` (its `model.pt`), in eval mode."""
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
    model = build_model(
        state["model"], tuple(state["input_shape"]), state["num_classes"], state["params"]
    )
    model.load_state_dict(state["state_dict"])
    return model.to(device).eval()
