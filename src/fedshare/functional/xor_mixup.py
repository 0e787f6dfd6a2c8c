"""XOR Mixup on pixel bytes (Shin et al. 2020, Section 3, Eqs. 1–3).

Samples are handled as uint8 bytes on the 0…255 scale (the paper XORs bits; its images' grey
levels are read as bytes): a blend of p samples of one label (Eq. 1, the weights of
`fedshare.functional.mixup.fold_weights`) is computed in float, rounded half up, clipped and
cast to uint8 once at the end; XOR is the element-wise bitwise XOR of the
bytes. Encoding and decoding are the same operation, XOR with the keys (Eq. 2, Eq. 3), so
decoding with the device's own keys returns the blended target bit for bit.
"""

import torch

from fedshare.functional.mixup import fold_weights, mix


def to_bytes(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Stored inputs -> uint8 bytes: uint8 stays as is, else round(x · scale · 255) clipped.

    `scale` is the dataset's factor to [0, 1] (MNIST: uint8 and 1/255; digits: 1/16).
    """
    if x.dtype == torch.uint8:
        return x
    return quantize(x.double() * (scale * 255.0))


def from_bytes(b: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """uint8 bytes -> the dataset's stored dtype (the inverse of `to_bytes` up to rounding)."""
    if dtype == torch.uint8:
        return b
    return (b.double() / (scale * 255.0)).to(dtype)


def quantize(x: torch.Tensor) -> torch.Tensor:
    """Round half up, clip to [0, 255], cast to uint8."""
    return torch.floor(x + 0.5).clamp_(0, 255).to(torch.uint8)


def binarize(b: torch.Tensor) -> torch.Tensor:
    """The optional {0, 255} representation (threshold 128)."""
    return torch.where(b >= 128, 255, 0).to(torch.uint8)


def blend(
    samples: torch.Tensor,
    alpha: float,
    order: str = "fold_left",
    binary: bool = False,
) -> torch.Tensor:
    """g^p (Eq. 1): blend the `k` uint8 samples along dim 1 of (n, k, ...) into (n, ...) uint8.

    k = 1 returns the sample itself (α has no effect). With `binary`, inputs and the result
    are binarised ({0, 255}).
    """
    if binary:
        samples = binarize(samples)
    k = samples.shape[1]
    if k == 1:
        out = samples[:, 0]
    else:
        out = quantize(mix(samples, fold_weights(alpha, k, order)).double())
    return binarize(out) if binary else out


def xor_reduce(keys: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """XOR of uint8 keys along `dim` (order-free: XOR is associative and commutative)."""
    out = keys.select(dim, 0).clone()
    for j in range(1, keys.shape[dim]):
        out.bitwise_xor_(keys.select(dim, j))
    return out


def xor_code(x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """x ⊕ keys[:, 0] ⊕ … ⊕ keys[:, M−1] for uint8 x (n, ...) and keys (n, M, ...).

    Eq. 2 on the device (x = the target blend, keys = its dummy blends) and Eq. 3 on the server
    (x = the code, keys = the server's own dummy blends).
    """
    return torch.bitwise_xor(x, xor_reduce(keys))


def draw_distinct(
    pool_size: int, rows: int, k: int, generator: torch.Generator, device: torch.device | None
) -> torch.Tensor:
    """(rows, k) positions in [0, pool_size), distinct within each row, uniformly at random."""
    keys = torch.rand(rows, pool_size, generator=generator, device=device)
    return keys.argsort(dim=1)[:, :k]


def blend_by_label(
    x: torch.Tensor,
    y: torch.Tensor,
    labels: torch.Tensor,
    p: int,
    alpha: float,
    generator: torch.Generator,
    order: str = "fold_left",
    binary: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One blend per entry of `labels` (any shape L) from the samples `x` (uint8) of that label.

    Each blend uses min(p, available) distinct samples of its label drawn at random ("up to
    p", Section 3). Returns the blends (*L, ...) uint8 and the positions in `x` used (*L, p); rows
    with fewer than p samples repeat their first position. Every label must occur in `y`.
    """
    out = torch.empty((*labels.shape, *x.shape[1:]), dtype=torch.uint8, device=x.device)
    positions = torch.empty((*labels.shape, p), dtype=torch.long, device=x.device)
    for label in labels.unique().tolist():
        mask = labels == label
        pool = torch.nonzero(y == label).flatten()
        if pool.numel() == 0:
            raise ValueError(f"no sample of label {label} to blend")
        k = min(p, pool.numel())
        chosen = pool[draw_distinct(pool.numel(), int(mask.sum()), k, generator, x.device)]
        out[mask] = blend(x[chosen], alpha, order, binary)
        positions[mask] = torch.cat([chosen, chosen[:, :1].expand(-1, p - k)], dim=1)
    return out, positions
