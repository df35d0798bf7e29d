"""Tests for syntaxnmt.alignment.lexicon: P(e|f) by relative frequency of word links; `syntaxnmt lexicon`."""

from __future__ import annotations

import pytest

from syntaxnmt.alignment.lexicon import lexical_table, write_table
from syntaxnmt.cli import main
from syntaxnmt.decoding.unk import read_best_translations
from syntaxnmt.errors import UserError


def test_relative_frequencies_of_the_links(tmp_path):
    src = ["a b", "a c", "a b"]
    tgt = ["x y", "z w", "x x"]
    links = [{(0, 0), (1, 1)}, {(0, 0), (1, 1)}, {(0, 0), (1, 1)}]
    table = lexical_table(src, tgt, links)
    assert table["a"] == [("x", pytest.approx(2 / 3), 2), ("z", pytest.approx(1 / 3), 1)]
    assert table["b"] == [("x", 0.5, 1), ("y", 0.5, 1)]  # ties: alphabetical
    assert lexical_table(src, tgt, links, top=1)["a"] == [("x", pytest.approx(2 / 3), 2)]
    assert "c" not in lexical_table(src, tgt, links, min_count=2)
    write_table(tmp_path / "lex.tsv", table)
    assert read_best_translations(tmp_path / "lex.tsv") == {"a": "x", "b": "x", "c": "w"}


def test_a_bad_table_is_a_user_error(tmp_path):
    (tmp_path / "bad.tsv").write_text("a\tx\tnot-a-number\n")
    with pytest.raises(UserError, match="bad.tsv:1"):
        read_best_translations(tmp_path / "bad.tsv")
    with pytest.raises(UserError, match="not found"):
        read_best_translations(tmp_path / "missing.tsv")


def test_lexicon_command_from_gold_links(make_config, corpus, tmp_path):
    """The synthetic corpus translates 'apple' as 'ringo' (its gold alignments say so)."""
    cfg = make_config()
    cfg.save(tmp_path / "cfg.yaml")
    main(["lexicon", str(tmp_path / "cfg.yaml"), "-o", str(tmp_path / "lex.tsv"), "--align", str(corpus["train"]["align"])])
    best = read_best_translations(tmp_path / "lex.tsv")
    src_words = {w for line in corpus["train"]["src"].read_text().splitlines() for w in line.split()}
    assert set(best) <= src_words and len(best) > 20
    assert best.get("apple") == "ringo" and best.get("garden") == "niwa"


def test_lexicon_command_with_eflomal(make_config, tmp_path):
    pytest.importorskip("eflomal")
    cfg = make_config()
    cfg.save(tmp_path / "cfg.yaml")
    main(["lexicon", str(tmp_path / "cfg.yaml"), "-o", str(tmp_path / "lex.tsv"), "--top", "2"])
    lines = (tmp_path / "lex.tsv").read_text().splitlines()
    per_word = {}
    for line in lines:
        f, e, p, n = line.split("\t")
        per_word.setdefault(f, []).append(float(p))
    assert max(len(v) for v in per_word.values()) <= 2
    assert all(0 < p <= 1 for v in per_word.values() for p in v)
    assert read_best_translations(tmp_path / "lex.tsv").get("apple") == "ringo"
