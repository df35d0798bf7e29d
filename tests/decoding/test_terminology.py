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


# ---------------------------------------------------------------- terminology test sets and term accuracy (issue 52)

from test_cli import assert_one_line_error, run_cli  # noqa: E402

from syntaxnmt.decoding.terminology import build_term_set, content_dictionary, eval_words, term_accuracy  # noqa: E402

# A hand-made lexicon table (f, e, P(e|f), c(f,e)): "Dog" and "dog" pool their links; "the" is
# the most linked source word (a function word); "on" is too short, "3" not alphabetic.
TABLE = """\
the\tdie\t0.400000\t40
the\tder\t0.350000\t35
dog\tHund\t0.700000\t7
dog\tdem\t0.300000\t3
Dog\tHund\t1.000000\t3
ball\tBall\t0.900000\t9
ball\tball\t0.100000\t1
man\tMann\t0.450000\t9
man\tmann\t0.100000\t2
on\tauf\t0.900000\t18
3\tdrei\t1.000000\t9
park\tPark\t0.500000\t4
"""


def test_the_content_dictionary_pools_case_and_keeps_content_words_above_the_thresholds(tmp_path):
    table = _write(tmp_path / "lex.tsv", TABLE)
    # links c(f): the 100, on 20, man 20, dog 10 + Dog 3, ball 10, 3 9, park 8
    # dog: (7 + 3) / 13 = 0.77 hund; ball: 10 / 10 ball; man: 11 / 20 = 0.55 mann; park: 4 / 8, 4 links (< 5)
    assert content_dictionary(table, threshold=0.5, min_count=5, skip_frequent=1) == {"ball": "ball", "dog": "hund", "man": "mann"}
    assert content_dictionary(table, threshold=0.6, min_count=4, skip_frequent=1) == {"ball": "ball", "dog": "hund"}
    assert content_dictionary(table, threshold=0.5, min_count=4, skip_frequent=0) == {"ball": "ball", "dog": "hund", "man": "mann", "park": "park"}
    assert content_dictionary(table, threshold=0.3, min_count=1, skip_frequent=0)["the"] == "die"  # 0.4: why the most linked words are left out
    assert content_dictionary(table, threshold=0.5, min_count=1, skip_frequent=3) == {"ball": "ball", "dog": "hund", "park": "park"}  # the, man, on: the most linked


def test_a_term_set_keeps_the_terms_the_reference_has_as_it_writes_them(tmp_path):
    dictionary = {"dog": "hund", "ball": "ball", "man": "mann", "red ball": "roter ball"}
    sources = ["A dog plays with a ball.", "The man and the dog.", "Nothing here.", "A dog, a dog and a red ball!"]
    refs = ["Ein Hund spielt mit einem Ball.", "Der Mann und die Katze.", "Hier nichts.", "Ein Hund, noch ein Hund und ein roter Ball!"]
    assert build_term_set(dictionary, sources, refs) == [["Hund", "Ball"], ["Mann"], [], ["Hund", "Hund", "roter Ball"]]
    assert eval_words("Ein Hund, noch ein HUND!") == ["ein", "hund", ",", "noch", "ein", "hund", "!"]


def test_term_accuracy_counts_every_required_occurrence_once():
    terms = [["Hund", "Ball"], ["Mann"], [], ["Hund", "Hund", "roter Ball"]]
    hyps = ["Ein hund spielt mit dem Bälle.", "Der Mannschaft.", "x", "Ein Hund, ein roter Ball, ein Hund und ein Hund."]
    assert term_accuracy(hyps, terms) == (1 + 0 + 0 + 3, 2 + 1 + 0 + 3)  # "Bälle", "Mannschaft": not the terms; a third Hund counts nothing
    with pytest.raises(UserError, match="2 output lines for 4 lines of terms"):
        term_accuracy(hyps[:2], terms)


def test_terminology_commands_seed_build_and_evaluate(tmp_path, capsys):
    """``terminology --from-lexicon``, ``terminology-set`` and ``evaluate-terms`` on hand-made files."""
    table = _write(tmp_path / "lex.tsv", TABLE)
    code, out, err = run_cli(capsys, "terminology", "--from-lexicon", table, "--threshold", "0.6", "-o", tmp_path / "dict.tsv")
    assert code == 0, err
    assert (tmp_path / "dict.tsv").read_text() == "3\tdrei\nDog\tHund\nball\tBall\ndog\tHund\non\tauf\n"
    src = _write(tmp_path / "test.en", "A dog plays with a ball.\nThe man and the dog.\nNothing here.\n")
    ref = _write(tmp_path / "test.de", "Ein Hund spielt mit einem Ball.\nDer Mann und die Katze.\nHier nichts.\n")
    code, out, err = run_cli(capsys, "terminology-set", "--lexicon", table, "--src", src, "--ref", ref, "-o", tmp_path / "set", "--skip-frequent", "1")
    assert code == 0, err
    assert "3 terms in terms.tsv; 2 of 3 lines with a term, 3 term occurrences" in out
    assert (tmp_path / "set" / "terms.tsv").read_text() == "ball\tball\ndog\thund\nman\tmann\n"
    assert (tmp_path / "set" / "constraints.txt").read_text() == "Hund\tBall\nMann\n\n"
    plain = _write(tmp_path / "plain.de", "Ein Hund spielt mit einem Spielzeug.\nDer Kerl und die Katze.\nHier nichts.\n")
    code, out, err = run_cli(capsys, "evaluate-terms", "--ref", ref, "--constraints", tmp_path / "set" / "constraints.txt", "--hyp", f"plain={plain}", f"reference={ref}")
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:3]}
    assert rows["plain"][2:5] == ["33.33", "%", "(1/3)"] and rows["reference"][1:5] == ["100.00", "100.00", "%", "(3/3)"]
    assert "nrefs:1" in out.splitlines()[-1]
    code, _, err = run_cli(capsys, "evaluate-terms", "--ref", ref, "--constraints", tmp_path / "set" / "constraints.txt", "--hyp", "plain")
    assert_one_line_error(code, err, "--hyp plain: give NAME=FILE")
    _write(tmp_path / "short.de", "x\n")
    code, _, err = run_cli(capsys, "evaluate-terms", "--ref", ref, "--constraints", tmp_path / "set" / "constraints.txt", "--hyp", f"s={tmp_path / 'short.de'}")
    assert_one_line_error(code, err, "short.de: 1 lines for 3 references")
