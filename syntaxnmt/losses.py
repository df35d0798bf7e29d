"""Training losses.

Padding positions are removed before the output projection (:func:`sequence_loss`), so the
largest matrix product of the model -- states x vocabulary -- and the log-softmax skip them.
For a bias-free output layer (the Transformer's), the projection and the loss are fused and
chunked (:class:`_ChunkedLinearCrossEntropy`): the (tokens x vocabulary) logits are never held
at once, which on CPU saves both memory and the page faults of allocating them every update.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from syntaxnmt.model.linear import linear

from syntaxnmt.subwords import PAD


def smoothed_cross_entropy(logits: Tensor, target: Tensor, smoothing: float, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy (Szegedy et al. 2016) of rows ``logits`` (N, V) for
    classes ``target`` (N,), and the summed NLL (no gradient); ``mask`` (N,), when given, weights
    the rows (0 leaves a row out).

    With V classes the smoothed target is ``(1 - eps) * onehot(y) + eps / V``, so
    ``loss = (1 - eps) * (-log p_y) + eps * mean_v(-log p_v)`` -- the same definition as PyTorch's
    ``cross_entropy(label_smoothing=eps)``, computed from one log-softmax (in float32 at least,
    also under bf16 autocast).
    """
    lprobs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    picked, mean = lprobs.gather(1, target[:, None])[:, 0], lprobs.mean(dim=-1)
    if mask is not None:
        picked, mean = picked * mask, mean * mask
    nll = -picked.sum()
    if not smoothing:
        return nll, nll.detach()
    return (1.0 - smoothing) * nll - smoothing * mean.sum(), nll.detach()


def label_smoothed_nll(logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """:func:`smoothed_cross_entropy` of logits (..., V) over the non-PAD positions of ``target`` (...)."""
    flat = target.reshape(-1)
    keep = flat.ne(PAD)
    return smoothed_cross_entropy(logits.reshape(-1, logits.size(-1))[keep], flat[keep], smoothing)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """:func:`smoothed_cross_entropy` of ``h W^T`` (h: N x D, W: V x D), ``chunk`` rows at a time.

    The loss is a scalar, so its gradients are known in the forward pass up to the upstream
    factor: per chunk, ``dL/dz = softmax(z) - q`` (q the smoothed target) gives ``dL/dh = (dL/dz) W``
    and adds ``(dL/dz)^T h`` to ``dL/dW``; backward only scales them. One chunk of logits lives at
    a time, and the log-softmax and the softmax are computed in its buffer.
    """

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, target: Tensor, eps: float, chunk: int, need_grad: bool):
        n_classes = weight.size(0)
        loss = h.new_zeros((), dtype=torch.float32)
        nll = h.new_zeros((), dtype=torch.float32)
        grad_h = torch.empty_like(h) if need_grad else None
        grad_w = torch.zeros_like(weight) if need_grad else None
        rows = torch.arange(min(chunk, h.size(0)), device=h.device)
        for start in range(0, h.size(0), chunk):
            hc, tc = h[start : start + chunk], target[start : start + chunk]
            z = linear(hc, weight).float()
            z = z.sub_(torch.logsumexp(z, dim=-1, keepdim=True))  # log-probabilities
            nll_c = -z.gather(1, tc[:, None]).sum()
            nll += nll_c
            loss += (1.0 - eps) * nll_c - eps * z.sum() / n_classes if eps else nll_c
            if need_grad:
                g = z.exp_()  # softmax
                if eps:
                    g.sub_(eps / n_classes)
                g[rows[: len(tc)], tc] -= 1.0 - eps
                g = g.to(h.dtype)
                grad_h[start : start + chunk] = linear(g, weight.t())
                grad_w += linear(g.t(), hc.t())
        ctx.save_for_backward(grad_h, grad_w)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_loss, grad_w * grad_loss, None, None, None, None


def sequence_loss(out, target: Tensor, smoothing: float, chunk: int = 1024, static: bool = False) -> tuple[Tensor, Tensor]:
    """:func:`smoothed_cross_entropy` of a model output, projecting only the non-PAD target
    positions to the vocabulary (``out.states`` and ``out.project`` of
    :class:`~syntaxnmt.model.transformer.ModelOutput`); fused and chunked for a bias-free
    ``nn.Linear`` output layer.

    ``static``: project every position and mask the padding instead of selecting the non-PAD
    rows, so that every tensor keeps the batch's shape (bucketed static shapes: CUDA graphs,
    oneDNN's per-shape state); the loss is the same.
    """
    keep = target.ne(PAD)
    if static:
        states, project = out.states.reshape(-1, out.states.size(-1)), out.project
        return smoothed_cross_entropy(project(states), target.reshape(-1), smoothing, keep.reshape(-1).to(torch.float32))
    states, project = out.states[keep], out.project
    if isinstance(project, nn.Linear) and project.bias is None and states.dtype == project.weight.dtype and not torch.is_autocast_enabled(states.device.type):
        need_grad = torch.is_grad_enabled() and (states.requires_grad or project.weight.requires_grad)
        return _ChunkedLinearCrossEntropy.apply(states, project.weight, target[keep], float(smoothing), chunk, need_grad)
    return smoothed_cross_entropy(project(states), target[keep], smoothing)
