"""Multi-head attention (Vaswani et al. 2017, Sec. 3.2), built to be extended.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V,   per head, then concatenated and projected.

Enriched attention plugs in through :class:`AttentionExtension` objects rather than copies of this
module. An extension can replace the queries/keys of some heads (linguistic heads), add terms to
the energies (relation embeddings on keys, Shaw et al. 2018), rescale them (parent-scaled
attention) and add terms to the output (relation embeddings on values). Extensions read their
per-batch inputs (tags, relation ids, parent positions) from the typed
:class:`~syntaxnmt.inputs.SourceFeatures` passed to ``forward``.

How the plain attention (softmax, no extension, no weights asked for) is computed is the
attention's :class:`AttentionKernel`: by default PyTorch's fused
:func:`torch.nn.functional.scaled_dot_product_attention`; the code that runs a model on a given
machine may install another one (:func:`syntaxnmt.cpu.install`: the C kernels of CPU training and
decoding), as extensions plug into the explicit formula.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.inputs import SourceFeatures
from syntaxnmt.model.normalizers import HardMode, Normalizer, attention_weights


class AttentionExtension(nn.Module):
    """Hook points of :class:`MultiHeadAttention`; every default is the identity.

    Shapes: ``q`` (B, H, Tq, d), ``k`` (B, H, Tk, d), ``scores`` and ``weights`` (B, H, Tq, Tk),
    ``out`` (B, H, Tq, d). ``features`` are the source features given to ``MultiHeadAttention.forward``.
    """

    def queries_keys(self, q: Tensor, k: Tensor, features: SourceFeatures) -> tuple[Tensor, Tensor]:
        return q, k

    def scores(self, scores: Tensor, q: Tensor, features: SourceFeatures) -> Tensor:
        """Energies before masking and softmax (already divided by sqrt(d))."""
        return scores

    def values(self, out: Tensor, weights: Tensor, features: SourceFeatures) -> Tensor:
        """The per-head output ``weights @ V`` before the heads are merged."""
        return out


class LeakSlot(nn.Module):
    """A learned extra key/value position that the queries of some heads may attend to (leaky
    attention of Mask-Align, Chen, Sun & Liu 2021, "Mask-Align: Self-Supervised Neural Word
    Alignment", ACL): per head, a key k_leak and a value v_leak (d_head each). A head's weights are
    the softmax over the real keys and the leak, so attention the real positions do not deserve can
    go to the leak instead of piling on punctuation or EOS. The value starts at 0 (attending to the
    leak adds nothing at first)."""

    def __init__(self, heads: int, d_head: int, head: int | None = None):
        """``head``: the one head with a leak (None: every head)."""
        super().__init__()
        self.key = nn.Parameter(torch.randn(heads, d_head) * d_head**-0.5)
        self.value = nn.Parameter(torch.zeros(heads, d_head))
        mask = torch.ones(heads, dtype=torch.bool) if head is None else torch.arange(heads) == head % heads
        self.register_buffer("heads", mask, persistent=False)

    def scores(self, q: Tensor) -> Tensor:
        """Scores (B, H, Tq, 1) of queries ``q`` (B, H, Tq, d) for the leak; -inf for heads without it."""
        s = torch.einsum("bhqd,hd->bhq", q, self.key.to(q.dtype))[..., None] / math.sqrt(q.size(-1))
        return s.masked_fill(~self.heads[None, :, None, None], float("-inf"))


def future_keys(tq: int, tk: int, device: torch.device | None = None) -> Tensor:
    """The causal mask (Vaswani et al. 2017, Sec. 3.2.3): (Tq, Tk), True where a key lies after its
    query, which may not attend to it. The queries are the newest ``tq`` of the ``tk`` positions
    (with a cache, query i is position tk - tq + i)."""
    return torch.ones(tq, tk, dtype=torch.bool, device=device).triu(tk - tq + 1)


class AttentionKernel:
    """How :class:`MultiHeadAttention` computes its plain attention (softmax over the keys, no
    extension, no leak slot, no weights asked for): the one seam for a faster implementation.
    :meth:`__call__` gets the whole call (projections and cache included, so a kernel may stack
    the projections or keep its own cache, :func:`reorder_cache`); :meth:`attend` the heads only
    (also used by HAN's word level). This default is PyTorch's fused kernel."""

    def __call__(self, attn: "MultiHeadAttention", query: Tensor, key_value: Tensor | None, key_padding_mask: Tensor | None, causal: bool, cache: dict | None, static_kv: bool) -> Tensor:
        """The attention output (B, Tq, D) of :meth:`MultiHeadAttention.forward` for a plain attention."""
        q, k, v = attn.project(query, key_value, cache, static_kv)
        return attn.out_proj(attn.merge(self.attend(attn, q, k, v, key_padding_mask, causal and q.size(2) > 1)))

    def attend(self, attn: "MultiHeadAttention", q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, own_dropout: bool = False) -> Tensor:
        """``softmax(q k^T / sqrt(d) + mask) v`` per head (B, H, Tq, d), with the attention's dropout in
        training; ``own_dropout``: the caller would rather have the weights dropped by the attention's
        own dropout module than by the fused kernel (a kernel may honour it; HAN's word level asks)."""
        mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]  # True = may attend
        p = attn.dropout if attn.training else 0.0
        tq, tk = q.size(2), k.size(2)
        if causal and (mask is not None or tq != tk):  # is_causal aligns the queries with the first keys, not the last
            allowed = ~future_keys(tq, tk, q.device)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed if mask is None else mask & allowed, dropout_p=p)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self- and cross-attention, with an optional key/value cache.

    ``forward(query, key_value, ...)``: ``query`` is (B, Tq, D) and ``key_value`` (B, Tk, D)
    (the same tensor for self-attention). ``key_padding_mask`` (B, Tk) is True at padding, which
    receives zero weight; ``causal`` hides future positions (decoder self-attention).
    """

    kernel: AttentionKernel = AttentionKernel()
    """How the plain attention is computed (:class:`AttentionKernel`; an instance may have its own)."""

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True, extensions: Sequence[AttentionExtension] = (), normalizer: Normalizer = "softmax", hard: HardMode = "none"):
        """``normalizer`` and ``hard``: sparse or hard weights instead of the softmax (see :mod:`syntaxnmt.model.normalizers`)."""
        super().__init__()
        self.normalizer, self.hard = normalizer, hard
        assert d_model % heads == 0, "d_model must be divisible by heads"
        self.d_model, self.heads, self.d_head = d_model, heads, d_model // heads
        self.dropout = dropout
        self.weights_dropout = nn.Dropout(dropout)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.extensions = nn.ModuleList(extensions)
        self.leak: LeakSlot | None = None  # set by train.alignment.leaky (syntaxnmt.model.factory)

    @property
    def plain(self) -> bool:
        """Softmax attention without extensions: what :attr:`kernel` computes."""
        return not self.extensions and self.normalizer == "softmax" and self.hard == "none"

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        cache: dict[str, Tensor] | None = None,
        static_kv: bool = False,
        features: SourceFeatures | None = None,
        leak: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Return the attention output (B, Tq, D) and, if ``need_weights``, the weights (B, H, Tq, Tk).

        ``leak``: the heads of :attr:`leak` (a :class:`LeakSlot`) also attend to its slot; the
        weights then have one more column, the leak's, last (B, H, Tq, Tk + 1). ``cache``: a dict
        updated in place for incremental decoding (:meth:`project`)."""
        if self.plain and not need_weights and not leak:
            return self.kernel(self, query, key_value, key_padding_mask, causal, cache, static_kv), None
        q, k, v = self.project(query, key_value, cache, static_kv)
        causal = causal and q.size(2) > 1  # with a cache, the queries are the newest positions: no future key exists to hide
        out, weights = self.explicit(q, k, v, key_padding_mask, causal, features or SourceFeatures(), self.leak if leak else None)
        return self.out_proj(self.merge(out)), weights

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.d_head).transpose(1, 2)

    def merge(self, out: Tensor) -> Tensor:
        """The heads (B, H, T, d) side by side (B, T, D), before the output projection."""
        b, _, t, _ = out.shape
        return out.transpose(1, 2).reshape(b, t, self.d_model)

    def project_kv(self, key_value: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values (B, H, Tk, d); decoders cache these for the encoder output."""
        return self._split(self.k_proj(key_value)), self._split(self.v_proj(key_value))

    def project(self, query: Tensor, key_value: Tensor | None, cache: dict | None = None, static_kv: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values (B, H, T, d). With a ``cache`` (incremental decoding), for
        self-attention the new keys/values are appended to ``cache['k']``/``cache['v']`` (after
        selecting the rows ``cache['order']`` when beam search left one, :func:`defer_reorder`);
        with ``static_kv`` (cross-attention) they are computed once from ``key_value`` and reused."""
        q = self._split(self.q_proj(query))
        if cache is not None and static_kv and "k" in cache:
            return q, cache["k"], cache["v"]
        k, v = self.project_kv(query if key_value is None else key_value)
        if cache is not None:
            if not static_kv and "k" in cache:
                order = cache.pop("order", None)  # rows kept by beam search since the last step (defer_reorder)
                k, v = append_rows(cache["k"], k, order), append_rows(cache["v"], v, order)
            else:  # stored contiguous: every later step multiplies with them
                k, v = k.contiguous(), v.contiguous()
            cache["k"], cache["v"] = k, v
        return q, k, v

    def weights(self, query: Tensor, key_value: Tensor, *, key_padding_mask: Tensor | None = None, features: SourceFeatures | None = None, leak: bool = False) -> Tensor:
        """The weights (B, H, Tq, Tk) ``forward(query, key_value, need_weights=True, ...)`` returns
        (bit for bit, leak column included), without the values and the output projection: for
        readers of the attention only (alignment)."""
        q, k = self._split(self.q_proj(query)), self._split(self.k_proj(key_value))
        return self._weights(q, k, key_padding_mask, False, features or SourceFeatures(), self.leak if leak else None)[2]

    def _weights(self, q: Tensor, k: Tensor, key_padding_mask: Tensor | None, causal: bool, features: SourceFeatures, leak: LeakSlot | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Queries and keys after the extensions, and the attention weights (a leak column last with ``leak``)."""
        for ext in self.extensions:
            q, k = ext.queries_keys(q, k, features)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d_head)
        for ext in self.extensions:
            scores = ext.scores(scores, q, features)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        if causal:
            scores = scores.masked_fill(future_keys(*scores.shape[-2:], scores.device), float("-inf"))
        if leak is not None:
            scores = torch.cat([scores, leak.scores(q)], dim=-1)
        return q, k, attention_weights(scores, None, self.normalizer, self.hard, self.training)

    def explicit(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, features: SourceFeatures, leak: LeakSlot | None = None) -> tuple[Tensor, Tensor]:
        """The attention (B, H, Tq, d) written out, its weights computed (and read by the extensions)."""
        q, k, weights = self._weights(q, k, key_padding_mask, causal, features, leak)
        dropped = self.weights_dropout(weights)
        if leak is not None:
            tk = k.size(2)
            out = torch.matmul(dropped[..., :tk], v) + dropped[..., tk:] * leak.value.to(v.dtype)[None, :, None, :]
            dropped = dropped[..., :tk]
        else:
            out = torch.matmul(dropped, v)
        for ext in self.extensions:
            out = ext.values(out, dropped, features)
        return out, weights


def reorder_cache(cache: dict, index: Tensor) -> None:
    """Select batch rows ``index`` of every cached tensor in place (beam search bookkeeping); a
    kernel that keeps its own state in the cache (``cache['kernel']``, :class:`AttentionKernel`)
    selects it with its ``reorder(index)``."""
    if "kernel" in cache:
        cache["kernel"].reorder(index)
        return
    for key, value in cache.items():
        if isinstance(value, Tensor):
            cache[key] = value.index_select(0, index)


def defer_reorder(cache: dict[str, Tensor], index: Tensor) -> None:
    """Select batch rows ``index`` of a self-attention cache at its next append instead of now:
    :func:`append_rows` then copies the cache once (gather and append together) rather than twice
    (``index_select`` now, ``torch.cat`` at the next step). Successive selections compose. A
    kernel's own state (``cache['kernel']``) selects them with its ``defer_reorder(index)``."""
    if "kernel" in cache:
        cache["kernel"].defer_reorder(index)
    elif "k" in cache:
        cache["order"] = cache["order"].index_select(0, index) if "order" in cache else index


def append_rows(cached: Tensor, new: Tensor, order: Tensor | None = None) -> Tensor:
    """``torch.cat([cached.index_select(0, order), new], dim=2)`` (``order`` None: all rows in
    place) for caches (B, H, T, d), written with one copy of ``cached``."""
    if order is None:
        return torch.cat([cached, new], dim=2)
    if torch.is_grad_enabled() and (cached.requires_grad or new.requires_grad):  # out= has no autograd
        return torch.cat([cached.index_select(0, order), new], dim=2)
    b, h, t, d = cached.shape
    out = cached.new_empty(order.numel(), h, t + new.size(2), d)
    torch.index_select(cached, 0, order, out=out[:, :, :t])
    out[:, :, t:] = new
    return out
