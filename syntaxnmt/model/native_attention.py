"""Whole-sequence attention on the CPU in the C kernels, forward and backward (training, scoring).

    O = softmax(Q K^T / sqrt(d) + mask) V                      (Vaswani et al. 2017, Eq. 1)
    dV = P^T dO,  dS = P o (dP - rowsum(P o dP)) with dP = dO V^T,  dQ = dS K / sqrt(d),  dK = dS^T Q / sqrt(d)

At the sentence lengths of sentence-level NMT (Multi30k's batches: 12-32 positions, 4 heads of
64) PyTorch's fused CPU kernel (``scaled_dot_product_attention``, flash attention) runs at about
a seventh of the machine's arithmetic rate: its time goes to the bookkeeping of each (sentence,
head) block, and attention took 8 % of a training update of the side-by-side model on a 2-core
AVX2 EPYC (docs/benchmarks.md, "Native kernels of training"). :func:`attention` computes each block in
``syntaxnmt/_native.c`` (``attention_forward``/``attention_backward``) with its rows in the L1
cache, keeps the probabilities P (B, H, Tq, Tk) for the backward pass, reads the heads of the
projections where they are and writes the output and the gradients in the (B, T, H, d) layout the
projections use, so merging the heads copies nothing. Sentences are split between torch's
threads; each is computed by one thread, so the result does not depend on the thread count.

:func:`usable` says when :meth:`MultiHeadAttention._fused
<syntaxnmt.model.attention.MultiHeadAttention._fused>` takes this path: float32 on the CPU, the
kernel built for this CPU (AVX2/FMA), no attention dropout, a head size that is a multiple of 8,
at most :data:`MAX_LENGTH` positions, a causal mask only over equal query and key lengths, and
training's kernels not turned off (``train.cpu_native: torch`` keeps PyTorch's kernel,
:func:`syntaxnmt.runtime.set_native_training`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from syntaxnmt.runtime import in_threads, native_kernels, native_training_kernels

_native = native_kernels()

MAX_LENGTH = 128
"""The longest query or key sequence the kernel takes; longer ones keep PyTorch's flash attention,
whose blocking pays off there (docs/benchmarks.md, "Native kernels of training")."""


def usable(q: Tensor, k: Tensor, dropout_p: float, causal: bool) -> bool:
    """Whether :func:`attention` computes this attention (see the module docstring)."""
    return shapes_usable(q, q.size(0), q.size(2), k.size(2), q.size(-1), dropout_p, causal) and k.dtype == torch.float32


def shapes_usable(x: Tensor, b: int, tq: int, tk: int, d_head: int, dropout_p: float, causal: bool) -> bool:
    """:func:`usable` for queries of ``x``'s device and dtype, ``b`` sentences of ``tq`` queries and
    ``tk`` keys, heads of ``d_head`` (also :func:`stacked_attention`'s condition)."""
    return (
        native_training_kernels() is not None and x.device.type == "cpu" and x.dtype == torch.float32
        and dropout_p == 0.0 and d_head % 8 == 0 and max(tq, tk) <= MAX_LENGTH
        and not (causal and tq != tk) and b > 0
    )


def _view(x: Tensor) -> tuple[int, int, int, int]:
    return x.data_ptr(), x.stride(0), x.stride(1), x.stride(2)


def _heads_last(like: Tensor, length: int) -> Tensor:
    """An empty (B, H, length, d) tensor laid out as (B, length, H, d)."""
    b, h, _, d = like.shape
    return like.new_empty(b, length, h, d).transpose(1, 2)


def _unit_stride(x: Tensor) -> Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _stacked_heads(sources: tuple[Tensor, ...], heads: int) -> list[Tensor]:
    """q, k and v as (B, H, T, d) views of stacked projections: ``sources`` is (B, T, 3D) [q | k | v]
    or (B, Tq, D) q and (B, Tk, 2D) [k | v]."""
    views = []
    for x, parts in zip(sources, (3,) if len(sources) == 1 else (1, 2)):
        b, t, w = x.shape
        views += x.view(b, t, parts, heads, w // (parts * heads)).permute(2, 0, 3, 1, 4).unbind(0)
    return views


def _require_native() -> None:
    if _native is None:
        raise RuntimeError("the native kernel syntaxnmt/_native.c was not built (install with a C compiler: pip install -e .) or this CPU lacks AVX2/FMA")


class _Attention(torch.autograd.Function):
    """The kernels with their gradients. ``sources``: q, k, v (B, H, T, d) each (``heads`` 0), or
    stacked projections (:func:`_stacked_heads`), whose gradients the backward pass then writes
    into one tensor per source (no copies to stack them)."""

    @staticmethod
    def forward(ctx, pad: Tensor | None, causal: bool, heads: int, *sources: Tensor) -> Tensor:
        sources = tuple(_unit_stride(x) if not heads else x.contiguous() for x in sources)
        q, k, v = _stacked_heads(sources, heads) if heads else sources
        b, h, tq, d = q.shape
        tk = k.size(2)
        out = _heads_last(q, tq)
        probs = q.new_empty(b, h, tq, tk)
        mask = 0 if pad is None else pad.contiguous().view(torch.uint8).data_ptr()
        scale = 1.0 / math.sqrt(d)
        in_threads(lambda a, z: _native.attention_forward(_view(q), _view(k), _view(v), _view(out), probs.data_ptr(), mask, a, z, h, tq, tk, d, causal, scale), b)
        ctx.save_for_backward(probs, *sources)
        ctx.causal, ctx.heads = causal, heads
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        probs, *sources = ctx.saved_tensors
        heads = ctx.heads
        q, k, v = _stacked_heads(sources, heads) if heads else sources
        grad = _unit_stride(grad)
        b, h, tq, d = q.shape
        tk = k.size(2)
        if heads:
            grads = [torch.empty_like(x) for x in sources]
            dq, dk, dv = _stacked_heads(grads, heads)
        else:
            grads = [_heads_last(q, tq), _heads_last(k, tk), _heads_last(v, tk)]
            dq, dk, dv = grads
        scale = 1.0 / math.sqrt(d)
        in_threads(lambda a, z: _native.attention_backward(_view(q), _view(k), _view(v), _view(grad), _view(dq), _view(dk), _view(dv), probs.data_ptr(), a, z, h, tq, tk, d, ctx.causal, scale), b)
        return None, None, None, *grads


def attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, causal: bool = False) -> Tensor:
    """``softmax(q k^T / sqrt(d)) v`` for ``q`` (B, H, Tq, d), ``k`` and ``v`` (B, H, Tk, d):
    keys where ``key_padding_mask`` (B, Tk) is True are ignored, and with ``causal`` (Tq = Tk)
    query i sees keys j <= i; a query with no key left gets zeros (PyTorch's kernel gives NaN or
    zeros there). Returns (B, H, Tq, d), stored as (B, Tq, H, d). Differentiable in q, k and v.
    Only where :func:`usable`; raises RuntimeError where the kernel was not built for this CPU."""
    _require_native()
    if key_padding_mask is not None and key_padding_mask.shape != (q.size(0), k.size(2)):
        raise ValueError(f"key_padding_mask must be (B, Tk) = {(q.size(0), k.size(2))}, not {tuple(key_padding_mask.shape)}")
    return _Attention.apply(key_padding_mask, causal, 0, q, k, v)


def stacked_attention(sources: tuple[Tensor, ...], heads: int, key_padding_mask: Tensor | None = None, causal: bool = False) -> Tensor:
    """:func:`attention` of ``heads`` heads whose q, k and v are column blocks of stacked
    projections: ``sources`` (qkv,) with qkv (B, T, 3D) (self-attention) or (q, kv) with q (B, Tq, D)
    and kv (B, Tk, 2D) (cross-attention), each the output of one product (the projections' weights
    side by side). The gradient of each source comes out as one tensor. Returns (B, H, Tq, d),
    stored as (B, Tq, H, d). Only where :func:`shapes_usable`."""
    _require_native()
    if any(x.dtype != torch.float32 or x.device.type != "cpu" for x in sources):
        raise ValueError(f"stacked_attention computes float32 CPU tensors, not {', '.join(f'{x.dtype} on {x.device}' for x in sources)}")
    return _Attention.apply(key_padding_mask, causal, heads, *sources)
