"""Attention as alignment in training: guided alignment, coverage, fertility, symmetry.

Shapes and conventions
----------------------
``attn`` is the attention of target positions over source positions, (B, T, S):
``attn[b, i, j] = α_ij``, target position i attending to source position j, each row a
distribution over the source (e.g. :func:`syntaxnmt.alignment.extract.average_heads` of the model's
``cross_attention``). Masks follow :class:`syntaxnmt.inputs.Batch`: ``src_pad_mask`` (B, S)
and ``tgt_pad_mask`` (B, T) are **True at padding**. Whether EOS positions count is the caller's
choice: mark them as padding to leave them out.

``reduction`` is ``"none"`` (one value per sentence, shape (B,)), ``"sum"`` or ``"mean"`` (over
sentences). All functions are differentiable in ``attn``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from syntaxnmt.config import AlignmentConfig, Config
from syntaxnmt.data.links import normalize_alignment
from syntaxnmt.inputs import EOS, PAD
from syntaxnmt.model.outputs import average_heads, layer_head
from syntaxnmt.training.losses import AuxiliaryObjective, decay

REDUCTIONS = ("none", "sum", "mean")


def _reduce(per_sentence: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return per_sentence
    if reduction == "sum":
        return per_sentence.sum()
    if reduction == "mean":
        return per_sentence.mean()
    raise ValueError(f"unknown reduction {reduction!r}; choose one of {', '.join(REDUCTIONS)}")


def _keep(mask: Tensor | None, like: Tensor, dim: int) -> Tensor:
    """A float (B, n) tensor: 1 at real positions, 0 at padding (all ones when ``mask`` is None)."""
    if mask is None:
        return like.new_ones(like.size(0), like.size(dim))
    return (~mask).to(like.dtype)


# --------------------------------------------------------------------------------------
# Guided alignment (Chen et al. 2016)
# --------------------------------------------------------------------------------------


def guided_alignment_loss(
    attn: Tensor,
    ref: Tensor,
    src_pad_mask: Tensor | None = None,
    tgt_pad_mask: Tensor | None = None,
    reduction: str = "mean",
    eps: float = 1e-9,
) -> Tensor:
    """Guided alignment cross-entropy (Chen et al. 2016, "Guided Alignment Training for
    Topic-Aware Neural Machine Translation", AMTA), per sentence::

        G(A, α) = -(1 / T_y) Σ_i Σ_j A_ij log α_ij

    ``attn`` α (B, T, S): target position i over source position j. ``ref`` (B, T, S): the
    reference alignment, 0/1 or weights; it is normalized per target word here (see
    :func:`normalize_alignment`), so a target word aligned to several source words shares the mass
    equally and unaligned target words contribute nothing. T_y is the number of non-padding target
    positions of the sentence. α is clamped to ``eps`` inside the log. Training adds
    ``λ · decay(step, schedule) · G`` to the translation loss.
    """
    if attn.shape != ref.shape:
        raise ValueError(f"attention {tuple(attn.shape)} and reference {tuple(ref.shape)} differ in shape")
    a = normalize_alignment(ref, src_pad_mask, tgt_pad_mask).to(attn.dtype)
    log_alpha = torch.log(attn.clamp_min(eps))
    cross = -(a * log_alpha).sum(dim=(1, 2))  # (B,)
    t_y = _keep(tgt_pad_mask, attn, 1).sum(dim=1).clamp_min(1.0)
    return _reduce(cross / t_y, reduction)


def leak_loss(leak: Tensor, ref: Tensor, tgt_pad_mask: Tensor | None = None, reduction: str = "mean", eps: float = 1e-9) -> Tensor:
    """The leak term of leaky attention (``train.alignment.leaky``), per sentence::

        -Σ_{i unlinked} log λ_i

    ``leak`` λ (B, T): the weight target position i gives the leak slot (:class:`~syntaxnmt.model.attention.LeakSlot`;
    Chen, Sun & Liu 2021, "Mask-Align"). ``ref`` (B, T, S): the reference alignment; the
    non-padding target positions without a reference link (unaligned words, EOS) are trained to
    attend to the leak, as linked ones are trained to attend to their source words by
    :func:`guided_alignment_loss`. Summed, not divided by T_y (``AlignmentObjective`` adds it to
    T_y · G)."""
    unlinked = ref.sum(dim=-1).eq(0)
    if tgt_pad_mask is not None:
        unlinked = unlinked & ~tgt_pad_mask
    per_sentence = -(torch.log(leak.clamp_min(eps)) * unlinked.to(leak.dtype)).sum(dim=1)
    return _reduce(per_sentence, reduction)


# --------------------------------------------------------------------------------------
# Coverage and fertility (Tu et al. 2016; Cohn et al. 2016)
# --------------------------------------------------------------------------------------


def coverage_loss(
    attn: Tensor,
    src_pad_mask: Tensor | None = None,
    tgt_pad_mask: Tensor | None = None,
    fertility: Tensor | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Coverage regularizer, per sentence (Tu et al. 2016; Cohn et al. 2016, "Incorporating
    Structural Alignment Biases into an Attentional Neural Translation Model", NAACL)::

        Σ_j (f_j - Σ_i α_ij)²

    with j over non-padding source positions, i over non-padding target positions, ``attn`` α
    (B, T, S). ``fertility`` f (B, S) comes from :class:`Fertility`; ``None`` means f_j = 1, the
    plain coverage penalty Σ_j (1 - Σ_i α_ij)² (every source word attended once in total).
    """
    keep_t = _keep(tgt_pad_mask, attn, 1)
    keep_s = _keep(src_pad_mask, attn, 2)
    received = (attn * keep_t[:, :, None]).sum(dim=1)  # (B, S): Σ_i α_ij
    f = attn.new_ones(received.shape) if fertility is None else fertility.to(attn.dtype)
    per_sentence = (((f - received) ** 2) * keep_s).sum(dim=1)
    return _reduce(per_sentence, reduction)


# --------------------------------------------------------------------------------------
# Bilingual symmetry (Cohn et al. 2016)
# --------------------------------------------------------------------------------------


def trace_bonus(
    attn_st: Tensor,
    attn_ts: Tensor,
    src_pad_mask: Tensor | None = None,
    tgt_pad_mask: Tensor | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Bilingual symmetry bonus (Cohn et al. 2016, "joint training" of both directions), per pair::

        B = Σ_i Σ_j α^{s→t}_ij α^{t→s}_ji = trace(α^{s→t} α^{t→s})

    ``attn_st`` (B, T, S): the source→target model, target position i over source position j.
    ``attn_ts`` (B, S, T): the target→source model trained jointly on the same pair, source
    position j (its output side) over target position i (its input side). B is large when the
    two attentions agree; train with ``-γ · B`` added to the loss. i runs over non-padding target
    positions, j over non-padding source positions.
    """
    bsz, t, s = attn_st.shape
    if attn_ts.shape != (bsz, s, t):
        raise ValueError(f"attn_ts must be (B, S, T) = {(bsz, s, t)}, got {tuple(attn_ts.shape)}")
    keep = _keep(tgt_pad_mask, attn_st, 1)[:, :, None] * _keep(src_pad_mask, attn_st, 2)[:, None, :]
    per_sentence = (attn_st * attn_ts.transpose(1, 2) * keep).sum(dim=(1, 2))
    return _reduce(per_sentence, reduction)


# --------------------------------------------------------------------------------------
# The training objective (``train.alignment``)
# --------------------------------------------------------------------------------------
# Attention as alignment in training: the terms of ``train.alignment`` added to the loss.
#
# * guided alignment (Chen et al. 2016): ``λ · decay(step) · Σ_sentences T_y · G(A, α)``, i.e. the
#   cross-entropy between the reference alignment A of the batch (``Batch.alignment``, built by
#   :func:`~syntaxnmt.data.batches.collate` from the prepared subword links) and the attention α, summed
#   over target tokens like the translation loss;
# * coverage (Tu et al. 2016; Cohn et al. 2016): ``w · Σ_sentences Σ_j (f_j - Σ_i α_ij)²`` with
#   f_j = 1, or f_j predicted by a :class:`Fertility` module that
#   :func:`attach_fertility` adds to the model (so it is trained, checkpointed and loaded with it).
#
# α is one (B, T, S) matrix per batch: ``train.alignment.layer``/``head`` of the cross-attention
# that ``model(batch, need_weights=True)`` returns (:func:`~syntaxnmt.model.outputs.average_heads`),
# or with ``full_context`` (Garg et al. 2019, Sec. 4) that head of the extra pass through the
# supervised layer without the causal mask (``ModelOutput.alignment_attention``). With ``leaky``
# (Mask-Align) the guided term also trains the target positions without a link to attend to the
# leak slot (:func:`leak_loss`).
# Coverage and the symmetry bonus (:mod:`syntaxnmt.training.joint`) leave out EOS and padding on both sides;
# guided alignment only sees linked positions. The sum over sentences is normalized by the update's
# target tokens together with the translation loss (:func:`syntaxnmt.training.step.update`).


def word_masks(src: Tensor, tgt_out: Tensor) -> tuple[Tensor, Tensor]:
    """(source, target) masks, True at padding and at EOS: only real subwords count as words."""
    return src.eq(PAD) | src.eq(EOS), tgt_out.eq(PAD) | tgt_out.eq(EOS)


def alignment_attention(out, cfg: AlignmentConfig) -> Tensor:
    """The (B, T, S) attention the terms read from a model output (called with ``need_weights=True``):
    ``layer``/``head`` of the cross-attention or, with ``full_context``, ``head`` of the supervised
    layer's full-context pass. A leaky head's rows keep the leak's share out (they sum to 1 - λ_i)."""
    if cfg.full_context:
        if out.alignment_attention is None:
            raise ValueError("train.alignment.full_context: the model output has no full-context attention (a model built without it?)")
        return average_heads([out.alignment_attention], None, layer_head(cfg.head))
    return average_heads(out.cross_attention, layer_head(cfg.layer), layer_head(cfg.head))


def alignment_leak(out, cfg: AlignmentConfig) -> Tensor:
    """The (B, T) leak weights of the supervised attention of a leaky model (heads as ``head``)."""
    if out.alignment_leak is None:
        raise ValueError("train.alignment.leaky: the model output has no leak weights (a model built without them?)")
    head = layer_head(cfg.head)
    return out.alignment_leak.mean(dim=1) if head is None else out.alignment_leak[:, head]


class AlignmentObjective(AuxiliaryObjective):
    """The guided-alignment and coverage terms of one model (reading its cross-attention)."""

    needs_cross_attention = True

    def __init__(self, cfg: AlignmentConfig):
        self.cfg = cfg

    @property
    def needs_reference(self) -> bool:
        """Whether batches must carry the reference alignment (guided alignment)."""
        return self.cfg.guided_weight > 0

    def terms(self, model: nn.Module, batch, out) -> dict[str, Tensor]:
        """Unweighted terms, each summed over the batch's sentences: ``guided`` and/or ``coverage``."""
        a = self.cfg
        attn = alignment_attention(out, a)
        terms = {}
        if a.guided_weight > 0:
            tgt_pad = batch.tgt_out.eq(PAD)
            g = guided_alignment_loss(attn, batch.alignment, batch.src_pad_mask, tgt_pad, reduction="none")
            terms["guided"] = (g * (~tgt_pad).sum(1)).sum()  # T_y · G per sentence
            if a.leaky:
                terms["guided"] = terms["guided"] + leak_loss(alignment_leak(out, a), batch.alignment, tgt_pad, reduction="sum")
        if a.coverage_weight > 0:
            src_mask, tgt_mask = word_masks(batch.src, batch.tgt_out)
            fertility = model.fertility(out.encoder.hidden, src_mask) if a.fertility else None
            terms["coverage"] = coverage_loss(attn, src_mask, tgt_mask, fertility, reduction="sum")
        return terms

    def weights(self, step: int | Tensor) -> dict[str, float | Tensor]:
        return {"guided": self.cfg.guided_weight * decay(step, self.cfg.guided_decay), "coverage": self.cfg.coverage_weight}


def alignment_objective(cfg: Config) -> AlignmentObjective | None:
    """The objective of ``cfg``, or None when no term is on (training then skips the attention weights)."""
    a = cfg.train.alignment
    return AlignmentObjective(a) if a.guided_weight > 0 or a.coverage_weight > 0 else None
