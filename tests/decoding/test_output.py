"""Tests for syntaxnmt.decoding.output: raw lines in, one output line per input line."""

from __future__ import annotations

from conftest import run_translate, untrained_checkpoint


def test_empty_and_blank_lines_translate_to_empty_lines(trained_run, corpus, tmp_path):
    sources = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:2]
    alone = run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt"], tmp_path, "\n".join(sources) + "\n")
    mixed = run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt"], tmp_path, f"\n{sources[0]}\n  \t \n{sources[1]}\n")
    assert alone.returncode == 0 and mixed.returncode == 0, mixed.stderr.decode()
    first, second = alone.stdout.decode().splitlines()
    assert mixed.stdout.decode().split("\n") == ["", first, "", second, ""]  # 4 lines, 2 of them empty
    nbest = run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt", "--nbest", "2"], tmp_path, f"{sources[0]}\n\n")
    assert nbest.stdout.decode().splitlines()[-1] == "1 |||  ||| 0.0000"


def test_over_long_line_is_cut_with_a_warning_naming_it(make_config, corpus, tmp_path):
    cfg = make_config({"model": {"max_positions": 24, "positions": "none"}})  # reads 22 subwords
    path = untrained_checkpoint(cfg, tmp_path / "short.pt")
    words = corpus["test"]["src"].read_text(encoding="utf-8").split()
    src = tmp_path / "in.txt"
    src.write_text(f"{' '.join(words[:5])}\n{' '.join(words[:60])}\n", encoding="utf-8")
    proc = run_translate(["--checkpoint", str(path), "-i", str(src), "--beam", "1"], tmp_path, "")
    assert proc.returncode == 0, proc.stderr.decode()
    assert len(proc.stdout.decode().splitlines()) == 2
    warnings = [line for line in proc.stderr.decode().splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"syntaxnmt: warning: {src}:2: ")
    assert warnings[0].endswith("subwords, only the first 22 are translated (the model's max_positions)")


# ---------------------------------------------------------------- constraints and term dictionaries (issue 52)

import re  # noqa: E402

import pytest  # noqa: E402
from test_cli import assert_one_line_error, run_cli  # noqa: E402

from syntaxnmt.api import Translator  # noqa: E402

# target phrases of the synthetic corpus's language (in its vocabulary), some lines with none
PHRASES = [["mado"], [], ["kawa", "onna"], ["isha wo"], [], ["sono mado", "mado"], ["tomo"]]


def _contains(text: str, phrase: str) -> int:
    """How often ``phrase`` occurs in ``text`` starting a word (the search guarantees the phrase's
    pieces; its last word can go on with more pieces: "tomo" in "tomoaaa")."""
    return len(re.findall(rf"(?:^| )(?={re.escape(phrase)})", text))


def _inputs(corpus, tmp_path, blank_at: int | None = 3):
    lines = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[: len(PHRASES)]
    cons = [list(p) for p in PHRASES]
    if blank_at is not None:  # a blank input line has an empty constraints line
        lines.insert(blank_at, "  ")
        cons.insert(blank_at, [])
    src, cfile = tmp_path / "in.txt", tmp_path / "cons.txt"
    src.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    cfile.write_text("".join("\t".join(c) + "\n" for c in cons), encoding="utf-8")
    return lines, cons, src, cfile


@pytest.mark.parametrize("beam", [1, 4])
def test_every_constraint_appears_and_the_command_line_gives_the_api_output(trained_run, corpus, tmp_path, capsys, beam):
    """``translate --constraints FILE`` (fairseq's format, a blank input line with it) writes every
    phrase of its line, as ``Translator.translate(constraints=)`` does, line for line."""
    best = f"{trained_run.work_dir}/best.pt"
    lines, cons, src, cfile = _inputs(corpus, tmp_path)
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", beam, "--constraints", cfile)
    assert code == 0, err
    cli = out.split("\n")[:-1]
    api = [t.text for t in Translator.from_checkpoint(best, device="cpu").translate(lines, beam=beam, constraints=cons)]
    assert cli == api and len(cli) == len(lines) and cli[3] == ""
    for text, phrases in zip(cli, cons):
        for p in set(phrases):
            assert _contains(text, p) >= phrases.count(p), (text, phrases)
    plain = [t.text for t in Translator.from_checkpoint(best, device="cpu").translate(lines, beam=beam)]
    assert any(_contains(t, p) == 0 for t, ps in zip(plain, cons) for p in ps)  # the constraints made a difference


def test_nbest_and_an_ensemble_and_unknown_word_replacement_meet_every_constraint(trained_run, corpus, tmp_path, capsys):
    lines, cons, src, cfile = _inputs(corpus, tmp_path, blank_at=None)
    run = trained_run.work_dir
    code, out, err = run_cli(capsys, "translate", "--checkpoint", f"{run}/best.pt", f"{run}/last.pt", "-i", src, "--beam", 4, "--nbest", 3, "--constraints", cfile, "--decode.unk_replace=copy")
    assert code == 0, err
    rows = [line.split(" ||| ") for line in out.splitlines()]
    assert len(rows) == 3 * len(lines)
    for i, text, _ in rows:
        for p in cons[int(i)]:
            assert _contains(text, p) >= cons[int(i)].count(p), (text, cons[int(i)])


def test_no_constraints_leave_the_output_unchanged(trained_run, corpus, tmp_path, capsys):
    """An all-empty constraints file and a dictionary that matches nothing give the plain output."""
    best = f"{trained_run.work_dir}/best.pt"
    lines, _, src, _ = _inputs(corpus, tmp_path)
    (tmp_path / "none.txt").write_text("\n" * len(lines), encoding="utf-8")
    (tmp_path / "terms.tsv").write_text("zebra\tmado\n", encoding="utf-8")
    outs = []
    for flags in ([], ["--constraints", tmp_path / "none.txt"], ["--terminology", tmp_path / "terms.tsv"]):
        code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", 3, "--nbest", 2, *flags)
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1] == outs[2]


def test_the_terminology_flag_makes_the_dictionarys_target_terms_appear(trained_run, corpus, tmp_path, capsys):
    """Where a source term occurs (as the model reads its source), its target term is written;
    with --constraints too, both (a phrase both require, once)."""
    best = f"{trained_run.work_dir}/best.pt"
    lines, cons, src, cfile = _inputs(corpus, tmp_path, blank_at=None)
    terms = tmp_path / "terms.tsv"
    terms.write_text("# synthetic terms\nwindow\tmado\nthe river\tsono kawa\nfriend\ttomo\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", 4, "--terminology", terms, "--constraints", cfile)
    assert code == 0, err
    outputs = out.splitlines()
    found = 0
    for line, text, given in zip(lines, outputs, cons):
        words = line.lower().split()
        required = list(given)
        for source, target in (("window", "mado"), ("the river", "sono kawa"), ("friend", "tomo")):
            n = sum(words[i : i + len(source.split())] == source.split() for i in range(len(words)))
            found += n
            required += [target] * max(0, n - given.count(target))
        for p in set(required):
            assert _contains(text, p) >= required.count(p), (line, text, required)
    assert found >= 2  # the dictionary's terms occur in the input
    api = Translator.from_checkpoint(best, device="cpu").translate(lines, beam=4, terminology=terms, constraints=cons)
    assert [t.text for t in api] == outputs


def test_constraint_mistakes_are_one_error_line_naming_the_file_and_line(trained_run, corpus, tmp_path, capsys):
    best = f"{trained_run.work_dir}/best.pt"
    lines, cons, src, cfile = _inputs(corpus, tmp_path)
    bad = tmp_path / "bad.txt"

    def error(*flags, text: str | None = None) -> str:
        if text is not None:
            bad.write_text(text, encoding="utf-8")
        code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, *flags)
        assert out == ""
        return assert_one_line_error(code, err)

    assert f"{bad}: 2 lines of constraints for {len(lines)} input lines" in error("--constraints", bad, text="mado\n\n")
    assert f"{bad}:2: constraint 'zzqx" in error("--constraints", bad, text="mado\nzzqx\n" + "\n" * (len(lines) - 2))
    assert f"{bad}:4: constraints for an empty line" in error("--constraints", bad, text="\n\n\nmado\n" + "\n" * (len(lines) - 4))
    # too long for the output length limit: named by its input line (5; the blank line 4 is not searched)
    long = "\n\n\n\n" + " ".join(["sono mado"] * 3) + "\n" + "\n" * (len(lines) - 5)
    assert "sentence 5: its constraints take" in error("--constraints", bad, "--decode.max_len_a=0", "--decode.max_len_b=4", text=long)
    (tmp_path / "t.tsv").write_text("window\n", encoding="utf-8")
    assert "t.tsv:1: expected 'source term<TAB>target term'" in error("--terminology", tmp_path / "t.tsv")
    assert "need the PyTorch search: translate with --engine torch" in error("--engine", "ctranslate2", "--constraints", cfile)


def test_a_two_to_two_concatenation_model_refuses_constraints(trained_run):
    """A 2-to-2 model writes the previous sentences' translation before the sentence's: refused."""
    import numpy as np
    import torch

    from syntaxnmt.data.documents import DocumentContext
    from syntaxnmt.decoding.loading import load_model
    from syntaxnmt.decoding.translate import translate_ids
    from syntaxnmt.errors import UserError

    model, cfg, toks = load_model(f"{trained_run.work_dir}/best.pt", torch.device("cpu"))
    model.document_context = DocumentContext("concat", 1, "both", sep=9)
    ids = [np.asarray(toks.src.encode("a red house ."), dtype=np.int64)] * 2
    with pytest.raises(UserError, match="constraints with a 2-to-2 concatenation model"):
        translate_ids(model, ids, cfg.decode, torch.device("cpu"), contexts=[[], [ids[0]]], constraints=[[toks.tgt.encode("mado")], []])


def test_a_constraint_stays_a_word_of_the_output(trained_run, corpus):
    """A phrase's last piece is not continued into a longer word ("darui" + "iii"): every required
    term is found as words of the output (term accuracy 100 %)."""
    import random

    from syntaxnmt.decoding.terminology import term_accuracy

    src = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()
    tgt = corpus["test"]["tgt"].read_text(encoding="utf-8").splitlines()
    rng = random.Random(0)
    terms = [[rng.choice([w for w in t.split() if len(w) > 3])] for t in tgt]
    translator = Translator.from_checkpoint(f"{trained_run.work_dir}/best.pt", device="cpu")
    for beam in (1, 5):
        out = [t.text for t in translator.translate(src, beam=beam, constraints=terms)]
        assert term_accuracy(out, terms) == (len(src), len(src)), [(t, o) for t, o in zip(terms, out) if term_accuracy([o], [t])[0] == 0]


def test_a_syntax_model_meets_every_constraint_from_its_parses(make_config, parsed_prepared_dir, corpus, tmp_path, capsys):
    """A model with tree relations and tag features (an untrained one: what it writes is noise),
    its input parsed from --src-conllu, writes every phrase of --constraints; the API the same."""
    from conftest import deep_merge, untrained_checkpoint

    extra = deep_merge({"data": {"annotate": "conllu", "prepared_dir": str(parsed_prepared_dir)}}, {"model": {"syntax": {"input_features": ["upos"], "relations": [["tree_distance", "none", "none", "none"]]}}})
    path = untrained_checkpoint(make_config(extra, prepared_dir=parsed_prepared_dir), tmp_path / "syntax.pt")
    lines = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:3]
    blocks = corpus["test"]["conllu"].read_text(encoding="utf-8").strip("\n").split("\n\n")[:3]
    src, conllu, cfile = tmp_path / "in.txt", tmp_path / "in.conllu", tmp_path / "cons.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    conllu.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    cons = [["mado", "sono kawa"], [], ["isha"]]
    cfile.write_text("".join("\t".join(c) + "\n" for c in cons), encoding="utf-8")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--beam", 3, "--constraints", cfile)
    assert code == 0, err
    for text, phrases in zip(out.splitlines(), cons):
        for p in phrases:
            assert _contains(text, p) >= 1, (text, phrases)
    api = Translator.from_checkpoint(path, device="cpu").translate(lines, beam=3, src_conllu=str(conllu), constraints=cons)
    assert [t.text for t in api] == out.splitlines()
