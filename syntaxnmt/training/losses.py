"""Training losses: the translation loss, the decay schedules of auxiliary terms, and the
interface of auxiliary objectives (attention as alignment, multi-task learning).

Padding positions are removed before the output projection (:func:`sequence_loss`), so the
largest matrix product of the model -- states x vocabulary -- and the log-softmax skip them.
For a bias-free output layer (the Transformer's), the projection and the loss are fused and
chunked (:class:`_ChunkedLinearCrossEntropy`): the (tokens x vocabulary) logits are never held
at once, which on CPU saves both memory and the page faults of allocating them every update.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from syntaxnmt.config import parse_decay
from syntaxnmt.cpu.linear import add_weight_grad, linear, row_granule
from syntaxnmt.cpu.loss import native_smoothed_xent
from syntaxnmt.cpu.machine import native_training_kernels
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import PAD, FeatureSpec


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
    and adds ``(dL/dz)^T h`` to ``dL/dW`` (in place: :func:`~syntaxnmt.cpu.linear.add_weight_grad`); backward only scales them. One chunk of logits lives at
    a time, and the log-softmax and the softmax are computed in its buffer. The last chunk is
    padded with zero rows to a multiple of ``GRANULE`` rows where oneDNN computes the products, of 8
    otherwise (:func:`~syntaxnmt.cpu.linear.row_granule`; left out of the loss; zero rows add
    nothing to ``dL/dW``), so the products have a few shapes only, whatever N (oneDNN keeps
    state per shape: :mod:`syntaxnmt.cpu.linear`).
    """

    GRANULE = 128

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, target: Tensor, eps: float, chunk: int, need_grad: bool):
        n, n_classes = h.size(0), weight.size(0)
        loss = h.new_zeros((), dtype=torch.float32)
        nll = h.new_zeros((), dtype=torch.float32)
        grad_h = torch.empty_like(h) if need_grad else None
        grad_w = None  # dL/dW, summed over the chunks
        rows = torch.arange(min(chunk, n), device=h.device)
        for start in range(0, n, chunk):
            hc, tc = h[start : start + chunk], target[start : start + chunk]
            real = hc.size(0)
            hc = pad_rows(hc, min(chunk, row_granule(_ChunkedLinearCrossEntropy.GRANULE)))
            z = linear(hc, weight).float()
            if native_training_kernels() is not None and z.device.type == "cpu":
                loss_c, nll_c = native_smoothed_xent(z[:real], tc, eps)  # z[:real] becomes dL/dz
                loss += loss_c
                nll += nll_c
                g = z
            else:
                z = torch.log_softmax(z, dim=-1)  # one fused kernel; logsumexp then sub_ made 4 passes and a temporary
                nll_c = -z[:real].gather(1, tc[:, None]).sum()
                nll += nll_c
                loss += (1.0 - eps) * nll_c - eps * z[:real].sum() / n_classes if eps else nll_c
                if need_grad:
                    g = z.exp_()  # softmax
                    if eps:
                        g.sub_(eps / n_classes)
                    g[rows[:real], tc] -= 1.0 - eps
            if need_grad:
                g = g.to(h.dtype)
                grad_h[start : start + real] = linear(g, weight.t())[:real]
                grad_w = add_weight_grad(grad_w, g, hc)  # g^T h
        if need_grad and grad_w is None:  # no rows
            grad_w = torch.zeros_like(weight)
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
    real = out.real
    if static:
        states, project = out.states.reshape(-1, out.states.size(-1)), out.project
        return smoothed_cross_entropy(project(states), target.reshape(-1), smoothing, keep.reshape(-1).to(torch.float32))
    states = real[1] if real is not None and torch.equal(real[0], keep) else out.states[keep]  # the same rows
    project = out.project
    if isinstance(project, nn.Linear) and project.bias is None and states.dtype == project.weight.dtype and not torch.is_autocast_enabled(states.device.type):
        need_grad = torch.is_grad_enabled() and (states.requires_grad or project.weight.requires_grad)
        return _ChunkedLinearCrossEntropy.apply(states, project.weight, target[keep], float(smoothing), chunk, need_grad)
    logits = project(pad_rows(states, row_granule(_ChunkedLinearCrossEntropy.GRANULE)))[: states.size(0)]  # a few shapes (oneDNN)
    return smoothed_cross_entropy(logits, target[keep], smoothing)


def pad_rows(x: Tensor, multiple: int) -> Tensor:
    """``x`` (N, D) with zero rows appended up to a multiple of ``multiple`` rows."""
    extra = -x.size(0) % multiple
    return torch.cat([x, x.new_zeros(extra, *x.shape[1:])]) if extra else x


# --------------------------------------------------------------------------------------
# Auxiliary objectives
# --------------------------------------------------------------------------------------

def decay(step: int | Tensor, schedule: str = "constant") -> float | Tensor:
    """The weight multiplier of an auxiliary loss at training ``step`` (0-based), in [0, 1]; a
    tensor when ``step`` is a (0-dim) tensor, e.g. a step counter on the GPU.

    ``schedule`` (parsed by :func:`syntaxnmt.config.parse_decay`):

    * ``"constant"``: 1.
    * ``"linear:N"``: ``max(0, 1 - step / N)``, reaching 0 at step N.
    * ``"exp:R"``: ``R ** step`` with 0 < R <= 1 (e.g. ``exp:0.9999`` halves about every 6.9k steps).
    * ``"step:N"``: 1 before step N, 0 from step N on (guided alignment only early in training).
    """
    try:
        kind, value = parse_decay(schedule)
    except ValueError as e:
        raise UserError(str(e)) from None
    if kind == "constant":
        return 1.0
    if kind == "exp":
        return value ** step.clamp(min=0) if isinstance(step, Tensor) else value ** max(step, 0)
    if kind == "linear":
        return (1.0 - step / value).clamp(min=0.0) if isinstance(step, Tensor) else max(0.0, 1.0 - step / value)
    return (step < value).float() if isinstance(step, Tensor) else (1.0 if step < value else 0.0)  # step


class AuxiliaryObjective:
    """Terms added to the translation loss by :func:`syntaxnmt.training.step.forward_loss`.

    A subclass says what it reads -- the cross-attention (``needs_cross_attention``), the
    self-attention weights of some encoder layers (``encoder_weights``), source features beyond
    the model's own (``feature_spec``), the reference alignment (``needs_reference``) -- and gives
    its unweighted ``terms`` (each summed over the batch) and their ``weights`` at an update.
    The weighted sum is normalized with the translation loss by the update's target tokens.
    No method waits for the device, so the loss can run inside a captured CUDA graph.
    """

    needs_reference = False
    needs_cross_attention = False
    encoder_weights: frozenset[int] = frozenset()
    feature_spec = FeatureSpec()

    def terms(self, model: nn.Module, batch, out) -> dict[str, Tensor]:
        raise NotImplementedError

    def weights(self, step: int | Tensor) -> dict[str, float | Tensor]:
        """The weight of every term at update ``step`` (0-based; an int or a 0-dim tensor)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch, out, step: int | Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """The weighted sum of the terms at update ``step``, and the unweighted terms, detached, for logging."""
        weights = self.weights(step)
        total = torch.zeros((), device=batch.src.device)
        terms = self.terms(model, batch, out)
        for name, value in terms.items():
            total = total + weights[name] * value
        return total, {name: value.detach() for name, value in terms.items()}
