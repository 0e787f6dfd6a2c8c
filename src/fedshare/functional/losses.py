"""Losses shared by several strategies: soft-label cross-entropy and knowledge distillation.

Used by FLea (flea.md §2.5: Eq. 3 and the distillation term, paper and code forms) and FedMix
(flea.md §5: soft-label CE on mixed batches).
"""

import torch
import torch.nn.functional as F

from fedshare.errors import FedshareError, choices_message

KD_DIRECTIONS = ("teacher_to_student", "student_to_teacher")


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """−(1/n) Σ_i Σ_c t_ic · log softmax(z_i)_c for label distributions `targets` (n, C)."""
    return -(targets * F.log_softmax(logits, dim=-1)).sum(dim=-1).mean()


def distillation_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float = 1.0,
    direction: str = "teacher_to_student",
) -> torch.Tensor:
    """Batch-mean KL divergence between softened teacher and student distributions, times τ².

    `teacher_to_student`: KL(p_teacher ‖ p_student) (Hinton; FLea's code, flea.md §2.5).
    `student_to_teacher`: KL(p_student ‖ p_teacher) (FLea's Eq. 4 as printed).
    The teacher logits are used as given (detach them for a frozen teacher).
    """
    if temperature <= 0:
        raise FedshareError(f"distillation temperature={temperature} must be positive")
    log_s = F.log_softmax(student_logits / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits / temperature, dim=-1)
    if direction == "teacher_to_student":
        kl = (log_t.exp() * (log_t - log_s)).sum(dim=-1)
    elif direction == "student_to_teacher":
        kl = (log_s.exp() * (log_s - log_t)).sum(dim=-1)
    else:
        raise FedshareError(choices_message("kd_direction", direction, list(KD_DIRECTIONS)))
    return kl.mean() * temperature**2
