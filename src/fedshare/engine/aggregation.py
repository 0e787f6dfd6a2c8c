"""Running weighted averages over flat vectors: one accumulator, never a list of models."""

import torch


class RunningMean:
    """Accumulates sum(w_i · v_i) and sum(w_i); `value()` is the weighted mean."""

    def __init__(self) -> None:
        self._sum: torch.Tensor | None = None
        self.total_weight = 0.0

    def add(self, vector: torch.Tensor, weight: float) -> None:
        if weight < 0:
            raise ValueError(f"aggregation weight must be non-negative, got {weight}")
        if self._sum is None:
            self._sum = (
                vector.detach().to(
                    torch.float64 if vector.dtype == torch.float64 else torch.float32
                )
                * weight
            )
        else:
            self._sum.add_(vector.detach(), alpha=weight)
        self.total_weight += weight

    @property
    def empty(self) -> bool:
        return self._sum is None or self.total_weight == 0

    def value(self) -> torch.Tensor:
        if self._sum is None or self.total_weight == 0:
            raise ValueError("no updates with positive weight to average")
        return self._sum / self.total_weight
