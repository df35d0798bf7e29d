"""Tests for syntaxnmt.decoding.loading: a checkpoint that carries what it needs, and one-line errors for one that does not fit."""

from __future__ import annotations

import shutil

import yaml
from conftest import run_translate, tiny_tree
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.cli import main

# ---------------------------------------------------------------- self-contained checkpoints


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
    here = run_translate(["exp.yaml"], home, lines)
    assert here.returncode == 0, here.stderr.decode()
    (tmp_path / "elsewhere").mkdir()
    moved = shutil.move(str(home / "run" / "best.pt"), tmp_path / "elsewhere" / "model.pt")
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(home)
    (tmp_path / "other").mkdir()
    there = run_translate(["--checkpoint", str(moved)], tmp_path / "other", lines)
    assert there.returncode == 0, there.stderr.decode()
    assert there.stdout == here.stdout and len(there.stdout.decode().splitlines()) == 2


def test_older_checkpoint_without_tokenizers_names_what_it_needs(trained_run, tmp_path):
    state = load_checkpoint(f"{trained_run.work_dir}/best.pt")
    assert set(state["assets"]) == {"spm_src", "spm_tgt", "tags"}
    del state["assets"]
    state["config"]["data"]["prepared_dir"] = str(tmp_path / "gone")
    old = tmp_path / "old.pt"
    save_checkpoint(old, state)
    proc = run_translate(["--checkpoint", str(old)], tmp_path, "a b\n")
    err = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "Traceback" not in proc.stderr.decode()
    assert err[0].startswith(f"syntaxnmt: error: {old} holds no tokenizers (an older checkpoint)") and "SentencePiece model not found" in err[0]


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
