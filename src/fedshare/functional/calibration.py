"""Label-prior calibration of logits for local training on label-skewed clients.

One place for the calibrated losses of ReBaFL and its logit-calibration baselines
(Xu et al., Section 4.1; the baselines of its Section 5.1):

* relaxed balanced softmax (R-BSM, Eqs. 9–10): cross-entropy on `z + log π̂` with the prior
  `π̂(c) = (1 − ε)·n_c/n + ε/C`; ε = 1 is plain cross-entropy, ε = 0 is balanced softmax (BSM,
  Eq. 8, exact −∞ offsets for absent classes instead of the code's 1e-9),
* FedLC's logit adjustment `z − τ·n_c^{−1/4}` (absent classes count as 1e-9),
* FedRS's restricted softmax: logits of classes absent locally are multiplied by α.

Priors are computed once from a client's class counts, not per mini-batch.
"""

import torch
import torch.nn.functional as F

from fedshare.errors import FedshareError


def class_counts(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Samples per class (float, length `num_classes`) of a label vector."""
    return torch.bincount(labels, minlength=num_classes)[:num_classes].to(torch.float32)


def check_eps(eps: float) -> None:
    if not 0.0 <= eps <= 1.0:
        raise FedshareError(f"strategy.eps={eps} must be in [0, 1] (1 = plain CE, 0 = BSM)")


def relaxed_prior(counts: torch.Tensor, eps: float) -> torch.Tensor:
    """Eq. 10: π̂(c) = (1 − ε)·n_c/n + ε/C, a distribution over the C classes.

    `counts` must hold at least one sample (not checked: no host sync in a training step)."""
    check_eps(eps)
    counts = counts.to(torch.float32)
    return (1.0 - eps) * counts / counts.sum() + eps / counts.numel()


def log_relaxed_prior(counts: torch.Tensor, eps: float) -> torch.Tensor:
    """log π̂; −∞ for classes with zero prior (only possible with ε = 0)."""
    return torch.log(relaxed_prior(counts, eps))


def balanced_softmax_loss(
    logits: torch.Tensor, targets: torch.Tensor, log_prior: torch.Tensor
) -> torch.Tensor:
    """Eq. 9 in logit-adjustment form: mean CE(z + log π̂, y). Offsets of −∞ (absent classes
    under BSM) drop those classes from the normaliser exactly; their gradient is 0."""
    return F.cross_entropy(logits + log_prior, targets)


def relaxed_balanced_softmax_loss(
    logits: torch.Tensor, targets: torch.Tensor, counts: torch.Tensor, eps: float
) -> torch.Tensor:
    """R-BSM with the prior of `counts` relaxed by `eps` (convenience wrapper)."""
    return balanced_softmax_loss(logits, targets, log_relaxed_prior(counts, eps))


def logit_adjustment(counts: torch.Tensor, tau: float, missing_count: float = 1e-9) -> torch.Tensor:
    """FedLC's per-class offset −τ·n_c^{−1/4} (τ = 1 in ReBaFL's code); absent classes count
    `missing_count` (1e-9 gives ≈ −177.8·τ). Add it to the logits: `z + logit_adjustment(n, τ)`."""
    if tau < 0:
        raise FedshareError(f"strategy.tau={tau} must be non-negative")
    counts = counts.to(torch.float32).clamp_min(missing_count)
    return -tau * counts.pow(-0.25)


def restricted_logits(logits: torch.Tensor, present: torch.Tensor, alpha: float) -> torch.Tensor:
    """FedRS's restricted softmax input: logits of classes absent locally (`present` false)
    are scaled by `alpha` (α = 0.5 in ReBaFL's code); present classes are unchanged."""
    if not 0.0 <= alpha <= 1.0:
        raise FedshareError(f"strategy.alpha={alpha} must be in [0, 1]")
    scale = torch.where(present, 1.0, alpha).to(logits.dtype)
    return logits * scale
