"""Pieces of FedGen (Zhu et al., ICML 2021, "Data-Free Knowledge Distillation for Heterogeneous
Federated Learning"): its generator's diversity loss (§6.1, after Mao et al. 2019) and the
label-count-weighted ensemble of the clients' classifier heads that the generator is trained
against (§3.1, Eq. 4).
"""

import torch
import torch.nn.functional as F


def diversity_loss(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """exp(−mean over pairs of ‖x_i − x_j‖₁/dim · ‖z_i − z_j‖²/dim) (FedGen's form): small when
    different noise z gives different outputs x."""
    dx = torch.cdist(x.flatten(1), x.flatten(1), p=1) / x[0].numel()
    dz = torch.cdist(z, z, p=2).pow(2) / z.shape[1]
    return torch.exp(-(dx * dz).mean())


def label_weights(counts: torch.Tensor) -> torch.Tensor:
    """α_{k,y} = n_{k,y} / Σ_j n_{j,y} from the clients' label counts (K, C); a class nobody
    holds gets weight 0 everywhere."""
    counts = counts.to(torch.float32)
    return counts / counts.sum(0, keepdim=True).clamp(min=1)


def weighted_ensemble_logits(
    logits: torch.Tensor, counts: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Σ_k α_{k,y_i} · logits[k, i]: each sample's ensemble of the K heads' logits (K, n, C),
    every head weighted by its client's share of the sample's label y_i (counts (K, C))."""
    weights = label_weights(counts)[:, labels]  # (K, n)
    return (weights[:, :, None] * logits).sum(0)


def ensemble_cross_entropy(
    logits: torch.Tensor, counts: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """FedGen's generator objective (its Eq. 4 with label-count weights): CE of the weighted
    ensemble's logits against the labels the features were generated for."""
    return F.cross_entropy(weighted_ensemble_logits(logits, counts, labels), labels)
