"""FedKT (Li, He & Song, VLDB 2021, one-shot knowledge transfer) as FedPFT compares it (Table 5,
Section 5.2; the paper gives no details).

The clients' uploaded heads vote on the server's unlabelled features (each head's argmax; the
most frequent class wins, ties to the smaller class id), and the global head is trained on the
votes as hard labels from the common initialisation (`_server_distillation`). Deviation: FedKT's
two tiers of PATE (teacher partitions and student models inside each party, public data held by
the parties, privacy noise) are not built; this is its server-side vote, the one-shot
knowledge transfer FedPFT names.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import Rule, ruled
from fedshare.strategies._server_distillation import STUDENT_INITS, ServerDistillation
from fedshare.strategies.base import register_strategy


def majority_vote(votes: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(teachers, n) class votes -> (n,) the most voted class; ties go to the smaller id."""
    counts = F.one_hot(votes, num_classes).sum(dim=0)
    return counts.argmax(dim=1)  # argmax returns the first maximum


@register_strategy("fedkt")
@dataclass
class FedKT(ServerDistillation):
    """Majority vote of the clients' heads on server inputs, learnt as hard labels."""

    student_init: str = ruled(
        "fresh",
        Rule(choices=STUDENT_INITS),
        source="paper: FedKT (Li et al., VLDB 2021), the student is trained from scratch on the "
        "voted labels",
    )

    def teachers(self, heads: list[tuple[torch.Tensor, float]]) -> list[nn.Module]:
        return self.client_heads(heads)

    def distill(
        self, teachers: list[nn.Module], feats: torch.Tensor, gen: torch.Generator
    ) -> torch.Tensor:
        with torch.no_grad():
            votes = torch.stack([t(feats).argmax(dim=1) for t in teachers])
        return self.fit(feats, majority_vote(votes, self.head.out_features), gen)
