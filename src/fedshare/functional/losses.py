"""Losses shared by several strategies: soft-label cross-entropy and knowledge distillation.

Used by FLea (Section 3.3.2: Eq. 3 and the distillation term, paper and code forms) and FedMix
(FLea's App. C.3: soft-label CE on mixed batches).
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

    `teacher_to_student`: KL(p_teacher ‖ p_student) (Hinton; FLea's code).
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


def decorrelation_loss(z: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """FedDecorr's penalty on features `z` (n, d): standardise each dimension over the batch,
    K = zᵀz, the mean of K's squared off-diagonal entries, divided by n (0 for n = 1)."""
    n, d = z.shape
    if n < 2 or d < 2:
        return z.new_zeros(())
    z = z - z.mean(dim=0, keepdim=True)
    z = z / torch.sqrt(eps + z.var(dim=0, keepdim=True))
    gram = z.T @ z
    off_diagonal = gram.masked_select(~torch.eye(d, dtype=torch.bool, device=z.device))
    return off_diagonal.pow(2).mean() / n


REMOVED_LOGIT = -1e9
"""A logit whose softmax probability is exactly 0 (exp underflows) yet stays finite."""


def not_true_distillation(
    logits: torch.Tensor, teacher_logits: torch.Tensor, y: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """FedNTD's loss: τ²·KL(p_teacher ‖ p_student) over the not-true classes only (the true
    class's logit is removed from both vectors before the softmax), batch mean. The true class
    gets a logit of −1e9 instead (its probability is exactly 0 in float32 and bf16), which
    keeps the shapes fixed, so the loss also runs under `vmap` (batched clients)."""
    true_class = torch.arange(logits.shape[1], device=logits.device) == y[:, None]
    student = logits.masked_fill(true_class, REMOVED_LOGIT)
    teacher = teacher_logits.masked_fill(true_class, REMOVED_LOGIT)
    return distillation_kl(student, teacher, temperature)
