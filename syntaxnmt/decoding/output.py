"""Translating raw source lines to detokenized n-best lists: the text pipeline around
:func:`~syntaxnmt.decoding.translate.translate_ids` (empty lines, long lines, document ids,
unknown-word replacement, constraints in words and term dictionaries)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from syntaxnmt.config import Config, DecodeConfig
from syntaxnmt.data.documents import doc_index, previous_sentences
from syntaxnmt.data.prepare import Tokenizers
from syntaxnmt.decoding.constraints import BatchConstraints, continuing_pieces, glue_pieces, phrase_ids
from syntaxnmt.decoding.sources import encode_source_lines, parser_words, warn_cut_lines
from syntaxnmt.decoding.terminology import TermDictionary, source_words
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.decoding.unk import translations_with_replacement
from syntaxnmt.errors import UserError


@dataclass
class Output:
    """One translation of a source line: detokenized text, the search's score (log P / lp(y), as
    hypotheses are ranked), the total log-probability (EOS included) and the output's subword ids."""

    text: str
    score: float
    log_prob: float
    tokens: list[int]
    context_tokens: list[int] | None = None  # 2-to-2: the context part the model wrote before ``tokens``


def without_empty_lines(lines: Sequence[str], translate: Callable[[list[str], list[int]], list[list[Output]]]) -> list[list[Output]]:
    """``translate(kept, numbers)`` of the lines with words (and their 1-based numbers); an empty
    or blank line gets an empty translation with score 0, in its place, without reaching the model."""
    numbers = [n for n, line in enumerate(lines, start=1) if line.strip()]
    out: list[list[Output]] = [[Output("", 0.0, 0.0, [])] for _ in lines]
    for n, nbest in zip(numbers, translate([lines[n - 1] for n in numbers], numbers) if numbers else []):
        out[n - 1] = nbest
    return out


Phrases = Sequence[Sequence[str] | None]
"""Constraints in words: per line, the target phrases its translation must contain (None or [] for none)."""


def line_constraints(toks: Tokenizers, lines: Sequence[str], constraints: Phrases | None = None, terminology: TermDictionary | None = None, *, source_name: str = "<input>", constraints_name: str = "constraints") -> list[list[str]] | None:
    """Every line's target phrases (in words): its given ``constraints`` (one entry per line) and
    the target terms of ``terminology``'s source terms found in it (:meth:`TermDictionary.targets`;
    the union: a phrase both give is required as often as the one that gives it more often). None
    when neither is given. A count of constraints other than the lines', or constraints for an
    empty line (it translates to an empty line), is a :class:`UserError`."""
    if constraints is None and terminology is None:
        return None
    if constraints is not None and len(constraints) != len(lines):
        raise UserError(f"{constraints_name}: constraints for {len(constraints)} lines, {source_name} has {len(lines)} (one entry per line, empty for none)")
    words = source_words(toks.src)
    out = []
    for n, line in enumerate(lines, start=1):
        entry = constraints[n - 1] if constraints is not None else None
        if isinstance(entry, str) or (entry is not None and not all(isinstance(p, str) for p in entry)):
            raise UserError(f"{constraints_name}:{n}: give a list of phrases (strings) per line, not {entry!r}")
        given = list(entry or [])
        terms = terminology.targets(words(line)) if terminology is not None and line.strip() else []
        if given and not line.strip():
            raise UserError(f"{constraints_name}:{n}: constraints for an empty line of {source_name} (it translates to an empty line)")
        union = Counter(given) | Counter(terms)
        out.append([p for p in dict.fromkeys(given + terms) for _ in range(union[p])])
    return out


def translate_outputs(
    model,
    cfg: Config,
    toks: Tokenizers,
    lines: Sequence[str],
    decode: DecodeConfig,
    device: torch.device,
    *,
    conllu: str | None = None,
    source_name: str = "<input>",
    line_numbers: Sequence[int] | None = None,
    docs: Sequence[str] | None = None,
    constraints: Phrases | None = None,
    terminology: TermDictionary | None = None,
    constraints_name: str = "constraints",
    **kw,
) -> list[list[Output]]:
    """Raw source lines to n-best lists of :class:`Output`, best first.

    An empty or blank line translates to an empty line without reaching the model (with
    ``conllu``, the CoNLL-U file holds one sentence per non-empty line, as for ``prepare``); a line
    longer than the model's positions is cut, with a warning naming it (docs/robustness.md).
    ``docs`` (a document id per line): a context model reads the previous lines of each line's
    document (a sentence-level model translates as without them).

    ``constraints`` (one list of target phrases, in words, per line) and ``terminology`` (a term
    dictionary: the target terms of the source terms in a line) make the search write every
    phrase (:func:`line_constraints`, :func:`~syntaxnmt.decoding.constraints.phrase_ids`:
    segmented as the model's training targets; errors name ``constraints_name`` or
    ``source_name`` and the line)."""
    if docs is not None and len(docs) != len(lines):
        raise UserError(f"{len(docs)} document ids for {len(lines)} lines of {source_name} (give one id per line)")
    phrases = line_constraints(toks, lines, constraints, terminology, source_name=source_name, constraints_name=constraints_name)
    if phrases is not None:
        where = constraints_name if terminology is None else source_name if constraints is None else f"{constraints_name} / {source_name}"
        numbers = line_numbers or range(1, len(lines) + 1)
        kw["constraints"] = BatchConstraints([phrase_ids(toks.tgt, p, f"{where}:{n}") for p, n in zip(phrases, numbers)], continuing_pieces(toks.tgt), glue_pieces(toks.tgt))
    return _translate_ids_of_lines(model, cfg, toks, lines, decode, device, conllu, source_name, line_numbers, docs, **kw)


def _translate_ids_of_lines(model, cfg: Config, toks: Tokenizers, lines: Sequence[str], decode: DecodeConfig, device: torch.device, conllu, source_name: str, line_numbers, docs, **kw) -> list[list[Output]]:
    """:func:`translate_outputs` once the constraints are token ids (``kw["constraints"]``, one per line)."""
    if any(not line.strip() for line in lines):
        cons = kw.pop("constraints", None)

        def kept_lines(kept: list[str], numbers: list[int]) -> list[list[Output]]:
            more = {} if cons is None else {"constraints": cons.subset([n - 1 for n in numbers])}
            return _translate_ids_of_lines(model, cfg, toks, kept, decode, device, conllu, source_name, numbers, None if docs is None else [docs[n - 1] for n in numbers], **kw, **more)

        return without_empty_lines(lines, kept_lines)
    sources, annotations = encode_source_lines(cfg, toks, lines, model.feature_spec, conllu, source_name)
    warn_cut_lines(sources, model.cfg.max_positions - 2, source_name, line_numbers)
    contexts = None
    context = getattr(model, "document_context", None)
    if docs is not None and context is not None:
        previous = previous_sentences(doc_index(docs, f"{source_name} (document ids)"), context.sentences)
        contexts = [[sources[j] for j in row if j >= 0] for row in previous]
    else:
        previous = None
    hyps = translate_ids(model, sources, decode, device, annotations=annotations, contexts=contexts, previous=previous, line_numbers=line_numbers, **kw)
    if decode.unk_replace != "none":
        words = parser_words(cfg, lines, conllu, source_name)
        texts = translations_with_replacement(toks, lines, sources, hyps, decode, words)
        return [[Output(text, h.score, h.log_prob, h.tokens, h.context_tokens) for (text, _), h in zip(tnb, nb)] for tnb, nb in zip(texts, hyps)]
    return [[Output(toks.tgt.decode(h.tokens), h.score, h.log_prob, h.tokens, h.context_tokens) for h in nb] for nb in hyps]


def translate_lines(model, cfg: Config, toks: Tokenizers, lines: Sequence[str], decode: DecodeConfig, device: torch.device, **kw) -> list[list[tuple[str, float]]]:
    """Raw source lines to detokenized n-best lists of (translation, score) (:func:`translate_outputs`)."""
    return [[(o.text, o.score) for o in nb] for nb in translate_outputs(model, cfg, toks, lines, decode, device, **kw)]
