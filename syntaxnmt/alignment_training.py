"""Attention as alignment in training: the terms of ``train.alignment`` added to the loss.

* guided alignment (Chen et al. 2016): ``λ · decay(step) · Σ_sentences T_y · G(A, α)``, i.e. the
  cross-entropy between the reference alignment A of the batch (``Batch.alignment``, built by
  :func:`~syntaxnmt.batches.collate` from the prepared subword links) and the attention α, summed
  over target tokens like the translation loss;
* coverage (Tu et al. 2016; Cohn et al. 2016): ``w · Σ_sentences Σ_j (f_j - Σ_i α_ij)²`` with
  f_j = 1, or f_j predicted by a :class:`~syntaxnmt.alignment_losses.Fertility` module that
  :func:`attach_fertility` adds to the model (so it is trained, checkpointed and loaded with it).

α is one (B, T, S) matrix per batch: ``train.alignment.layer``/``head`` of the cross-attention
that ``model(batch, need_weights=True)`` returns (:func:`~syntaxnmt.alignment.average_heads`).
Coverage and the symmetry bonus (:mod:`syntaxnmt.joint`) leave out EOS and padding on both sides;
guided alignment only sees linked positions. The sum over sentences is normalized by the update's
target tokens together with the translation loss (:func:`syntaxnmt.train.update`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from syntaxnmt.alignment import average_heads
from syntaxnmt.alignment_losses import Fertility, coverage_loss, decay, guided_alignment_loss
from syntaxnmt.config import AlignmentConfig, Config
from syntaxnmt.subwords import EOS, PAD


def layer_head(value: int | str) -> int | None:
    """``average`` -> None (the argument of :func:`~syntaxnmt.alignment.average_heads`), else the index."""
    return None if value == "average" else int(value)


def attach_fertility(model: nn.Module, cfg: Config) -> nn.Module:
    """Add ``model.fertility`` (a :class:`Fertility` on the encoder states) when ``train.alignment.fertility`` is on."""
    a = cfg.train.alignment
    if a.fertility and not hasattr(model, "fertility"):
        dim = cfg.model.d_model if cfg.model.arch == "transformer" else 2 * cfg.model.rnn.hidden
        model.fertility = Fertility(dim, a.max_fertility)
    return model


def word_masks(src: Tensor, tgt_out: Tensor) -> tuple[Tensor, Tensor]:
    """(source, target) masks, True at padding and at EOS: only real subwords count as words."""
    return src.eq(PAD) | src.eq(EOS), tgt_out.eq(PAD) | tgt_out.eq(EOS)


def alignment_attention(out, cfg: AlignmentConfig) -> Tensor:
    """The (B, T, S) attention the terms read from a model output (called with ``need_weights=True``)."""
    return average_heads(out.cross_attention, layer_head(cfg.layer), layer_head(cfg.head))


class AlignmentObjective:
    """The guided-alignment and coverage terms of one model; keeps running sums for logging."""

    def __init__(self, cfg: AlignmentConfig):
        self.cfg = cfg
        self.window: dict[str, float] = {}

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
        if a.coverage_weight > 0:
            src_mask, tgt_mask = word_masks(batch.src, batch.tgt_out)
            fertility = model.fertility(out.encoder.hidden, src_mask) if a.fertility else None
            terms["coverage"] = coverage_loss(attn, src_mask, tgt_mask, fertility, reduction="sum")
        return terms

    def loss(self, model: nn.Module, batch, out, step: int) -> Tensor:
        """The weighted sum of the terms at update ``step`` (0-based, for the decay of λ)."""
        weights = {"guided": self.cfg.guided_weight * decay(step, self.cfg.guided_decay), "coverage": self.cfg.coverage_weight}
        total = torch.zeros((), device=batch.src.device)
        for name, value in self.terms(model, batch, out).items():
            self.add(name, value)
            total = total + weights[name] * value
        return total

    def add(self, name: str, value: Tensor) -> None:
        self.window[name] = self.window.get(name, 0.0) + float(value.detach())

    def pop_window(self, n_tokens: int) -> dict[str, float]:
        """The terms summed since the last call, per target token; resets the sums."""
        out = {k: v / max(n_tokens, 1) for k, v in self.window.items()}
        self.window = {}
        return out


def alignment_objective(cfg: Config) -> AlignmentObjective | None:
    """The objective of ``cfg``, or None when no term is on (training then skips the attention weights)."""
    a = cfg.train.alignment
    return AlignmentObjective(a) if a.guided_weight > 0 or a.coverage_weight > 0 else None
