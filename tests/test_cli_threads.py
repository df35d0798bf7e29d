"""Options a command does not have are reported as unknown options (not read as its config), and
the CPU-heavy commands take ``--threads`` and say how many threads they use."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from test_cli import assert_one_line_error, run_cli


@pytest.mark.parametrize(
    "argv",
    [
        ["prepare", "--bogus", "1"],  # was "1: config file not found"
        ["translate", "--threds", "1"],
        ["evaluate", "--threads", "1", "--hyp", "h", "--ref", "r"],
        ["aer", "--gold", "g", "--hyp", "h", "-z"],
    ],
)
def test_an_unknown_option_is_reported_as_unknown(capsys, argv):
    code, _, err = run_cli(capsys, *argv)
    flag = next(a for a in argv[1:] if a in ("--bogus", "--threds", "--threads", "-z"))
    assert_one_line_error(code, err, f"{argv[0]}: unknown option {flag}")
    assert "config file not found" not in err


def test_config_overrides_are_not_unknown_options(capsys, tmp_path):
    code, _, err = run_cli(capsys, "prepare", tmp_path / "none.yaml", "--train.lr", "-1", "--work_dir=x", "--seed", "2", "--data.src_lang", "-x")
    assert_one_line_error(code, err, "none.yaml: config file not found")


@pytest.fixture
def threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_align_sweep_and_score_take_threads_and_say_so(capsys, trained_run, corpus, tmp_path, monkeypatch, threads_restored):
    from syntaxnmt.data.discourse import write_documents

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the inference commands' notes go to a terminal
    ckpt = Path(trained_run.work_dir) / "best.pt"
    src, tgt, gold = corpus["test"]["src"], corpus["test"]["tgt"], corpus["test"]["align"]
    torch.set_num_threads(2)
    code, out, err = run_cli(capsys, "align-sweep", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--gold", gold, "--threads", "1")
    assert code == 0, err
    assert "1 thread as requested" in err and torch.get_num_threads() == 1
    files = write_documents(tmp_path / "docs", n_train_docs=2, n_dev_docs=2, n_test_docs=2, seed=1)
    torch.set_num_threads(2)
    code, out, err = run_cli(capsys, "score", "--checkpoint", ckpt, "--contrastive", files["test"]["contrastive"], "--threads", "1")
    assert code == 0, err
    assert "1 thread as requested" in err and "accuracy" in out


@pytest.mark.parametrize("command", ["translate", "align", "serve"])
def test_translate_align_and_serve_say_how_many_threads(capsys, trained_run, corpus, tmp_path, monkeypatch, threads_restored, command):
    import syntaxnmt.cli as cli

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(cli, "serve", lambda path, **kw: cli.Translator.from_checkpoint([path], device=kw["device"]))
    ckpt = Path(trained_run.work_dir) / "best.pt"
    src, tgt = corpus["test"]["src"], corpus["test"]["tgt"]
    argv = {
        "translate": ["-i", src, "-o", tmp_path / "out"],
        "align": ["--src", src, "--tgt", tgt, "-o", tmp_path / "out"],
        "serve": [],
    }[command]
    code, _, err = run_cli(capsys, command, "--checkpoint", ckpt, "--device", "cpu", "--threads", "1", *argv)
    assert code == 0, err
    assert "device cpu, 1 thread as requested" in err
