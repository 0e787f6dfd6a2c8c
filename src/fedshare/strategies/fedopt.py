"""Server optimizers on FedAvg's mean update: FedAdagrad, FedAdam and FedYogi (Reddi et al.,
ICLR 2021, "Adaptive Federated Optimization", Alg. 2) and FedAvgM (Hsu et al. 2019, "Measuring
the Effects of Non-Identical Data Distribution for Federated Visual Classification", §3, server
momentum).

Clients train as in FedAvg; the server treats Δ_t = mean_k(y_k) − x_t (the sample-weighted mean
update, i.e. minus a pseudo-gradient) as the input of an optimizer. Reddi et al.'s Alg. 2:

    m_t = β1·m_{t−1} + (1 − β1)·Δ_t
    v_t = v_{t−1} + Δ_t²                                    (FedAdagrad)
    v_t = β2·v_{t−1} + (1 − β2)·Δ_t²                        (FedAdam)
    v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²)      (FedYogi)
    x_{t+1} = x_t + η·m_t / (√v_t + τ)

with no bias correction (as in Alg. 2) and v_{−1} = v0 (Alg. 2 asks v_{−1} ≥ τ²). Hsu et al.'s
server momentum: v_t = β·v_{t−1} − Δ_t, x_{t+1} = x_t − η·v_t (η = 1 in their update; β = 0 is
FedAvg). Defaults: η = 0.01, β1 = 0.9, β2 = 0.99, τ = 1e-3, v0 = 1e-6 are the FedYogi settings
of FedPFT's baselines (Beitollahi et al. 2024, Appendix "FedYogi"), shared by the adaptive
family; FedAvgM's β = 0.9 is the usual SGD momentum (a documented rule: Hsu et al. sweep β and
the server learning rate rather than fix one), η = 1 their update's. The step applies to the
model's parameters; floating-point buffers (BatchNorm running statistics) take the plain mean of
the clients' values, as FedAvg does (an Adam step could drive a running variance below zero).
The optimizer's state is server state and is checkpointed.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fedshare.config.rules import NON_NEGATIVE, POSITIVE, Rule, ruled
from fedshare.strategies.base import SetupContext, Update, register_strategy
from fedshare.strategies.fedavg import FedAvg


@dataclass
class _ServerOptimizer(FedAvg):
    """FedAvg clients; the server steps its parameters from the clients' mean (`step`) and
    keeps `state_names` as checkpointed server state."""

    state_names: ClassVar[tuple[str, ...]] = ()

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        params = {name for name, p in ctx.model.named_parameters()}
        mask = [
            torch.full((n,), name in params, dtype=torch.bool)
            for name, n in zip(self.flat.names, self.flat.sizes, strict=True)
        ]
        self.param_mask = torch.cat(mask).to(ctx.device)
        self.init_state(int(self.param_mask.sum()), ctx.device)

    def init_state(self, size: int, device: torch.device) -> None:
        """The optimizer's state for `size` parameters."""
        raise NotImplementedError

    def step(self, x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """The new parameters from the current ones `x` and the mean update Δ_t."""
        raise NotImplementedError

    def server_step(self, x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        """The new flat global state from the current one `x` and the clients' mean."""
        new = mean.clone()  # buffers: the plain mean
        mask = self.param_mask
        new[mask] = self.step(x[mask], mean[mask] - x[mask])
        return new

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        mean = self.average_weights(updates)
        x = self.flat.flatten(self.model)
        self.load_weights(self.model, self.server_step(x, mean))
        self.round_metrics["server_update_norm"] = float((mean - x).norm())

    def state_dict(self) -> dict[str, Any]:
        own = {name: getattr(self, name).cpu() for name in self.state_names}
        return {**super().state_dict(), **own}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        for name in self.state_names:
            setattr(self, name, state[name].to(getattr(self, name).device))


DECAY = Rule(low=0, high=1, high_open=True)
"""A decay or momentum factor: [0, 1)."""


@dataclass
class _FedOpt(_ServerOptimizer):
    """Reddi et al.'s Alg. 2 with the second moment of a subclass (`_second_moment`)."""

    state_names: ClassVar[tuple[str, ...]] = ("m", "v")

    eta: float = ruled(
        0.01,
        POSITIVE,
        source="paper: FedPFT App. D.1 'FedYogi' (Beitollahi et al. 2024), server lr 0.01",
    )
    beta1: float = ruled(
        0.9,
        DECAY,
        source="paper: FedPFT App. D.1 'FedYogi' (Beitollahi et al. 2024), β1 = 0.9",
    )
    tau: float = ruled(
        1e-3,
        NON_NEGATIVE,
        source="paper: FedPFT App. D.1 'FedYogi' (Beitollahi et al. 2024), τ = 0.001",
    )
    v0: float = ruled(
        1e-6,
        NON_NEGATIVE,
        source="paper: FedPFT App. D.1 'FedYogi' (Beitollahi et al. 2024), v initialised to 1e-6",
    )

    def init_state(self, size: int, device: torch.device) -> None:
        self.m = torch.zeros(size, device=device)
        self.v = torch.full((size,), self.v0, device=device)

    def _second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def step(self, x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        self.m = self.beta1 * self.m + (1 - self.beta1) * delta
        self.v = self._second_moment(self.v, delta * delta)
        return x + self.eta * self.m / (self.v.sqrt() + self.tau)


@dataclass
class _FedOptDecay(_FedOpt):
    """Alg. 2's members with a second-moment decay β2 (FedAdam, FedYogi)."""

    beta2: float = ruled(
        0.99,
        DECAY,
        source="paper: FedPFT App. D.1 'FedYogi' (Beitollahi et al. 2024), β2 = 0.99",
    )


@register_strategy("fedadagrad")
@dataclass
class FedAdagrad(_FedOpt):
    """FedAdagrad: v_t = v_{t−1} + Δ_t² (Reddi et al. 2021, Alg. 2)."""

    def _second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return v + delta_sq


@register_strategy("fedadam")
@dataclass
class FedAdam(_FedOptDecay):
    """FedAdam: v_t = β2·v_{t−1} + (1 − β2)·Δ_t² (Reddi et al. 2021, Alg. 2)."""

    def _second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return self.beta2 * v + (1 - self.beta2) * delta_sq


@register_strategy("fedyogi")
@dataclass
class FedYogi(_FedOptDecay):
    """FedYogi: v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²) (Reddi et al. 2021, Alg. 2)."""

    def _second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return v - (1 - self.beta2) * delta_sq * torch.sign(v - delta_sq)


@register_strategy("fedavgm")
@dataclass
class FedAvgM(_ServerOptimizer):
    """FedAvgM: v_t = β·v_{t−1} − Δ_t, x_{t+1} = x_t − η·v_t (Hsu et al. 2019, §3: SGD with
    momentum on the pseudo-gradient −Δ_t; v_{−1} = 0)."""

    state_names: ClassVar[tuple[str, ...]] = ("velocity",)

    server_lr: float = ruled(
        1.0,
        POSITIVE,
        source="paper: FedAvgM (Hsu et al. 2019) §3, server step η = 1 (β = 0 is then FedAvg)",
    )
    momentum: float = ruled(
        0.9,
        DECAY,
        source="rule: Hsu et al. 2019 sweep β; 0.9, the usual SGD momentum",
    )

    def init_state(self, size: int, device: torch.device) -> None:
        self.velocity = torch.zeros(size, device=device)

    def step(self, x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        self.velocity = self.momentum * self.velocity - delta
        return x - self.server_lr * self.velocity
