"""Batched greedy and beam search over any model with the incremental-decoding interface.

A model provides ``encode(batch)``, ``init_state(encoder_output)``, ``step(tokens, state)`` ->
``(log_probs, state)`` and ``reorder_state(state, index, sources_kept)``, and with ``step_rows =
True`` takes ``step(..., rows=)``: the log-probabilities of those rows only; the Transformer and
later model families share this search. ``sources_kept`` says that ``index`` only moves rows among
the beams of their own sentence (none left the batch), so per-sentence tensors -- the encoder
output and the keys/values computed from it -- need no reordering. On the CPU, a model with
``native_attention`` (``init_state(..., native=True)``: :func:`syntaxnmt.cpu.install` sets it
where the C kernels are built) steps its attentions in the native kernels (:func:`native_state`).

Beam search is vectorized over sentences and beams (no Python loop over hypotheses). Hypotheses
are ranked by ``log P(y|x) / lp(y)``: length normalization, ``lp(y) = |y|**alpha`` or GNMT's
``((5 + |y|) / 6)**alpha`` (:func:`length_penalty`; ``alpha = 0`` ranks by raw log-probability). A hypothesis that emits EOS stays in its beam, frozen, and keeps competing
with its final normalized score; a sentence is done when all its beams are finished, and done
sentences leave the batch. With beam size 1 this is exactly greedy search.

With a coverage penalty β > 0 (Wu et al. 2016, Sec. 7) beams are ranked by
``log P / |y|**alpha + β Σ_j log(min(c_j, 1))``, where c_j is the attention source word j
(EOS and padding left out) has received so far; the model's ``step(..., need_weights=True)``
then provides ``state.last_cross_attention`` (N, S). Greedy search is unaffected (one beam).

Lexical constraints (``constraints``: per sentence, target phrases as token-id lists that every
output must contain) make the search choose its candidates by dynamic beam allocation (Post &
Vilar 2018; Hu et al. 2019): :mod:`syntaxnmt.decoding.constraints`. Without any, nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from syntaxnmt.decoding.constraints import BeamConstraints, SentenceConstraints, StepRows, has_constraints
from syntaxnmt.inputs import BOS, EOS, PAD, Batch


def coverage_score(
    coverage: Tensor,
    beta: float,
    src_pad_mask: Tensor | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """Coverage penalty for beam search (Wu et al. 2016, "Google's Neural Machine Translation
    System", arXiv:1609.08144, Sec. 7)::

        cp(X; Y) = β Σ_j log(min(Σ_i α_ij, 1.0))

    ``coverage`` (..., S) is the attention each source word received so far, Σ_i α_ij (e.g.
    ``attn.sum(-2)`` or a running sum in the beam). Convention: cp <= 0 and is *added* to the
    length-normalized log-probability, s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y); a source word
    attended once or more costs nothing. Padding positions (``src_pad_mask`` (..., S), True at
    padding) are skipped, and coverage is clamped below at ``eps`` so that an unattended word costs
    β·log(eps) instead of -∞. Returns shape (...).
    """
    c = coverage.clamp(min=eps, max=1.0).log()
    if src_pad_mask is not None:
        c = c.masked_fill(src_pad_mask, 0.0)
    return beta * c.sum(dim=-1)


LengthPenaltyType = Literal["power", "gnmt"]


def length_penalty(length: Tensor | float, alpha: float, kind: LengthPenaltyType = "power") -> Tensor | float:
    """The divisor lp(y) of a hypothesis's log-probability (``length`` counts EOS, at least 1):
    ``power``: |y|^α; ``gnmt``: ((5 + |y|) / 6)^α (Wu et al. 2016, arXiv:1609.08144, Eq. 14).
    Both are 1 for α = 0."""
    length = length.clamp(min=1) if isinstance(length, Tensor) else max(float(length), 1.0)
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind != "power":
        raise ValueError(f"unknown length penalty type {kind!r} (power or gnmt)")
    return length**alpha


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS/EOS
    score: float  # normalized log-probability used for ranking
    log_prob: float  # total log-probability, EOS included
    unk_sources: list[int] | None = None  # most attended source piece of each <unk> (decode.unk_replace)
    context_tokens: list[int] | None = None  # 2-to-2: what the model wrote before ``tokens`` (the context's translation and separators)


def max_output_length(src_lengths: Tensor, a: float, b: int, limit: int) -> int:
    return int(min(limit, max(1, int(a * int(src_lengths.max()) + b))))


def max_output_lengths(src_lengths: Tensor, a: float, b: int, limit: int) -> Tensor:
    """``a * |x| + b`` per sentence, within ``[1, limit]`` (so a sentence's output does not depend
    on the other sentences of its batch)."""
    return (a * src_lengths.cpu().double() + b).long().clamp(1, limit)


def _limits(max_len: int | Tensor, n: int) -> Tensor:
    """The longest output of each of the ``n`` sentences, from one int or one per sentence."""
    if isinstance(max_len, Tensor):
        return max_len.cpu().long().view(n)
    return torch.full((n,), int(max_len), dtype=torch.long)


def _forbid(log_probs: Tensor, step: int, min_len: int, max_len: Tensor) -> Tensor:
    """Enforce ``min_len <= length <= max_len`` (length counts subwords before EOS; ``max_len`` one
    per row); never emit PAD or BOS."""
    log_probs[:, PAD] = float("-inf")
    log_probs[:, BOS] = float("-inf")
    if step < min_len:
        log_probs[:, EOS] = float("-inf")
    over = step >= max_len
    if over.any():
        eos = log_probs[over, EOS].clone()
        log_probs[over] = float("-inf")
        log_probs[over, EOS] = eos
    return log_probs


def topk_rows(x: Tensor, k: int, chunk: int = 64) -> tuple[Tensor, Tensor]:
    """``x.topk(k, dim=-1)`` of a matrix (R, V) with a wide V (the next-token log-probabilities),
    about twice as fast on CPU: a row's k largest values lie in the k blocks of ``chunk`` columns
    with the largest maxima, so the top-k runs on those k * chunk columns (and the last, partial
    block) only. Same values and, but for equal values (whose order ``torch.topk`` leaves
    unspecified), same indices."""
    r, v = x.shape
    blocks = v // chunk
    if blocks <= k or x.device.type != "cpu":
        return x.topk(k, dim=-1)
    best = x[:, : blocks * chunk].view(r, blocks, chunk).amax(-1).topk(k, dim=-1).indices.sort(-1).values
    cols = (best[:, :, None] * chunk + torch.arange(chunk, device=x.device)).view(r, -1)
    if blocks * chunk < v:
        cols = torch.cat([cols, torch.arange(blocks * chunk, v, device=x.device).expand(r, -1)], dim=1)
    values, pos = x.gather(1, cols).topk(k, dim=-1)
    return values, cols.gather(1, pos)


def native_state(model, device: torch.device, need_weights: bool = False) -> dict:
    """``init_state``'s keyword for a search on ``device``: on the CPU the model's attentions step
    in the native kernels where it supports that (``native_attention``); not where the search
    reads the attention weights (``need_weights``: the coverage penalty)."""
    return {"native": True} if device.type == "cpu" and not need_weights and getattr(model, "native_attention", False) else {}


def next_candidates(model, tokens: Tensor, state, k: int, step: int, min_len: int, row_limits: Tensor, constrained: StepRows | None = None, **step_kwargs) -> tuple[Tensor, Tensor, object]:
    """The model's step and the ``k`` best next tokens of each row it computed: log-probabilities
    and tokens (R, k) on the model's device, best first, and the new state. ``row_limits`` (R,): each row's
    longest output (:func:`_forbid`'s rules: never PAD or BOS, EOS only from ``min_len`` on and
    nothing else from a row's limit on): ``log_softmax``, :func:`_forbid` and :func:`topk_rows`
    (``max`` for k = 1). ``k`` larger than the vocabulary gives all of it. ``constrained`` (the
    rows' constraint states): their rules apply to the candidates, and their constraint tokens
    follow them (:class:`~syntaxnmt.decoding.constraints.StepRows`)."""
    log_probs, state = model.step(tokens, state, **step_kwargs)
    log_probs = _forbid(log_probs.float(), step, min_len, row_limits.to(log_probs.device))
    if constrained is not None:
        constrained.restrict(log_probs)
    k = min(k, log_probs.size(-1))
    values, index = topk_rows(log_probs, k) if k > 1 else log_probs.max(-1, keepdim=True)
    if constrained is not None:
        values, index = constrained.extend(log_probs, values, index)
    return values, index, state


@torch.no_grad()
def greedy_search(model, batch: Batch, max_len: int | Tensor, min_len: int = 0, alpha: float = 1.0, lp_type: LengthPenaltyType = "power") -> list[list[Hypothesis]]:
    """Pick the most probable token at every step, for all sentences at once (``max_len``: one
    for all or one per sentence)."""
    n = len(batch)
    limits = _limits(max_len, n)
    steps = int(limits.max()) + 1
    tokens = torch.full((n,), BOS, dtype=torch.long, device=batch.src.device)
    out = torch.full((n, steps), PAD, dtype=torch.long)
    total = torch.zeros(n)
    finished = torch.zeros(n, dtype=torch.bool)
    state = model.init_state(model.encode(batch), **native_state(model, batch.src.device))
    for t in range(steps):
        best, tokens, state = next_candidates(model, tokens, state, 1, t, min_len, limits)
        best, tokens = best[:, 0], tokens[:, 0]
        best, tok_cpu = best.cpu(), tokens.cpu()
        total += torch.where(finished, torch.zeros_like(best), best)
        out[:, t] = torch.where(finished, torch.full_like(tok_cpu, PAD), tok_cpu)
        finished |= tok_cpu.eq(EOS)
        if finished.all():
            break
    hyps = []
    for i in range(n):
        seq = out[i].tolist()
        body = seq[: seq.index(EOS)] if EOS in seq else [s for s in seq if s != PAD]
        hyps.append([Hypothesis(body, total[i].item() / length_penalty(len(body) + 1, alpha, lp_type), total[i].item())])
    return hyps


@torch.no_grad()
def beam_search(model, batch: Batch, beam: int, max_len: int | Tensor, min_len: int = 0, alpha: float = 1.0, nbest: int = 1, coverage_penalty: float = 0.0, lp_type: LengthPenaltyType = "power", constraints: Sequence[SentenceConstraints] | None = None) -> list[list[Hypothesis]]:
    """Beam search; returns the ``nbest`` best hypotheses of every sentence, best first (``coverage_penalty``: β;
    ``max_len``: one for all or one per sentence; ``lp_type``: see :func:`length_penalty`).
    ``constraints[i]``: target phrases (token-id lists) every hypothesis of batch row ``i`` contains
    (None or [] for none; :mod:`~syntaxnmt.decoding.constraints`: dynamic beam allocation).
    Constraints longer than a sentence's limit are a UserError naming it; where they
    leave fewer than ``nbest`` hypotheses (a sentence whose limit they fill), its list is shorter."""
    device = batch.src.device
    n, k = len(batch), beam
    limits = _limits(max_len, n)
    nbest = min(nbest, k)
    cons = BeamConstraints.build(constraints, limits, k, batch.ids.tolist()) if has_constraints(constraints) else None
    # Hypotheses are rows i*k .. i*k+k-1 of sentence i. The first step has one live beam per
    # sentence: it runs on the n sentences (and so do the cross-attention's key and value
    # projections of the encoder output, which decoders cache at their first step); the state is
    # expanded to the n * k rows after it.
    state = model.init_state(model.encode(batch), **native_state(model, device, need_weights=bool(coverage_penalty)))
    alive = torch.arange(n)  # sentence ids of the rows still in the batch
    tokens = torch.full((n,), BOS, dtype=torch.long, device=device)  # the first step: one row per sentence
    history = torch.empty(n, k, 0, dtype=torch.long)
    raw = torch.full((n, k), float("-inf"))
    raw[:, 0] = 0.0  # at the first step only one beam is live
    lengths = torch.zeros(n, k)
    done = torch.zeros(n, k, dtype=torch.bool)
    results: list[list[Hypothesis] | None] = [None] * n
    norm = (lambda length: length_penalty(length, alpha, lp_type)) if alpha else (lambda length: torch.ones_like(length))
    partial = getattr(model, "step_rows", False)  # the model's step can skip the finished rows
    frozen = torch.full((k + (cons.width if cons is not None else 0),), float("-inf"))
    frozen[0] = 0.0
    if coverage_penalty:
        n_src = batch.src.size(1)
        no_word = (batch.src.eq(PAD) | (torch.arange(n_src, device=device) == batch.src.ne(PAD).sum(1, keepdim=True) - 1)).cpu()
        coverage = torch.zeros(n, k, n_src)

    for t in range(int(limits.max()) + 1):
        m = len(alive)
        # A finished hypothesis can only be extended by PAD, at no cost: only the open ones'
        # next-token distributions are computed (the output layer, its softmax and top-k are
        # most of a step's work, and about a seventh of the rows are finished ones at beam 5).
        open_rows = (~done).view(-1).nonzero().view(-1)
        rows = None if len(open_rows) == m * k or not partial or t == 0 else open_rows
        step_rows = {} if rows is None else {"rows": rows.to(device)}
        row_limits = limits[alive].repeat_interleave(k)
        # Within a beam every candidate has the same length (and coverage penalty), so a beam's
        # best k continuations by log-probability hold all its candidates for the sentence's
        # top k: rank the k*k of them rather than k*V.
        constrained = {} if cons is None else {"constrained": cons.rows(t, rows, first=t == 0)}
        open_lp, open_tok, state = next_candidates(model, tokens, state, k, t, min_len, row_limits[::k] if t == 0 else row_limits if rows is None else row_limits[rows], **constrained, **step_rows, **({"need_weights": True} if coverage_penalty else {}))
        if t == 0:  # one row per sentence: the other beams' candidates are never live (raw -inf)
            open_lp, open_tok = open_lp.repeat_interleave(k, 0), open_tok.repeat_interleave(k, 0)
        if coverage_penalty:
            attn = state.last_cross_attention.float().cpu()
            attn = (attn.repeat_interleave(k, 0) if t == 0 else attn).view(m, k, n_src)
            coverage = coverage + attn.masked_fill(done[:, :, None], 0.0)  # finished hypotheses keep theirs
            penalty = coverage_score(coverage, coverage_penalty, no_word[alive][:, None, :])  # (m, k)
        open_lp, open_tok = open_lp.cpu(), open_tok.cpu()
        kk = open_lp.size(1)  # k, or the vocabulary's size if smaller
        if rows is None:  # every row computed: the finished ones' (if any) are replaced
            cand_lp = torch.where(done[:, :, None], frozen[:kk], open_lp.view(m, k, kk))
            cand_tok = open_tok.view(m, k, kk).masked_fill(done[:, :, None], PAD)
        else:
            cand_lp = frozen[:kk].repeat(m * k, 1).index_copy_(0, rows, open_lp).view(m, k, kk)
            cand_tok = torch.full((m * k, kk), PAD, dtype=torch.long).index_copy_(0, rows, open_tok).view(m, k, kk)
        cand_raw = raw[:, :, None] + cand_lp
        cand_len = (lengths + (~done).float())[:, :, None].expand_as(cand_raw)
        cand_score = cand_raw / norm(cand_len)
        if coverage_penalty:
            cand_score = cand_score + penalty[:, :, None]
        if cons is None:
            top_score, top_idx = cand_score.view(m, -1).topk(k, dim=-1)
        else:  # dynamic beam allocation; the constraint states move to the chosen candidates
            top_score, top_idx = cons.select(cand_score, cand_tok, done, k)
        src_beam, new_tok = top_idx // kk, cand_tok.view(m, -1).gather(1, top_idx)
        raw = cand_raw.view(m, -1).gather(1, top_idx)
        lengths = cand_len.reshape(m, -1).gather(1, top_idx)
        done = done.gather(1, src_beam) | new_tok.eq(EOS) | raw.isneginf()
        history = torch.cat([history.gather(1, src_beam[:, :, None].expand(-1, -1, history.size(2))), new_tok[:, :, None]], dim=2)
        if coverage_penalty:
            coverage = coverage.gather(1, src_beam[:, :, None].expand(-1, -1, n_src))
        row_index = (torch.arange(m)[:, None] * k + src_beam).view(-1)

        sentence_done = done.all(dim=1) | (t >= limits[alive])
        for i in sentence_done.nonzero().view(-1).tolist():
            order = top_score[i].argsort(descending=True)[:nbest]
            if cons is not None:  # constraints can leave fewer than k finite hypotheses (a forced sentence): not the -inf ones
                order = order[top_score[i, order].isfinite()] if top_score[i, order[0]].isfinite() else order[:1]
            hyps = []
            for j in order.tolist():
                seq = history[i, j].tolist()
                body = seq[: seq.index(EOS)] if EOS in seq else [s for s in seq if s != PAD]
                hyps.append(Hypothesis(body, top_score[i, j].item(), raw[i, j].item()))
            results[int(alive[i])] = hyps
        if sentence_done.all():
            break
        keep = (~sentence_done).nonzero().view(-1)
        if len(keep) < m:  # drop finished sentences from the batch
            alive, raw, lengths, done, history, new_tok = alive[keep], raw[keep], lengths[keep], done[keep], history[keep], new_tok[keep]
            if coverage_penalty:
                coverage = coverage[keep]
            if cons is not None:
                cons.keep(keep)
            row_index = row_index.view(m, k)[keep].view(-1)
        # While no sentence leaves, rows only move among the beams of their own sentence; after
        # the first step, every row comes from its sentence's single row.
        state = model.reorder_state(state, (row_index // k if t == 0 else row_index).to(device), sources_kept=len(keep) == m and t > 0)
        tokens = new_tok.view(-1).to(device)
    return results  # type: ignore[return-value]


def search(model, batch: Batch, beam: int, max_len: int | Tensor, min_len: int = 0, alpha: float = 1.0, nbest: int = 1, coverage_penalty: float = 0.0, lp_type: LengthPenaltyType = "power", constraints: Sequence[SentenceConstraints] | None = None) -> list[list[Hypothesis]]:
    """Greedy search for beam 1, else beam search; with ``constraints`` (see :func:`beam_search`)
    beam search also at beam 1 (greedy search with the constraints' candidates and allocation)."""
    if beam == 1 and nbest == 1 and not has_constraints(constraints):
        return greedy_search(model, batch, max_len, min_len, alpha, lp_type)
    return beam_search(model, batch, beam, max_len, min_len, alpha, nbest, coverage_penalty, lp_type, constraints)
