"""Transformer encoder-decoder (Vaswani et al. 2017) with pre- or post-norm residual blocks.

Every attention goes through :class:`~syntaxnmt.model.attention.MultiHeadAttention`. How the
stacks of layers run when nothing is asked of their attentions is the model's :class:`StackRunner`
(by default the layers one by one; :func:`syntaxnmt.cpu.install` installs one that keeps CPU
training's states on the real positions between the layers). Decoding is
incremental: :meth:`Transformer.step` feeds one token per hypothesis and reuses cached keys and
values (self-attention grows its cache; cross-attention projects the encoder output once).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.config import ModelConfig
from syntaxnmt.inputs import PAD, Batch, FeatureSpec, SourceFeatures
from syntaxnmt.model.attention import MultiHeadAttention, defer_reorder, reorder_cache
from syntaxnmt.model.context import CONTEXT_MODELS
from syntaxnmt.model.outputs import ContextAttention, DecoderState, EncoderOutput, ForcedAttention, ModelOutput
from syntaxnmt.model.syntax_attention import InputFeatures, encoder_extensions


def sinusoidal_table(n: int, d: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et al. 2017, Sec. 3.5)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv)[:, : d // 2]
    return table


class Embeddings(nn.Module):
    """Token embedding (optionally combined with linguistic input features) scaled by
    sqrt(d_model), plus absolute positions (sinusoidal or learned)."""

    def __init__(self, vocab: int, cfg: ModelConfig, shared: nn.Embedding | None = None, features: InputFeatures | None = None):
        super().__init__()
        self.features = features
        word_dim = cfg.d_model - (features.word_dim_reduction if features is not None else 0)
        self.tokens = shared if shared is not None else nn.Embedding(vocab, word_dim, padding_idx=PAD)
        if shared is None:
            nn.init.normal_(self.tokens.weight, std=cfg.d_model**-0.5)
            nn.init.zeros_(self.tokens.weight[PAD])
        self.scale = math.sqrt(cfg.d_model)
        self.learned = cfg.positions == "learned"
        self.absolute = cfg.positions != "none"
        if self.learned:
            self.positions = nn.Embedding(cfg.max_positions, cfg.d_model)
            nn.init.normal_(self.positions.weight, std=cfg.d_model**-0.5)
        else:
            self.register_buffer("table", sinusoidal_table(cfg.max_positions, cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, tokens: Tensor, offset: int = 0, features: SourceFeatures | None = None) -> Tensor:
        t = tokens.size(1)
        pos = self.positions.weight[offset : offset + t] if self.learned else self.table[offset : offset + t]
        x = self.tokens(tokens)
        if self.features is not None:
            x = self.features(x, features or SourceFeatures())
        x = x * self.scale
        return self.dropout(x + pos if self.absolute else x)


class FeedForward(nn.Module):
    """The position-wise feed-forward block."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.d_model)
        self.act = F.relu if cfg.activation == "relu" else F.gelu
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """FFN(x) = W_2 dropout(act(x W_1 + b_1)) + b_2, position-wise (Vaswani et al. 2017, Eq. 2)."""
        return self.fc2(self.dropout(self.act(self.fc1(x))))


class Residual(nn.Module):
    """``x + dropout(f(norm(x)))`` (pre-norm) or ``norm(x + dropout(f(x)))`` (post-norm)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.norm = nn.LayerNorm(cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, f) -> tuple[Tensor, object]:
        y, aux = f(self.sublayer_input(x))
        x = self.add(x, y)
        return (x if self.pre else self.norm(x)), aux

    def sublayer_input(self, x: Tensor) -> Tensor:
        """What the sublayer reads: ``norm(x)`` (pre-norm) or ``x`` (post-norm)."""
        return self.norm(x) if self.pre else x

    def add(self, x: Tensor, y: Tensor) -> Tensor:
        """The residual connection ``x + dropout(y)`` (Vaswani et al. 2017, Sec. 5.4)."""
        return x + self.dropout(y)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, extensions=()):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, extensions=extensions)
        self.ffn = FeedForward(cfg)
        self.res_attn, self.res_ffn = Residual(cfg), Residual(cfg)

    def forward(self, x: Tensor, pad_mask: Tensor, need_weights: bool = False, features: SourceFeatures | None = None) -> tuple[Tensor, Tensor | None]:
        x, w = self.res_attn(x, lambda h: self.self_attn(h, key_padding_mask=pad_mask, need_weights=need_weights, features=features))
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x, w


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, normalizer=cfg.attention_normalizer, hard=cfg.hard_attention)
        self.ffn = FeedForward(cfg)
        self.res_self, self.res_cross, self.res_ffn = Residual(cfg), Residual(cfg), Residual(cfg)

    def forward(self, y: Tensor, memory: Tensor, memory_mask: Tensor, cache: dict | None = None, need_weights: bool = False, self_weights: bool = False, leak: bool = False) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Output, cross-attention weights (``need_weights``) and self-attention weights
        (``self_weights``); ``leak``: the cross-attention's leak slot is on (``train.alignment.leaky``)."""
        self_cache = cache.setdefault("self", {}) if cache is not None else None
        cross_cache = cache.setdefault("cross", {}) if cache is not None else None
        y, ws = self.res_self(y, lambda h: self.self_attn(h, causal=True, cache=self_cache, need_weights=self_weights))
        y, w = self.res_cross(y, lambda h: self.cross_attn(h, memory, key_padding_mask=memory_mask, cache=cross_cache, static_kv=True, need_weights=need_weights, leak=leak))
        y, _ = self.res_ffn(y, lambda h: (self.ffn(h), None))
        return y, w, ws

    def full_context_attention(self, y: Tensor, tgt_pad: Tensor, memory: Tensor, memory_mask: Tensor, leak: bool = False) -> Tensor:
        """Cross-attention weights (B, H, T, S) of an extra pass through this layer whose
        self-attention sees the whole target (Garg et al. 2019, Sec. 4): ``y`` (B, T, D) are the
        layer's input states of the causal pass, ``tgt_pad`` (B, T) is True at target padding
        (hidden from the unmasked self-attention). The pass's output is not used: only its
        attention, the one the alignment terms supervise."""
        h, _ = self.res_self(y, lambda x: self.self_attn(x, key_padding_mask=tgt_pad))
        _, w = self.res_cross(h, lambda x: self.cross_attn(x, memory, key_padding_mask=memory_mask, need_weights=True, leak=leak))
        return w

    def cross_weights(self, y: Tensor, memory: Tensor, memory_mask: Tensor, tgt_pad: Tensor | None = None, leak: bool = False) -> Tensor:
        """This layer's cross-attention weights (B, H, T, S) and nothing after them (no values, no
        feed-forward block): those of :meth:`forward` with ``need_weights`` or, with ``tgt_pad``,
        of :meth:`full_context_attention`, bit for bit."""
        if tgt_pad is None:
            h, _ = self.res_self(y, lambda x: self.self_attn(x, causal=True))
        else:
            h, _ = self.res_self(y, lambda x: self.self_attn(x, key_padding_mask=tgt_pad))
        return self.cross_attn.weights(self.res_cross.sublayer_input(h), memory, key_padding_mask=memory_mask, leak=leak)


def split_leak(weights: Tensor | None, leak: bool) -> tuple[Tensor | None, Tensor | None]:
    """Cross-attention weights with a leak column last (``leak``) -> (real keys (B, H, T, S), leak (B, H, T))."""
    if weights is None or not leak:
        return weights, None
    return weights[..., :-1], weights[..., -1]


@dataclass(frozen=True)
class AlignmentPass:
    """How a model computes the cross-attention its alignment terms supervise (``train.alignment``
    with ``full_context`` or ``leaky``; set by :func:`syntaxnmt.model.build_model`)."""

    layer: int
    """The supervised decoder layer, 0-based (``train.alignment.layer`` counted from the end when negative)."""
    full_context: bool
    """An extra pass through that layer without the causal mask gives the supervised attention."""
    leaky: bool
    """The supervised attention has a leak slot (in the extra pass with ``full_context``, else in the model's own pass)."""

    def leak_in_translation(self, layer: int) -> bool:
        """Whether decoder layer ``layer``'s own (translation) pass uses the leak slot."""
        return self.leaky and not self.full_context and layer == self.layer


class StackRunner:
    """How :class:`Transformer` runs its encoder's and its decoder's layers when nothing is asked of
    their attentions (no weights, no alignment pass, no target-side context rows): the one seam for
    a faster execution of the stacks. This default declines (None), and the layers run one by one."""

    def encode(self, model: "Transformer", batch: Batch) -> tuple[Tensor, Sequence[Tensor], object] | None:
        """The encoder's normalized output (B, S, D), each layer's output states, and what the
        runner keeps for its :meth:`decode` (:attr:`EncoderOutput.kept`); None: the plain loop."""
        return None

    def decode(self, model: "Transformer", tgt_in: Tensor, enc: EncoderOutput) -> tuple[Tensor, tuple[Tensor, Tensor] | None] | None:
        """The decoder's normalized final states (B, T, D) and :attr:`ModelOutput.real` (or None); None: the plain loop."""
        return None


class Transformer(nn.Module):
    """Encoder-decoder; the interface used by training (``forward``) and search (``encode``/``step``)."""

    alignment_pass: AlignmentPass | None = None
    step_rows = True  # step(..., rows=) computes the next-token distribution of some rows only
    stacks: StackRunner = StackRunner()
    """How the stacks run when nothing is asked of their attentions (:class:`StackRunner`)."""

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, **tag_vocabs: int):
        super().__init__()
        self.cfg = cfg
        syn = cfg.syntax
        self.feature_spec = FeatureSpec.from_config(syn)  # source features the batches must carry
        self.tgt_embed = Embeddings(tgt_vocab, cfg)
        features = InputFeatures(syn, cfg.d_model, tag_vocabs) if syn.input_features else None
        shared = None
        if cfg.tie_embeddings == "all":
            if src_vocab != tgt_vocab:
                raise ValueError("tie_embeddings=all needs a joint vocabulary (data.joint_vocab: true)")
            if features is not None and features.concat:
                raise ValueError("model.syntax.feature_combine=concat cannot share the source embedding: use tie_embeddings=decoder")
            shared = self.tgt_embed.tokens
        self.src_embed = Embeddings(src_vocab, cfg, shared=shared, features=features)
        d_head = cfg.d_model // cfg.heads
        self.encoder = nn.ModuleList(EncoderLayer(cfg, encoder_extensions(syn, i, cfg.heads, d_head, tag_vocabs)) for i in range(cfg.enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        self.enc_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        kind = CONTEXT_MODELS[cfg.context.kind]  # the document-context model (syntaxnmt.model.context)
        self.han, self.han_target = kind.blocks(cfg)
        self.context = kind(self)
        self.dec_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.output = nn.Linear(cfg.d_model, tgt_vocab, bias=False)
        if cfg.tie_embeddings in ("decoder", "all"):
            self.output.weight = self.tgt_embed.tokens.weight
        else:
            nn.init.normal_(self.output.weight, std=cfg.d_model**-0.5)
        for name, p in self.named_parameters():
            if p.dim() == 2 and "embed" not in name and "output" not in name:
                nn.init.xavier_uniform_(p)

    def encode(self, batch: Batch, need_weights: bool = False, encoder_weights: Collection[int] = ()) -> EncoderOutput:
        """Encoder states, each layer's output, and self-attention weights: of every layer with
        ``need_weights``, else of the layers ``encoder_weights`` (negative: from the end) only, so
        the other layers keep the fused kernel."""
        pad_mask = batch.src_pad_mask
        wanted = {i % len(self.encoder) for i in encoder_weights}
        weights, states = [], []
        run = None if need_weights or wanted else self.stacks.encode(self, batch)
        if run is not None:
            hidden, states, kept = run
        else:
            x, kept = self.src_embed(batch.src, features=batch.features), None
            for i, layer in enumerate(self.encoder):
                x, w = layer(x, pad_mask, need_weights or i in wanted, batch.features)
                weights.append(w)
                states.append(x)
            hidden = self.enc_norm(x)
        hidden, target_context, target_rows, context_attention = self.context.read_source(batch, hidden, pad_mask, need_weights)
        kept = None if self.context.changes_encoder_output else kept
        return EncoderOutput(hidden, pad_mask, weights if need_weights or wanted else [], states, target_context=target_context, context_attention=context_attention, target_context_rows=target_rows, kept=kept)

    def encode_states(self, src: Tensor) -> Tensor:
        """The encoder output (B, S, D) of sentences ``src`` without HAN: the states the
        source-side HAN reads of a previous sentence."""
        pad = src.eq(PAD)
        x = self.src_embed(src)
        for layer in self.encoder:
            x, _ = layer(x, pad)
        return self.enc_norm(x)

    def decode_states(self, tgt_in: Tensor, memory: Tensor, memory_pad: Tensor) -> Tensor:
        """The final decoder states (B, T, D), normalized, before the decoder-side HAN and the output layer, of
        targets ``tgt_in`` (teacher-forced) reading ``memory``: what the target-side HAN attends over (Miculicich
        et al. 2018, Sec. 2.3) when ``memory`` is the sentence's own (:meth:`context_memory` for ``side: both``)."""
        y = self.tgt_embed(tgt_in)
        for layer in self.decoder:
            y = layer(y, memory, memory_pad)[0]
        return self.dec_norm(y)

    def context_memory(self, hidden: Tensor, ctx: Tensor, ctx_pad: Tensor) -> Tensor:
        """The memory the decoder reads: encoder states ``hidden`` (B, S, D) after the context model's source side
        over the encoder states ``ctx`` (B, k, Sc, D) of the previous source sentences (padding ``ctx_pad``)."""
        return self.context.memory(hidden, ctx, ctx_pad)

    def decode(self, tgt_in: Tensor, enc: EncoderOutput, need_weights: bool = False, self_weights: bool = True) -> tuple[Tensor, list[Tensor], list[Tensor], Tensor | None, Tensor | None, ContextAttention | None, tuple[Tensor, Tensor] | None]:
        """Final decoder states (B, T, D), normalized (and read by the target-side HAN of a
        context model, ``self.context.read_target``), before the output layer; cross- and
        self-attention weights per layer on request, and with them the supervised layer's
        full-context cross-attention (B, H, T, S) of a model with ``alignment_pass.full_context``,
        the leak weights (B, H, T) of the supervised attention of a leaky one and the target-side
        HAN's weights; last :attr:`ModelOutput.real` where the stack runner computed the real positions only."""
        cross, own = [], []
        pad = tgt_in.eq(PAD)
        ap = self.alignment_pass
        aligned = leak = None
        run = None if need_weights or ap is not None or enc.target_context_rows is not None else self.stacks.decode(self, tgt_in, enc)
        if run is not None:
            final, real = run
            states, target_attention = self.context.read_target(final, enc)
            return states, [], [], None, None, target_attention, real if states is final else None
        y = self.tgt_embed(tgt_in)
        for i, layer in enumerate(self.decoder):
            if need_weights and ap is not None and ap.full_context and i == ap.layer:
                aligned, leak = split_leak(layer.full_context_attention(y, pad, enc.hidden, enc.pad_mask, leak=ap.leaky), ap.leaky)
            leaky = ap is not None and ap.leak_in_translation(i)
            y, w, ws = layer(y, enc.hidden, enc.pad_mask, need_weights=need_weights, self_weights=need_weights and self_weights, leak=leaky)
            w, layer_leak = split_leak(w, leaky)
            leak = layer_leak if layer_leak is not None else leak
            cross.append(w)
            own.append(ws)
        states = self.dec_norm(y)
        states, target_attention = self.context.read_target(states, enc, need_weights, pad=pad)
        return states, (cross if need_weights else []), (own if need_weights and self_weights else []), aligned, leak, target_attention, None

    def forced_attention(self, batch: Batch, layers: Collection[int] = (), full_context: bool = False, enc: EncoderOutput | None = None) -> ForcedAttention:
        """The cross-attention of decoder ``layers`` (negative: from the end) and, with ``full_context``, of the
        supervised layer's full-context pass, teacher-forcing ``batch.tgt_in`` in eval mode: each equal, bit for bit,
        to that of ``self(batch, need_weights=True, self_weights=False)`` (``enc``, when given, must be ``batch``'s).
        The decoder stops after the cross-attention weights of the deepest layer needed. A leaky model also runs
        its leak's pass (its readings take the leak as the null word or renormalize it away)."""
        n = len(self.decoder)
        wanted = {i % n for i in layers}
        ap = self.alignment_pass
        full_layer = ap.layer if ap is not None and ap.full_context and (full_context or ap.leaky) else None
        if ap is not None and ap.leaky and not ap.full_context:
            wanted.add(ap.layer)
        deepest = max(wanted | ({full_layer} if full_layer is not None else set()), default=-1)
        enc = self.encode(batch) if enc is None else enc
        tgt_in = batch.tgt_in
        y = self.tgt_embed(tgt_in)
        pad = tgt_in.eq(PAD)
        out = ForcedAttention([None] * n)
        for i, layer in enumerate(self.decoder[: deepest + 1]):
            if i == full_layer:
                out.alignment_attention, leak = split_leak(layer.cross_weights(y, enc.hidden, enc.pad_mask, pad, leak=ap.leaky), ap.leaky)
                out.alignment_leak = leak if leak is not None else out.alignment_leak
            leaky = ap is not None and ap.leak_in_translation(i)
            if i < deepest:  # its output feeds the next layer: the whole block, weights as the full pass computes them
                y, w, _ = layer(y, enc.hidden, enc.pad_mask, need_weights=True, leak=leaky)
            elif i in wanted:
                w = layer.cross_weights(y, enc.hidden, enc.pad_mask, leak=leaky)
            else:
                break
            w, leak = split_leak(w, leaky)
            out.alignment_leak = leak if leak is not None else out.alignment_leak
            out.cross_attention[i] = w if i in wanted else None
        return out

    def forward(self, batch: Batch, need_weights: bool = False, encoder_weights: Collection[int] = (), self_weights: bool = True) -> ModelOutput:
        """The output of a whole batch; ``need_weights``: with every attention's weights, or with
        the cross-attention's only when ``self_weights`` is False (the self-attentions then keep
        the fused kernel)."""
        enc = self.encode(batch, need_weights and self_weights, encoder_weights)
        states, cross, own, aligned, leak, target_attention, real = self.decode(batch.tgt_in, enc, need_weights, self_weights)
        return ModelOutput(states, self.output, enc, cross, own, aligned, leak, target_attention, real)

    # --- incremental decoding -------------------------------------------------------------
    def init_state(self, enc: EncoderOutput, native: bool = False) -> DecoderState:
        """The state before the first step; ``native``: each attention's cache starts marked for
        the installed attention kernel's own decoding state (``syntaxnmt.cpu``: float32 on the CPU,
        no attention weights; a model with ``native_attention`` takes it)."""
        return DecoderState(enc, 0, [{"self": {"native": True}, "cross": {"native": True}} if native else {} for _ in self.decoder])

    def step(self, tokens: Tensor, state: DecoderState, need_weights: bool = False, rows: Tensor | None = None) -> tuple[Tensor, DecoderState]:
        """Log-probabilities (N, V) of the next token given the previous one ``tokens`` (N,);
        with ``rows`` (R,), those rows' only (R, V): the output layer and its softmax, the
        largest products of a step, skip the rows nobody reads (finished hypotheses)."""
        if state.encoder.target_context_rows is not None:
            raise ValueError("incremental decoding reads computed target-side context states (batch.context_states), not batch rows")
        y = self.tgt_embed(tokens[:, None], offset=state.step)
        w = None
        ap = self.alignment_pass
        for i, (layer, cache) in enumerate(zip(self.decoder, state.caches)):
            leaky = ap is not None and ap.leak_in_translation(i)
            y, w, _ = layer(y, state.encoder.hidden, state.encoder.pad_mask, cache=cache, need_weights=need_weights, leak=leaky)
            w = split_leak(w, leaky)[0]
        final = self.context.read_target(self.dec_norm(y), state.encoder, cache=state.caches[-1])[0][:, 0]
        logits = self.output(final if rows is None else final.index_select(0, rows))
        state.step += 1
        state.last_cross_attention = w[:, :, 0].mean(1) if need_weights else None
        return torch.log_softmax(logits.float(), dim=-1), state

    def reorder_state(self, state: DecoderState, index: Tensor, sources_kept: bool = False) -> DecoderState:
        """Keep (and duplicate) hypotheses ``index`` of the decoder state. With ``sources_kept`` (rows move only among
        the beams of their own sentence), the encoder output and the cross-attention keys/values stay as they are.
        The target-side HAN's keys and values (``context``, of the context rows) never move. The self-attention
        caches are selected at the next step's append (:func:`defer_reorder`)."""
        for cache in state.caches:
            for name, sub in cache.items():
                if name == "self":
                    defer_reorder(sub, index)
                elif name != "context" and not (sources_kept and name == "cross"):
                    reorder_cache(sub, index)
        if not sources_kept:
            state.encoder = state.encoder.index_select(index)
        return state
