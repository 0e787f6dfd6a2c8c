"""FedAdam and FedYogi (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Alg. 2).

Clients train as in FedAvg; the server treats Δ_t = mean_k(y_k) − x_t (the sample-weighted mean
update, i.e. minus a pseudo-gradient) as the input of an adaptive optimizer:

    m_t = β1·m_{t−1} + (1 − β1)·Δ_t
    v_t = β2·v_{t−1} + (1 − β2)·Δ_t²                        (FedAdam)
    v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²)      (FedYogi)
    x_{t+1} = x_t + η·m_t / (√v_t + τ)

with no bias correction (as in the paper's Algorithm 2) and v_{−1} = v0 (the paper asks
v_{−1} ≥ τ²). Defaults are the FedPFT spec's FedYogi settings (fedpft.md §4, the baselines of
its Figs. 1/4): η = 0.01, β1 = 0.9, β2 = 0.99, τ = 1e-3, v0 = 1e-6. The adaptive step applies to
the model's parameters; floating-point buffers (BatchNorm running statistics) take the plain
mean of the clients' values, as FedAvg does (an Adam step could drive a running variance below
zero). m and v are server state and are checkpointed.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from fedshare.config.rules import NON_NEGATIVE, POSITIVE, Rule, ruled
from fedshare.strategies.base import SetupContext, Update, register_strategy
from fedshare.strategies.fedavg import FedAvg


@dataclass
class _FedOpt(FedAvg):
    """FedAvg clients, an adaptive server step (FedAdam / FedYogi set `_second_moment`)."""

    eta: float = ruled(0.01, POSITIVE)
    beta1: float = ruled(0.9, Rule(low=0, high=1, high_open=True))
    beta2: float = ruled(0.99, Rule(low=0, high=1, high_open=True))
    tau: float = ruled(1e-3, NON_NEGATIVE)
    v0: float = ruled(1e-6, NON_NEGATIVE)

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        params = {name for name, p in ctx.model.named_parameters()}
        mask = [
            torch.full((n,), name in params, dtype=torch.bool)
            for name, n in zip(self.flat.names, self.flat.sizes, strict=True)
        ]
        self.param_mask = torch.cat(mask).to(ctx.device)
        size = int(self.param_mask.sum())
        self.m = torch.zeros(size, device=ctx.device)
        self.v = torch.full((size,), self.v0, device=ctx.device)

    def _second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def server_step(self, x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        """The new flat global state from the current one `x` and the clients' mean."""
        new = mean.clone()  # buffers: the plain mean
        mask = self.param_mask
        delta = mean[mask] - x[mask]
        self.m = self.beta1 * self.m + (1 - self.beta1) * delta
        self.v = self._second_moment(self.v, delta * delta)
        new[mask] = x[mask] + self.eta * self.m / (self.v.sqrt() + self.tau)
        return new

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        mean = self.average_weights(updates)
        x = self.flat.flatten(self.model)
        self.load_weights(self.model, self.server_step(x, mean))
        self.round_metrics["server_update_norm"] = float((mean - x).norm())

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "m": self.m.cpu(), "v": self.v.cpu()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.m = state["m"].to(self.m.device)
        self.v = state["v"].to(self.v.device)


@register_strategy("fedadam")
@dataclass
class FedAdam(_FedOpt):
    """FedAdam: v_t = β2·v_{t−1} + (1 − β2)·Δ_t² (Reddi et al. 2021, Alg. 2)."""

    def _second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return self.beta2 * v + (1 - self.beta2) * delta_sq


@register_strategy("fedyogi")
@dataclass
class FedYogi(_FedOpt):
    """FedYogi: v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²) (Reddi et al. 2021, Alg. 2)."""

    def _second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return v - (1 - self.beta2) * delta_sq * torch.sign(v - delta_sq)
