"""Random streams derived from (seed, purpose, round, client).

Every random choice in a run draws from its own stream, so the numbers of one client or one
round never depend on what ran before or beside it, and a resumed run equals an
uninterrupted one.
"""

import zlib

import numpy as np
import torch


def derive_seed(seed: int, purpose: str, *keys: int) -> int:
    """A 63-bit seed that depends only on the seed, the purpose string and the integer keys."""
    words = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, zlib.crc32(purpose.encode())]
    words += [k + 1 if k >= 0 else 0 for k in keys]  # -1 means "none" and maps to 0
    state = np.random.SeedSequence(words).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def torch_generator(
    seed: int, purpose: str, *keys: int, device: torch.device | str = "cpu"
) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, purpose, *keys))
    return gen


def numpy_rng(seed: int, purpose: str, *keys: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, purpose, *keys))


def seed_global_torch(seed: int, purpose: str, *keys: int) -> None:
    """Seed torch's global generator (used by module init and dropout) from a derived stream."""
    torch.manual_seed(derive_seed(seed, purpose, *keys))
