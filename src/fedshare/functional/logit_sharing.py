"""Per-label logits and mutual distillation, shared by the logit-sharing methods (FedDistill)
and the mutual-learning ones (FML, FedKD)."""

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.functional.prototypes import class_means


@torch.no_grad()
def label_logits(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int, batch_size: int = 1000
) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, C) mean logit vector of each label over (x, y) in eval mode, and the label counts."""
    was_training = model.training
    model.eval()
    logits = torch.cat([model(chunk) for chunk in x.split(batch_size)])
    model.train(was_training)
    return class_means(logits.float(), y, num_classes)


def label_distillation_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    global_logits: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """Batch mean of τ²·KL(softmax(ḡ_y/τ) ‖ softmax(z/τ)): each sample distils toward the
    global average logits ḡ_y of its own label; a label without global logits adds zero."""
    log_student = F.log_softmax(logits / temperature, dim=1)
    log_teacher = F.log_softmax(global_logits[labels].to(logits) / temperature, dim=1)
    kl = (log_teacher.exp() * (log_teacher - log_student)).sum(dim=1)
    return (kl * mask[labels].to(kl)).mean() * temperature**2


def kl_to(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Batch-mean KL(softmax(teacher) ‖ softmax(student)); gradients flow into both."""
    log_s = F.log_softmax(student, dim=1)
    log_t = F.log_softmax(teacher, dim=1)
    return (log_t.exp() * (log_t - log_s)).sum(dim=1).mean()
