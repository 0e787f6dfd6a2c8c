"""FedBE (Chen & Chao, ICLR 2021, "Bayesian model ensemble") as a one-shot baseline on heads
(FedPFT's Table 5, specs/fedpft.md §4.3: "15 models sampled from the posterior over heads";
the server's distillation data is not specified, §7 A16).

The server fits a diagonal Gaussian to the uploaded heads (mean and variance of every weight,
weighted as `weighting` says: the mean is `oneshot_avg`'s head), samples `samples` = 15 heads
from it, and uses the clients' heads, the mean head and the samples as the ensemble: its mean
softmax on the server's unlabelled features is the soft target, distilled (KL) into the global
head started from the mean head (`_server_distillation`). FedBE is multi-round in its paper;
FedPFT compares it one-shot.
"""

from dataclasses import dataclass

import torch
from torch import nn

from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError
from fedshare.strategies._feature_heads import head_from_vector, head_vector
from fedshare.strategies._server_distillation import ProbabilityMean, ServerDistillation
from fedshare.strategies.base import register_strategy


@register_strategy("fedbe")
@dataclass
class FedBE(ServerDistillation):
    """Clients' heads + mean + Gaussian samples, mean softmax distilled on server inputs."""

    samples: int = 15

    def __post_init__(self) -> None:
        if self.samples < 0:
            raise FedshareError(f"strategy.samples={self.samples} must be >= 0")

    def teachers(self, heads: list[tuple[torch.Tensor, float]]) -> list[nn.Module]:
        vectors = torch.stack([v for v, _ in heads])
        uniform = self.weighting == "uniform"
        weights = torch.tensor([1.0 if uniform else w for _, w in heads], device=vectors.device)
        weights = (weights / weights.sum())[:, None]
        mean = head_vector(self.head, torch.float32)  # the base's weighted mean head
        std = ((weights * (vectors - mean) ** 2).sum(0)).sqrt()
        gen = torch_generator(self.config.seed, "fedbe/samples", device=vectors.device)
        noise = torch.randn((self.samples, mean.numel()), generator=gen, device=vectors.device)
        drawn = mean + noise * std
        dim, classes = self.head.in_features, self.head.out_features
        extra = [head_from_vector(v, dim, classes).requires_grad_(False) for v in (mean, *drawn)]
        return self.client_heads(heads) + extra

    def distill(
        self, teachers: list[nn.Module], feats: torch.Tensor, gen: torch.Generator
    ) -> torch.Tensor:
        return self.fit(feats, None, gen, teacher=ProbabilityMean(teachers))
