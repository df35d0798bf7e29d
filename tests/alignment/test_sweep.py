"""``syntaxnmt align-sweep``: AER of every cross-attention reading from one force-decoding pass."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli import assert_one_line_error, run_cli, write_lines

import syntaxnmt.alignment.sweep as sweep_module
from syntaxnmt.data.links import read_alignments


def _aer_of(capsys, tmp_path, ckpt, src, tgt, gold, *options) -> tuple[float, float, float]:
    """AER, precision, recall (%) of `align OPTIONS` scored by `aer`: what a user would run."""
    hyp = tmp_path / "hyp.align"
    code, _, err = run_cli(capsys, "align", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "-o", hyp, *options)
    assert code == 0, err
    code, out, err = run_cli(capsys, "aer", "--gold", gold, "--hyp", hyp)
    assert code == 0, err
    words = out.split()
    return float(words[1]), float(words[3]), float(words[5])


def test_sweep_equals_align_and_aer_for_every_reading(capsys, trained_run, corpus, tmp_path, monkeypatch):
    ckpt = Path(trained_run.work_dir) / "best.pt"
    src, tgt, gold = corpus["test"]["src"], corpus["test"]["tgt"], corpus["test"]["align"]
    calls = []
    load = sweep_module.load_model

    def counting_load(path, device):
        model, cfg, toks = load(path, device)
        model.register_forward_hook(lambda *_: calls.append(1))
        return model, cfg, toks

    monkeypatch.setattr(sweep_module, "load_model", counting_load)
    out_json = tmp_path / "sweep.json"
    code, out, err = run_cli(capsys, "align-sweep", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--gold", gold, "-o", out_json, "--batch-size", "100")
    assert code == 0, err
    assert len(calls) == 1  # 30 pairs, one batch: one forward pass for all readings
    report = json.loads(out_json.read_text())
    n_layers, n_heads = trained_run.model.dec_layers, trained_run.model.heads
    readings = report["readings"]
    assert len(readings) == 2 * (n_layers * (n_heads + 1) + 1)
    assert {(r["layer"], r["head"], r["shift"]) for r in readings} == {
        (layer, head, shift) for shift in (False, True) for layer, head in [*[(l, h) for l in range(n_layers) for h in [*range(n_heads), None]], (None, None)]
    }
    for r in readings:
        expected = _aer_of(capsys, tmp_path, ckpt, src, tgt, gold, *r["options"].split())
        assert [round(100 * r[k], 2) for k in ("aer", "precision", "recall")] == list(expected), r
    best = min(readings, key=lambda r: r["aer"])
    assert report["best"]["aer"] == best["aer"]
    assert report["best_shifted"]["aer"] == min(r["aer"] for r in readings if r["shift"])
    # The printed table: one row per layer/head with both readings, and the best named.
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    assert len(rows) == n_layers * (n_heads + 1) + 1
    assert f"best: {report['best']['label']} ({report['best']['options']}): AER {100 * best['aer']:.2f}" in out


def test_sweep_one_indexed_gold_and_errors(capsys, trained_run, corpus, tmp_path):
    ckpt = Path(trained_run.work_dir) / "best.pt"
    src, tgt = corpus["test"]["src"], corpus["test"]["tgt"]
    gold = read_alignments(corpus["test"]["align"])
    one = write_lines(tmp_path / "gold1", [" ".join(f"{i + 1}-{j + 1}" for i, j in sorted(s)) for s, _ in gold])
    code, out1, err = run_cli(capsys, "align-sweep", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--gold", one, "--one-indexed-gold")
    assert code == 0, err
    code, out0, err = run_cli(capsys, "align-sweep", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--gold", corpus["test"]["align"])
    assert code == 0 and out0 == out1, err
    short = write_lines(tmp_path / "short", ["0-0"])
    code, _, err = run_cli(capsys, "align-sweep", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--gold", short)
    assert_one_line_error(code, err, str(short), "1 alignment lines")
    code, _, err = run_cli(capsys, "align-sweep", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--gold", one)  # 1-indexed read as 0-indexed
    assert_one_line_error(code, err, str(one), "out of range")
