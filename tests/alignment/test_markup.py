"""Markup transfer (``translate --markup``): hand-made cases with known alignments, malformed markup, the command."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from test_cli import assert_one_line_error, run_cli, write_lines

from syntaxnmt.alignment.markup import parse_markup, transfer_markup
from syntaxnmt.data.links import read_alignments
from syntaxnmt.errors import UserError


def transfer(source: str, translation: str, links: set, tgt_tokens: list[str] | None = None) -> str:
    m = parse_markup(source)
    return transfer_markup(m, m.text.split(), translation, tgt_tokens or translation.split(), links)


@pytest.mark.parametrize(
    "source, translation, links, expected",
    [
        # a pair around the word its source word is linked to (reordered)
        ("the <b>red</b> car", "la voiture rouge", {(0, 0), (1, 2), (2, 1)}, "la voiture <b>rouge</b>"),
        # nesting kept, attributes copied as written
        ("<a href='x.html'>the <b>red</b> car</a>", "la voiture rouge", {(0, 0), (1, 2), (2, 1)}, "<a href='x.html'>la voiture <b>rouge</b></a>"),
        # a pair over several words covers the hull of their targets
        ('see <a href="u">the big house</a> now', "voir la grande maison maintenant", {(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)}, 'voir <a href="u">la grande maison</a> maintenant'),
        # one source word to two target words
        ("<i>dogs</i> bark", "les chiens aboient", {(0, 0), (0, 1), (1, 2)}, "<i>les chiens</i> aboient"),
        # self-closing: after the target of the source word before it
        ("hello <br/>world", "bonjour monde", {(0, 0), (1, 1)}, "bonjour <br/>monde"),
        ("hello<br/> world", "monde bonjour", {(0, 1), (1, 0)}, "monde bonjour<br/>"),
        # at the start of the line: before the target of the first linked word after it
        ("<br/>hello world", "monde bonjour", {(0, 1), (1, 0)}, "monde <br/>bonjour"),
        # a pair whose word is aligned to nothing: empty, after the target of the word before it
        ("the <i>very</i> car", "la voiture", {(0, 0), (2, 1)}, "la <i></i>voiture"),
        # an empty pair stays empty
        ("a <b></b>b", "x y", {(0, 0), (1, 1)}, "x <b></b>y"),
        # siblings whose hulls overlap: the later one keeps what the earlier leaves (here nothing: empty, after it)
        ("<b>a</b> <i>b</i>", "x y", {(0, 0), (0, 1), (1, 1)}, "<b>x y</b><i></i>"),
        ("<b>a</b> <i>b c</i>", "x y z", {(0, 0), (0, 1), (1, 1), (2, 2)}, "<b>x y</b> <i>z</i>"),
        # a parent's span is the hull of its words' targets (here also over c's)
        ("<b>a <i>b</i></b> c", "x y z", {(0, 0), (1, 2), (2, 1)}, "<b>x y <i>z</i></b>"),
        # a child aligned outside its parent's (cut) span is cut to it: empty, at the nearest valid place
        ("<b>a</b> <i>b <u>c</u></i>", "x y z", {(0, 0), (0, 1), (1, 2), (2, 1)}, "<b>x y</b> <i>z<u></u></i>"),
        # nothing aligned at all: elements go to the start
        ("<b>a</b> b", "x y", set(), "<b></b>x y"),
        # an empty translation keeps the tags
        ("<br/>", "", set(), "<br/>"),
        # detokenized text: the words are found in it, the text between them kept
        ("<b>bonjour</b> , monde !", "Hello, world!", {(0, 0), (1, 1), (2, 2), (3, 3)}, "<b>Hello</b>, world!"),
        ("bonjour , <b>monde</b> !", "Hello, world!", {(0, 0), (1, 1), (2, 2), (3, 3)}, "Hello, <b>world</b>!"),
    ],
)
def test_hand_made_cases(source, translation, links, expected):
    tokens = re.findall(r"\w+|[^\w\s]", translation) if "," in translation else None
    assert transfer(source, translation, links, tokens) == expected


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("a <b>b", "<b> is never closed"),
        ("a </b> b", "</b> at column 3 closes no open tag"),
        ("<b><i>x</b></i>", "</b> at column 8 closes <i> (tags must nest)"),
        ("3 < 5", "'<' at column 3 starts no tag"),
        ("a <b x='1'>b</b x>", "malformed closing tag"),
        ("<a href=>x</a>", "'<' at column 1 starts no tag"),
    ],
)
def test_malformed_markup(line, fragment):
    with pytest.raises(UserError, match=re.escape(fragment)) as err:
        parse_markup(line, "in.txt:7")
    assert str(err.value).startswith("in.txt:7: ")


def _random_markup(rng: random.Random, words: list[str]) -> str:
    """Words with random, well-nested elements around word ranges and some self-closing tags."""
    out, open_tags = [], []
    for w in words:
        if rng.random() < 0.2:
            out.append("<br/>")
        for _ in range(rng.randint(0, 2)):
            name = rng.choice(["b", "i", "a", "span"])
            open_tags.append(name)
            out.append(f"<{name}>" if name != "a" else '<a href="#">')
        out.append(w + " ")
        while open_tags and rng.random() < 0.4:
            out.append(f"</{open_tags.pop()}>")
    out += [f"</{t}>" for t in reversed(open_tags)]
    return "".join(out)


def test_random_markup_always_nests_and_keeps_the_translation():
    rng = random.Random(0)
    for _ in range(300):
        src_words = [f"s{k}" for k in range(rng.randint(1, 7))]
        tgt_words = [f"t{k}" for k in range(rng.randint(0, 7))]
        source = _random_markup(rng, src_words)
        links = {(i, j) for i in range(len(src_words)) for j in range(len(tgt_words)) if rng.random() < 0.25}
        out = transfer(source, " ".join(tgt_words), links)
        back = parse_markup(out)  # raises if the tags do not nest
        assert back.text.split() == tgt_words
        tags = lambda text: sorted(re.findall(r"<[^>]+>", text))  # noqa: E731
        assert tags(out) == tags(source)


def test_translate_markup(capsys, trained_run, corpus, tmp_path):
    ckpt = Path(trained_run.work_dir) / "best.pt"
    plain = corpus["test"]["src"].read_text().splitlines()[:6]
    marked = []
    for k, line in enumerate(plain):
        w = line.split()
        marked.append({0: f"<b>{w[0]}</b> " + " ".join(w[1:]), 1: " ".join(w[:-1]) + f' <a href="x">{w[-1]}</a>', 2: f"{w[0]} <br/>" + " ".join(w[1:])}.get(k % 3))
    src = write_lines(tmp_path / "in.txt", marked)
    links_path = tmp_path / "out.align"
    code, out, err = run_cli(capsys, "translate", "--checkpoint", ckpt, "-i", src, "--markup", "--alignments", links_path, "--beam", "2", "--batch-size", "4")
    assert code == 0, err
    warnings = err
    code, expected_plain, err = run_cli(capsys, "translate", "--checkpoint", ckpt, "-i", write_lines(tmp_path / "plain.txt", plain), "--beam", "2", "--batch-size", "4")
    assert code == 0, err
    err = warnings
    outputs, translations = out.splitlines(), expected_plain.splitlines()
    links = [s for s, _ in read_alignments(links_path)]
    assert len(outputs) == len(links) == len(marked) and all("<" in o for o in outputs)
    for n, (source, output, translation, lk) in enumerate(zip(marked, outputs, translations, links), start=1):
        assert " ".join(parse_markup(output).text.split()) == translation  # the tags removed, the same translation
        assert output == transfer(source, translation, lk)  # placed by the written links
        emptied = re.search(r"<(b|a)[^>]*></\1>", output) is not None  # an element that enclosed a word lost it
        assert (f"in.txt:{n}: " in err) == emptied, (output, err)  # a warning naming the line then, and only then
    code, _, err = run_cli(capsys, "translate", "--checkpoint", ckpt, "-i", write_lines(tmp_path / "bad.txt", ["fine", "a <b>b"]), "--markup")
    assert_one_line_error(code, err, "bad.txt:2", "<b> is never closed")


def test_an_element_emptied_by_the_alignment_is_a_warning_naming_the_line(capsys):
    """`<a href=...>the house</a>` whose words no target word is aligned to comes out empty: the
    translation keeps it (`<a href="u"></a>`) and a warning names the line and what it enclosed."""
    from syntaxnmt.alignment.markup import transfer_to_translations

    marked = [parse_markup('see <a href="u">the house</a> now'), parse_markup("the <b>red</b> car"), parse_markup("a <br/>b")]
    results = [[("voir maintenant", -1.0)], [("la voiture rouge", -1.0)], [("x y", -1.0)]]
    links = [[{(0, 0), (3, 1)}], [{(0, 0), (1, 2), (2, 1)}], [{(0, 0), (1, 1)}]]
    out = transfer_to_translations(marked, results, links, str, str, where=["in.txt:1", "in.txt:2", "in.txt:3"])
    assert [nb[0][0] for nb in out] == ['voir <a href="u"></a>maintenant', "la voiture <b>rouge</b>", "x <br/>y"]
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "syntaxnmt: warning: in.txt:1: <a href=\"u\"></a> enclosed 'the house' but no word of the translation is aligned to it: "
        "it is empty in the translation (a poorly aligned model? see docs/alignment.md)"
    ]  # the well-placed <b> and the self-closing <br/> (empty in the source too) give none
    transfer_to_translations(marked, results, links, str, str)  # without line names (the server): no warning
    assert capsys.readouterr().err == ""
