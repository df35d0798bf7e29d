"""What a model returns: encoder and decoder outputs, the incremental-decoding state, and the
reading of cross-attention as one (B, T, S) matrix (a layer/head or their average)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor

from syntaxnmt.errors import UserError


@dataclass
class ContextAttention:
    """HAN's weights for one batch (:class:`syntaxnmt.model.context.HierarchicalContext`), on
    request: ``word`` (B, k, H, S, Sc) word-level attention of each current token over each previous
    sentence's pieces, ``sentence`` (B, H, S, k) sentence-level attention over the k previous
    sentences (nearest first), ``gate`` (B, S) the gate λ_t averaged over the model dimensions.
    A missing previous sentence gets zero weight in both; a sentence without context has all-zero
    weights and gate 0 (its states are left unchanged)."""

    word: Tensor
    sentence: Tensor
    gate: Tensor


@dataclass
class EncoderOutput:
    hidden: Tensor  # (B, S, D)
    pad_mask: Tensor  # (B, S), True at padding
    self_attention: list[Tensor | None] = field(default_factory=list)  # per layer (B, H, S, S), on request (None: a layer not requested)
    layers: list[Tensor] = field(default_factory=list)  # per layer, its output states (B, S, D) (before the final norm)
    target_context: tuple[Tensor, Tensor] | None = None  # target-side HAN: decoder states (B, k, Tc, D) of the previous target sentences and their padding (B, k, Tc)
    context_attention: ContextAttention | None = None  # HAN's weights over the previous sentences, on request
    target_context_rows: Tensor | None = None  # target-side HAN on a batch of rows (B, k): the decoder pass gathers its own states of these rows
    target_context_index: Tensor | None = None  # (B,): the row of ``target_context`` each row reads (None: its own)
    kept: object | None = None  # what a stack runner (Transformer.stacks) kept of its encoder pass for its decoder pass

    def index_select(self, index: Tensor) -> "EncoderOutput":
        """Rows ``index`` (beam search: each sentence's row once per hypothesis). The target-side
        context is not copied: the rows read it through ``target_context_index``, so that the
        target-side HAN projects it once per sentence (:class:`syntaxnmt.model.context.HierarchicalContext`)."""
        ctx_index = None
        if self.target_context is not None:
            ctx_index = index if self.target_context_index is None else self.target_context_index.index_select(0, index)
        return EncoderOutput(self.hidden.index_select(0, index), self.pad_mask.index_select(0, index), target_context=self.target_context, target_context_index=ctx_index)


@dataclass
class ModelOutput:
    """Decoder states before the output layer; ``project`` maps them (or a selection of their
    rows, e.g. the non-padding ones) to vocabulary logits."""

    states: Tensor  # (B, T, D)
    project: Callable[[Tensor], Tensor]
    encoder: EncoderOutput
    cross_attention: list[Tensor] = field(default_factory=list)  # per decoder layer (B, H, T, S), on request
    decoder_self_attention: list[Tensor] = field(default_factory=list)  # per decoder layer (B, H, T, T), on request
    alignment_attention: Tensor | None = None  # (B, H, T, S): the supervised layer's full-context pass (train.alignment.full_context), on request
    alignment_leak: Tensor | None = None  # (B, H, T): the leak slot's weights in the supervised attention (train.alignment.leaky), on request
    target_context_attention: ContextAttention | None = None  # the target-side HAN's weights over the previous target sentences (S = T, Sc = Tc), on request
    real: tuple[Tensor, Tensor] | None = None
    """Where a stack runner (``Transformer.stacks``) computed the decoder on the real positions only:
    the positions that are not padding, (B, T) True there, and ``states`` at them in flat order
    (N, D): the rows the loss reads, without a placement into (B, T, D) and a selection back."""

    @property
    def logits(self) -> Tensor:
        """(B, T, V) logits of every position."""
        return self.project(self.states)


@dataclass
class ForcedAttention:
    """What reading a teacher-forced pass as alignment needs (:meth:`syntaxnmt.model.transformer.Transformer.forced_attention`):
    the fields of :class:`ModelOutput` that hold cross-attention, each equal to that field of
    ``model(batch, need_weights=True)``; a decoder layer not asked for is None."""

    cross_attention: list[Tensor | None]  # per decoder layer (B, H, T, S); None: not computed
    alignment_attention: Tensor | None = None  # (B, H, T, S): the full-context pass, when asked for
    alignment_leak: Tensor | None = None  # (B, H, T): a leaky model's leak weights (the null word of its supervised readings, or renormalized away)


@dataclass
class DecoderState:
    """What incremental decoding carries from one step to the next."""

    encoder: EncoderOutput
    step: int = 0
    caches: list[dict] = field(default_factory=list)
    last_cross_attention: Tensor | None = None  # (N, S), head-averaged, last layer; on request


def average_heads(cross_attention: Sequence[torch.Tensor | None], layer: int | None = None, head: int | None = None) -> torch.Tensor:
    """One (B, T, S) attention from a list of per-layer (B, H, T, S) tensors.

    ``layer``/``head`` pick one decoder layer / head (negative values count from the end);
    ``None`` averages over all layers / heads.
    """
    if not cross_attention:
        raise ValueError("no cross-attention weights (call the model with need_weights=True)")
    n_layers = len(cross_attention)
    if layer is not None:
        if not -n_layers <= layer < n_layers:
            raise UserError(f"alignment layer {layer} out of range: the model has {n_layers} decoder layers")
        layers = [cross_attention[layer]]
    else:
        layers = list(cross_attention)
    if any(w is None for w in layers):
        raise ValueError(f"the cross-attention of {'every decoder layer' if layer is None else f'decoder layer {layer}'} is needed but was not computed")
    n_heads = layers[0].size(1)
    if head is not None:
        if not -n_heads <= head < n_heads:
            raise UserError(f"alignment head {head} out of range: the model has {n_heads} heads")
        per_layer = [w[:, head] for w in layers]
    else:
        per_layer = [w.mean(dim=1) for w in layers]
    return torch.stack(per_layer).mean(dim=0)


def layer_head(value: int | str) -> int | None:
    """``average`` -> None (the argument of :func:`~syntaxnmt.model.outputs.average_heads`), else the index."""
    return None if value == "average" else int(value)
