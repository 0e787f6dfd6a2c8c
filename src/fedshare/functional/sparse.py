"""Top-K sparse vectors as one byte string: a bit mask of the kept positions, then their fp32
values (DSFL's upload). At density d the string is n/8 + 4·d·n bytes against 4·n dense."""

import math

import torch

_BITS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)


def top_k_mask(vector: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the k entries of largest magnitude."""
    mask = torch.zeros(vector.numel(), dtype=torch.bool, device=vector.device)
    if k > 0:
        mask[torch.topk(vector.abs().flatten(), k).indices] = True
    return mask


def pack(vector: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """uint8 string: ⌈n/8⌉ mask bytes (big-endian bits), then the kept values as fp32 bytes."""
    n = mask.numel()
    padded = torch.zeros(math.ceil(n / 8) * 8, dtype=torch.uint8, device=mask.device)
    padded[:n] = mask.to(torch.uint8)
    bits = _BITS.to(mask.device)
    mask_bytes = (padded.view(-1, 8) * bits).sum(dim=1).to(torch.uint8)
    values = vector.flatten()[mask].to(torch.float32).contiguous().view(torch.uint8)
    return torch.cat([mask_bytes, values])


def unpack(blob: torch.Tensor, n: int) -> torch.Tensor:
    """The dense fp32 vector of length n that `pack` encoded (zeros where nothing was kept)."""
    head = math.ceil(n / 8)
    bits = _BITS.to(blob.device)
    mask = ((blob[:head, None] & bits) > 0).flatten()[:n]
    dense = torch.zeros(n, dtype=torch.float32, device=blob.device)
    dense[mask] = blob[head:].clone().view(torch.float32)  # a fresh, aligned storage
    return dense
