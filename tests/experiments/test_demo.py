"""Tests for ``syntaxnmt demo``: it ends with a BLEU however little training its budget allows."""

from __future__ import annotations

import re
from pathlib import Path

from syntaxnmt.cli import main
from syntaxnmt.data.synthetic import write_corpus

TINY = ["--model.d_model=32", "--model.heads=2", "--model.ffn_dim=64", "--model.enc_layers=1", "--model.dec_layers=1", "--train.threads=1", "--train.tensorboard=false", "--decode.beam_size=2"]


def test_demo_on_a_slow_machine_prints_a_bleu_and_a_rerun_recovers(tmp_path, capsys):
    """A budget far too short for the first validation (update 200), as on a machine many times
    slower than a quiet one: the demo still translates and scores, and running it again (budget
    spent) does the same without training further."""
    directory = tmp_path / "demo"
    write_corpus(directory / "corpus", n_train=300, n_dev=20, n_test=10, seed=1)  # the demo reuses a corpus it finds
    for run in range(2):
        main(["demo", "--dir", str(directory), "--minutes", "0.001", *TINY])
        out = capsys.readouterr().out
        assert "test (10 sentences, beam 2): BLEU = " in out, out
        assert re.search(r"stopped \(max_minutes\) at update \d+,", out), out  # 1 or 2 updates: the clock decides
        assert ("resumed" in out) == (run == 1)
        assert f"`syntaxnmt demo --dir {directory} --minutes 0.002` continues this run" in out, out  # how to train more
    assert len((directory / "test.hyp").read_text(encoding="utf-8").splitlines()) == 10
    assert Path(directory / "run" / "best.pt").is_file()
