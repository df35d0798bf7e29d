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
gives what a full pass gives (:meth:`syntaxnmt.model.transformer.Transformer.read_target_context`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from syntaxnmt.model.attention import MultiHeadAttention
from syntaxnmt.model.dropout import Dropout
from syntaxnmt.model.linear import Linear
from syntaxnmt.model.outputs import ContextAttention


class HierarchicalContext(nn.Module):
    """The HAN block on top of the encoder or of the decoder (see the module docstring)."""

    def __init__(self, d_model: int, heads: int, ffn_dim: int, dropout: float = 0.1):
        super().__init__()
        self.word = MultiHeadAttention(d_model, heads, dropout)
        self.sentence = MultiHeadAttention(d_model, heads, dropout)
        self.ffn = nn.Sequential(Linear(d_model, ffn_dim), nn.ReLU(), Dropout(dropout), Linear(ffn_dim, d_model))
        self.gate = Linear(2 * d_model, d_model)
        self.norm = nn.LayerNorm(d_model)

    def gathered_context(self, states: Tensor, pad: Tensor, rows: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """The word-level keys and values (a ``cache`` for :meth:`forward`, (B, k, H, L, d) each)
        and the padding (B, k, L) of the previous sentences ``rows`` (B, k; -1: missing) among
        ``states`` (N, L, D) with padding ``pad`` (N, L): every row's projected once, however
        many sentences read it (the same keys and values as projecting the gathered states)."""
        keys, values = self.word.project_kv(states)
        missing = rows.lt(0)
        index = rows.clamp_min(0)  # a missing sentence: any finite row (all padding, no weight)
        return {"k": keys[index], "v": values[index]}, pad[index] | missing[..., None]

    def forward(self, h: Tensor, ctx: Tensor | None, ctx_pad: Tensor, need_weights: bool = False, cache: dict[str, Tensor] | None = None) -> tuple[Tensor, ContextAttention | None]:
        """``h`` (B, S, D) current states; ``ctx`` (B, k, Sc, D) encoder (or decoder) states of the
        previous sentences (nearest first) with ``ctx_pad`` (B, k, Sc) True at padding and in missing sentences.

        Returns h~ and, with ``need_weights`` (as the attention layers return theirs), the
        word-level and sentence-level weights and the gate (:class:`ContextAttention`).
        ``cache`` (incremental decoding, updated in place): the word-level keys and values of
        ``ctx``, (B, k, H, Sc, d) each, projected on the first call and reused (they do not
        depend on the query), as cross-attention caches those of the encoder output; given
        (:meth:`gathered_context`), ``ctx`` may be None."""
        b, s, d = h.shape
        k, sc = ctx_pad.shape[1], ctx_pad.shape[2]
        present = ~ctx_pad.all(-1)  # (B, k): the sentence exists
        # Word level: every token attends over each context sentence separately.
        queries = h.unsqueeze(1).expand(b, k, s, d).reshape(b * k, s, d)
        word_mask = ctx_pad.reshape(b * k, sc).clone()
        word_mask[~present.reshape(-1), 0] = False  # a missing sentence: any finite row (masked below)
        kv = None
        if cache is not None:
            if "k" not in cache:
                keys, values = self.word.project_kv(ctx.reshape(b * k, sc, d))
                cache["k"], cache["v"] = (x.contiguous().view(b, k, *x.shape[1:]) for x in (keys, values))
            kv = {"k": cache["k"].flatten(0, 1), "v": cache["v"].flatten(0, 1)}
        summaries, w_word = self.word(queries, None if kv is not None else ctx.reshape(b * k, sc, d), key_padding_mask=word_mask, need_weights=need_weights, cache=kv, static_kv=kv is not None)
        summaries = summaries.view(b, k, s, d).transpose(1, 2).reshape(b * s, k, d)
        # Sentence level: every token attends over the k summaries.
        sent_mask = (~present).unsqueeze(1).expand(b, s, k).reshape(b * s, k).clone()
        none = sent_mask.all(-1)
        sent_mask[none, 0] = False
        context, w_sent = self.sentence(h.reshape(b * s, 1, d), summaries, key_padding_mask=sent_mask, need_weights=need_weights)
        d_t = self.ffn(context.view(b, s, d))
        gate = torch.sigmoid(self.gate(torch.cat([h, d_t], dim=-1)))
        out = self.norm((1 - gate) * h + gate * d_t)
        has_context = present.any(-1)[:, None, None]
        weights = None
        if need_weights:  # a sentence without context keeps h: zero weights, gate 0
            sentence = w_sent.view(b, s, -1, k).transpose(1, 2) * has_context[..., None]
            weights = ContextAttention(w_word.view(b, k, -1, s, sc) * present[:, :, None, None, None], sentence, gate.mean(-1) * has_context[..., 0])
        return torch.where(has_context, out, h), weights

    def gate_values(self, h: Tensor, d_t: Tensor) -> Tensor:
        """λ of Eq. 4 for states ``h`` and context vectors ``d_t`` (for tests and analysis)."""
        return torch.sigmoid(self.gate(torch.cat([h, d_t], dim=-1)))
