"""Truncated SVD of a weight update, keeping a fraction of its spectral energy (FedKD's
compression, Wu et al., Nat. Commun. 2022, "Communication-efficient federated learning via
knowledge distillation", §Methods "Dynamic gradients approximation").

A weight tensor is viewed as a matrix (its first dimension by the rest); 1-d tensors (biases,
BN vectors) travel whole. The factors are what crosses the network, so bytes count at the
compressed size.
"""

import torch


def energy_rank(singular_values: torch.Tensor, energy: float) -> int:
    """The smallest k whose top-k squared singular values hold at least `energy` of the total."""
    power = singular_values.float().pow(2)
    total = power.sum()
    if total <= 0:
        return 1
    kept = torch.cumsum(power, 0) / total
    return int(torch.searchsorted(kept, torch.tensor(energy, dtype=kept.dtype)).item()) + 1


def compress(tensor: torch.Tensor, energy: float) -> dict[str, torch.Tensor]:
    """`tensor` as {"u", "s", "v"} factors of rank k (`energy_rank`) when that is smaller than
    the matrix, else {"full": tensor}."""
    if tensor.dim() < 2:
        return {"full": tensor}
    matrix = tensor.reshape(tensor.shape[0], -1)
    u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    k = min(energy_rank(s, energy), len(s))
    rows, cols = matrix.shape
    if k * (rows + cols + 1) >= rows * cols:
        return {"full": tensor}
    return {"u": u[:, :k].contiguous(), "s": s[:k].contiguous(), "v": vh[:k].contiguous()}


def decompress(factors: dict[str, torch.Tensor], shape: torch.Size) -> torch.Tensor:
    """The tensor of `shape` that `compress` factored: U·diag(S)·V (or the full tensor)."""
    if "full" in factors:
        return factors["full"].reshape(shape)
    return ((factors["u"] * factors["s"]) @ factors["v"]).reshape(shape)


def energy_schedule(start: float, end: float, round_idx: int, rounds: int) -> float:
    """FedKD's dynamic threshold: the kept energy grows linearly from `start` in the first
    round to `end` in the last (more precise updates as the model converges)."""
    if rounds <= 1:
        return end
    return start + (end - start) * round_idx / (rounds - 1)
