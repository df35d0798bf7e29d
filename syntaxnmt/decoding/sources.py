"""Raw source lines as a model reads them: the parser's words and parses (spaCy or CoNLL-U),
subword ids and, for a model with source features, the annotations of every sentence."""

from __future__ import annotations

import sys
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from syntaxnmt.config import Config
from syntaxnmt.data.annotations import spacy_parser
from syntaxnmt.data.controls import apply_controls
from syntaxnmt.data.features import SourceAnnotation
from syntaxnmt.data.prepare import Tokenizers, load_tag_vocab, parse_source
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import TAG_NAMES, FeatureSpec


def source_parses(cfg: Config, lines: Sequence[str], conllu: str | None = None, source_name: str = "<input>", why: str = "this model uses parses"):
    """Parses of raw source lines: from a CoNLL-U file (``conllu``) or as the corpus was parsed
    (``data.annotate``); a bad tree is an error. ``why`` starts the message when neither is available."""
    method = "conllu" if conllu else cfg.data.annotate
    if method in ("conllu", "none") and not conllu:
        raise UserError(f"{why}: give the parses of {source_name} with --src-conllu FILE")
    if method == "spacy":
        try:
            spacy_parser(cfg.data.spacy_pipeline)  # loaded once (kept for the parse below)
        except UserError as e:
            raise UserError(f"{why}: give the parses of {source_name} with --src-conllu FILE, or install its spaCy pipeline ({e})") from None
    parse_cfg = cfg.model_copy(deep=True)
    parse_cfg.data.annotate, parse_cfg.data.bad_tree = method, "fail"
    parses, _ = parse_source(parse_cfg, list(lines), source_name, conllu or "", progress=False)
    return parses


def parse_annotations(cfg: Config, parses: Sequence, word_of_piece: Sequence[Sequence[int]], tags=None) -> list[SourceAnnotation]:
    """Source annotations (tree and tag ids) of parsed sentences whose pieces belong to ``word_of_piece``;
    ``tags``: the model's tag vocabularies (:attr:`Tokenizers.tags`; default: the prepared corpus's).
    A control arm's model (``data.structure_control``) reads the parses as its training did
    (:mod:`syntaxnmt.data.controls`): the same random tree or bijection for the same sentence."""
    tags = tags if tags is not None else load_tag_vocab(cfg)
    if tags is None:
        raise UserError(f"{cfg.prepared_dir}: the prepared corpus has no tag vocabulary (tags.json)")
    parses = apply_controls(parses, cfg.data.structure_control, tags)
    return [
        SourceAnnotation(np.asarray(w, dtype=np.int64), np.asarray(p.heads, dtype=np.int64), {t: tags.encode(t, getattr(p, t)) for t in TAG_NAMES})
        for p, w in zip(parses, word_of_piece)
    ]


def parser_words(cfg: Config, lines: Sequence[str], conllu: str | None = None, source_name: str = "<input>") -> list[list[str]] | None:
    """The words of raw source lines as a model trained on a parsed corpus saw them in training:
    the parser's tokens (:func:`syntaxnmt.data.prepare.model_words`), from ``conllu`` when given, else
    from the tokenizer alone of the corpus's spaCy pipeline (no parse). A corpus parsed from
    CoNLL-U files whose pipeline is not installed is taken to be tokenized: its lines' whitespace
    tokens. None for a corpus that was not parsed (the model reads the lines as they are)."""
    if cfg.data.annotate == "none":
        return None
    if conllu:
        return [p.words for p in source_parses(cfg, lines, conllu, source_name)]

    try:
        return spacy_parser(cfg.data.spacy_pipeline).tokenize(lines)
    except (ImportError, UserError) as e:
        if cfg.data.annotate == "conllu":
            tqdm.write(
                f"syntaxnmt: warning: {source_name}: read as whitespace-separated words, since the spaCy pipeline "
                f"'{cfg.data.spacy_pipeline}' cannot split it ({e}); tokenize the input as the CoNLL-U words were, "
                "give --src-conllu, or name an installed pipeline with --data.spacy_pipeline",
                file=sys.stderr,
            )
            return [line.split() for line in lines]
        raise UserError(f"this model was trained on a parser's words: give the parses of {source_name} with --src-conllu FILE, or install its spaCy pipeline ({e})") from None


def encode_source_lines(cfg: Config, toks: Tokenizers, lines: Sequence[str], spec: FeatureSpec, conllu: str | None = None, source_name: str = "<input>") -> tuple[list[np.ndarray], list[SourceAnnotation] | None]:
    """Subword ids of raw source lines and, when the model needs them, their annotations.

    A model with tree relations or tag heads needs the parse of every sentence: from spaCy when
    the corpus was parsed with spaCy, else from a CoNLL-U file (``conllu``) -- missing is an error.
    Any model trained on a parsed corpus reads the parser's words (:func:`parser_words`), so that
    every system of a study sees the same tokens, with or without linguistic features.
    """
    if not spec.needs_parse:
        words = parser_words(cfg, lines, conllu, source_name)
        ids, word_of_piece = toks.src.encode_words(words) if words is not None else toks.src.encode_with_words(list(lines))
        anns = [SourceAnnotation(np.asarray(w), np.zeros(0, dtype=np.int64)) for w in word_of_piece] if spec else None
        return [np.asarray(i, dtype=np.int64) for i in ids], anns
    parses = source_parses(cfg, lines, conllu, source_name, f"this model uses {', '.join(sorted(spec.names - {'bie'}))} from parses")
    ids, words = toks.src.encode_words([p.words for p in parses])
    return [np.asarray(i, dtype=np.int64) for i in ids], parse_annotations(cfg, parses, words, toks.tags)


def warn_cut_lines(sources: Sequence[np.ndarray], limit: int, source_name: str, line_numbers: Sequence[int] | None = None) -> None:
    """A warning on stderr for each source longer than the ``limit`` subwords the model reads (it is cut)."""
    for k, ids in enumerate(sources):
        if len(ids) > limit:
            n = line_numbers[k] if line_numbers is not None else k + 1
            tqdm.write(f"syntaxnmt: warning: {source_name}:{n}: {len(ids)} subwords, only the first {limit} are translated (the model's max_positions)", file=sys.stderr)
