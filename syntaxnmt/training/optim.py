"""Adam with the inverse-square-root learning-rate schedule (Vaswani et al. 2017, Eq. 3).

lr(step) = peak * min(step / warmup, sqrt(warmup / step)): linear warm-up to ``peak`` over
``warmup`` updates, then decay proportional to 1/sqrt(step).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.graph import increment_version

from syntaxnmt.config import TrainConfig


def inverse_sqrt(warmup: int):
    def factor(step: int) -> float:
        step += 1  # LambdaLR passes the number of updates already made; this is the 1-based update

        return min(step / max(warmup, 1), math.sqrt(max(warmup, 1) / step))

    return factor


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    # One fused kernel for the whole update, on CUDA and on CPU (ATen's fused CPU Adam: 3-5x faster
    # than the multi-tensor one on the side-by-side model's 7.6M parameters, docs/benchmarks.md).
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay, fused=fused or None)
    # The fused kernel writes the weights without bumping their version counters, which the no-grad
    # caches of decoding key on (a HAN's composed maps): without this, validation would decode
    # with the weights of its first run.
    weights = [p for group in opt.param_groups for p in group["params"]]
    opt.register_step_post_hook(lambda *_: increment_version(weights))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, inverse_sqrt(cfg.warmup_steps))
    return opt, sched
