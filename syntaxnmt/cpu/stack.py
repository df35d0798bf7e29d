"""CPU training's execution of a Transformer's stacks on the real positions only.

Bucketed CPU batches (``train.shape_bucket``) are about a fifth padding (:mod:`syntaxnmt.cpu.packing`).
Where every attention of a stack is the plain one of the C kernels
(:func:`syntaxnmt.cpu.attention.rows_usable`), :class:`PackedStacks` -- the
:class:`~syntaxnmt.model.transformer.StackRunner` that :func:`syntaxnmt.cpu.install` gives a
Transformer -- keeps the states packed between the layers: from the embeddings of the real rows,
the norms, dropouts, residuals and products run on those rows, and only the kernels' q, k, v are
placed (through row maps). A pre-norm stack also runs each residual connection and the norm after
it in one pass (:func:`pre_norm_chain`) where every block is the paper's residual (:func:`chains`);
a residual form of its own runs its ``forward`` on the packed rows. The result is the same as the
layers one by one.
A stack that cannot pack through (an attention extension, weights asked for, attention dropout, a
leak slot, HAN's blocks) runs the model's layers one by one on every row: the products of such
stacks are no longer gathered onto the real rows layer by layer (issue 48; its saving is to be
measured with the other fast paths).

The position-wise blocks of a layer get their fused kernels from :class:`FusedFeedForward`
(bias, ReLU and dropout in one pass) and :class:`FusedResidual` (dropout and the residual sum in
one pass), which :func:`syntaxnmt.cpu.install` gives the model's modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.cpu.attention import rows_attention, rows_usable
from syntaxnmt.cpu.dropout import bias_relu_dropout, dropout_add, dropout_add_norm, fuses_bias
from syntaxnmt.cpu.linear import linear, row_granule
from syntaxnmt.cpu.packing import Place, PlacedRows, gather_rows, packed_rows
from syntaxnmt.inputs import PAD, Batch, SourceFeatures
from syntaxnmt.model.outputs import EncoderOutput
from syntaxnmt.model.transformer import Embeddings, FeedForward, Residual, StackRunner, Transformer

Block = tuple[Residual, Callable[[Tensor], Tensor]]  # a residual block and the function f it wraps


class FusedFeedForward(FeedForward):
    """:class:`~syntaxnmt.model.transformer.FeedForward` whose hidden layer's bias, ReLU and
    dropout run in one pass of the C kernel where it can (:func:`bias_relu_dropout`)."""

    def forward(self, x: Tensor) -> Tensor:
        p = self.dropout.p
        if self.act is F.relu and fuses_bias(x, p, self.training, self.fc1.out_features):
            return self.fc2(bias_relu_dropout(linear(x, self.fc1.weight), self.fc1.bias, p, True))
        return super().forward(x)


class FusedResidual(Residual):
    """:class:`~syntaxnmt.model.transformer.Residual` whose ``x + dropout(y)`` is one pass of the C kernel where it can (:func:`dropout_add`)."""

    def add(self, x: Tensor, y: Tensor) -> Tensor:
        return dropout_add(x, y, self.dropout.p, self.training)


def pre_norm_chain(x: Tensor, blocks: Sequence[Block], final_norm: nn.Module, training: bool) -> tuple[Tensor, list[Tensor]]:
    """Pre-norm residual blocks ``x <- x + dropout(f(norm(x)))`` in order, then ``final_norm(x)``,
    with each residual connection and the norm after it (the next block's, or ``final_norm``) in
    one pass (:func:`dropout_add_norm`): the normalized output and each block's ``x``."""
    h, outputs = blocks[0][0].norm(x), []
    for i, (res, f) in enumerate(blocks):
        after = blocks[i + 1][0].norm if i + 1 < len(blocks) else final_norm
        x, h = dropout_add_norm(x, f(h), res.dropout.p, training, after)
        outputs.append(x)
    return h, outputs


def embedded_rows(embed: Embeddings, tokens: Tensor, rows: Tensor, features: SourceFeatures | None = None) -> Tensor:
    """``embed(tokens)``'s rows at the flat positions ``rows`` of ``tokens`` (B, L), (len(rows), D),
    computed on those rows only (the padding of a bucketed batch is not embedded); with input
    features, the whole batch and then its rows."""
    if embed.features is not None:
        return gather_rows(embed(tokens, features=features), rows)
    x = embed.tokens(tokens.reshape(-1)[rows]) * embed.scale
    if embed.absolute:
        at = rows % tokens.size(1)
        x = x + (embed.positions(at) if embed.learned else embed.table[at])
    return embed.dropout(x)


def chains(blocks: Sequence[Block]) -> bool:
    """Whether :func:`pre_norm_chain` computes these blocks: each is the paper's residual
    (:class:`~syntaxnmt.model.transformer.Residual`, or its fused form) with a LayerNorm. Another
    residual form (a subclass with its own ``forward``) runs its own code, block by block."""
    return all(type(res) in (Residual, FusedResidual) and type(res.norm) is nn.LayerNorm for res, _ in blocks)


def _run(x: Tensor, blocks: list[Block], per_layer: int, final_norm: nn.Module, pre: bool, training: bool) -> tuple[Tensor, list[Tensor]]:
    """The residual ``blocks`` of a stack (``per_layer`` each) on packed states ``x``: the
    normalized output and each layer's output."""
    if pre and chains(blocks):
        final, outputs = pre_norm_chain(x, blocks, final_norm, training)
        return final, outputs[per_layer - 1 :: per_layer]
    outputs = []
    for i, (res, f) in enumerate(blocks):
        x, _ = res(x, lambda h, f=f: (f(h), None))
        if (i + 1) % per_layer == 0:
            outputs.append(x)
    return final_norm(x), outputs


class PackedStacks(StackRunner):
    """The stacks of CPU training on the non-padding positions (see the module docstring)."""

    pack_granule: int = 128
    """The multiple to which the packed row count is topped up (a few shapes for oneDNN,
    :func:`~syntaxnmt.cpu.linear.row_granule`); 0 turns packing off (the calibration's choice,
    :func:`syntaxnmt.cpu.calibration.install`)."""

    def granule(self, model: Transformer, pad: Tensor) -> int:
        """The multiple of the packed row count in training on CPU (:func:`row_granule`); 0: no packing."""
        return row_granule(self.pack_granule) if model.training and pad.device.type == "cpu" and self.pack_granule else 0

    def rows(self, model: Transformer, pad: Tensor) -> Tensor | None:
        """The rows the layers compute in training on CPU (:func:`packed_rows`); None: all of them."""
        granule = self.granule(model, pad)
        return packed_rows(pad, granule) if granule else None

    @staticmethod
    def packs_through(model: Transformer, x: Tensor, memory: Tensor | None = None) -> bool:
        """Whether the encoder's layers (``memory`` None) or the decoder's (``memory``: the encoder
        output) can keep packed states between them for inputs like ``x``: every attention is the
        plain one the C kernels compute (:func:`~syntaxnmt.cpu.attention.rows_usable`)."""
        if memory is None:
            return all(rows_usable(layer.self_attn, x, None, False) for layer in model.encoder)
        return all(rows_usable(layer.self_attn, x, None, True) and rows_usable(layer.cross_attn, x, memory, False) for layer in model.decoder)

    def encode(self, model: Transformer, batch: Batch) -> tuple[Tensor, Sequence[Tensor], object] | None:
        """The encoder on the real rows: its output placed, each layer's output placed when read
        (:class:`PlacedRows`: multitask heads), and the output's packed rows for :meth:`decode`."""
        pad_mask = batch.src_pad_mask
        rows = self.rows(model, pad_mask)
        if rows is None or not self.packs_through(model, _states_like(model, batch.src)):
            return None
        place = Place(rows, *batch.src.shape)
        blocks = [block for layer in model.encoder for block in ((layer.res_attn, lambda h, a=layer.self_attn: rows_attention(a, h, place, pad_mask)), (layer.res_ffn, layer.ffn))]
        final, outputs = _run(embedded_rows(model.src_embed, batch.src, rows, batch.features), blocks, 2, model.enc_norm, model.cfg.norm == "pre", model.training)
        return place.placed(final), PlacedRows(outputs, place), (final, place)

    def decode(self, model: Transformer, tgt_in: Tensor, enc: EncoderOutput) -> tuple[Tensor, tuple[Tensor, Tensor] | None] | None:
        """The decoder on the real rows, reading the encoder output's packed rows (``enc.kept``, or
        gathered): its final states placed, and the real positions' states for the loss. A target
        with too little padding to leave out (:func:`packed_rows` None: a batch that fills its
        shape) runs every row, still reading the source's packed rows: the cross-attention's keys
        and values are not projected on the source's padding (issue 48)."""
        pad = tgt_in.eq(PAD)
        granule = self.granule(model, pad)
        if not granule or not self.packs_through(model, _states_like(model, tgt_in), enc.hidden):
            return None
        rows = packed_rows(pad, granule)
        place = Place(rows, *tgt_in.shape)
        if enc.kept is not None:  # the encoder's output rows as it computed them
            memory, memory_place = enc.kept
        else:
            memory_place = Place(self.rows(model, enc.pad_mask), *enc.hidden.shape[:2])
            memory = gather_rows(enc.hidden, memory_place.rows)
        blocks = [
            block
            for layer in model.decoder
            for block in (
                (layer.res_self, lambda h, a=layer.self_attn: rows_attention(a, h, place, causal=True)),
                (layer.res_cross, lambda h, a=layer.cross_attn: rows_attention(a, h, place, enc.pad_mask, memory=memory, memory_place=memory_place)),
                (layer.res_ffn, layer.ffn),
            )
        ]
        x = embedded_rows(model.tgt_embed, tgt_in, rows) if rows is not None else model.tgt_embed(tgt_in).reshape(-1, model.cfg.d_model)
        final, _ = _run(x, blocks, 3, model.dec_norm, model.cfg.norm == "pre", model.training)
        if rows is None:  # every row, in order: the loss reads the real positions of the placed states
            return place.placed(final), None
        kept = ~pad
        return place.placed(final), (kept, final[: int(kept.sum())])  # packed_rows puts the real rows first


def _states_like(model: Transformer, tokens: Tensor) -> Tensor:
    """An empty (B, L, 0) tensor of the states' dtype and device for ``tokens`` (B, L): what
    :meth:`PackedStacks.packs_through` reads of the states (shape, dtype, device), before computing any."""
    return model.tgt_embed.tokens.weight.new_empty(*tokens.shape, 0)
