"""Training losses."""

from __future__ import annotations

import torch
from torch import Tensor

from syntaxnmt.subwords import PAD


def label_smoothed_nll(logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy (Szegedy et al. 2016) and summed NLL over non-PAD targets.

    With V classes the smoothed target is ``(1 - eps) * onehot(y) + eps / V``, so
    ``loss = (1 - eps) * (-log p_y) + eps * mean_v(-log p_v)`` -- the same definition as PyTorch's
    ``cross_entropy(label_smoothing=eps)``, computed from one log-softmax.
    """
    lprobs = torch.log_softmax(logits.reshape(-1, logits.size(-1)).float(), dim=-1)
    flat = target.reshape(-1)
    keep = flat.ne(PAD)
    nll = -lprobs.gather(1, flat[:, None]).squeeze(1)
    nll = nll.masked_fill(~keep, 0.0).sum()
    if not smoothing:
        return nll, nll.detach()
    smooth = -lprobs.mean(dim=-1).masked_fill(~keep, 0.0).sum()
    return (1.0 - smoothing) * nll + smoothing * smooth, nll.detach()
