"""Attention on the CPU in the C kernels: :class:`CpuAttention`, the
:class:`~syntaxnmt.model.attention.AttentionKernel` that :func:`syntaxnmt.cpu.install` gives a
model's attentions -- the whole sequence (training, scoring), forward and backward, on packed
rows where training can (:func:`rows_attention`), and the incremental step of decoding
(:func:`native_step`).

    O = softmax(Q K^T / sqrt(d) + mask) V                      (Vaswani et al. 2017, Eq. 1)
    dV = P^T dO,  dS = P o (dP - rowsum(P o dP)) with dP = dO V^T,  dQ = dS K / sqrt(d),  dK = dS^T Q / sqrt(d)

At the sentence lengths of sentence-level NMT (Multi30k's batches: 12-32 positions, 4 heads of
64) PyTorch's fused CPU kernel (``scaled_dot_product_attention``, flash attention) runs at about
a seventh of the machine's arithmetic rate: its time goes to the bookkeeping of each (sentence,
head) block, and attention took 8 % of a training update of the side-by-side model on a 2-core
AVX2 EPYC (docs/benchmarks.md, "Native kernels of training"). :func:`attention` computes each block in
``syntaxnmt/cpu/_native.c`` (``attention_forward``/``attention_backward``) with its rows in the L1
cache, keeps the probabilities P (B, H, Tq, Tk) for the backward pass, reads the heads of the
projections where they are and writes the output and the gradients in the (B, T, H, d) layout the
projections use, so merging the heads copies nothing. Sentences are split between torch's
threads; each is computed by one thread, so the result does not depend on the thread count.

:func:`usable` says when :meth:`CpuAttention.attend` takes this path: float32 on the CPU, the
kernel built for this CPU (AVX2/FMA), no attention dropout, a head size that is a multiple of 8,
at most :data:`MAX_LENGTH` positions, a causal mask only over equal query and key lengths, and
training's kernels not turned off (``train.cpu_native: torch`` keeps PyTorch's kernel,
:func:`syntaxnmt.cpu.machine.set_native_training`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import torch
from torch import Tensor

from syntaxnmt.cpu.machine import native_kernels, native_training_kernels
from syntaxnmt.cpu.packing import Place
from syntaxnmt.cpu.threads import kernel_threads
from syntaxnmt.inputs import SourceFeatures
from syntaxnmt.model.attention import AttentionKernel, MultiHeadAttention

_native = native_kernels()

MAX_LENGTH = 128
"""The longest query or key sequence the kernel takes; longer ones keep PyTorch's flash attention,
whose blocking pays off there (docs/benchmarks.md, "Native kernels of training")."""


def usable(q: Tensor, k: Tensor, dropout_p: float, causal: bool) -> bool:
    """Whether :func:`attention` computes this attention (see the module docstring)."""
    return shapes_usable(q, q.size(0), q.size(2), k.size(2), q.size(-1), dropout_p, causal) and k.dtype == torch.float32


def shapes_usable(x: Tensor, b: int, tq: int, tk: int, d_head: int, dropout_p: float, causal: bool) -> bool:
    """:func:`usable` for queries of ``x``'s device and dtype, ``b`` sentences of ``tq`` queries and
    ``tk`` keys, heads of ``d_head`` (also :func:`packed_attention`'s condition)."""
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


def _packed_view(x: Tensor, heads: int, place: Place) -> tuple[int, ...]:
    """The kernel view (``parse_view`` of ``_native.c``) of ``x`` (R, heads * d), whose rows are
    the positions ``place.rows`` of a (B, T) layout: each position's row is looked up in
    :meth:`Place.row_map` (-1: zeros, writes dropped)."""
    d, w = x.size(1) // heads, x.stride(0)
    where = (0, d, w, place.row_map().data_ptr(), place.length) if place.rows is not None else (place.length * w, d, w)  # the map is kept on rows
    return (x.data_ptr(), *where)


def _require_native() -> None:
    if _native is None:
        raise RuntimeError("the native kernel syntaxnmt/cpu/_native.c was not built (install with a C compiler: pip install -e .) or this CPU lacks AVX2/FMA")


def _forward(views: list, out_view: tuple, pad: Tensor | None, b: int, h: int, tq: int, tk: int, d: int, causal: bool) -> Tensor:
    """The forward kernel over ``b`` sentences split between torch's threads; returns P (B, H, Tq, Tk)."""
    probs = torch.empty(b, h, tq, tk)
    mask = 0 if pad is None else pad.contiguous().view(torch.uint8).data_ptr()
    _native.attention_forward(*views, out_view, probs.data_ptr(), mask, 0, b, h, tq, tk, d, causal, 1.0 / math.sqrt(d), kernel_threads(b))
    return probs


def _backward(views: list, grad_view: tuple, grad_views: list, probs: Tensor, d: int, causal: bool) -> None:
    """The backward kernel (the gradients written through ``grad_views``) over P's sentences."""
    b, h, tq, tk = probs.shape
    _native.attention_backward(*views, grad_view, *grad_views, probs.data_ptr(), 0, b, h, tq, tk, d, causal, 1.0 / math.sqrt(d), kernel_threads(b))


def _views(qkv: Sequence[Tensor], heads: int, places: tuple[Place, Place]) -> list[tuple[int, ...]]:
    """The kernel views of q (the query's ``places[0]``), k and v (the keys' ``places[1]``)."""
    return [_packed_view(x, heads, place) for x, place in zip(qkv, (places[0], places[1], places[1]))]


class _PackedAttention(torch.autograd.Function):
    """:class:`_Attention` of q, k and v (R, D) each whose rows are packed (:mod:`syntaxnmt.cpu.packing`):
    the kernels read them through each one's row map and write the output (and, back, the
    gradients) in the rows of the query, so nothing is placed in a (B, T, ...) layout and
    gathered back."""

    @staticmethod
    def forward(ctx, pad: Tensor | None, causal: bool, heads: int, places: tuple[Place, Place], q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        q, k, v = (x.contiguous() for x in (q, k, v))
        d = q.size(1) // heads
        out = q.new_empty(q.size(0), heads * d)
        views = _views((q, k, v), heads, places)
        probs = _forward(views, _packed_view(out, heads, places[0]), pad, places[0].batch, heads, places[0].length, places[1].length, d, causal)
        ctx.save_for_backward(probs, q, k, v)
        ctx.causal, ctx.heads, ctx.places = causal, heads, places
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        probs, *sources = ctx.saved_tensors
        grads = [torch.empty_like(x) for x in sources]
        heads, places = ctx.heads, ctx.places
        grad_view = _packed_view(grad.contiguous(), heads, places[0])
        _backward(_views(sources, heads, places), grad_view, _views(grads, heads, places), probs, grad.size(1) // heads, ctx.causal)
        return None, None, None, None, *grads


class _Attention(torch.autograd.Function):
    """The kernels with their gradients, for q, k, v (B, H, T, d) each."""

    @staticmethod
    def forward(ctx, pad: Tensor | None, causal: bool, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        q, k, v = (_unit_stride(x) for x in (q, k, v))
        b, h, tq, d = q.shape
        out = _heads_last(q, tq)
        probs = _forward([_view(q), _view(k), _view(v)], _view(out), pad, b, h, tq, k.size(2), d, causal)
        ctx.save_for_backward(probs, q, k, v)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        probs, q, k, v = ctx.saved_tensors
        grads = [_heads_last(q, q.size(2)), _heads_last(k, k.size(2)), _heads_last(v, k.size(2))]
        _backward([_view(q), _view(k), _view(v)], _view(_unit_stride(grad)), [_view(x) for x in grads], probs, q.size(3), ctx.causal)
        return None, None, *grads


def attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, causal: bool = False) -> Tensor:
    """``softmax(q k^T / sqrt(d)) v`` for ``q`` (B, H, Tq, d), ``k`` and ``v`` (B, H, Tk, d):
    keys where ``key_padding_mask`` (B, Tk) is True are ignored, and with ``causal`` (Tq = Tk)
    query i sees keys j <= i; a query with no key left gets zeros (PyTorch's kernel gives NaN or
    zeros there). Returns (B, H, Tq, d), stored as (B, Tq, H, d). Differentiable in q, k and v.
    Only where :func:`usable`; raises RuntimeError where the kernel was not built for this CPU."""
    _require_native()
    if key_padding_mask is not None and key_padding_mask.shape != (q.size(0), k.size(2)):
        raise ValueError(f"key_padding_mask must be (B, Tk) = {(q.size(0), k.size(2))}, not {tuple(key_padding_mask.shape)}")
    return _Attention.apply(key_padding_mask, causal, q, k, v)


def packed_attention(q: Tensor, k: Tensor, v: Tensor, places: tuple[Place, Place], heads: int, key_padding_mask: Tensor | None = None, causal: bool = False) -> Tensor:
    """:func:`attention` of ``heads`` heads of the projections q (Rq, D), k and v (Rk, D) on packed
    rows: the rows of q are the positions of ``places[0]`` (:class:`~syntaxnmt.cpu.packing.Place`)
    in the query's (B, Tq) layout, those of k and v the positions of ``places[1]`` in the keys'
    (B, Tk) (rows None: every position in order). Returns (Rq, D), the output at the query's
    rows. The same values as placing q, k and v in (B, T, ...) with zeros at the positions without
    a row, attending, and gathering the output's rows, without those copies. Only where
    :func:`shapes_usable`."""
    _require_native()
    if any(x.dtype != torch.float32 or x.device.type != "cpu" or x.dim() != 2 for x in (q, k, v)):
        raise ValueError(f"packed_attention computes (rows, width) float32 CPU tensors, not {', '.join(f'{tuple(x.shape)} {x.dtype} on {x.device}' for x in (q, k, v))}")
    return _PackedAttention.apply(key_padding_mask, causal, heads, places, q, k, v)


# ------------------------------------------------------------------ the kernel of a model's attentions


def rows_usable(attn: MultiHeadAttention, query: Tensor, key_value: Tensor | None, causal: bool) -> bool:
    """Whether :func:`rows_attention` computes this call of ``attn``: its plain attention in
    training, in the C kernels (:func:`shapes_usable`), the projections not under autocast."""
    tk = query.size(1) if key_value is None else key_value.size(1)
    return (
        attn.training and attn.plain
        and not torch.is_autocast_enabled(query.device.type)  # the projections would be bf16/fp16: PyTorch's kernels
        and shapes_usable(query, query.size(0), query.size(1), tk, attn.d_head, attn.dropout, causal)
    )


def rows_attention(attn: MultiHeadAttention, h: Tensor, place: Place, key_padding_mask: Tensor | None = None, causal: bool = False, memory: Tensor | None = None, memory_place: Place | None = None) -> Tensor:
    """The plain attention of CPU training in the C kernels on rows: ``h`` (R, D) holds the
    positions of ``place`` (:class:`~syntaxnmt.cpu.packing.Place`: packed rows, or every position
    in order), ``memory`` (Rs, D) those of ``memory_place`` (cross-attention; None:
    self-attention), and so does the result. q, k and v are the attention's own projections of
    those rows; the kernels read and write them through a row map (:func:`packed_attention`), so
    stacks whose states stay packed between the layers (:class:`syntaxnmt.cpu.stack.PackedStacks`)
    run every operator on the R rows."""
    kv, kv_place = (h, place) if memory is None else (memory, memory_place)
    out = packed_attention(attn.q_proj(h), attn.k_proj(kv), attn.v_proj(kv), (place, kv_place), attn.heads, key_padding_mask, causal)
    return attn.out_proj(out)


class _CrossState:
    """A native cross-attention cache: one key/value block per sentence (its first step's rows)
    and the block each row reads (``map``, reordered with the hypotheses)."""

    def __init__(self, k: Tensor, v: Tensor, pad: Tensor | None, rows: int):
        self.k, self.v, self.pad, self.map = k, v, pad, torch.arange(rows)

    def reorder(self, index: Tensor) -> None:
        self.map = self.map.index_select(0, index)

    defer_reorder = reorder


class _SelfState:
    """A native self-attention cache: every step's keys and values (R_t, D) as that step computed
    them, their addresses, and an ancestry table (R, t) -- the row of each earlier step a row
    descends from -- which beam search reorders instead of the keys."""

    def __init__(self):
        self.keys: list[tuple[Tensor, Tensor]] = []  # the tensors, kept alive; their addresses and rows below
        self.key_at, self.value_at, self.rows_at = array("q"), array("q"), array("q")
        self.anc: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> None:
        self.keys.append((k, v))
        self.key_at.append(k.data_ptr())
        self.value_at.append(v.data_ptr())
        self.rows_at.append(k.size(0))
        new = torch.arange(k.size(0))[:, None]
        self.anc = new if self.anc is None else torch.cat([self.anc, new], dim=1)

    def reorder(self, index: Tensor) -> None:
        self.anc = self.anc.index_select(0, index)

    defer_reorder = reorder


def native_step(attn: MultiHeadAttention, query: Tensor, key_value: Tensor | None, key_padding_mask: Tensor | None, cache: dict, static_kv: bool) -> Tensor:
    """One step of incremental decoding (one float32 query per row on the CPU) of ``attn``'s plain
    attention in the kernels of ``syntaxnmt/cpu/_native.c``, without copying a cache: its state
    (``cache['kernel']``: :class:`_SelfState`, :class:`_CrossState`) is reordered by
    :func:`~syntaxnmt.model.attention.reorder_cache` and ``defer_reorder``. Same values as the
    explicit path to float rounding."""
    if query.size(1) != 1 or query.dtype != torch.float32 or query.device.type != "cpu":
        raise ValueError("a native decoding state (init_state(..., native=True)) steps one float32 CPU query per row, without attention weights")
    x = query.reshape(-1, attn.d_model)
    r, h, d = x.size(0), attn.heads, attn.d_head
    q = attn.q_proj(x).contiguous()
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d)
    if static_kv:
        state = cache.get("kernel")
        if state is None:  # the first step: the blocks of the rows' sentences
            k, v = attn.project_kv(key_value)
            state = cache["kernel"] = _CrossState(k.contiguous(), v.contiguous(), None if key_padding_mask is None else key_padding_mask.contiguous(), r)
        k, v, pad = state.k, state.v, state.pad
        _native.cross_attention(q.data_ptr(), r, h, d, k.size(0), k.size(2), k.data_ptr(), v.data_ptr(), state.map.data_ptr(), 0 if pad is None else pad.data_ptr(), out.data_ptr(), scale)
    else:
        state = cache.setdefault("kernel", _SelfState())
        state.append(attn.k_proj(x).contiguous(), attn.v_proj(x).contiguous())
        at = [a.buffer_info()[0] for a in (state.key_at, state.value_at, state.rows_at)]
        _native.self_attention(q.data_ptr(), r, h, d, len(state.keys), *at, state.anc.data_ptr(), out.data_ptr(), scale)
    return attn.out_proj(out).view(query.shape)


class CpuAttention(AttentionKernel):
    """The CPU's :class:`~syntaxnmt.model.attention.AttentionKernel`: a decoding step marked native
    (:meth:`~syntaxnmt.model.transformer.Transformer.init_state`) in :func:`native_step`; training
    in the kernels of rows (:func:`rows_attention`); else the projections, then
    :meth:`attend`. PyTorch's kernel wherever none of these applies (another device, other dtypes)."""

    def __call__(self, attn: MultiHeadAttention, query: Tensor, key_value: Tensor | None, key_padding_mask: Tensor | None, causal: bool, cache: dict | None, static_kv: bool) -> Tensor:
        if cache is not None and cache.get("native") and _native is not None:
            return native_step(attn, query, key_value, key_padding_mask, cache, static_kv)
        if cache is None and rows_usable(attn, query, key_value, causal):
            b, t, d = query.shape
            memory, memory_place = (None, None) if key_value is None else (key_value.reshape(-1, d), Place(None, *key_value.shape[:2]))
            return rows_attention(attn, query.reshape(-1, d), Place(None, b, t), key_padding_mask, causal, memory, memory_place).view(b, t, -1)
        return super().__call__(attn, query, key_value, key_padding_mask, causal, cache, static_kv)

    def attend(self, attn: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, own_dropout: bool = False) -> Tensor:
        """One query per row (incremental decoding), and training with attention dropout where the
        caller asks for ``own_dropout``: the explicit products (two small matrix products beat the
        fused kernel's per-call overhead, about 2x at beam search's shapes; with dropout the fused
        kernel falls back to a reference path whose full-mask checks and ``bernoulli_`` mask cost
        more than the products). Short sequences: the C kernels (:func:`attention`). Else
        PyTorch's fused kernel."""
        if q.device.type == "cpu" and (q.size(2) == 1 or (own_dropout and attn.training and attn.dropout > 0)):
            return attn.explicit(q, k, v, key_padding_mask, causal, SourceFeatures())[0]
        if usable(q, k, attn.dropout if attn.training else 0.0, causal):
            return attention(q, k, v, key_padding_mask, causal)
        return super().attend(attn, q, k, v, key_padding_mask, causal)


CPU_ATTENTION = CpuAttention()
