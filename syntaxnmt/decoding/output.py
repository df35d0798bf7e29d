"""Translating raw source lines to detokenized n-best lists: the text pipeline around
:func:`~syntaxnmt.decoding.translate.translate_ids` (empty lines, long lines, document ids,
unknown-word replacement)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from syntaxnmt.config import Config, DecodeConfig
from syntaxnmt.data.documents import doc_index, previous_sentences
from syntaxnmt.data.prepare import Tokenizers
from syntaxnmt.decoding.sources import encode_source_lines, parser_words, warn_cut_lines
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


def translate_outputs(model, cfg: Config, toks: Tokenizers, lines: Sequence[str], decode: DecodeConfig, device: torch.device, *, conllu: str | None = None, source_name: str = "<input>", line_numbers: Sequence[int] | None = None, docs: Sequence[str] | None = None, **kw) -> list[list[Output]]:
    """Raw source lines to n-best lists of :class:`Output`, best first.

    An empty or blank line translates to an empty line without reaching the model (with
    ``conllu``, the CoNLL-U file holds one sentence per non-empty line, as for ``prepare``); a line
    longer than the model's positions is cut, with a warning naming it (docs/robustness.md).
    ``docs`` (a document id per line): a context model reads the previous lines of each line's
    document (a sentence-level model translates as without them)."""
    if docs is not None and len(docs) != len(lines):
        raise UserError(f"{len(docs)} document ids for {len(lines)} lines of {source_name} (give one id per line)")
    if any(not line.strip() for line in lines):
        return without_empty_lines(
            lines, lambda kept, numbers: translate_outputs(model, cfg, toks, kept, decode, device, conllu=conllu, source_name=source_name, line_numbers=numbers, docs=None if docs is None else [docs[n - 1] for n in numbers], **kw)
        )
    sources, annotations = encode_source_lines(cfg, toks, lines, model.feature_spec, conllu, source_name)
    warn_cut_lines(sources, model.cfg.max_positions - 2, source_name, line_numbers)
    contexts = None
    context = getattr(model, "document_context", None)
    if docs is not None and context is not None:
        previous = previous_sentences(doc_index(docs, f"{source_name} (document ids)"), context.sentences)
        contexts = [[sources[j] for j in row if j >= 0] for row in previous]
    else:
        previous = None
    hyps = translate_ids(model, sources, decode, device, annotations=annotations, contexts=contexts, previous=previous, **kw)
    if decode.unk_replace != "none":
        words = parser_words(cfg, lines, conllu, source_name)
        texts = translations_with_replacement(toks, lines, sources, hyps, decode, words)
        return [[Output(text, h.score, h.log_prob, h.tokens, h.context_tokens) for (text, _), h in zip(tnb, nb)] for tnb, nb in zip(texts, hyps)]
    return [[Output(toks.tgt.decode(h.tokens), h.score, h.log_prob, h.tokens, h.context_tokens) for h in nb] for nb in hyps]


def translate_lines(model, cfg: Config, toks: Tokenizers, lines: Sequence[str], decode: DecodeConfig, device: torch.device, **kw) -> list[list[tuple[str, float]]]:
    """Raw source lines to detokenized n-best lists of (translation, score) (:func:`translate_outputs`)."""
    return [[(o.text, o.score) for o in nb] for nb in translate_outputs(model, cfg, toks, lines, decode, device, **kw)]
