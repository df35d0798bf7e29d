"""Translating subword ids: sources batched by length and searched, in input order; a context
model reads the previous sentences of each document (a target-side HAN model translates the
documents in waves, :mod:`syntaxnmt.decoding.documents`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.config import MAX_BEAM, DecodeConfig
from syntaxnmt.cpu.pools import batches_side_by_side
from syntaxnmt.data.batches import context_batch, make_batch
from syntaxnmt.data.features import SourceAnnotation
from syntaxnmt.decoding.constraints import BatchConstraints, SentenceConstraints, has_constraints
from syntaxnmt.decoding.documents import DocumentStates, document_waves, sentence_pool
from syntaxnmt.decoding.search import Hypothesis, max_output_lengths, search
from syntaxnmt.decoding.unk import locate_unknown_words
from syntaxnmt.errors import UserError


def translate_ids(
    model: torch.nn.Module,
    sources: Sequence[np.ndarray],
    decode: DecodeConfig,
    device: torch.device,
    *,
    beam: int | None = None,
    nbest: int = 1,
    annotations: Sequence[SourceAnnotation] | None = None,
    contexts: Sequence[Sequence[np.ndarray]] | None = None,
    previous: np.ndarray | None = None,
    progress: bool = False,
    constraints: Sequence[SentenceConstraints] | None = None,
    line_numbers: Sequence[int] | None = None,
) -> list[list[Hypothesis]]:
    """Search every source (subword ids, no EOS) in batches of similar length; results in input order.

    ``annotations`` (one per source) are required when the model uses source features.
    ``contexts`` (one list per source: the previous source sentences of its document, nearest
    first) are read by a context model (``model.document_context``); a 2-to-2 model's output keeps
    the sentence after its last separator. ``previous`` (N, k): the positions among ``sources`` of
    those sentences, nearest first, -1 where there are fewer (``contexts`` is made from it when
    not given). A target-side HAN model needs it: it reads its own translations of the previous
    sentences, so the documents are translated in order -- the first sentence of every document
    in one pass, then the second sentences, and so on, each pass batched across documents.
    """
    beam = decode.beam_size if beam is None else beam
    if not 1 <= beam <= MAX_BEAM:
        raise UserError(f"beam size {beam}: give 1 to {MAX_BEAM}")
    spec = model.feature_spec
    if spec and annotations is None:
        raise UserError(f"this model uses source features ({', '.join(sorted(spec.names))}): the input must be annotated")
    if contexts is None and previous is not None:
        contexts = [[sources[j] for j in row if j >= 0] for row in previous]
    context = getattr(model, "document_context", None) if contexts is not None else None
    if not has_constraints(constraints):
        constraints = None
    elif len(constraints) != len(sources):
        raise ValueError(f"constraints for {len(constraints)} sentences, {len(sources)} sources")
    elif context is not None and context.concat_target:
        raise UserError("constraints with a 2-to-2 concatenation model (model.context: it writes the previous sentences' translation too): translate without --docs, or with a sentence-level or HAN model")
    names = np.arange(len(sources)) if line_numbers is None else np.asarray(line_numbers, dtype=np.int64) - 1
    results: list[list[Hypothesis]] = [None] * len(sources)  # type: ignore[list-item]
    own = context is not None and context.han_target  # the context translations are the model's own
    if own and previous is None:
        raise ValueError("a target-side HAN model translates documents in order: give the positions of the previous sentences (previous=)")
    model.eval()
    states = None
    if context is not None and context.reads_states:
        max_pos = model.cfg.max_positions - 2
        pool, rows = sentence_pool(sources, contexts, previous, context.sentences)
        states = DocumentStates(model, [s[:max_pos] for s in pool], device, decode.batch_size)
        states.encode(np.unique(rows[rows >= 0]))  # every context sentence once
        previous = rows
    with tqdm(total=len(sources), desc="translate", unit="sent", disable=not progress, leave=False) as bar:
        for wave in document_waves(previous, len(sources)) if own else [np.arange(len(sources))]:
            _translate_wave(model, sources, wave, results, decode, device, beam, nbest, annotations, contexts, previous if own or states is not None else None, bar, states, constraints, names)
            if own:  # the decoder states of these translations: the next sentences' context
                read = np.intersect1d(wave, np.unique(previous[previous >= 0]))
                states.decode(read, [results[i][0].tokens for i in read], previous[read])
    return results


def _translate_wave(model, sources, wave: np.ndarray, results: list, decode: DecodeConfig, device, beam: int, nbest: int, annotations, contexts, previous: np.ndarray | None, bar, states: DocumentStates | None = None, constraints=None, names: np.ndarray | None = None) -> None:
    """Search the sources ``wave`` (indices into ``sources``) into ``results``, batched by length;
    a HAN model reads the ``states`` of the previous sentences ``previous`` (for a target-side
    one also the states of its best translations of them), a concatenation model ``contexts``.
    ``constraints[i]``: source i's target phrases; ``names[i]``: its number in errors, from 0."""
    spec = model.feature_spec
    max_pos = model.cfg.max_positions - 2
    context = getattr(model, "document_context", None) if contexts is not None else None
    order = wave[np.argsort([len(sources[i]) for i in wave], kind="stable")[::-1]]

    def search_batch(idx: np.ndarray) -> list[list[Hypothesis]]:
        anns = [_truncate(annotations[i], max_pos) for i in idx] if spec else None
        if states is not None:
            batch = make_batch([sources[i][:max_pos] for i in idx], None, idx.tolist()).to(device)
            batch.context_states = states.gather(previous[idx], context.han_target)
        elif context is not None:
            batch = context_batch(context, [sources[i][:max_pos] for i in idx], None, idx.tolist(), [[c[:max_pos] for c in contexts[i]] for i in idx])
            batch.src = batch.src[:, -(max_pos + 1) :]  # a long context is cut from the left; the current sentence stays
            batch = batch.to(device)
        else:
            batch = make_batch([sources[i][:max_pos] for i in idx], None, idx.tolist(), anns, spec).to(device)
        src_lens = batch.src.ne(0).sum(1) - 1
        max_len = max_output_lengths(src_lens, decode.max_len_a, decode.max_len_b, max_pos)
        if constraints is None:
            hyps = search(model, batch, beam, max_len, decode.min_len, decode.length_penalty, nbest, decode.coverage_penalty, decode.length_penalty_type)
        else:  # the batch's ids name its sentences in the search's errors: their input line numbers
            batch.ids = torch.as_tensor(names[idx], dtype=torch.long)
            cons = constraints.subset(idx) if isinstance(constraints, BatchConstraints) else [constraints[i] for i in idx]
            hyps = search(model, batch, beam, max_len, decode.min_len, decode.length_penalty, nbest, decode.coverage_penalty, decode.length_penalty_type, constraints=cons)
        if decode.unk_replace != "none":
            locate_unknown_words(model, batch, hyps, decode)
        if context is not None and context.concat_target:
            for h in (h for nb in hyps for h in nb):
                current = context.current_part(h.tokens)
                h.context_tokens, h.tokens = h.tokens[: len(h.tokens) - len(current)], current
        return hyps

    def store(idx: np.ndarray, hyps: list[list[Hypothesis]]) -> None:
        for i, h in zip(idx, hyps):
            results[i] = h

    batches = [order[start : start + decode.batch_size] for start in range(0, len(order), decode.batch_size)]
    for idx in batches_side_by_side(search_batch, batches, decode.workers, device, store, decode.processes):
        bar.update(len(idx))


def _truncate(ann: SourceAnnotation, max_pieces: int) -> SourceAnnotation:
    return SourceAnnotation(ann.word_of_piece[:max_pieces], ann.heads, ann.tags) if len(ann.word_of_piece) > max_pieces else ann
