"""Adam with the inverse-square-root learning-rate schedule (Vaswani et al. 2017, Eq. 3).

lr(step) = peak * min(step / warmup, sqrt(warmup / step)): linear warm-up to ``peak`` over
``warmup`` updates, then decay proportional to 1/sqrt(step).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from syntaxnmt.config import TrainConfig


def inverse_sqrt(warmup: int):
    def factor(step: int) -> float:
        step += 1  # LambdaLR passes the number of updates already made; this is the 1-based update

        return min(step / max(warmup, 1), math.sqrt(max(warmup, 1) / step))

    return factor


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    on_cuda = all(p.is_cuda for p in model.parameters())  # one fused kernel for the whole update
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay, fused=on_cuda or None)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, inverse_sqrt(cfg.warmup_steps))
    return opt, sched
