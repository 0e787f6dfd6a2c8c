"""A model's floating-point state as one flat vector: the unit that crosses the network."""

import torch
from torch import nn


class FlatState:
    """Flattens and loads the floating-point state-dict entries (parameters and BN statistics).

    Integer buffers (e.g. BatchNorm's `num_batches_tracked`) stay on each model as they are.
    """

    def __init__(self, model: nn.Module) -> None:
        state = model.state_dict()
        self.names = [k for k, v in state.items() if v.is_floating_point()]
        self.sizes = [state[k].numel() for k in self.names]
        self.shapes = [state[k].shape for k in self.names]
        self.numel = sum(self.sizes)

    def tensors(self, model: nn.Module) -> list[torch.Tensor]:
        state = model.state_dict(keep_vars=False)
        return [state[k] for k in self.names]

    def flatten(self, model: nn.Module) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([t.reshape(-1) for t in self.tensors(model)])

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """`flat` as named tensors shaped like the state entries (views, no copy): the
        arguments of `torch.func.functional_call`, so it works under `vmap` too."""
        chunks = flat.split(self.sizes)
        return {
            n: c.view(shape) for n, c, shape in zip(self.names, chunks, self.shapes, strict=True)
        }

    def load_(self, model: nn.Module, flat: torch.Tensor) -> nn.Module:
        """Copy `flat` into `model` in place (no new module, no deepcopy)."""
        if flat.numel() != self.numel:
            raise ValueError(f"flat state has {flat.numel()} values, the model {self.numel}")
        with torch.no_grad():
            for target, chunk in zip(self.tensors(model), flat.split(self.sizes), strict=True):
                target.copy_(chunk.view_as(target))
        return model
