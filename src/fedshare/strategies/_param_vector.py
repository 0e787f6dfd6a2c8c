"""The trainable parameters of a model as one vector, for methods that keep per-parameter
state (SCAFFOLD's control variates, FedDyn's gradient term and server state `h`)."""

import torch
from torch import nn

from fedshare.engine.flat import FlatState
from fedshare.strategies.base import ClientSetup, SetupContext, Strategy


class ParamVector:
    """Maps the trainable parameters to positions in `FlatState`'s flat vector.

    The order is `FlatState`'s (state-dict order); buffers such as BatchNorm statistics and
    frozen parameters are left out. `index` selects the parameter entries of a flat vector.
    """

    def __init__(self, model: nn.Module, flat: FlatState) -> None:
        trainable = {name for name, p in model.named_parameters() if p.requires_grad}
        positions: list[torch.Tensor] = []
        self.names: list[str] = []
        offset = 0
        for name, size in zip(flat.names, flat.sizes, strict=True):
            if name in trainable:
                self.names.append(name)
                positions.append(torch.arange(offset, offset + size))
            offset += size
        self.index = torch.cat(positions) if positions else torch.zeros(0, dtype=torch.long)
        self.numel = int(self.index.numel())
        self.sizes = [int(p.numel()) for p in self.params(model)]
        self.shapes = [tuple(p.shape) for p in self.params(model)]

    def params(self, model: nn.Module) -> list[torch.Tensor]:
        """The trainable parameters of `model` (the worker or the global model) in order."""
        named = dict(model.named_parameters())
        return [named[name] for name in self.names]

    def of(self, flat_vector: torch.Tensor) -> torch.Tensor:
        """The parameter entries of a flat state vector."""
        return flat_vector[self.index.to(flat_vector.device)]

    def per_param(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """A stack of parameter vectors (one row per client) split per parameter, by name
        and shaped as the stacked parameters of batched training (`fedshare.engine.batched`)."""
        chunks = rows.split(self.sizes, dim=1)
        return {
            name: chunk.reshape(len(rows), *shape)
            for name, chunk, shape in zip(self.names, chunks, self.shapes, strict=True)
        }

    def add_to_grads(
        self, params: list[torch.Tensor], vector: torch.Tensor, alpha: float = 1.0
    ) -> None:
        """grad += alpha · vector (split per parameter); parameters without a gradient in this
        step are left alone, as FedProx does."""
        grads, chunks = [], []
        for p, chunk in zip(params, vector.split(self.sizes), strict=True):
            if p.grad is not None:
                grads.append(p.grad)
                chunks.append(chunk.view_as(p.grad))
        if grads:
            torch._foreach_add_(grads, chunks, alpha=alpha)


class ParamVectorStrategy(Strategy):
    """A strategy whose both sides keep per-parameter vectors: `self.pv` on each side."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.pv = ParamVector(ctx.model, self.flat)

    def client_setup(self, ctx: ClientSetup) -> None:
        super().client_setup(ctx)
        self.pv = ParamVector(ctx.model, self.flat)
