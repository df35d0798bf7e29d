"""Multi-head attention (Vaswani et al. 2017, Sec. 3.2), built to be extended.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V,   per head, then concatenated and projected.

Enriched attention plugs in through :class:`AttentionExtension` objects rather than copies of this
module. An extension can replace the queries/keys of some heads (linguistic heads), add terms to
the energies (relation embeddings on keys, Shaw et al. 2018), rescale them (parent-scaled
attention) and add terms to the output (relation embeddings on values). Extensions read their
per-batch inputs (tags, relation ids, parent positions) from the typed
:class:`~syntaxnmt.inputs.SourceFeatures` passed to ``forward``.

With no extension and no request for the weights, the fused
:func:`torch.nn.functional.scaled_dot_product_attention` kernel computes the same thing faster
(except for single queries on CPU, as in incremental decoding, where plain matrix products or the
native search step win, and for sequences of up to 128 positions on CPU, where the C kernels of
:mod:`syntaxnmt.model.native_attention` do).
"""

from __future__ import annotations

import math
from array import array
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.inputs import SourceFeatures
from syntaxnmt.model import native_attention
from syntaxnmt.model.dropout import dropout
from syntaxnmt.model.linear import Linear, linear
from syntaxnmt.model.normalizers import HardMode, Normalizer, attention_weights
from syntaxnmt.model.packing import Place, gather_rows, on_rows, scatter_rows
from syntaxnmt.runtime import native_kernels

_native = native_kernels()  # None: incremental decoding keeps PyTorch's operators


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


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self- and cross-attention, with an optional key/value cache.

    ``forward(query, key_value, ...)``: ``query`` is (B, Tq, D) and ``key_value`` (B, Tk, D)
    (the same tensor for self-attention). ``key_padding_mask`` (B, Tk) is True at padding, which
    receives zero weight; ``causal`` hides future positions (decoder self-attention).
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True, extensions: Sequence[AttentionExtension] = (), normalizer: Normalizer = "softmax", hard: HardMode = "none"):
        """``normalizer`` and ``hard``: sparse or hard weights instead of the softmax (see :mod:`syntaxnmt.model.normalizers`)."""
        super().__init__()
        self.normalizer, self.hard = normalizer, hard
        assert d_model % heads == 0, "d_model must be divisible by heads"
        self.d_model, self.heads, self.d_head = d_model, heads, d_model // heads
        self.dropout = dropout
        self.q_proj = Linear(d_model, d_model, bias=bias)
        self.k_proj = Linear(d_model, d_model, bias=bias)
        self.v_proj = Linear(d_model, d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)
        self.extensions = nn.ModuleList(extensions)
        self.leak: LeakSlot | None = None  # set by train.alignment.leaky (syntaxnmt.model.factory)

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.d_head).transpose(1, 2)

    def project_kv(self, key_value: Tensor, rows: Tensor | None = None, packed: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Keys and values (B, H, Tk, d); decoders cache these for the encoder output. With
        ``rows``, computed on those rows of ``key_value`` only (``packed``: already gathered)."""
        packed = gather_rows(key_value, rows) if packed is None else packed
        return self._split(scatter_rows(self.k_proj(packed), rows, key_value)), self._split(scatter_rows(self.v_proj(packed), rows, key_value))

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
        rows: Tensor | None = None,
        kv_rows: Tensor | None = None,
        leak: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Return the attention output (B, Tq, D) and, if ``need_weights``, the weights (B, H, Tq, Tk).

        ``leak``: the heads of :attr:`leak` (a :class:`LeakSlot`) also attend to its slot; the
        weights then have one more column, the leak's, last (B, H, Tq, Tk + 1).

        ``rows`` (``kv_rows``): flat indices of the query (key/value) positions the projections
        compute, the others get zeros (:mod:`syntaxnmt.model.packing`; ``kv_rows`` defaults to
        ``rows`` in self-attention). Only for positions nobody reads: padding.

        ``cache``: a dict updated in place for incremental decoding. For self-attention the new
        keys/values are appended to ``cache['k']``/``cache['v']`` (after selecting the rows
        ``cache['order']`` when beam search left one, :func:`defer_reorder`); with ``static_kv``
        (cross-attention) they are computed once from ``key_value`` and reused.
        """
        if cache is not None and cache.get("native") and self.native_ready(leak):
            if need_weights or rows is not None or query.size(1) != 1 or query.dtype != torch.float32 or query.device.type != "cpu":
                raise ValueError("a native decoding state (init_state(..., native=True)) steps one float32 CPU query per row, without attention weights")
            return self._native_step(query, key_value, key_padding_mask, cache, static_kv), None
        if cache is None and not need_weights and self._stackable(query, key_value, causal, leak):
            place = Place(rows, query.size(0), query.size(1))
            memory, memory_place = (None, None) if key_value is None else (gather_rows(key_value, kv_rows), Place(kv_rows, key_value.size(0), key_value.size(1)))
            out = self.packed_attention(gather_rows(query, rows), place, key_padding_mask, causal, memory, memory_place)
            return scatter_rows(out, rows, query), None
        packed = gather_rows(query, rows)
        q = self._split(scatter_rows(self.q_proj(packed), rows, query))
        if cache is not None and static_kv and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k, v = self.project_kv(query, rows, packed) if key_value is None else self.project_kv(key_value, kv_rows)
            if cache is not None:
                if not static_kv and "k" in cache:
                    order = cache.pop("order", None)  # rows kept by beam search since the last step (defer_reorder)
                    k, v = append_rows(cache["k"], k, order), append_rows(cache["v"], v, order)
                else:  # stored contiguous: every later step multiplies with them
                    k, v = k.contiguous(), v.contiguous()
                cache["k"], cache["v"] = k, v
        # With a cache, the queries are the newest positions: no future key exists to hide.
        causal = causal and q.size(2) > 1
        # One query per row (incremental decoding) on CPU: two small matrix products beat the
        # fused kernel's per-call overhead (about 2x at beam search's shapes).
        single_query_cpu = q.size(2) == 1 and q.device.type == "cpu"
        plain = self.normalizer == "softmax" and self.hard == "none"
        leak_slot = self.leak if leak else None
        if not self.extensions and not need_weights and not single_query_cpu and plain and leak_slot is None:
            out = self._fused(q, k, v, key_padding_mask, causal)
            weights = None
        else:
            out, weights = self._explicit(q, k, v, key_padding_mask, causal, features or SourceFeatures(), leak_slot)
        b, _, tq, _ = out.shape
        out = out.transpose(1, 2).reshape(b, tq, self.d_model)
        return on_rows(self.out_proj, out, rows), weights

    def _stackable(self, query: Tensor, key_value: Tensor | None, causal: bool, leak: bool) -> bool:
        """Whether :meth:`packed_attention` computes this call: the plain attention of CPU training in the C
        kernels (:func:`~syntaxnmt.model.native_attention.shapes_usable`)."""
        tk = query.size(1) if key_value is None else key_value.size(1)
        return (
            self.training and not self.extensions and self.normalizer == "softmax" and self.hard == "none" and not leak
            and not torch.is_autocast_enabled(query.device.type)  # the projections would be bf16/fp16: PyTorch's kernels
            and native_attention.shapes_usable(query, query.size(0), query.size(1), tk, self.d_head, self.dropout, causal)
        )

    def _projection(self, x: Tensor, layers: Sequence[nn.Linear], rows: Tensor | None) -> Tensor:
        """The projections ``layers`` of ``x`` (B, T, D) side by side (B, T, len(layers) * D), as one
        product with the weights stacked (their gradients come back as slices of one)."""
        if len(layers) == 1:
            return on_rows(layers[0], x, rows)
        weight = torch.cat([p.weight for p in layers])
        bias = torch.cat([p.bias for p in layers]) if layers[0].bias is not None else None
        return on_rows(lambda h: linear(h, weight, bias), x, rows)

    def packed_attention(self, h: Tensor, place: Place, key_padding_mask: Tensor | None = None, causal: bool = False, memory: Tensor | None = None, memory_place: Place | None = None) -> Tensor:
        """The plain attention of CPU training in the C kernels with the projections stacked: q, k,
        v (self-attention) or k, v (cross-attention, of ``memory``) are one product each, on the
        wider weight, and the kernels read their heads where the product wrote them and write their
        gradients into one tensor (:func:`~syntaxnmt.model.native_attention.packed_attention`):
        fewer, larger products than three, and no sums of the three input gradients. ``h`` (R, D)
        holds the positions of ``place`` (:class:`~syntaxnmt.model.packing.Place`: packed rows, or
        every position in order), ``memory`` (Rs, D) those of ``memory_place``, and so does the
        result: the kernels read and write the packed rows through a row map, so layers whose
        states stay packed between them (:meth:`syntaxnmt.model.transformer.Transformer.encode`,
        ``decode``) run every operator on the R rows; :meth:`forward` packs and places around it."""
        if memory is None:
            sources, places = (self._projection(h, (self.q_proj, self.k_proj, self.v_proj), None),), (place,)
        else:
            sources, places = (self.q_proj(h), self._projection(memory, (self.k_proj, self.v_proj), None)), (place, memory_place)
        return self.out_proj(native_attention.packed_attention(sources, places, self.heads, key_padding_mask, causal))

    def native_ready(self, leak: bool = False) -> bool:
        """Whether :meth:`_native_step` can compute this attention: the kernel was built for this
        CPU and the attention is the plain one (softmax, no extension, no leak slot)."""
        return _native is not None and not self.extensions and self.normalizer == "softmax" and self.hard == "none" and not leak

    def _native_step(self, query: Tensor, key_value: Tensor | None, key_padding_mask: Tensor | None, cache: dict, static_kv: bool) -> Tensor:
        """One step of incremental decoding (one query per row, float32 on the CPU) in the kernels
        of ``syntaxnmt/_native.c``, without copying a cache: a self-attention cache keeps every
        step's keys and values (R_t, D) as that step computed them and an ancestry table (R, t)
        -- the row of each earlier step a row descends from -- which beam search reorders instead
        of the keys (:func:`defer_reorder`); a cross-attention cache keeps one key/value block per
        sentence (its first step's rows) and the block each row reads (``map``, reordered by
        :func:`reorder_cache`). Same values as the explicit path to float rounding."""
        x = query.reshape(-1, self.d_model)
        r, h, d = x.size(0), self.heads, self.d_head
        q = self.q_proj(x).contiguous()
        out = torch.empty_like(q)
        scale = 1.0 / math.sqrt(d)
        if static_kv:
            if "map" not in cache:  # the first step: the blocks of the rows' sentences
                k, v = self.project_kv(key_value)
                cache["k"], cache["v"], cache["map"] = k.contiguous(), v.contiguous(), torch.arange(r)
                cache["pad"] = None if key_padding_mask is None else key_padding_mask.contiguous()
            k, v, pad = cache["k"], cache["v"], cache["pad"]
            _native.cross_attention(q.data_ptr(), r, h, d, k.size(0), k.size(2), k.data_ptr(), v.data_ptr(), cache["map"].data_ptr(), 0 if pad is None else pad.data_ptr(), out.data_ptr(), scale)
        else:
            k, v = self.k_proj(x).contiguous(), self.v_proj(x).contiguous()
            keys = cache.setdefault("keys", [])  # the tensors, kept alive; their addresses and rows below
            keys.append((k, v))
            for name, value in (("key_at", k.data_ptr()), ("value_at", v.data_ptr()), ("rows_at", r)):
                cache.setdefault(name, array("q")).append(value)
            new = torch.arange(r)[:, None]
            cache["anc"] = anc = new if "anc" not in cache else torch.cat([cache["anc"], new], dim=1)
            at = [cache[name].buffer_info()[0] for name in ("key_at", "value_at", "rows_at")]
            _native.self_attention(q.data_ptr(), r, h, d, len(keys), *at, anc.data_ptr(), out.data_ptr(), scale)
        return self.out_proj(out).view(query.shape)

    def _fused(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool) -> Tensor:
        mask = None
        if key_padding_mask is not None:
            mask = ~key_padding_mask[:, None, None, :]  # True = may attend
        p = self.dropout if self.training else 0.0
        if native_attention.usable(q, k, p, causal):  # CPU, short sequences: the C kernels
            return native_attention.attention(q, k, v, key_padding_mask, causal)
        if causal and mask is not None:
            tq, tk = q.size(2), k.size(2)
            future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(tk - tq + 1)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask & ~future, dropout_p=p)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)

    def weights(self, query: Tensor, key_value: Tensor, *, key_padding_mask: Tensor | None = None, features: SourceFeatures | None = None, rows: Tensor | None = None, kv_rows: Tensor | None = None, leak: bool = False) -> Tensor:
        """The weights (B, H, Tq, Tk) ``forward(query, key_value, need_weights=True, ...)`` returns
        (bit for bit, leak column included), without the values and the output projection: for
        readers of the attention only (alignment)."""
        q = self._split(scatter_rows(self.q_proj(gather_rows(query, rows)), rows, query))
        k = self._split(scatter_rows(self.k_proj(gather_rows(key_value, kv_rows)), kv_rows, key_value))
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
            tq, tk = scores.shape[-2:]
            future = torch.ones(tq, tk, dtype=torch.bool, device=scores.device).triu(tk - tq + 1)
            scores = scores.masked_fill(future, float("-inf"))
        if leak is not None:
            scores = torch.cat([scores, leak.scores(q)], dim=-1)
        return q, k, attention_weights(scores, None, self.normalizer, self.hard, self.training)

    def _explicit(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, features: SourceFeatures, leak: LeakSlot | None = None) -> tuple[Tensor, Tensor]:
        q, k, weights = self._weights(q, k, key_padding_mask, causal, features, leak)
        dropped = dropout(weights, self.dropout, self.training)
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
    """Select batch rows ``index`` of every cached tensor in place (beam search bookkeeping); of
    a native cross-attention cache (:meth:`MultiHeadAttention._native_step`), the map from rows
    to key/value blocks."""
    if "map" in cache:
        cache["map"] = cache["map"].index_select(0, index)
        return
    for key, value in cache.items():
        if isinstance(value, Tensor):
            cache[key] = value.index_select(0, index)


def defer_reorder(cache: dict[str, Tensor], index: Tensor) -> None:
    """Select batch rows ``index`` of a self-attention cache at its next append instead of now:
    :func:`append_rows` then copies the cache once (gather and append together) rather than twice
    (``index_select`` now, ``torch.cat`` at the next step). Successive selections compose. A
    native cache (:meth:`MultiHeadAttention._native_step`) selects rows of its ancestry table now."""
    if "anc" in cache:
        cache["anc"] = cache["anc"].index_select(0, index)
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
