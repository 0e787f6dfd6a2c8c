"""Inputs a frozen classifier maps to given labels, optimised from Gaussian noise (FedAA's
adversarial examples, Section 3.3 and Eq. 4).

x_adv = argmin_x Σ_i CE(model(x_i), y_i), started at x ~ N(0, σ²) and kept inside the valid
input box. Not a norm-bounded perturbation: the whole input is optimised ("fooling images").
The examples are independent given the frozen model, so minimising the summed loss of the
whole batch at once is exact and runs as one batched problem.

Solvers: `lbfgsb` (scipy's L-BFGS-B, the box-constrained L-BFGS the paper cites, float64 on the
host: the default) and `torch` (torch's L-BFGS with a strong-Wolfe line
search on the run device, projected into the box after every block of 20 iterations, each
block from a fresh history: for a GPU).
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedshare.errors import FedshareError

Objective = Callable[[torch.Tensor], torch.Tensor]
SOLVERS = ("lbfgsb", "torch")
TORCH_BLOCK = 20


@dataclass(frozen=True)
class Box:
    """Per-input bounds (broadcastable to one input)."""

    low: torch.Tensor
    high: torch.Tensor

    def clamp(self, x: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(x, self.high), self.low)


@dataclass(frozen=True)
class Fooled:
    """The examples and how well they fool the model: mean loss before and after, and the
    fraction the model assigns to its target."""

    x: torch.Tensor
    loss_start: float
    loss_end: float
    hit_rate: float


def fool(
    model: nn.Module,
    targets: torch.Tensor,
    input_shape: tuple[int, ...],
    generator: torch.Generator,
    init_std: float = 1.0,
    box: Box | None = None,
    solver: str = "lbfgsb",
    max_iter: int = 100,
) -> Fooled:
    """Optimise one input per target from N(0, init_std²) noise (drawn with `generator`, on
    its device) against the frozen `model` (evaluated in eval mode; its parameters untouched).
    """
    if solver not in SOLVERS:
        raise FedshareError(f"adv_solver={solver!r} is not a solver; valid: {', '.join(SOLVERS)}")
    device = targets.device
    was_training = model.training
    model.eval()
    x0 = torch.randn((len(targets), *input_shape), generator=generator, device=generator.device)
    x0 = x0.to(device) * init_std
    if box is not None:
        x0 = box.clamp(x0)

    def summed_loss(x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x), targets, reduction="sum")

    with torch.no_grad():
        start = summed_loss(x0).item() / len(targets)
    run = _scipy_lbfgsb if solver == "lbfgsb" else _torch_lbfgs
    x = run(summed_loss, x0, box, max_iter)
    with torch.no_grad():
        logits = model(x)
        end = F.cross_entropy(logits, targets).item()
        hits = (logits.argmax(1) == targets).float().mean().item()
    model.train(was_training)
    return Fooled(x.detach(), start, end, hits)


def _scipy_lbfgsb(
    summed_loss: Objective, x0: torch.Tensor, box: Box | None, max_iter: int
) -> torch.Tensor:
    shape, device, dtype = x0.shape, x0.device, x0.dtype

    def value_and_grad(flat: np.ndarray) -> tuple[float, np.ndarray]:
        x = torch.from_numpy(flat).to(device=device, dtype=dtype).view(shape).requires_grad_()
        loss = summed_loss(x)
        (grad,) = torch.autograd.grad(loss, x)
        return loss.item(), grad.detach().double().flatten().cpu().numpy()

    from scipy.optimize import Bounds, minimize  # here: scipy.optimize costs ~1 s to import

    bounds = None
    if box is not None:
        low = box.low.expand(shape).double().flatten().cpu().numpy()
        high = box.high.expand(shape).double().flatten().cpu().numpy()
        bounds = Bounds(low, high)
    result = minimize(
        value_and_grad,
        x0.double().flatten().cpu().numpy(),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": max_iter},
    )
    return torch.from_numpy(result.x).to(device=device, dtype=dtype).view(shape)


def _torch_lbfgs(
    summed_loss: Objective, x0: torch.Tensor, box: Box | None, max_iter: int
) -> torch.Tensor:
    """Blocks of `TORCH_BLOCK` L-BFGS iterations, each from a fresh history (a projection
    invalidates the stored curvature pairs), projected into the box after each block."""
    x = x0.clone().requires_grad_()
    for _ in range(max(1, -(-max_iter // TORCH_BLOCK))):
        optimizer = torch.optim.LBFGS(
            [x], lr=1.0, max_iter=TORCH_BLOCK, history_size=10, line_search_fn="strong_wolfe"
        )

        def closure() -> torch.Tensor:
            loss = summed_loss(x)
            (x.grad,) = torch.autograd.grad(loss, x)
            return loss

        optimizer.step(closure)
        if box is not None:
            with torch.no_grad():
                x.copy_(box.clamp(x))
    return x.detach()
