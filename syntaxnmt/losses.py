"""Training losses."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from syntaxnmt.subwords import PAD


def label_smoothed_nll(logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy (Szegedy et al. 2016) and summed NLL over non-PAD targets.

    The smoothed target puts ``1 - smoothing`` on the reference token and spreads ``smoothing``
    uniformly over the vocabulary (PyTorch's ``cross_entropy(label_smoothing=...)``).
    """
    flat_logits, flat_target = logits.reshape(-1, logits.size(-1)).float(), target.reshape(-1)
    loss = F.cross_entropy(flat_logits, flat_target, ignore_index=PAD, label_smoothing=smoothing, reduction="sum")
    nll = F.cross_entropy(flat_logits, flat_target, ignore_index=PAD, reduction="sum") if smoothing else loss
    return loss, nll.detach()
