"""``syntaxnmt align-sweep``: AER of every cross-attention reading from one force-decoding pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_cli import assert_one_line_error, run_cli, write_lines

import syntaxnmt.alignment.sweep as sweep_module
from syntaxnmt.alignment.extract import AttentionReading, model_alignments
from syntaxnmt.alignment.sweep import SweepResult, reading_options
from syntaxnmt.alignment.symmetrize import symmetrize
from syntaxnmt.data.links import AERResult, read_alignments
from syntaxnmt.errors import UserError
from syntaxnmt.textio import read_lines


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
        forced = model.forced_attention
        model.forced_attention = lambda *a, **k: calls.append(1) or forced(*a, **k)
        return model, cfg, toks

    monkeypatch.setattr(sweep_module, "load_model", counting_load)
    out_json = tmp_path / "sweep.json"
    code, out, err = run_cli(capsys, "align-sweep", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--gold", gold, "-o", out_json, "--batch-size", "100")
    assert code == 0, err
    assert len(calls) == 1  # 30 pairs, one batch: one forced pass for all readings
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


def _fake_sweep():
    """An ``align_sweep`` stand-in: in the forward direction (source->target gold as it is) the best
    unshifted reading (layer 0, head 1: AER 0.30) beats the best shifted one (layer 0, head 0: AER
    0.80); in the reverse direction (transposed gold) the shifted one wins (0.25 against 0.50)."""

    def fake(path, src, tgt, gold, device, *, transpose_gold=False, **_):
        unshifted, shifted = (0.50, 0.25) if transpose_gold else (0.30, 0.80)
        result = lambda x: AERResult(x, 1 - x, 1 - x)  # noqa: E731
        rows = [
            (AttentionReading(0, 2), result(0.90)),
            (AttentionReading(0, 1), result(unshifted)),
            (AttentionReading(0, 3, True), result(0.95)),
            (AttentionReading(0, 0, True), result(shifted)),
        ]
        return SweepResult(rows, len(src))

    return fake


@pytest.mark.parametrize(
    ("choice", "forward_reading", "reverse_reading"),
    [
        ("best", AttentionReading(0, 1), AttentionReading(0, 0, True)),
        ("shifted", AttentionReading(0, 0, True), AttentionReading(0, 0, True)),
        ("unshifted", AttentionReading(0, 1), AttentionReading(0, 1)),
    ],
)
def test_self_training_labels_use_the_chosen_teacher_reading(trained_run, corpus, tmp_path, monkeypatch, choice, forward_reading, reverse_reading):
    """Issue 22: with ``reading: best`` each direction's labels come from the better of its best
    unshifted and best shifted dev reading (here unshifted forward, shifted reverse); ``shifted`` /
    ``unshifted`` force one kind. The labels written are those readings of the training corpus,
    symmetrized with grow-diag-final-and, as ``align`` reads them."""
    monkeypatch.setattr(sweep_module, "align_sweep", _fake_sweep())
    ckpt = Path(trained_run.work_dir) / "best.pt"  # read both ways: a stand-in for the reverse twin
    dev = (read_lines(corpus["dev"]["src"]), read_lines(corpus["dev"]["tgt"]), corpus["dev"]["align"], False)
    output, logged = tmp_path / "self.train.align", []
    cpu = torch.device("cpu")
    chosen = sweep_module.self_training_alignments(trained_run, ckpt, ckpt, dev, output, cpu, reading=choice, log=logged.append)
    assert (chosen["forward"]["reading"], chosen["reverse"]["reading"]) == (forward_reading.label, reverse_reading.label)
    assert chosen["forward"]["dev_aer"] == (0.30 if not forward_reading.shift else 0.80)
    assert f"forward model {ckpt}: the best {'shifted' if forward_reading.shift else 'unshifted'} reading {forward_reading.label} (dev AER" in "\n".join(logged)

    src, tgt = read_lines(corpus["train"]["src"]), read_lines(corpus["train"]["tgt"])

    def labels(fwd: AttentionReading, rev: AttentionReading) -> list:
        f = model_alignments(ckpt, src, tgt, cpu, **reading_options(fwd))
        r = model_alignments(ckpt, tgt, src, cpu, **reading_options(rev))
        return [symmetrize(a, {(i, j) for j, i in b}, "grow-diag-final-and") for a, b in zip(f, r)]

    expected = labels(forward_reading, reverse_reading)
    written = read_alignments(output, False, [len(x.split()) for x in src], [len(x.split()) for x in tgt])
    assert [s for s, _ in written] == expected
    # The choice matters: the other kind of reading gives other labels.
    flipped = [AttentionReading(0, 1) if r.shift else AttentionReading(0, 0, True) for r in (forward_reading, reverse_reading)]
    assert labels(*flipped) != expected


def test_self_training_with_an_unknown_teacher_reading_is_a_user_error(trained_run, corpus, tmp_path):
    dev = (read_lines(corpus["dev"]["src"]), read_lines(corpus["dev"]["tgt"]), corpus["dev"]["align"], False)
    ckpt = Path(trained_run.work_dir) / "best.pt"
    with pytest.raises(UserError, match="teacher reading 'sideways': choose from best, shifted, unshifted"):
        sweep_module.self_training_alignments(trained_run, ckpt, ckpt, dev, tmp_path / "x.align", torch.device("cpu"), reading="sideways")
    assert not (tmp_path / "x.align").exists()


@pytest.mark.parametrize("head, expected", [(2, [2]), ("average", [0, 1, 2, 3, None])])
def test_leak_as_null_readings_only_for_heads_with_the_leak_slot(make_config, corpus, head, expected):
    """A leaky model's "leak as null" readings: the heads that have the slot (train.alignment.head),
    and their average only when every head has one (a head without it has no null share)."""
    from syntaxnmt.alignment.sweep import sweep_readings
    from syntaxnmt.model import build_model

    cfg = make_config({"data": {"train_align": str(corpus["train"]["align"])}, "train": {"alignment": {"guided_weight": 1.0, "layer": 0, "head": head, "leaky": True}}})
    readings = sweep_readings(build_model(cfg, 40, 40))
    assert [(r.head, r.shift) for r in readings if r.null] == [(h, s) for s in (False, True) for h in expected]
