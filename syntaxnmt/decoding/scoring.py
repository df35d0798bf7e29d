"""Scoring given translations: the summed negative log-likelihood of a target sentence given its
source (and, for a context model, the previous sentences of the document), and contrastive
evaluation (``syntaxnmt score --contrastive``): a model passes an item when it gives the correct
candidate the lowest NLL (Sennrich 2017; Müller et al. 2018; Voita et al. 2019).

The context of an item can be replaced by a control: ``none`` (no previous sentence) or
``other-document`` (the context of an item of another document). A model that really reads its
context falls back to chance under both; one that does not is at chance with its true context too.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from syntaxnmt.data.batches import context_batch
from syntaxnmt.data.contrastive import ContrastiveItem, chance
from syntaxnmt.decoding.forced import score_ids
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import PAD

CONTEXT_MODES = ("true", "other-document", "none")


@dataclass
class ScoredPair:
    """One (source, target) pair to score, with the document context the model may read."""

    src: str
    tgt: str
    context_src: list[str] = field(default_factory=list)  # previous source sentences, nearest first
    context_tgt: list[str] = field(default_factory=list)  # their translations (2-to-2 and target-side HAN models), nearest first


@torch.no_grad()
def target_nll(model, toks, pairs: Sequence[ScoredPair], device: torch.device, batch_size: int = 64) -> list[float]:
    """The summed NLL (nats, EOS included) of every pair's target given its source and context.

    A 2-to-2 concatenation model reads the context translations before a separator in the target:
    only the current sentence's tokens count. A target-side HAN model reads the decoder states of
    the context translations (``context_tgt``, the references of ``contrastive.json``)."""
    context = getattr(model, "document_context", None)
    encode = lambda tok, text: np.asarray(tok.encode(text), dtype=np.int64)  # noqa: E731
    if context is None:  # a sentence-level model: the scoring of syntaxnmt.decoding.forced
        src, tgt = [encode(toks.src, p.src) for p in pairs], [encode(toks.tgt, p.tgt) for p in pairs]
        return [-x for x in score_ids(model, src, tgt, device, batch_size=batch_size)]
    model.eval()
    out: list[float] = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        src = [encode(toks.src, p.src) for p in chunk]
        tgt = [encode(toks.tgt, p.tgt) for p in chunk]
        src_ctx = [[encode(toks.src, s) for s in p.context_src] for p in chunk]
        tgt_ctx = [[encode(toks.tgt, s) for s in p.context_tgt] for p in chunk]
        if (context.concat_target or context.han_target) and any(len(a) != len(b) for a, b in zip(src_ctx, tgt_ctx)):
            what = "2-to-2" if context.concat_target else "target-side HAN"
            raise UserError(f"a {what} model scores with the translations of the context sentences: give as many as source sentences")
        batch = context_batch(context, src, tgt, range(len(chunk)), src_ctx, tgt_ctx).to(device)
        # 2-to-2: the context translations and their separators come first and do not count
        prefix = [sum(len(s) + 1 for s in c[: context.sentences]) if context.concat_target else 0 for c in tgt_ctx]
        logits = model(batch).logits.float()
        nll = F.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=PAD, reduction="none")  # (B, T)
        for b, skip in enumerate(prefix):
            out.append(float(nll[b, skip:].sum()))
    return out


@dataclass
class ContrastiveResult:
    """Accuracy of a contrastive test: overall, per (phenomenon, distance) cell, ties, chance, and
    per item (``outcomes``: how many of its ``draws`` trials it passed, in the order of the items),
    so that an accuracy can be resampled by item (and by seed) afterwards."""

    correct: int
    items: int
    ties: int
    chance: float
    cells: dict[str, dict[str, float]]
    draws: int = 1  # trials per item: the other-document control scores each item with several donors
    outcomes: list[int] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return self.items * self.draws

    @property
    def accuracy(self) -> float:
        return self.correct / self.trials if self.items else 0.0

    def as_json(self) -> dict:
        return {"accuracy": self.accuracy, "items": self.items, "draws": self.draws, "correct": self.correct, "ties": self.ties, "tie_rate": self.ties / max(self.trials, 1), "chance": self.chance, "cells": self.cells, "outcomes": self.outcomes}

    def table(self) -> str:
        """The result as the lines ``score`` prints."""
        of = f"{self.correct}/{self.items}" if self.draws == 1 else f"{self.correct}/{self.trials}: {self.items} items x {self.draws} other documents"
        lines = [f"accuracy {100 * self.accuracy:.1f}% ({of}), chance {100 * self.chance:.1f}%, ties {self.ties}"]
        for name, cell in sorted(self.cells.items()):
            lines.append(f"  {name}: {100 * cell['accuracy']:.1f}% of {int(cell['items'])} (chance {100 * cell['chance']:.1f}%)")
        return "\n".join(lines)


def contrastive_result(candidates: Sequence[int], correct: Sequence[int], scores: Sequence[Sequence[float]], cells: Sequence[str], draws: int = 1) -> ContrastiveResult:
    """Score items: item i has ``candidates[i]`` candidates with NLLs ``scores[i]``, the one at
    ``correct[i]`` right; it passes when that one has the strictly lowest NLL (a tie fails). With
    ``draws`` > 1 the trials come draw by draw (trial t is item t mod the number of items)."""
    per_cell: dict[str, list] = defaultdict(lambda: [0, 0, 0.0])
    right = ties = 0
    outcomes = [0] * (len(candidates) // draws)
    for t, (n, c, s, cell) in enumerate(zip(candidates, correct, scores, cells)):
        best = min(s)
        tie = sum(1 for x in s if x == best) > 1
        ok = s[c] == best and not tie
        right += ok
        outcomes[t % len(outcomes)] += ok
        ties += tie
        per_cell[cell][0] += ok
        per_cell[cell][1] += 1
        per_cell[cell][2] += 1.0 / n
    total = len(candidates)
    chance = sum(1.0 / n for n in candidates) / total if total else 0.0
    table = {k: {"accuracy": v[0] / v[1], "items": v[1] // draws, "chance": v[2] / v[1]} for k, v in per_cell.items()}
    return ContrastiveResult(right, total // draws, ties, chance, table, draws, outcomes)


def swap_contexts(documents: Sequence[str], seed: int = 0) -> list[int]:
    """For every item, the index of an item of another document whose context it borrows (the
    ``other-document`` control); a fixed seed keeps the control the same from run to run."""
    rng = np.random.default_rng(seed)
    docs = np.asarray(documents, dtype=object)
    out = []
    for i in range(len(docs)):
        choices = np.flatnonzero(docs != docs[i])
        if not len(choices):
            raise UserError("the other-document control needs items of at least two documents")
        out.append(int(choices[int(rng.integers(len(choices)))]))
    return out


def score_contrastive(model, toks, items: Sequence[ContrastiveItem], device: torch.device, context: str = "true", batch_size: int = 64, seed: int = 0, draws: int = 1) -> ContrastiveResult:
    """Contrastive accuracy of ``model`` on ``items`` (:func:`syntaxnmt.data.contrastive.read_contrastive`)
    with their true context, another document's (``other-document``) or none.

    ``draws`` (``other-document`` only): score every item with that many donors drawn independently
    and count every (item, donor) as a trial. A model that reads its context is right about half the
    time with a random donor, so one draw leaves a 100-item cell ±5 points (one sd) from chance;
    ``draws`` = R narrows that to ±5/√R."""
    if context not in CONTEXT_MODES:
        raise UserError(f"--context {context}: choose one of {', '.join(CONTEXT_MODES)}")
    if draws < 1 or (draws > 1 and context != "other-document"):
        raise UserError(f"--draws {draws}: give a positive number, above 1 only with --context other-document")
    doc_ids = [str(it.doc if it.doc is not None else i) for i, it in enumerate(items)]
    donors = [d for r in range(draws) for d in swap_contexts(doc_ids, seed + r)] if context == "other-document" else range(len(items))
    trials = [item for _ in range(draws) for item in items]
    pairs, owners = [], []
    for i, (item, donor) in enumerate(zip(trials, donors)):
        ctx = items[donor]  # the items hold their context nearest last; the model reads it nearest first
        ctx_src, ctx_tgt = ([], []) if context == "none" else (list(reversed(ctx.context_src)), list(reversed(ctx.context_tgt)))
        for candidate in item.candidates:
            pairs.append(ScoredPair(item.src, candidate, ctx_src, ctx_tgt))
            owners.append(i)
    nll = target_nll(model, toks, pairs, device, batch_size)
    scores: list[list[float]] = [[] for _ in trials]
    for i, value in zip(owners, nll):
        scores[i].append(value)
    cells = [f"{it.phenomenon or 'all'}" + (f" / distance {it.distance}" if it.distance is not None else "") for it in trials]
    result = contrastive_result([len(it.candidates) for it in trials], [it.correct for it in trials], scores, cells, draws)
    result.chance = chance(items)
    return result
