"""Scoring given targets (force-decoding): log P(y | x) of references, and the search's ranking
score of an output."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from syntaxnmt.config import DecodeConfig
from syntaxnmt.data.batches import make_batch
from syntaxnmt.data.features import SourceAnnotation
from syntaxnmt.decoding.search import length_penalty
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import PAD


def check_forced_pairs(model, sources: Sequence, targets: Sequence, annotations=None, what: str = "sentence", annotate_hint: str = "the input must be annotated") -> None:
    """What force-decoding (scoring, alignment) needs: annotations for a model with source
    features, and no sentence longer than the model's positions; else a one-line error."""
    spec = model.feature_spec
    if spec and annotations is None:
        raise UserError(f"this model uses source features ({', '.join(sorted(spec.names))}): {annotate_hint}")
    limit = model.cfg.max_positions - 2
    for k, (src, tgt) in enumerate(zip(sources, targets), start=1):
        if max(len(src), len(tgt)) > limit:
            raise UserError(f"{what} {k} has {max(len(src), len(tgt))} subwords: more than the model's {limit} positions")


def _members(model) -> list[torch.nn.Module]:
    """The models of an ensemble (:class:`syntaxnmt.decoding.ensemble.Ensemble`), or the model itself."""
    return list(getattr(model, "models", [model]))


@torch.no_grad()
def score_ids(model, sources: Sequence[np.ndarray], targets: Sequence[Sequence[int]], device: torch.device, *, batch_size: int = 64, annotations: Sequence[SourceAnnotation] | None = None) -> list[float]:
    """log P(y | x) of every target (subword ids, no BOS/EOS) given its source, EOS included:
    the sum over the reference's positions of the model's log-probability of the reference token
    (teacher forcing). An ensemble scores with the distribution it searches with: the members'
    mean log-probability, renormalized at every position (:mod:`syntaxnmt.decoding.ensemble`)."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets")
    check_forced_pairs(model, sources, targets, annotations)
    spec = model.feature_spec
    members = _members(model)
    was_training = [m.training for m in members]
    for m in members:
        m.eval()
    order = np.argsort([len(s) + len(t) for s, t in zip(sources, targets)], kind="stable")
    out = [0.0] * len(sources)
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size].tolist()
            anns = [annotations[i] for i in idx] if spec else None
            batch = make_batch([np.asarray(sources[i], dtype=np.int64) for i in idx], [np.asarray(targets[i], dtype=np.int64) for i in idx], idx, anns, spec).to(device)
            log_probs = [torch.log_softmax(m(batch).logits.float(), dim=-1) for m in members]
            lp = log_probs[0] if len(log_probs) == 1 else torch.log_softmax(torch.stack(log_probs).mean(0), dim=-1)
            gold = lp.gather(-1, batch.tgt_out[..., None]).squeeze(-1).masked_fill(batch.tgt_out.eq(PAD), 0.0)
            for i, total in zip(idx, gold.sum(1).tolist()):
                out[i] = total
    finally:
        for m, t in zip(members, was_training):
            m.train(t)
    return out


def normalized_score(log_prob: float, length: int, decode: DecodeConfig) -> float:
    """The search's ranking score of an output of ``length`` subwords (EOS not counted here) with
    total log-probability ``log_prob``: log P / lp(y) (:func:`syntaxnmt.decoding.search.length_penalty`)."""
    return log_prob / length_penalty(length + 1, decode.length_penalty, decode.length_penalty_type) if decode.length_penalty else log_prob
