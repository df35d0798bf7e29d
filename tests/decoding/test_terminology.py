"""Tests for syntaxnmt.decoding.terminology: term dictionaries, their matches in a source sentence, seeding from a lexical table."""

from __future__ import annotations

import numpy as np
import pytest

from syntaxnmt.data.subwords import Tokenizer, train_sentencepiece
from syntaxnmt.decoding.terminology import TermDictionary, TermMatch, seed_from_lexicon, source_words, term_constraints
from syntaxnmt.errors import UserError


def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_longest_terms_first_never_overlapping(tmp_path):
    d = TermDictionary.read(_write(tmp_path / "t.tsv", "# a comment\nnew york\tNew York\nyork\tYork\nnew\tneu\n\ncity hall\tRathaus\nhall\tHalle\na b\tX\nb c\tY\n"))
    assert d.matches("i love new york".split()) == [TermMatch(2, 4, "New York")]
    assert d.targets("the new city hall of york".split()) == ["neu", "Rathaus", "York"]
    assert d.targets("hall new york city hall".split()) == ["Halle", "New York", "Rathaus"]  # in sentence order
    assert d.targets("a b c".split()) == ["X"]  # equally long and overlapping: the leftmost
    assert d.targets("b c a b".split()) == ["Y", "X"]
    assert d.targets("york york".split()) == ["York", "York"]  # every occurrence
    assert d.targets([]) == [] and TermDictionary({}).targets(["a"]) == []


def test_source_terms_are_read_as_the_model_reads_its_source(tmp_path):
    """Lowercased and Moses-tokenized with the source tokenizer: "New York," matches "new york ,"."""
    lines = [" ".join(np.random.default_rng(i).choice("the a new york city hall , . 's".split(), 6)) for i in range(200)]
    tok = Tokenizer(train_sentencepiece(lines, tmp_path / "spm.model", vocab_size=40), "en", moses=True, lowercase=True)
    words = source_words(tok)
    d = TermDictionary.read(_write(tmp_path / "t.tsv", "New York,\tNew York ,\nCity  Hall\tRathaus\n"), words)
    assert set(d.terms) == {("new", "york", ","), ("city", "hall")}
    assert d.terms[("new", "york", ",")] == "New York ,"  # the target side is kept as written (spaces collapsed)
    assert d.targets(words("In New York, the City Hall.")) == ["New York ,", "Rathaus"]


def test_terms_become_the_sentences_constraints(tmp_path):
    lines = [" ".join(np.random.default_rng(i).choice("the a new york city hall , . 's rathaus stadt".split(), 6)) for i in range(200)]
    tok = Tokenizer(train_sentencepiece(lines, tmp_path / "spm.model", vocab_size=50), "en", moses=True, lowercase=True)
    words = source_words(tok)
    d = TermDictionary.read(_write(tmp_path / "t.tsv", "city hall\tRathaus\nnew york\tNew York\nthe\tZürich\n"), words)
    sentences = [words("City Hall, New York"), words("a city"), words("the hall")]
    cons = term_constraints(d, tok, sentences[:2], first_line=5)
    assert cons == [[tok.encode("rathaus"), tok.encode("new york")], []]
    with pytest.raises(UserError, match="line 7: term dictionary: constraint 'Zürich' has a piece outside"):
        term_constraints(d, tok, sentences, first_line=5)


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("a\tb\nno tab here\n", 2, "expected 'source term<TAB>target term'"),
        ("a\tb\tc\n", 1, "one tab"),
        ("\tb\n", 1, "both sides non-empty"),
        ("a\tb\n\n# c\nx\t  \n", 4, "both sides non-empty"),
        ("a b\tX\nb\tY\na  b\tZ\n", 3, "already has the target 'X' \\(line 1\\)"),
    ],
)
def test_a_malformed_line_is_one_error_naming_file_and_line(tmp_path, text, line, message):
    path = _write(tmp_path / "terms.tsv", text)
    with pytest.raises(UserError, match=rf"terms.tsv:{line}: .*{message}"):
        TermDictionary.read(path)


def test_a_missing_dictionary_and_a_repeated_entry(tmp_path):
    with pytest.raises(UserError, match="nothing.tsv: term dictionary not found"):
        TermDictionary.read(tmp_path / "nothing.tsv")
    assert TermDictionary.read(_write(tmp_path / "t.tsv", "a\tX\na\tX\n")).terms == {("a",): "X"}  # the same pair twice is fine


def test_seeding_from_a_lexical_table(tmp_path):
    """Each source word's most probable translation at or above the threshold (and with enough links)."""
    table = _write(tmp_path / "lex.tsv", "cat\tKatze\t0.800000\t8\ncat\tKater\t0.200000\t2\ndog\tHund\t0.550000\t11\nthe\tdie\t0.400000\t40\nthe\tder\t0.350000\t35\nrare\tselten\t1.000000\t1\n")
    seeded = seed_from_lexicon(table, 0.5, tmp_path / "terms.tsv")
    assert seeded == [("cat", "Katze", 0.8), ("dog", "Hund", 0.55), ("rare", "selten", 1.0)]
    assert (tmp_path / "terms.tsv").read_text() == "cat\tKatze\ndog\tHund\nrare\tselten\n"
    assert TermDictionary.read(tmp_path / "terms.tsv").targets("the dog and the cat".split()) == ["Hund", "Katze"]
    assert [f for f, _, _ in seed_from_lexicon(table, 0.5, min_count=2)] == ["cat", "dog"]
    assert [f for f, _, _ in seed_from_lexicon(table, 0.3)] == ["cat", "dog", "rare", "the"]
    with pytest.raises(UserError, match=r"bad.tsv:2: expected 'source<TAB>target<TAB>probability"):
        seed_from_lexicon(_write(tmp_path / "bad.tsv", "a\tb\t0.5\t1\na\tb\tlikely\n"), 0.5)
    with pytest.raises(UserError, match="lexical table not found"):
        seed_from_lexicon(tmp_path / "none.tsv", 0.5)
