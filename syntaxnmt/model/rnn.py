"""RNN attentional encoder-decoders (``model.arch: rnn``) with the classical attention family.

Encoder (Bahdanau et al. 2015, Sec. 3.2): embeddings, optionally with source positions, read by
a bidirectional GRU or LSTM; the annotation of word j is ``h_j = [->h_j; <-h_j]`` (size
``2 * hidden``). Padding is skipped with packed sequences.

Decoders (``model.rnn.decoder``), all with the decoder state size ``rnn.dec_hidden`` (default
``hidden``; ``annotations``: ``2 * hidden``, as the parameter-free ``dot`` scores need):

* ``bahdanau`` (Bahdanau et al. 2015, Eq. 4-6 and Appendix A.2.2): attend with the previous
  state, ``c_i = ATT(C, s_{i-1})``, then ``s_i = RNN([E y_{i-1}; c_i], s_{i-1})``; the deep output
  ``t_i = tanh(W_t [s_i; E y_{i-1}; c_i] + b)`` (tanh as in Nematus, instead of the paper's
  maxout) feeds ``p(y_i) = softmax(W_o t_i + b_o)``.
* ``luong`` (Luong et al. 2015, Sec. 3, Eq. 5-6, input feeding Sec. 3.3): ``s_t = RNN(x_t, s_{t-1})``
  with ``x_t = [E y_{t-1}; h~_{t-1}]`` (input feeding, ``h~_0 = 0``) or ``E y_{t-1}``; attend with
  ``s_t``; ``h~_t = tanh(W_c [c_t; s_t])``; ``p(y_t) = softmax(W_s h~_t + b_s)``.
* ``cgru`` (conditional GRU of Nematus, Sennrich et al. 2017, Sec. 2):
  ``s'_i = GRU_1(y_{i-1}, s_{i-1})``, ``c_i = ATT(C, s'_i)``, ``s_i = GRU_2(c_i, s'_i)``; with
  ``dec_layers > 1`` plain GRU layers are stacked on ``s_i``; deep output as for ``bahdanau``
  (from the top state).

The initial decoder state of every layer is ``s_0 = tanh(W_init mean_j h_j + b_init)`` over the
non-padding annotations (Sennrich et al. 2017; Bahdanau et al. 2015 use ``<-h_1``); an LSTM's
initial cell is 0.

Reused from :class:`~syntaxnmt.config.ModelConfig`: ``dropout`` (embeddings, between stacked
RNN layers, before the output layer), ``tie_embeddings`` (``decoder``: the output layer shares
the target embedding matrix -- a luong decoder with a state size other than ``embed_dim`` then gets a
bias-free projection to ``embed_dim`` before it; ``all``: the source embedding too),
``max_positions`` (position tables) and ``d_model`` (embedding size when ``rnn.embed_dim`` is 0).
Embeddings are not scaled by sqrt(d).

Interface: the Transformer's. ``forward(batch, need_weights)`` teacher-forces and returns a
:class:`~syntaxnmt.model.transformer.ModelOutput` whose ``cross_attention`` is one (B, 1, T, S)
tensor on request; ``encode``/``init_state``/``step``/``reorder_state`` decode incrementally
(one token per hypothesis per step) for :mod:`syntaxnmt.decoding.search`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import Dropout, Linear  # the CPU path replaces them where it is installed (syntaxnmt.cpu.install)
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from syntaxnmt.config import ModelConfig, RNNConfig
from syntaxnmt.inputs import PAD, Batch, FeatureSpec
from syntaxnmt.model.outputs import EncoderOutput, ModelOutput
from syntaxnmt.model.rnn_scores import Attention
from syntaxnmt.model.transformer import sinusoidal_table


def _rnn(cell: str, input_size: int, hidden: int, layers: int, dropout: float, bidirectional: bool = False) -> nn.RNNBase:
    cls = nn.GRU if cell == "gru" else nn.LSTM
    return cls(input_size, hidden, layers, batch_first=True, bidirectional=bidirectional, dropout=dropout if layers > 1 else 0.0)


@dataclass
class RNNState:
    """What incremental decoding carries from one step to the next (batch dimension N = hypotheses)."""

    encoder: EncoderOutput  # annotations h_j (N, S, 2*hidden) and padding mask (N, S)
    keys: Tensor  # the score's cached key projection (N, S, *)
    hidden: Tensor  # decoder states s, (dec_layers, N, hidden)
    cell: Tensor | None  # LSTM cells (dec_layers, N, hidden)
    feed: Tensor | None  # luong input feeding: the previous attentional vector h~_{t-1} (N, hidden)
    source_len: Tensor  # J (N,), EOS included
    target_len: Tensor  # I (N,) for the position bias
    step: int = 0  # target position i of the next token
    last_cross_attention: Tensor | None = None  # (N, S), on request

    def index_select(self, index: Tensor, sources_kept: bool = False) -> "RNNState":
        """Rows ``index`` of every tensor; with ``sources_kept`` (rows move only among the beams of
        their own sentence) the per-sentence tensors are kept as they are."""
        pick = lambda t, dim=0: None if t is None else t.index_select(dim, index)  # noqa: E731
        same = (lambda t: t) if sources_kept else pick
        return RNNState(
            self.encoder if sources_kept else self.encoder.index_select(index),
            same(self.keys),
            pick(self.hidden, 1),
            pick(self.cell, 1),
            pick(self.feed),
            same(self.source_len),
            same(self.target_len),
            self.step,
            pick(self.last_cross_attention),
        )


class RNNEncoder(nn.Module):
    """Bidirectional GRU/LSTM over the source embeddings (Bahdanau et al. 2015, Sec. 3.2).

    Source positions (``rnn.positions``): ``log`` appends the feature log(1+j) to each embedding;
    ``learned`` and ``sinusoidal`` (Vaswani et al. 2017, Sec. 3.5) add a position vector.
    """

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding):
        super().__init__()
        rc = cfg.rnn
        self.embed = embedding
        dim = embedding.embedding_dim
        self.positions = rc.positions
        if self.positions == "learned":
            self.pos = nn.Embedding(cfg.max_positions, dim)
            nn.init.normal_(self.pos.weight, std=dim**-0.5)
        elif self.positions == "sinusoidal":
            self.register_buffer("table", sinusoidal_table(cfg.max_positions, dim), persistent=False)
        self.dropout = Dropout(cfg.dropout)
        self.rnn = _rnn(rc.cell, dim + (1 if self.positions == "log" else 0), rc.hidden, rc.enc_layers, cfg.dropout, bidirectional=True)

    def forward(self, src: Tensor, pad_mask: Tensor) -> Tensor:
        """Annotations (B, S, 2*hidden); zero at padding."""
        b, s = src.shape
        x = self.embed(src)
        if self.positions == "learned":
            x = x + self.pos.weight[:s]
        elif self.positions == "sinusoidal":
            x = x + self.table[:s]
        x = self.dropout(x)
        if self.positions == "log":
            j = torch.arange(s, device=src.device, dtype=x.dtype).log1p()
            x = torch.cat([x, j[None, :, None].expand(b, s, 1)], dim=-1)
        lengths = (~pad_mask).sum(1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=s)
        return out


class _Decoder(nn.Module):
    """Common part: the attention, the recurrent state, and teacher forcing as a loop over :meth:`step`."""

    out_dim: int

    def __init__(self, cfg: ModelConfig, embed_dim: int, key_dim: int):
        super().__init__()
        rc = cfg.rnn
        self.hidden, self.layers = rc.decoder_size, rc.dec_layers
        self.attention = Attention(rc.score, rc.decoder_size, key_dim, rc.attention_dim, rc.rank, rc.local_window, rc.position_bias, cfg.attention_normalizer, cfg.hard_attention)

    def _attend(self, query: Tensor, state: RNNState, target_pos: Tensor) -> tuple[Tensor, Tensor]:
        enc = state.encoder
        return self.attention(query, enc.hidden, state.keys, enc.pad_mask, state.source_len, target_pos, state.target_len)

    def _position(self, state: RNNState, n: int, device) -> Tensor:
        return torch.full((n,), float(state.step), device=device)

    def step(self, y: Tensor, state: RNNState) -> tuple[Tensor, Tensor]:
        """Consume the embedded previous tokens ``y`` (N, E); update ``state`` in place (except ``step``);
        return the pre-output vectors (N, out_dim) and the attention weights (N, S)."""
        raise NotImplementedError

    def teacher_force(self, y: Tensor, state: RNNState) -> tuple[Tensor, Tensor]:
        """All target positions: ``y`` (N, T, E) -> pre-outputs (N, T, out_dim), weights (N, T, S)."""
        outs, alphas = [], []
        for t in range(y.size(1)):
            out, alpha = self.step(y[:, t], state)
            state.step += 1
            outs.append(out)
            alphas.append(alpha)
        return torch.stack(outs, 1), torch.stack(alphas, 1)


class BahdanauDecoder(_Decoder):
    """``c_i = ATT(C, s_{i-1})``, ``s_i = RNN([E y_{i-1}; c_i], s_{i-1})``, deep output
    ``t_i = tanh(W_t [s_i; E y_{i-1}; c_i])`` (Bahdanau et al. 2015, Eq. 4-6, Appendix A.2.2)."""

    def __init__(self, cfg: ModelConfig, embed_dim: int, key_dim: int):
        super().__init__(cfg, embed_dim, key_dim)
        rc = cfg.rnn
        self.rnn = _rnn(rc.cell, embed_dim + key_dim, self.hidden, rc.dec_layers, cfg.dropout)
        self.readout = Linear(self.hidden + embed_dim + key_dim, embed_dim)
        self.out_dim = embed_dim

    def step(self, y: Tensor, state: RNNState) -> tuple[Tensor, Tensor]:
        context, alpha = self._attend(state.hidden[-1], state, self._position(state, y.size(0), y.device))
        hx = state.hidden if state.cell is None else (state.hidden, state.cell)
        out, hx = self.rnn(torch.cat([y, context], -1)[:, None], hx)
        state.hidden, state.cell = (hx, None) if state.cell is None else hx
        s = out[:, 0]
        return torch.tanh(self.readout(torch.cat([s, y, context], -1))), alpha


class LuongDecoder(_Decoder):
    """``s_t = RNN(x_t, s_{t-1})``, ``c_t = ATT(C, s_t)``, ``h~_t = tanh(W_c [c_t; s_t])`` (Luong et al. 2015,
    Eq. 5); ``x_t = [E y_{t-1}; h~_{t-1}]`` with input feeding (Sec. 3.3), else ``E y_{t-1}``."""

    def __init__(self, cfg: ModelConfig, embed_dim: int, key_dim: int):
        super().__init__(cfg, embed_dim, key_dim)
        rc = cfg.rnn
        self.input_feeding = rc.input_feeding
        self.input_size = embed_dim + (self.hidden if self.input_feeding else 0)
        self.rnn = _rnn(rc.cell, self.input_size, self.hidden, rc.dec_layers, cfg.dropout)
        self.W_c = Linear(key_dim + self.hidden, self.hidden, bias=False)
        self.out_dim = self.hidden

    def step(self, y: Tensor, state: RNNState) -> tuple[Tensor, Tensor]:
        x = torch.cat([y, state.feed], -1) if self.input_feeding else y
        hx = state.hidden if state.cell is None else (state.hidden, state.cell)
        out, hx = self.rnn(x[:, None], hx)
        state.hidden, state.cell = (hx, None) if state.cell is None else hx
        s = out[:, 0]
        context, alpha = self._attend(s, state, self._position(state, y.size(0), y.device))
        h_tilde = torch.tanh(self.W_c(torch.cat([context, s], -1)))
        if self.input_feeding:
            state.feed = h_tilde
        return h_tilde, alpha

    def teacher_force(self, y: Tensor, state: RNNState) -> tuple[Tensor, Tensor]:
        if self.input_feeding:  # h~_{t-1} is an input: one step at a time
            return super().teacher_force(y, state)
        # Without input feeding the RNN does not depend on the attention: run it over all t at once.
        n, t = y.shape[:2]
        hx = state.hidden if state.cell is None else (state.hidden, state.cell)
        s, hx = self.rnn(y, hx)
        state.hidden, state.cell = (hx, None) if state.cell is None else hx
        pos = (torch.arange(t, device=y.device, dtype=torch.float32) + state.step).expand(n, t)
        context, alpha = self._attend(s, state, pos)
        state.step += t
        return torch.tanh(self.W_c(torch.cat([context, s], -1))), alpha


class ConditionalGRUDecoder(_Decoder):
    """Conditional GRU (Sennrich et al. 2017, Nematus, Sec. 2): ``s'_i = GRU_1(y_{i-1}, s_{i-1})``,
    ``c_i = ATT(C, s'_i)``, ``s_i = GRU_2(c_i, s'_i)``; ``dec_layers - 1`` plain GRU layers on top;
    deep output ``t_i = tanh(W_t [s_i; E y_{i-1}; c_i])`` from the top state."""

    def __init__(self, cfg: ModelConfig, embed_dim: int, key_dim: int):
        super().__init__(cfg, embed_dim, key_dim)
        rc = cfg.rnn
        self.gru1 = nn.GRUCell(embed_dim, self.hidden)
        self.gru2 = nn.GRUCell(key_dim, self.hidden)
        self.upper = _rnn("gru", self.hidden, self.hidden, rc.dec_layers - 1, cfg.dropout) if rc.dec_layers > 1 else None
        self.dropout = Dropout(cfg.dropout)
        self.readout = Linear(self.hidden + embed_dim + key_dim, embed_dim)
        self.out_dim = embed_dim
        self.last_intermediate: Tensor | None = None  # s'_i of the latest step (inspection/tests)

    def step(self, y: Tensor, state: RNNState) -> tuple[Tensor, Tensor]:
        s_prev = state.hidden[0]
        s_mid = self.gru1(y, s_prev)  # s'_i
        context, alpha = self._attend(s_mid, state, self._position(state, y.size(0), y.device))
        s = self.gru2(context, s_mid)  # s_i
        self.last_intermediate = s_mid
        top, layers = s, [s]
        if self.upper is not None:
            out, upper_h = self.upper(self.dropout(s)[:, None], state.hidden[1:].contiguous())
            top = out[:, 0]
            layers.extend(upper_h.unbind(0))
        state.hidden = torch.stack(layers, 0)
        return torch.tanh(self.readout(torch.cat([top, y, context], -1))), alpha


DECODERS = {"bahdanau": BahdanauDecoder, "luong": LuongDecoder, "cgru": ConditionalGRUDecoder}


class RNNModel(nn.Module):
    """RNN encoder-decoder with attention; the interface used by training (``forward``) and search
    (``encode``/``init_state``/``step``/``reorder_state``)."""

    step_rows = True  # step(..., rows=) computes the next-token distribution of some rows only

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int):
        super().__init__()
        self.cfg = cfg
        self.feature_spec = FeatureSpec()  # the RNN model reads no source features
        rc: RNNConfig = cfg.rnn
        dim = rc.embed_dim or cfg.d_model
        self.tgt_embed = nn.Embedding(tgt_vocab, dim, padding_idx=PAD)
        if cfg.tie_embeddings == "all":
            if src_vocab != tgt_vocab:
                raise ValueError("tie_embeddings=all needs a joint vocabulary (data.joint_vocab: true)")
            self.src_embed = self.tgt_embed
        else:
            self.src_embed = nn.Embedding(src_vocab, dim, padding_idx=PAD)
        for emb in {id(e): e for e in (self.src_embed, self.tgt_embed)}.values():
            nn.init.normal_(emb.weight, std=dim**-0.5)
            with torch.no_grad():
                emb.weight[PAD].zero_()
        key_dim = 2 * rc.hidden
        self.encoder = RNNEncoder(cfg, self.src_embed)
        self.bridge = Linear(key_dim, rc.dec_layers * rc.decoder_size)
        self.decoder: _Decoder = DECODERS[rc.decoder](cfg, dim, key_dim)
        self.dropout = Dropout(cfg.dropout)
        tie = cfg.tie_embeddings in ("decoder", "all")
        out_dim = self.decoder.out_dim
        self.pre_output = Linear(out_dim, dim, bias=False) if tie and out_dim != dim else nn.Identity()
        self.output = Linear(dim if tie else out_dim, tgt_vocab)
        if tie:
            self.output.weight = self.tgt_embed.weight
        self.is_lstm = rc.cell == "lstm" and rc.decoder != "cgru"

    # --- encoder ------------------------------------------------------------------------------
    def encode(self, batch: Batch, need_weights: bool = False) -> EncoderOutput:
        pad_mask = batch.src_pad_mask
        return EncoderOutput(self.encoder(batch.src, pad_mask), pad_mask)

    def init_state(self, enc: EncoderOutput, target_length: Tensor | None = None) -> RNNState:
        """Decoder state before the first target token: ``s_0 = tanh(W_init mean_j h_j + b_init)``.

        ``target_length`` is I of the position bias (Cohn et al. 2016): the reference length
        (EOS included) when teacher forcing; by default -- at decoding time, where the
        translation's length is unknown -- the source length J is used for I.
        """
        keep = (~enc.pad_mask).to(enc.hidden.dtype)
        source_len = keep.sum(1)
        mean = (enc.hidden * keep[:, :, None]).sum(1) / source_len.clamp(min=1)[:, None]
        n, rc = enc.hidden.size(0), self.cfg.rnn
        hidden = torch.tanh(self.bridge(mean)).view(n, rc.dec_layers, rc.decoder_size).transpose(0, 1).contiguous()
        cell = torch.zeros_like(hidden) if self.is_lstm else None
        feed = hidden.new_zeros(n, rc.decoder_size) if rc.decoder == "luong" and rc.input_feeding else None
        target_len = source_len if target_length is None else target_length.to(source_len)
        return RNNState(enc, self.decoder.attention.precompute(enc.hidden), hidden, cell, feed, source_len, target_len)

    # --- training -----------------------------------------------------------------------------
    def _logits(self, pre: Tensor) -> Tensor:
        return self.output(self.pre_output(self.dropout(pre)))

    def forward(self, batch: Batch, need_weights: bool = False) -> ModelOutput:
        enc = self.encode(batch)
        state = self.init_state(enc, batch.tgt_out.ne(PAD).sum(1))
        y = self.dropout(self.tgt_embed(batch.tgt_in))
        pre, alpha = self.decoder.teacher_force(y, state)
        return ModelOutput(pre, self._logits, enc, [alpha[:, None]] if need_weights else [])

    # --- incremental decoding -----------------------------------------------------------------
    def step(self, tokens: Tensor, state: RNNState, need_weights: bool = False, rows: Tensor | None = None) -> tuple[Tensor, RNNState]:
        """Log-probabilities (N, V) of the next token given the previous one ``tokens`` (N,);
        with ``rows`` (R,), those rows' only (R, V)."""
        y = self.dropout(self.tgt_embed(tokens))
        pre, alpha = self.decoder.step(y, state)
        state.step += 1
        state.last_cross_attention = alpha if need_weights else None
        logits = self._logits(pre if rows is None else pre.index_select(0, rows))
        return torch.log_softmax(logits.float(), dim=-1), state

    def reorder_state(self, state: RNNState, index: Tensor, sources_kept: bool = False) -> RNNState:
        """Keep (and duplicate) hypotheses ``index``: every state tensor is index-selected (see
        :meth:`RNNState.index_select` for ``sources_kept``)."""
        return state.index_select(index, sources_kept)
