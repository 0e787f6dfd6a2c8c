"""Distance correlation between inputs and their representations (FLea's Eqs. 5 and 8,
Section 3.3.2, and its code).

Two forms, both differentiable and safe at zero distances:

* ``"code"`` (FLea's official code, what produced the paper's c values): plain Euclidean
  distances, double centring, and dCov / (√dVar_x · √dVar_f) with the code's small epsilons.
  Without the epsilons this is the textbook (Székely) distance correlation
  R = √(ν²(x,f) / √(ν²(x,x)·ν²(f,f))).
* ``"paper"`` (Eq. 5 / appendix Eq. 8): squared distances and the ratio
  ν²(x,f) / √(ν²(x,x)·ν²(f,f)), without the outer square root. With squared distances the
  double-centred matrices are −2× centred Gram matrices, so this form is the RV coefficient
  (linear dependence only); ``squared=False`` gives the ratio on plain distances.

Every function takes batches of ``n`` samples with any per-sample shape (flattened), and
optional leading batch dimensions (``batch_dims``) to evaluate many groups at once.
"""

from collections.abc import Iterable
from itertools import pairwise
from typing import Literal

import torch

from fedshare.errors import FedshareError, choices_message

Variant = Literal["code", "paper"]
VARIANTS = ("code", "paper")
CODE_EPS = 1e-7  # the official code's epsilon (distances and square roots)


def _flatten(x: torch.Tensor, batch_dims: int) -> torch.Tensor:
    if x.dim() < batch_dims + 1:
        raise ValueError(f"need at least {batch_dims + 1} dims, got shape {tuple(x.shape)}")
    return x.reshape(*x.shape[: batch_dims + 1], -1)


def squared_distances(x: torch.Tensor) -> torch.Tensor:
    """Pairwise squared Euclidean distances of the rows of x (..., n, d) -> (..., n, n).

    Gram form, clamped at 0, with an exact zero diagonal.
    """
    norms = x.pow(2).sum(-1)
    sq = norms.unsqueeze(-1) + norms.unsqueeze(-2) - 2.0 * (x @ x.transpose(-1, -2))
    eye = torch.eye(x.shape[-2], dtype=torch.bool, device=x.device)
    return sq.clamp_min(0.0).masked_fill(eye, 0.0)


def _safe_sqrt(sq: torch.Tensor, eps: float) -> torch.Tensor:
    """√sq with the code's clamp at `eps`; with eps = 0, exact zeros and zero gradients there."""
    if eps > 0:
        return sq.clamp_min(eps).sqrt()
    positive = sq > 0
    return torch.where(positive, torch.where(positive, sq, 1.0).sqrt(), 0.0)


def double_center(e: torch.Tensor) -> torch.Tensor:
    """C·E·C with C = I − J/n: subtract row and column means, add back the grand mean."""
    return (
        e
        - e.mean(dim=-1, keepdim=True)
        - e.mean(dim=-2, keepdim=True)
        + e.mean(dim=(-1, -2), keepdim=True)
    )


def _nu2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ν²(a, b) = (1/n²) Σ_ik Â_ik B̂_ik for double-centred matrices."""
    return (a * b).mean(dim=(-1, -2))


def _centred(x: torch.Tensor, squared: bool, eps: float) -> torch.Tensor:
    sq = squared_distances(x)
    return double_center(sq if squared else _safe_sqrt(sq, eps))


def distance_correlation(
    x: torch.Tensor,
    f: torch.Tensor,
    variant: Variant = "code",
    eps: float = CODE_EPS,
    squared: bool | None = None,
    batch_dims: int = 0,
) -> torch.Tensor:
    """Distance correlation between n inputs `x` (n, *) and n representations `f` (n, *).

    `variant="code"` (default, FLea's code) returns dCov/(√dVar_x·√dVar_f) on plain
    distances with the code's epsilon `eps` (eps=0: the exact textbook dCor). `variant="paper"`
    returns ν²(x,f)/√(ν²(x,x)ν²(f,f)) on squared distances (`squared=False`: plain ones).
    With `batch_dims=k` the first k dims index independent groups and a tensor of that shape is
    returned. Values lie in [0, 1] (up to the epsilons).
    """
    if variant not in VARIANTS:
        raise FedshareError(choices_message("dcor variant", variant, list(VARIANTS)))
    if x.shape[: batch_dims + 1] != f.shape[: batch_dims + 1]:
        raise ValueError(f"x {tuple(x.shape)} and f {tuple(f.shape)} differ in sample count")
    if x.shape[batch_dims] < 2:
        raise ValueError("distance correlation needs at least 2 samples")
    xs, fs = _flatten(x, batch_dims), _flatten(f, batch_dims)
    if fs.dtype != xs.dtype:
        fs = fs.to(xs.dtype)
    if variant == "code":
        a, b = _centred(xs, False, eps), _centred(fs, False, eps)
        dcov = (_nu2(a, b) + eps).clamp_min(0.0).sqrt()
        dvar_x = (_nu2(a, a) + eps).clamp_min(0.0).sqrt()
        dvar_f = (_nu2(b, b) + eps).clamp_min(0.0).sqrt()
        tiny = eps if eps > 0 else torch.finfo(xs.dtype).tiny
        return dcov / ((dvar_x + eps).sqrt() * (dvar_f + eps).sqrt()).clamp_min(tiny)
    use_sq = True if squared is None else squared
    a, b = _centred(xs, use_sq, eps), _centred(fs, use_sq, eps)
    denom = (_nu2(a, a) * _nu2(b, b)).clamp_min(0.0).sqrt()
    tiny = eps if eps > 0 else torch.finfo(xs.dtype).tiny
    return _nu2(a, b) / denom.clamp_min(tiny)


def chunks(n: int, size: int, min_size: int = 4) -> list[slice]:
    """Consecutive slices of `size` covering range(n); a remainder shorter than `min_size`
    joins the previous slice. Empty when n < min_size."""
    if n < min_size:
        return []
    size = max(size, min_size)
    bounds = [*range(0, n, size), n]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] < min_size:
        bounds.pop(-2)
    return [slice(a, b) for a, b in pairwise(bounds)]


@torch.no_grad()
def mean_distance_correlation(
    sources: torch.Tensor | Iterable[torch.Tensor],
    shared: torch.Tensor | Iterable[torch.Tensor],
    chunk: int = 32,
    variant: Variant = "code",
) -> float | None:
    """The metric of shared artefacts: mean dCor(source inputs, shared items) over consecutive
    chunks of `chunk` items (dCor's finite-sample bias depends on n, so the chunk size is
    fixed to compare strategies). Sequences of tensors are evaluated chunk-wise per tensor
    pair (e.g. per client). None when there are too few items."""
    if isinstance(sources, torch.Tensor) and isinstance(shared, torch.Tensor):
        sources, shared = [sources], [shared]
    values = []
    for src, out in zip(sources, shared, strict=True):
        src = src.reshape(src.shape[0], -1).double()
        out = out.reshape(out.shape[0], -1).double()
        for part in chunks(src.shape[0], chunk):
            values.append(distance_correlation(src[part], out[part], variant))
    if not values:
        return None
    return float(torch.stack(values).mean())
