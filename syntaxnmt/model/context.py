"""Hierarchical attention over the previous sentences of the document (``model.context.kind: han``).

Miculicich, Ram, Pappas & Henderson (EMNLP 2018), "Document-Level Neural Machine Translation with
Hierarchical Attention Networks", Sec. 2, after Yang et al. (2016). For every token state h_t of the
current sentence (the encoder output) and the encoder states C_j of each of the k previous source
sentences (the same encoder):

    s_t^j = MultiHead_w(h_t, C_j)                          word level: one summary per sentence (Eq. 1-2)
    d_t   = FFN(MultiHead_s(h_t, [s_t^1 ... s_t^k]))       sentence level (Eq. 3)
    λ_t   = σ(W_h h_t + W_d d_t)                           a gate per dimension (Eq. 4)
    h~_t  = LayerNorm((1 - λ_t) ⊙ h_t + λ_t ⊙ d_t)          (Eq. 5)

Padding of a context sentence gets no word-level weight, a missing sentence (the document has
fewer than k before this one) no sentence-level weight; a sentence with no context at all keeps
h_t unchanged -- exactly the sentence-level model's state.

The same block (a second instance, its own parameters) is the paper's "HAN decoder" (Sec. 2.3,
``side: target | both``): h_t is then the final state of the decoder at target position t and C_j
the states the same model computes for the j-th previous target sentence, teacher-forced (the
reference in training, the model's own translation when decoding a document): the output of its
last decoder layer before this block, whose memory is that sentence's encoder output after the
source-side block (``side: both``, as in HAN_NMT) or the plain encoder output (``side: target``).
h_t is only the query, so
position t reads nothing of the current sentence beyond its own state and incremental decoding
gives what a full pass gives (:meth:`HanContext.read_target`).
"""

from __future__ import annotations

import math
from typing import Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.config import ModelConfig
from syntaxnmt.inputs import PAD, Batch, SourceFeatures
from syntaxnmt.model.attention import MultiHeadAttention
from syntaxnmt.model.outputs import ContextAttention, EncoderOutput


def _composed(outer: nn.Module, inner: nn.Module) -> tuple[Tensor, Tensor | None]:
    """Weight and bias of the affine map ``outer(inner(x))`` (two linear layers)."""
    weight = outer.weight @ inner.weight
    bias = None if inner.bias is None else outer.weight @ inner.bias
    if outer.bias is not None:
        bias = outer.bias if bias is None else bias + outer.bias
    return weight, bias


def gather_context(kv: dict[str, Tensor], rows: Tensor | None = None) -> dict[str, Tensor]:
    """The word-level keys and values (B, k, H, L, d) of the sentences ``rows`` (None: all) from
    a cache of :meth:`HierarchicalContext.gathered_context` (the projections of the N context
    rows, contiguous, and ``index`` (B, k)): one copy of whole rows, composed with the selection.
    A cache of gathered keys and values (B, k, H, L, d) is selected as it is."""
    if "index" not in kv:
        return kv if rows is None else {n: kv[n].index_select(0, rows) for n in ("k", "v")}
    index = kv["index"] if rows is None else kv["index"].index_select(0, rows)
    flat = index.reshape(-1)
    return {n: kv[f"rows_{n}"].index_select(0, flat).view(*index.shape, *kv[f"rows_{n}"].shape[1:]) for n in ("k", "v")}


def beam_blocks(groups: Tensor) -> tuple[Tensor, int] | None:
    """(heads (G,), r) when the rows of ``groups`` (N,) come in G blocks of r consecutive rows that
    each read one context row (rows i*r .. i*r+r-1 read ``heads[i]``: the hypotheses of a sentence
    in beam search), else None."""
    n = groups.numel()
    if n == 0:
        return None
    g = int(groups[1:].ne(groups[:-1]).sum()) + 1
    if n % g:
        return None
    blocks = groups.view(g, n // g)
    return (blocks[:, 0], n // g) if bool(blocks.eq(blocks[:, :1]).all()) else None


def _memo(cache: dict | None, name: str, of: Tensor, compute: Callable[[], object]) -> object:
    """``compute()``, remembered in a decoding ``cache`` for as long as it is asked about the same
    tensor ``of`` (the context's padding and the beam's row groups stay the same tensors from step to
    step until beam search drops sentences): the host syncs it needs run once, not at every step."""
    if cache is None:
        return compute()
    if cache.get(f"{name}_of") is not of:
        cache[f"{name}_of"], cache[name] = of, compute()
    return cache[name]


def _selected(kv: dict[str, Tensor], heads: Tensor) -> dict[str, Tensor]:
    """The keys and values (G, k, H, Sc, d) of the context rows ``heads`` of a cache ``kv``,
    remembered in it until the rows change (beam search drops finished sentences now and then)."""
    if heads.numel() == kv["k"].size(0) and torch.equal(heads, torch.arange(heads.numel(), device=heads.device)):
        return kv
    if "heads" not in kv or not torch.equal(kv["heads"], heads):
        kv["heads"], kv["selected"] = heads, {n: kv[n].index_select(0, heads) for n in ("k", "v")}
    return kv["selected"]


class HierarchicalContext(nn.Module):
    """The HAN block on top of the encoder or of the decoder (see the module docstring)."""

    def __init__(self, d_model: int, heads: int, ffn_dim: int, dropout: float = 0.1):
        super().__init__()
        self.word = MultiHeadAttention(d_model, heads, dropout)
        self.sentence = MultiHeadAttention(d_model, heads, dropout)
        self.ffn = nn.Sequential(nn.Linear(d_model, ffn_dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ffn_dim, d_model))
        self.gate = nn.Linear(2 * d_model, d_model)
        self.norm = nn.LayerNorm(d_model)

    def gathered_context(self, states: Tensor, pad: Tensor, rows: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """The word-level keys and values (a ``cache`` for :meth:`forward`) and the padding (B, k, L)
        of the previous sentences ``rows`` (B, k; -1: missing) among ``states`` (N, L, D) with
        padding ``pad`` (N, L): every row's projected once, however many sentences read it (the
        same keys and values as projecting the gathered states). The cache holds the projections of
        the N rows, (N, H, L, d) each, contiguous, and ``index`` (B, k): :meth:`forward` gathers
        them once, for the sentences with a context only (:func:`gather_context`)."""
        keys, values = self.word.project_kv(states)
        missing = rows.lt(0)
        index = rows.clamp_min(0)  # a missing sentence: any finite row (all padding, no weight)
        ctx_pad = pad.index_select(0, index.reshape(-1)).view(*index.shape, pad.size(1)) | missing[..., None]
        return {"rows_k": keys.contiguous(), "rows_v": values.contiguous(), "index": index}, ctx_pad

    def forward(self, h: Tensor, ctx: Tensor | None, ctx_pad: Tensor, need_weights: bool = False, cache: dict[str, Tensor] | None = None, groups: Tensor | None = None) -> tuple[Tensor, ContextAttention | None]:
        """``h`` (B, S, D) current states; ``ctx`` (B, k, Sc, D) encoder (or decoder) states of the
        previous sentences (nearest first) with ``ctx_pad`` (B, k, Sc) True at padding and in missing sentences.

        Returns h~ and, with ``need_weights`` (as the attention layers return theirs), the
        word-level and sentence-level weights and the gate (:class:`ContextAttention`).
        ``cache`` (incremental decoding, updated in place): the word-level keys and values of
        ``ctx``, (B, k, H, Sc, d) each, projected on the first call and reused (they do not
        depend on the query), as cross-attention caches those of the encoder output; given
        (:meth:`gathered_context`), ``ctx`` may be None. ``groups`` (B,):
        the row of ``ctx``, ``ctx_pad`` and ``cache`` that each row of ``h`` reads (beam search:
        every hypothesis of a sentence reads its sentence's context); the keys and values are then
        those of the context rows, projected once per sentence, not per hypothesis, and one query
        per row reads them as a block of queries per sentence (:func:`beam_blocks`)."""
        b, s, d = h.shape
        k, sc = ctx_pad.shape[1], ctx_pad.shape[2]
        if not need_weights and not _memo(cache, "any_context", ctx_pad, lambda: bool(ctx_pad.logical_not().any())):
            return h, None  # no sentence has a context (a wave of documents' first sentences): h as it is
        if cache is not None and ("k" in cache or "index" in cache):
            kv = cache
        else:
            n = ctx.size(0)
            keys, values = self.word.project_kv(ctx.reshape(n * k, sc, d))
            kv = {"k": keys.contiguous().view(n, k, *keys.shape[1:]), "v": values.contiguous().view(n, k, *values.shape[1:])}
            if cache is not None:
                cache.update(kv)
        if groups is not None:
            blocks = _memo(cache, "blocks", groups, lambda: beam_blocks(groups)) if s == 1 and not need_weights else None
            if blocks is not None:
                return self._read(h, ctx_pad.index_select(0, groups), None, False, grouped=(*blocks, _selected(kv, blocks[0]), ctx_pad))
            kv, ctx_pad = {n: gather_context(kv)[n].index_select(0, groups) for n in ("k", "v")}, ctx_pad.index_select(0, groups)
        has_context = ~ctx_pad.all(-1).all(-1)  # (B,)
        if s > 1 and not need_weights:
            # a whole sentence (training, forced passes): only the rows with a context compute, the others keep h
            rows = has_context.nonzero().squeeze(1)
            if not len(rows):
                return h, None
            return self._read(h, ctx_pad.index_select(0, rows), gather_context(kv, rows), False, rows=rows)
        return self._read(h, ctx_pad, gather_context(kv), need_weights)

    def _read(self, h: Tensor, ctx_pad: Tensor, kv: dict[str, Tensor] | None, need_weights: bool, grouped: tuple | None = None, rows: Tensor | None = None) -> tuple[Tensor, ContextAttention | None]:
        """Eq. 1-5 for states ``h`` (B, S, D) given the word-level keys and values ``kv`` (B, k, H,
        Sc, d). ``grouped`` (one
        query per row, rows in blocks: :meth:`forward` with ``groups``): (heads (G,), r, the keys
        and values (G, k, H, Sc, d) of block i's context row ``heads[i]``, the padding of all context
        rows); ``kv`` is then None and ``ctx_pad`` the padding each row reads. ``rows`` (B',
        sentences that all have a context): ``ctx_pad`` and ``kv`` are those of these
        rows of ``h``, read and written in place (no copy of the selected rows, the others keep h)."""
        s, d = h.shape[1:]
        b = h.size(0) if rows is None else rows.numel()
        k, sc = ctx_pad.shape[1], ctx_pad.shape[2]
        present = ~ctx_pad.all(-1)  # (B, k): the sentence exists
        # Word level: every token attends over each context sentence separately (its query projected once).
        att = self.word
        into = None  # (flat positions of h) where the per-token results go, for rows
        if rows is not None:
            into = (rows[:, None] * s + torch.arange(s, device=h.device)).reshape(-1)
            h_t = h.reshape(-1, d).index_select(0, into)
            q = att._split(att.q_proj(h_t).view(b, s, -1))  # (B', H, S, d)
            z, _ = self._word_level(q, ctx_pad, kv, present, b, s, k, sc, False)
            return self._sentence_level(h, z, present, b, s, k, sc, False, None, h_t, into)
        q = att._split(att.q_proj(h))  # (B, H, S, d)
        if grouped is not None:  # one query per row; block i's r rows read context row heads[i] together
            heads, r, kv, all_pad = grouped
            g, hd = heads.numel(), att.heads
            word_mask = all_pad.index_select(0, heads).reshape(g * k, sc).clone()
            word_mask[word_mask.all(-1), 0] = False  # a missing sentence: any finite row (masked below)
            q = q.reshape(g, r, hd, -1).transpose(1, 2).unsqueeze(1).expand(g, k, hd, r, q.size(-1)).reshape(g * k, hd, r, -1)
            z, w_word = att.explicit(q, kv["k"].flatten(0, 1), kv["v"].flatten(0, 1), word_mask, False, SourceFeatures())
            z = z.view(g, k, hd, r, -1).permute(0, 3, 1, 2, 4).reshape(b * s, k, d)  # per row and sentence, before out_proj
            return self._sentence_level(h, z, present, b, s, k, sc, need_weights, w_word)
        z, w_word = self._word_level(q, ctx_pad, kv, present, b, s, k, sc, need_weights)
        return self._sentence_level(h, z, present, b, s, k, sc, need_weights, w_word)

    def _word_level(self, q: Tensor, ctx_pad: Tensor, kv: dict[str, Tensor], present: Tensor, b: int, s: int, k: int, sc: int, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """Eq. 1-2 for queries ``q`` (B, H, S, d): the word level's output (B*S, k, D) before its output map, and its weights on request."""
        att, d = self.word, q.size(1) * q.size(3)
        word_mask = ctx_pad.reshape(b * k, sc).clone()
        word_mask[~present.reshape(-1), 0] = False  # a missing sentence: any finite row (masked below)
        q = q.unsqueeze(1).expand(b, k, *q.shape[1:]).reshape(b * k, *q.shape[1:])
        keys, values = kv["k"].flatten(0, 1), kv["v"].flatten(0, 1)
        if need_weights:
            z, w_word = att.explicit(q, keys, values, word_mask, False, SourceFeatures())
        else:  # the attention's kernel (AttentionKernel.attend)
            z, w_word = att.kernel.attend(att, q, keys, values, word_mask, False, own_dropout=True), None
        return z.transpose(1, 2).reshape(b, k, s, d).transpose(1, 2).reshape(b * s, k, d), w_word  # per token and sentence

    def _sentence_level(self, h: Tensor, z: Tensor, present: Tensor, b: int, s: int, k: int, sc: int, need_weights: bool, w_word: Tensor | None, h_t: Tensor | None = None, into: Tensor | None = None) -> tuple[Tensor, ContextAttention | None]:
        """Eq. 3-5 of :meth:`_read` from the word level's output ``z`` (B*S, k, D) before its output
        map; with ``into`` (:meth:`_read` with ``rows``) the states ``h_t`` of the tokens are given
        and the results written at the flat positions ``into`` of ``h``."""
        d = h.size(-1)
        present_t = present.unsqueeze(1).expand(b, s, k).reshape(b * s, k)
        if into is None:
            h_t = h.reshape(b * s, d)
        # Sentence level: every token attends over the k summaries s = W_o z + b_o, whose keys and
        # values W (W_o z + b_o) + b are computed with the two maps composed (one product, not two).
        sent = self.sentence
        keys_s, values_s = (sent._split(F.linear(z, *maps)) for maps in self._sentence_maps())
        sent_mask = ~present_t
        sent_mask[sent_mask.all(-1), 0] = False
        # one query over k keys per token: elementwise products, not a batch of tiny matrix products
        q_s = sent._split(sent.q_proj(h_t[:, None]))  # (M, H, 1, d)
        scores = (q_s * keys_s).sum(-1) / math.sqrt(sent.d_head)  # (M, H, k)
        w_sent = torch.softmax(scores.masked_fill(sent_mask[:, None, :], float("-inf")), dim=-1)
        context = (sent.weights_dropout(w_sent)[..., None] * values_s).sum(-2)  # (M, H, d)
        d_t = self.ffn(sent.out_proj(context.reshape(-1, d)))
        gate = self.gate_values(h_t, d_t)
        out = self.norm((1 - gate) * h_t + gate * d_t)
        if into is not None:  # every row read has a context
            return h.reshape(-1, d).index_copy(0, into, out).view(h.shape), None
        out, gate = out.view(b, s, d), gate.view(b, -1, d)
        has_context = present.any(-1)[:, None, None]
        weights = None
        if need_weights:  # a sentence without context keeps h: zero weights, gate 0
            sentence = w_sent.view(b, s, -1, k).transpose(1, 2) * has_context[..., None]
            weights = ContextAttention(w_word.view(b, k, -1, s, sc) * present[:, :, None, None, None], sentence, gate.mean(-1) * has_context[..., 0])
        return torch.where(has_context, out, h), weights

    def _sentence_maps(self) -> tuple[tuple[Tensor, Tensor | None], ...]:
        """The composed maps (weight, bias) of the sentence level's keys and values from the word
        level's output; without autograd kept until a parameter changes (decoding: once, not per step)."""
        params = (self.word.out_proj, self.sentence.k_proj, self.sentence.v_proj)
        if torch.is_grad_enabled():
            return tuple(_composed(p, self.word.out_proj) for p in params[1:])
        key = tuple((t.untyped_storage()._cdata, t._version) for m in params for t in (m.weight, m.bias) if t is not None)
        memo = getattr(self, "_maps_memo", None)
        if memo is None or memo[0] != key:
            memo = (key, tuple(_composed(p, self.word.out_proj) for p in params[1:]))
            self._maps_memo = memo
        return memo[1]

    def gate_values(self, h: Tensor, d_t: Tensor) -> Tensor:
        """λ of Eq. 4 for states ``h`` and context vectors ``d_t`` (for tests and analysis)."""
        return torch.sigmoid(self.gate(torch.cat([h, d_t], dim=-1)))


def gather_rows(states: Tensor, pad: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """The states (B, k, L, D) of rows ``rows`` (B, k; -1: missing) of ``states`` (N, L, D) and
    their padding (B, k, L; a missing sentence is all padding, with zero states)."""
    missing = rows.lt(0)
    index = rows.clamp_min(0)
    ctx = states[index].masked_fill(missing[..., None, None], 0.0)
    return ctx, pad[index] | missing[..., None]


class ContextModel:
    """What a Transformer's encoder and decoder ask of a document-context model
    (``model.context.kind``; one of :data:`CONTEXT_MODELS`). This base is the sentence model's:
    nothing is read, as for concatenation (Tiedemann & Scherrer 2017), whose context is in the
    input sequences themselves (:mod:`syntaxnmt.data.documents`), not in the network."""

    changes_encoder_output: ClassVar[bool] = False
    """Whether :meth:`read_source` changes the encoder's output (a stack runner's kept rows are then stale)."""

    def __init__(self, model: nn.Module):
        """``model``: the Transformer whose encoder and decoder read the context (its ``han`` and ``han_target``, its decoder passes)."""
        self.model = model

    @staticmethod
    def blocks(cfg: ModelConfig) -> tuple[nn.Module | None, nn.Module | None]:
        """The modules the model holds for this kind, on the source side and on the target side
        (the model's ``han`` and ``han_target``: their state-dict keys)."""
        return None, None

    def read_source(self, batch: Batch, hidden: Tensor, pad_mask: Tensor, need_weights: bool = False) -> tuple[Tensor, tuple[Tensor, Tensor] | None, Tensor | None, ContextAttention | None]:
        """After the encoder: the memory, the target-side context, the rows the decoder pass gathers it from, and the weights."""
        return hidden, None, None, None

    def memory(self, hidden: Tensor, ctx: Tensor, ctx_pad: Tensor) -> Tensor:
        """Encoder states ``hidden`` after the source side, over the given context states ``ctx`` (B, k, Sc, D)."""
        return hidden

    def read_target(self, states: Tensor, enc: EncoderOutput, need_weights: bool = False, cache: dict | None = None, pad: Tensor | None = None) -> tuple[Tensor, ContextAttention | None]:
        """After the decoder: its final states (B, T, D) and the weights. ``cache``: a decoding step's
        layer cache (the model keeps its keys and values there); ``pad`` (B, T): the targets'
        padding, where the pass's own states are the context (``enc.target_context_rows``)."""
        return states, None


class HanContext(ContextModel):
    """HAN (Miculicich et al. 2018) as a context model: :class:`HierarchicalContext` after the
    encoder (``side: source | both``) and after the decoder (``side: target | both``)."""

    @property
    def changes_encoder_output(self) -> bool:
        return self.source is not None

    @property
    def source(self) -> HierarchicalContext | None:
        return self.model.han

    @property
    def target(self) -> HierarchicalContext | None:
        return self.model.han_target

    @staticmethod
    def blocks(cfg: ModelConfig) -> tuple[nn.Module | None, nn.Module | None]:
        side = cfg.context.side
        block = lambda: HierarchicalContext(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.dropout)  # noqa: E731
        return (block() if side != "target" else None), (block() if side != "source" else None)

    def read_source(self, batch: Batch, hidden: Tensor, pad_mask: Tensor, need_weights: bool = False) -> tuple[Tensor, tuple[Tensor, Tensor] | None, Tensor | None, ContextAttention | None]:
        """HAN on the encoder states ``hidden`` (B, S, D) of ``batch`` (Miculicich et al. 2018, Sec. 2).

        The source-side context states of a sentence are its encoder output before HAN; the
        target-side ones (Sec. 2.3) are the states the model itself computes for that sentence's
        target, teacher-forced: the output of the last decoder layer (normalized) before the
        decoder-side HAN, reading as memory the sentence's encoder output after the source-side
        HAN (``side: both``; ``side: target`` has none, its memory is the plain encoder output),
        as in HAN_NMT. With ``batch.context_rows`` every previous sentence is a row of the batch:
        one encoder pass gives all source-side context states, and the model's own decoder pass
        over the rows gives the target-side ones -- the model's ``decode`` gathers them (:meth:`read_target`)
        (``target_context_rows``), so a batch needs one decoder pass; only a model whose decoder
        translates with a leak slot (``train.alignment.leaky``) runs one more teacher-forced pass
        without it. Gradients flow through the gathered states into the rows they come from, as
        through the rows' own states. ``batch.context_states`` instead brings them computed
        (document decoding, :class:`syntaxnmt.decoding.translate.DocumentStates`). Returns the new
        ``hidden``, the target-side context (or None), the rows for the decoder pass to gather it
        from (or None) and HAN's weights (with ``need_weights``); a model without the source side
        keeps ``hidden``."""
        target_context = target_rows = attention = cache = None
        if batch.context_rows is not None:
            if self.source is not None:  # the keys and values of each row projected once
                cache, ctx_pad = self.source.gathered_context(hidden, pad_mask, batch.context_rows)
                ctx = (None, ctx_pad)
        elif batch.context_states is not None:
            ctx = batch.context_states[:2]
            if self.target is not None and len(batch.context_states) > 2:
                target_context = tuple(batch.context_states[2:4])
        else:
            return hidden, None, None, None
        if self.source is not None:
            hidden, attention = self.source(hidden, *ctx, need_weights=need_weights, cache=cache)
        if batch.context_rows is not None and self.target is not None:
            ap = self.model.alignment_pass
            if not (ap is not None and any(ap.leak_in_translation(i) for i in range(len(self.model.decoder)))):
                target_rows = batch.context_rows
            else:
                if batch.tgt_in is None:
                    raise ValueError("a target-side HAN batch needs the targets of its rows (tgt_in)")
                states = self.model.decode_states(batch.tgt_in, hidden, pad_mask)
                target_context = gather_rows(states, batch.tgt_in.eq(PAD), batch.context_rows)
        return hidden, target_context, target_rows, attention

    def memory(self, hidden: Tensor, ctx: Tensor, ctx_pad: Tensor) -> Tensor:
        return hidden if self.source is None else self.source(hidden, ctx, ctx_pad)[0]

    def read_target(self, states: Tensor, enc: EncoderOutput, need_weights: bool = False, cache: dict | None = None, pad: Tensor | None = None) -> tuple[Tensor, ContextAttention | None]:
        """The target-side HAN on final decoder states (B, T, D): each state is only the query of
        the attention over the previous target sentences, so position t reads nothing of the
        current sentence beyond its own state (incremental decoding gives the same result, the
        context's word-level keys and values kept in ``cache['context']``); with ``need_weights``
        also its weights (:class:`ContextAttention`, S = T and Sc = Tc). The rows of an encoder
        output expanded over a beam read their sentence's context (``enc.target_context_index``);
        with ``enc.target_context_rows``, this pass's own states are the rows' context states."""
        if self.target is None:
            return states, None
        if enc.target_context_rows is not None:
            kv, ctx_pad = self.target.gathered_context(states, pad, enc.target_context_rows)
            return self.target(states, None, ctx_pad, need_weights=need_weights, cache=kv)
        if enc.target_context is None:
            return states, None
        cache = None if cache is None else cache.setdefault("context", {})
        return self.target(states, *enc.target_context, need_weights=need_weights, cache=cache, groups=enc.target_context_index)


CONTEXT_MODELS: dict[str, type[ContextModel]] = {"none": ContextModel, "concat": ContextModel, "han": HanContext}
"""The context model of each ``model.context.kind``: a new kind is its class here and its entry in
:data:`syntaxnmt.config.CONTEXT_KINDS` (what the code around the network asks of it; a test keeps
the two in step: a kind whose ``reads_states`` is set holds blocks and reads them, the others
read nothing)."""
