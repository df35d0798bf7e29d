"""Training losses.

Padding positions are removed before the output projection (:func:`sequence_loss`), so the
largest matrix product of the model -- states x vocabulary -- and the log-softmax skip them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from syntaxnmt.subwords import PAD


def smoothed_cross_entropy(logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy (Szegedy et al. 2016) of rows ``logits`` (N, V) for
    classes ``target`` (N,), and the summed NLL (no gradient).

    With V classes the smoothed target is ``(1 - eps) * onehot(y) + eps / V``, so
    ``loss = (1 - eps) * (-log p_y) + eps * mean_v(-log p_v)`` -- the same definition as PyTorch's
    ``cross_entropy(label_smoothing=eps)``, computed from one log-softmax (in float32 at least,
    also under bf16 autocast).
    """
    lprobs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    nll = -lprobs.gather(1, target[:, None]).sum()
    if not smoothing:
        return nll, nll.detach()
    return (1.0 - smoothing) * nll - smoothing * lprobs.mean(dim=-1).sum(), nll.detach()


def label_smoothed_nll(logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """:func:`smoothed_cross_entropy` of logits (..., V) over the non-PAD positions of ``target`` (...)."""
    flat = target.reshape(-1)
    keep = flat.ne(PAD)
    return smoothed_cross_entropy(logits.reshape(-1, logits.size(-1))[keep], flat[keep], smoothing)


def sequence_loss(out, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """:func:`smoothed_cross_entropy` of a model output, projecting only the non-PAD target
    positions to the vocabulary (``out.states`` and ``out.project`` of
    :class:`~syntaxnmt.model.transformer.ModelOutput`)."""
    keep = target.ne(PAD)
    return smoothed_cross_entropy(out.project(out.states[keep]), target[keep], smoothing)
