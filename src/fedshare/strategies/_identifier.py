"""FedAA's client identifier I_k (FedAA's Section 3.4, Eq. 6): a 3-layer MLP on the extractor's
features that tells client k's adversarial examples (1) from the other clients' (0).

Architecture (the paper gives 512 hidden units, Section 4.1, not the layers): d_F → hidden → hidden
→ 1 with LeakyReLU(0.2), logits out (the sigmoid lives in the loss). Loss (Eq. 6): J = mean_pos
softplus(−z) + mean_neg softplus(z), the two groups averaged separately (a batch missing a group
skips that term).
"""

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.training import fit, shuffled_positions

SLOPE = 0.2


class ClientIdentifier(nn.Module):
    def __init__(self, in_features: int, hidden: int = 512) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.LeakyReLU(SLOPE),
            nn.Linear(hidden, hidden),
            nn.LeakyReLU(SLOPE),
            nn.Linear(hidden, 1),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Logits z, one per row of `features` (flattened)."""
        return self.net(features.flatten(1)).squeeze(1)


def identifier_loss(logits: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """Eq. 6 on one batch: `own` marks client k's examples (the positives)."""
    terms = []
    if own.any():
        terms.append(F.softplus(-logits[own]).mean())
    if (~own).any():
        terms.append(F.softplus(logits[~own]).mean())
    return torch.stack(terms).sum()


def train_identifier(
    identifier: ClientIdentifier,
    features: torch.Tensor,
    own: torch.Tensor,
    epochs: int,
    batch_size: int,
    lr: float,
    betas: tuple[float, float],
    generator: torch.Generator,
) -> tuple[float, float, float]:
    """Adam on Eq. 6 over cached (frozen-extractor) `features`; returns the full-set loss
    before and after, and the balanced accuracy after (threshold 0.5)."""

    def full_loss() -> float:
        with torch.no_grad():
            return identifier_loss(identifier(features), own).item()

    start = full_loss()
    optimizer = torch.optim.Adam(identifier.parameters(), lr=lr, betas=betas)
    batches = shuffled_positions(len(own), batch_size, generator, features.device, epochs)
    fit(optimizer, batches, lambda pos: identifier_loss(identifier(features[pos]), own[pos]))
    with torch.no_grad():
        said_own = identifier(features) > 0
    recalls = [(said_own[own]).float().mean(), (~said_own[~own]).float().mean()]
    balanced = torch.stack([r for r in recalls if not r.isnan()]).mean().item()
    return start, full_loss(), balanced
