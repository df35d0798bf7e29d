"""Readers of contrastive test sets: syntaxnmt's JSON, ContraPro and Voita et al. (2019), on small
hand-written files of each format, and one-line errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import assert_one_line_error

from syntaxnmt.data.contrastive import ContrastiveItem, chance, detect_format, read_contrastive
from syntaxnmt.errors import UserError
from syntaxnmt.runtime import run_command


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def write_text(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


SYNTAXNMT = {
    "format": "syntaxnmt-contrastive", "version": 1,
    "items": [
        {"context_src": ["this dog sleeps .", "a cat runs ."], "context_tgt": ["kono inu ga nemuru katta .", "ara neko ga hashiru katta ."],
         "src": "it sings .", "candidates": ["kare ga utau katta .", "kanojo ga utau katta ."], "correct": 0,
         "phenomenon": "pronoun", "distance": 2, "doc": "test-doc1", "line": 2, "pair": 0},
        {"src": "a b", "candidates": ["x", "y", "z"], "correct": 2},
    ],
}

# Two ContraPro items with the keys of contrapro.json (https://github.com/ZurichNLP/ContraPro).
CONTRAPRO = [
    {"ante distance": 1, "document id": "2009/1/doc.xml.gz", "segment id": 3, "intrasegmental": False,
     "src pronoun": "it", "ref pronoun": "Sie", "src segment": "Play it.", "ref segment": "Spiel sie.",
     "src ante phrase": "a song", "ref ante phrase": "eine Melodie",
     "errors": [{"contrastive": "Spiel ihn.", "replacement": "ihn", "replacement gender": "Masc"},
                {"contrastive": "Spiel es.", "replacement": "es", "replacement gender": "Neut"}]},
    {"ante distance": 0, "document id": "2009/2/doc.xml.gz", "segment id": 1, "intrasegmental": True,
     "src pronoun": "it", "ref pronoun": "er", "src segment": "The dog? It sleeps.", "ref segment": "Der Hund? Er schläft.",
     "errors": [{"contrastive": "Der Hund? Sie schläft.", "replacement": "Sie"}]},
]

# Two groups in the layout of consistency_testsets/*.json (https://github.com/lena-voita/good-translation-wrong-in-context).
VOITA = [
    {"src": "Go , check . _eos Fran , get up . _eos Fran 's coming !",
     "dst": ["Idi . _eos Fren , vstavai . _eos Fren idet !", "Idi . _eos Fren , vstavai . _eos Fran idet !"],
     "true_ind": 0, "ctx_dist": 1},
    {"src": "Stop ! _eos Frank ! _eos Stop !",
     "dst": ["Stoi ! _eos Frank ! _eos Stoite !", "Stoi ! _eos Frank ! _eos Stoi !"], "true_ind": 1, "ctx_dist": 2},
]


# ---- the three formats ----------------------------------------------------------------------


def test_syntaxnmt_format(tmp_path):
    items = read_contrastive(write_json(tmp_path / "contrastive.json", SYNTAXNMT))
    assert items[0] == ContrastiveItem(
        src="it sings .", candidates=("kare ga utau katta .", "kanojo ga utau katta ."), correct=0,
        context_src=("this dog sleeps .", "a cat runs ."), context_tgt=("kono inu ga nemuru katta .", "ara neko ga hashiru katta ."),
        phenomenon="pronoun", distance=2, doc="test-doc1", line=2, pair=0,
    )
    assert items[1] == ContrastiveItem(src="a b", candidates=("x", "y", "z"), correct=2)
    assert items[1].reference == "z"
    assert chance(items) == pytest.approx((1 / 2 + 1 / 3) / 2)
    bare = read_contrastive(write_json(tmp_path / "bare.json", SYNTAXNMT["items"]))
    assert bare == items


def test_contrapro_without_context(tmp_path):
    items = read_contrastive(write_json(tmp_path / "contrapro.json", CONTRAPRO))
    assert items[0] == ContrastiveItem(
        src="Play it.", candidates=("Spiel sie.", "Spiel ihn.", "Spiel es."), correct=0,
        phenomenon="it:sie", distance=1, doc="2009/1/doc.xml.gz", line=2,
    )
    assert items[1].candidates == ("Der Hund? Er schläft.", "Der Hund? Sie schläft.") and items[1].distance == 0
    assert items[1].phenomenon == "it:er" and items[1].context_src == ()
    assert chance(items) == pytest.approx((1 / 3 + 1 / 2) / 2)


def test_contrapro_with_the_context_files_of_json2text_and_context(tmp_path):
    path = write_json(tmp_path / "contrapro.json", CONTRAPRO)
    # --context 2: two lines (oldest first) for each of the 3 + 2 scored rows. Item 2 is segment 1,
    # the first of its document: the script prints a placeholder for lines before it.
    src_rows = [["Hello.", "I hear a song."]] * 3 + [["null", "null"]] * 2
    tgt_rows = [["Hallo.", "Ich höre eine Melodie."]] * 3 + [["null", "null"]] * 2
    ctx_src = write_text(tmp_path / "contrapro.context.en", [line for row in src_rows for line in row])
    ctx_tgt = write_text(tmp_path / "contrapro.context.de", [line for row in tgt_rows for line in row])
    items = read_contrastive(path, context_src=ctx_src, context_tgt=ctx_tgt)
    assert items[0].context_src == ("Hello.", "I hear a song.") and items[0].context_tgt == ("Hallo.", "Ich höre eine Melodie.")
    assert items[1].context_src == () and items[1].context_tgt == ()
    # --context 1 with an empty line at a document start (the README's description)
    one = [dict(item, **{"segment id": 5}) for item in CONTRAPRO]
    path1 = write_json(tmp_path / "one.json", one)
    ctx_src = write_text(tmp_path / "one.en", ["I hear a song."] * 3 + [""] * 2)
    ctx_tgt = write_text(tmp_path / "one.de", ["Ich höre eine Melodie."] * 3 + [""] * 2)
    items = read_contrastive(path1, context_src=ctx_src, context_tgt=ctx_tgt)
    assert [i.context_src for i in items] == [("I hear a song.",), ()]


def test_voita_format(tmp_path):
    items = read_contrastive(write_json(tmp_path / "lex_cohesion_dev.json", VOITA))
    assert items[0] == ContrastiveItem(
        src="Fran 's coming !", candidates=("Fren idet !", "Fran idet !"), correct=0,
        context_src=("Go , check .", "Fran , get up ."), context_tgt=("Idi .", "Fren , vstavai ."),
        phenomenon="lex_cohesion", distance=1,
    )
    assert items[1].correct == 1 and items[1].reference == "Stoi !" and items[1].distance == 2
    ellipsis = [{k: v for k, v in group.items() if k != "ctx_dist"} for group in VOITA]
    items = read_contrastive(write_json(tmp_path / "ellipsis_vp.json", ellipsis), phenomenon=None)
    assert {i.phenomenon for i in items} == {"ellipsis_vp"} and {i.distance for i in items} == {None}


def test_format_detection_and_override(tmp_path):
    assert detect_format(SYNTAXNMT) == "syntaxnmt" and detect_format(CONTRAPRO) == "contrapro" and detect_format(VOITA) == "voita"
    path = write_json(tmp_path / "x.json", VOITA)
    assert read_contrastive(path, format="voita") == read_contrastive(path)
    with pytest.raises(UserError, match="item 1: unknown key 'ctx_dist'"):
        read_contrastive(path, format="syntaxnmt")


# ---- bad files: one line naming the file and the item -----------------------------------------


def bad(tmp_path: Path, data, name: str = "bad.json") -> Path:
    return write_json(tmp_path / name, data)


def item(**changes):
    out = dict(SYNTAXNMT["items"][0], **changes)
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.parametrize("data, fragments", [
    ({"items": []}, ["holds no contrastive items"]),
    ({"items": "x"}, ["expected a JSON list"]),
    ([1, 2], ["item 1", "expected a JSON object"]),
    ([{"foo": 1}], ["cannot tell the contrastive format", "'foo'"]),
    ([item(), item(src=None)], ["item 2", "missing key 'src'"]),
    ([item(candidates=["only one"])], ["item 1", "at least 2"]),
    ([item(candidates=["a", 3])], ["item 1", "candidates[1] must be a string"]),
    ([item(correct=2)], ["item 1", "'correct' is 2", "2 candidates"]),
    ([item(correct=True)], ["item 1", "'correct' must be int", "bool"]),
    ([item(correct="0")], ["item 1", "'correct' must be int"]),
    ([item(distance=-1)], ["item 1", "'distance' must be >= 0"]),
    ([item(context_tgt=["one"])], ["item 1", "'context_tgt' has 1 sentences"]),
    ([item(candidate=["a", "b"])], ["item 1", "unknown key 'candidate'"]),
    ([dict(CONTRAPRO[0], errors=[])], ["item 1", "no contrastive"]),
    ([dict(CONTRAPRO[0], errors=[{"replacement": "x"}])], ["item 1", "errors[0]", "'contrastive'"]),
    ([CONTRAPRO[0], dict(CONTRAPRO[1], **{"ante distance": "far"})], ["item 2", "'ante distance' must be int"]),
    ([VOITA[0], dict(VOITA[1], true_ind=5)], ["item 2", "'true_ind' is 5"]),
    ([dict(VOITA[0], src="Fran 's coming !")], ["item 1", "dst[0] has 3 sentences", "src has 1"]),
    ([dict(VOITA[0], dst=[VOITA[0]["dst"][0], "Other . _eos Fren , vstavai . _eos Fran idet !"])], ["item 1", "dst[1] has another context"]),
])
def test_bad_files_are_one_line_errors(tmp_path, capsys, data, fragments):
    path = bad(tmp_path, data)
    with pytest.raises(SystemExit) as e:
        run_command(lambda: read_contrastive(path))
    assert_one_line_error(e.value.code, capsys.readouterr().err, str(path), *fragments)


def test_unreadable_files_are_one_line_errors(tmp_path, capsys):
    cases = [
        (tmp_path / "missing.json", ["missing.json", "file not found"]),
        (tmp_path / "broken.json", ["broken.json:3:", "invalid JSON"]),
        (tmp_path / "latin1.json", ["latin1.json:1", "invalid UTF-8"]),
    ]
    (tmp_path / "broken.json").write_text('[\n {"src": "a",\n  "candidates" ["x"]}\n]\n', encoding="utf-8")
    (tmp_path / "latin1.json").write_bytes('[{"src": "caf\xe9"}]'.encode("latin-1"))
    for path, fragments in cases:
        with pytest.raises(SystemExit) as e:
            run_command(lambda: read_contrastive(path))
        assert_one_line_error(e.value.code, capsys.readouterr().err, *fragments)


def test_bad_context_files_are_one_line_errors(tmp_path):
    path = write_json(tmp_path / "contrapro.json", CONTRAPRO)
    four = write_text(tmp_path / "four.en", ["a"] * 4)  # 5 scored rows: 4 lines fit no --context N
    five = write_text(tmp_path / "five.de", ["a"] * 5)
    with pytest.raises(UserError, match=r"four\.en has 4 lines but .*five\.de has 5"):
        read_contrastive(path, context_src=four, context_tgt=five)
    with pytest.raises(UserError, match=r"four\.en: 4 lines is not N context lines for each of the 5 scored rows"):
        read_contrastive(path, context_src=four, context_tgt=write_text(tmp_path / "four.de", ["a"] * 4))
    rows = write_text(tmp_path / "rows.en", ["a", "b", "a", "c", "c"])  # item 1's row 2 differs from its row 1
    with pytest.raises(UserError, match=r"rows\.en:2: context of .*contrapro\.json item 1, row 2 differs"):
        read_contrastive(path, context_src=rows, context_tgt=five)
    with pytest.raises(UserError, match="needs both files"):
        read_contrastive(path, context_src=five)
    voita = write_json(tmp_path / "deixis_dev.json", VOITA)
    with pytest.raises(UserError, match="for ContraPro only"):
        read_contrastive(voita, context_src=five, context_tgt=five)
    with pytest.raises(UserError, match="unknown contrastive format 'xml'"):
        read_contrastive(voita, format="xml")


def test_contrapro_scored_with_context_but_without_its_context_files_is_an_error(tmp_path, capsys):
    """Without --context-src/--context-tgt ContraPro items carry no context: `score` (default
    --context true) refuses them before loading a model, instead of a context-free score headed
    "context: true"; --context none is the honest context-free run."""
    from test_cli import run_cli

    path = write_json(tmp_path / "contrapro.json", CONTRAPRO)
    for mode in ([], ["--context", "other-document"]):
        code, _, err = run_cli(capsys, "score", "--checkpoint", tmp_path / "missing.pt", "--contrastive", path, *mode)
        assert_one_line_error(code, err, "contrapro.json: no item carries context", "--context-src and --context-tgt", "--context none")
    code, _, err = run_cli(capsys, "score", "--checkpoint", tmp_path / "missing.pt", "--contrastive", path, "--context", "none")
    assert_one_line_error(code, err, "missing.pt")  # past the check: the checkpoint is what is missing


def test_a_json_set_on_one_line_longer_than_a_text_line_loads(tmp_path):
    """Issue 49: text lines are at most 1 MiB, a JSON file is read whole (with a leading BOM)."""
    items = [{"src": f"sentence {i} " + "x" * 100, "candidates": ["a", "b"], "correct": 0} for i in range(20000)]
    path = tmp_path / "big.json"
    path.write_bytes("\ufeff".encode("utf-8") + json.dumps({"items": items}).encode("utf-8"))
    assert path.stat().st_size > 1 << 21 and len(read_contrastive(path)) == 20000
