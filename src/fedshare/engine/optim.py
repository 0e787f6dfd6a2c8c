"""The optimizer factory and the per-round learning-rate schedules."""

from collections.abc import Iterable

import torch

from fedshare.config import OPTIMIZERS, SCHEDULES, TrainConfig
from fedshare.errors import FedshareError, choices_message


def learning_rate(cfg: TrainConfig, round_idx: int) -> float:
    """The learning rate of round `round_idx` (0-based), never below `cfg.lr_floor`."""
    if cfg.lr_schedule == "constant":
        lr = cfg.lr
    elif cfg.lr_schedule == "exp":
        lr = cfg.lr * cfg.lr_decay**round_idx
    elif cfg.lr_schedule == "step":
        lr = cfg.lr * cfg.lr_decay ** (round_idx // max(cfg.lr_step, 1))
    elif cfg.lr_schedule == "linear":
        lr = cfg.lr * (1.0 - cfg.lr_decay * round_idx)
    else:
        raise FedshareError(choices_message("train.lr_schedule", cfg.lr_schedule, list(SCHEDULES)))
    return max(lr, cfg.lr_floor)


def make_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: TrainConfig, lr: float
) -> torch.optim.Optimizer:
    """The configured optimizer; with `cfg.optimizer_reset_each_step` its state (momentum,
    Adam moments and step count) is cleared after every step, which equals building a new
    optimizer per step (FLea's code: every step is a first, bias-corrected Adam step)."""
    optimizer: torch.optim.Optimizer
    if cfg.optimizer == "sgd":
        optimizer = torch.optim.SGD(
            params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    elif cfg.optimizer == "adam":
        b1, b2 = cfg.betas
        optimizer = torch.optim.Adam(params, lr=lr, betas=(b1, b2), weight_decay=cfg.weight_decay)
    else:
        raise FedshareError(choices_message("train.optimizer", cfg.optimizer, list(OPTIMIZERS)))
    if cfg.optimizer_reset_each_step:
        optimizer.register_step_post_hook(lambda opt, args, kwargs: opt.state.clear())
    return optimizer
