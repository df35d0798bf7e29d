"""End to end: synthetic corpus -> prepare -> train -> translate -> evaluate, through the CLI.

A small Transformer trained for a fixed number of updates (about a minute on two busy CPU cores)
learns the synthetic language pair well: calibrated at 400 updates it scores about 58 BLEU on the
test split with beam 4 (dev BLEU at the last validation about 59). The threshold sits well below
that, so only a broken model, loss, batching or search fails it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from syntaxnmt.cli import main
from syntaxnmt.data.synthetic import write_corpus
from syntaxnmt.textio import read_lines

BLEU_THRESHOLD = 35.0
STEPS = 400


def _config(tmp: Path, corpus: Path) -> dict:
    return {
        "name": "e2e",
        "work_dir": str(tmp / "run"),
        "seed": 1,
        "data": {
            "train_src": str(corpus / "train.src"),
            "train_tgt": str(corpus / "train.tgt"),
            "dev_src": str(corpus / "dev.src"),
            "dev_tgt": str(corpus / "dev.tgt"),
            "src_lang": "en",
            "tgt_lang": "syn",
            "vocab_size": 200,
        },
        "model": {"d_model": 64, "heads": 4, "ffn_dim": 128, "enc_layers": 2, "dec_layers": 2, "dropout": 0.1, "tie_embeddings": "all"},
        "train": {
            "max_tokens": 2048,
            "lr": 3e-3,
            "warmup_steps": 100,
            "max_steps": STEPS,
            "valid_every": STEPS // 2,
            "valid_max_sentences": 50,
            "log_every": 50,
            "tensorboard": False,
            "device": "cpu",
        },
        "decode": {"beam_size": 4, "batch_size": 100},
    }


def _cli(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "syntaxnmt", *argv], input=stdin, capture_output=True, env=env, timeout=600)


@pytest.mark.slow
def test_train_translate_evaluate(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    write_corpus(corpus, n_train=4000, n_dev=100, n_test=200, seed=1)
    cfg_path = tmp_path / "e2e.yaml"
    cfg_path.write_text(yaml.safe_dump(_config(tmp_path, corpus), sort_keys=False), encoding="utf-8")

    for argv in (["prepare", str(cfg_path)], ["train", str(cfg_path)]):
        try:
            main(argv)
        except SystemExit as e:  # pragma: no cover - a failure shows the CLI's message
            pytest.fail(f"syntaxnmt {' '.join(argv)} exited {e.code}: {capsys.readouterr().err}")
    run = tmp_path / "run"
    assert (run / "best.pt").is_file() and (run / "config.yaml").is_file()

    hyp = tmp_path / "test.hyp"
    proc = _cli("translate", str(cfg_path), "-i", str(corpus / "test.src"), "-o", str(hyp))
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()
    hyps = read_lines(hyp)
    assert len(hyps) == len(read_lines(corpus / "test.src")) == 200
    assert sum(bool(h.strip()) for h in hyps) == 200

    proc = _cli("evaluate", "--hyp", str(hyp), "--ref", str(corpus / "test.tgt"))
    assert proc.returncode == 0, proc.stderr.decode()
    report = proc.stdout.decode()
    match = re.search(r"BLEU = (\d+\.\d+)", report)
    assert match, report
    bleu = float(match.group(1))
    print(f"e2e test BLEU {bleu:.2f} (threshold {BLEU_THRESHOLD})")
    assert bleu > BLEU_THRESHOLD, report
