"""Tests for syntaxnmt.analysis.heads (``syntaxnmt analyze-heads``): relation shares on hand-made
weights, a model with a head forced onto the parent, cross-attention AER as ``align`` reads it."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from test_analysis_export import CPU, MODELS, load_tiny
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.analysis.export import SentenceAttention, attention_for_sentences
from syntaxnmt.analysis.heads import EncoderStats, add_sentences, markdown_report, new_analysis
from syntaxnmt.data.annotations import Parse, read_conllu
from syntaxnmt.textio import read_lines

# w0 <- w1 (root) -> w2 -> w3; w1 is split into two pieces; then </s>
HEADS, DEPREL = [2, 0, 2, 3], ["det", "root", "obj", "amod"]
WORD_OF_PIECE = [0, 1, 1, 2, 3, -1]


def _rows(targets: list[dict[int, float]]) -> np.ndarray:
    """Piece-level rows from {piece: weight} per query piece."""
    w = np.zeros((len(targets), len(WORD_OF_PIECE)))
    for q, row in enumerate(targets):
        for p, v in row.items():
            w[q, p] = v
    assert np.allclose(w.sum(-1), 1)
    return w


def _sentence(heads: list[np.ndarray]) -> SentenceAttention:
    parse = Parse(["w0", "w1", "w2", "w3"], ["X"] * 4, ["X"] * 4, HEADS, DEPREL)
    enc = np.stack(heads)[None].astype(np.float32)  # (1, H, 6, 6)
    pieces = ["▁w0", "▁w", "1", "▁w2", "▁w3", "</s>"]
    cross = np.full((1, 1, 2, 6), 1 / 6, dtype=np.float32)
    return SentenceAttention("w0 w1 w2 w3", "x", True, pieces, parse.words, WORD_OF_PIECE, ["▁x", "</s>"], ["x"], [0, -1], parse, enc, None, cross)


def test_relation_shares_on_hand_made_weights():
    # head 0: every word's highest weight among words is its parent (the root: itself). The parent
    # w1 is split: 0.2 + 0.2 on its pieces beats 0.3 on w3 only at the word level (sum over pieces);
    # </s> gets more than any word, and is left out.
    head0 = _rows([{1: 0.2, 2: 0.2, 4: 0.3, 5: 0.3}, {1: 0.2, 2: 0.25, 5: 0.55}, {1: 0.2, 2: 0.25, 5: 0.55}, {1: 0.35, 5: 0.65}, {3: 0.4, 5: 0.6}, {5: 1.0}])
    # head 1: the left neighbour (w0 has none: it looks at w3)
    head1 = _rows([{4: 1.0}, {0: 1.0}, {0: 1.0}, {1: 0.5, 2: 0.5}, {3: 1.0}, {5: 1.0}])
    # head 2: uniform over pieces -> the split word w1 collects twice the weight of the others
    head2 = np.full((6, 6), 1 / 6)
    stats = EncoderStats(1, 3)
    stats.add(_sentence([head0, head1, head2]))
    shares = stats.shares()
    assert stats.eligible == {"parent": 3, "child": 2, "self": 4, "left": 3, "right": 3}
    # argmax per word -- head 0: w1 w1 w1 w2; head 1: w3 w0 w1 w2; head 2: w1 w1 w1 w1
    np.testing.assert_allclose(shares["parent"][0], [1.0, 2 / 3, 2 / 3])
    np.testing.assert_allclose(shares["child"][0], [0.0, 1 / 2, 0.0])
    np.testing.assert_allclose(shares["self"][0], [1 / 4, 0.0, 1 / 4])
    np.testing.assert_allclose(shares["left"][0], [2 / 3, 1.0, 1 / 3])
    np.testing.assert_allclose(shares["right"][0], [1 / 3, 0.0, 1 / 3])
    for label in ("det", "obj", "amod"):
        assert stats.label_hits[("dep->head", label)][0, 0] == 1 and stats.label_n[label] == 1
    assert stats.label_hits[("head->dep", "det")][0].tolist() == [0, 1, 0]  # w1's argmax is w0 in head 1 only
    assert stats.label_hits[("head->dep", "amod")][0].tolist() == [0, 0, 0]
    assert stats.best_offset("det") == (1, 1.0)
    # </s> weight: mean over words of the word-level weight on </s>; entropy in bits per piece
    assert stats.eos[0, 1] == 0 and math.isclose(stats.eos[0, 2] / stats.words, 1 / 6, rel_tol=1e-6)
    assert math.isclose(stats.entropy[0, 2] / stats.pieces, math.log2(6), rel_tol=1e-6)
    np.testing.assert_allclose(stats.chance_shares()["parent"], 1 / 4)


def _force_parent_head(model, layer: int, head: int, c: float = 200.0) -> None:
    """Constant scores c for ``head`` (queries and keys are their biases); the parent-scaled
    extension multiplies them by a Gaussian around the parent, so the parent wins by far."""
    attn = model.encoder[layer].self_attn
    d = attn.d_head
    with torch.no_grad():
        for proj in (attn.q_proj, attn.k_proj):
            proj.weight.zero_()
            proj.bias.zero_()
            proj.bias[head * d : (head + 1) * d] = math.sqrt(c * math.sqrt(d) / d)


def test_a_head_forced_onto_the_parent_gets_100_percent(corpus, parsed_prepared_dir, tmp_path, monkeypatch):
    import test_analysis_export

    monkeypatch.setitem(test_analysis_export.MODELS, "forced", {"model": {"enc_layers": 1, "syntax": {"parent_scaled": [[False, False, True, False]]}}})
    _, model, cfg, toks, _ = load_tiny("forced", corpus, parsed_prepared_dir, tmp_path)
    _force_parent_head(model, 0, 2)
    lines = read_lines(corpus["test"]["src"])
    parses = read_conllu(corpus["test"]["conllu"])
    # and a sentence with invented words that split into several pieces
    lines.append("the dogxyzqwv sees a blorptastic cat .")
    parses.append(Parse(lines[-1].split(), ["X"] * 7, ["X"] * 7, [2, 3, 0, 6, 6, 3, 3], ["det", "nsubj", "root", "det", "amod", "obj", "punct"]))
    got = attention_for_sentences(model, cfg, toks, lines, parses=parses, device=CPU)
    assert len(got[-1].src_pieces) > len(got[-1].src_words) + 1
    analysis = new_analysis({"checkpoint": "x", "arch": "transformer", "heads": 4, "encoder_layers": 1, "decoder_layers": 1, "syntax": cfg.model.syntax.model_dump(mode="json")})
    add_sentences(analysis, got)
    e = analysis.encoder
    shares = e.shares()
    assert shares["parent"][0, 2] == 1.0
    assert shares["parent"][0, [0, 1, 3]].max() < 0.5
    for label, n in e.label_n.items():
        assert e.label_hits[("dep->head", label)][0, 2] == n, label
    report = markdown_report(analysis)
    assert "| 0 | 2 | parent-scaled | 100.0 |" in report


# ---------------------------------------------------------------- the command


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_analyze_heads_command_and_aer_as_align_reads_it(capsys, corpus, parsed_prepared_dir, tmp_path):
    *_, path = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    src, tgt, conllu, gold = corpus["test"]["src"], corpus["test"]["tgt"], corpus["test"]["conllu"], corpus["test"]["align"]
    out = tmp_path / "report"
    code, text, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "--ref", tgt, "--src-conllu", conllu, "--gold-align", gold, "-o", out, "--device", "cpu")
    assert code == 0, err
    for name in ("report.md", "report-heads.csv", "report-labels.csv", "report-cross.csv", "report.png"):
        assert (tmp_path / name).stat().st_size > 100, name
    assert text == (tmp_path / "report.md").read_text() and "| layer | head | enriched | parent |" in text
    heads = _csv(tmp_path / "report-heads.csv")
    assert len(heads) == 2 * 4 and all(0 <= float(r["parent"]) <= 1 for r in heads)
    labels = _csv(tmp_path / "report-labels.csv")
    assert {r["label"] for r in labels} >= {"det", "nsubj", "obj"} and {r["direction"] for r in labels} == {"dep->head", "head->dep"}
    cross = _csv(tmp_path / "report-cross.csv")
    row = next(r for r in cross if r["layer"] == "1" and r["head"] == "2")
    # the same links as `syntaxnmt align --layer 1 --head 2`, scored by `syntaxnmt aer`
    code, _, err = run_cli(capsys, "align", "--checkpoint", path, "--src", src, "--tgt", tgt, "--layer", "1", "--head", "2", "-o", tmp_path / "h.align", "--device", "cpu")
    assert code == 0, err
    code, aer_text, _ = run_cli(capsys, "aer", "--gold", gold, "--hyp", tmp_path / "h.align")
    assert aer_text.split()[1] == f"{100 * float(row['aer']):.2f}"
    avg = text.split("| all | all (average) | – | – | ")[1].split(" |")[0]
    code, _, err = run_cli(capsys, "align", "--checkpoint", path, "--src", src, "--tgt", tgt, "--layer", "average", "--head", "average", "-o", tmp_path / "a.align", "--device", "cpu")
    code, aer_text, _ = run_cli(capsys, "aer", "--gold", gold, "--hyp", tmp_path / "a.align")
    assert f"{float(aer_text.split()[1]):.1f}" == avg


def test_analyze_heads_on_an_rnn_and_errors(capsys, corpus, parsed_prepared_dir, tmp_path):
    *_, path = load_tiny("rnn", corpus, parsed_prepared_dir, tmp_path)
    src, conllu = corpus["test"]["src"], corpus["test"]["conllu"]
    code, text, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--sentences", "0-9", "-o", tmp_path / "rnn", "--device", "cpu")
    assert code == 0, err
    assert "10 sentences." in text and "Cross-attention" in text and "| layer | head | enriched |" not in text
    assert (tmp_path / "rnn.png").stat().st_size > 100 and not (tmp_path / "rnn-heads.csv").exists()
    code, _, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--gold-align", corpus["test"]["align"], "-o", tmp_path / "x")
    assert_one_line_error(code, err, "--gold-align needs --ref")
    code, _, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "-o", tmp_path / "x")
    assert_one_line_error(code, err, "needs source parses", "--src-conllu")
    code, _, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "--src-conllu", corpus["dev"]["conllu"], "-o", tmp_path / "x")
    assert_one_line_error(code, err, "dev.conllu")


@pytest.mark.parametrize("bad, fragment", [("0-0 99-0", "outside"), ("", None)])
def test_gold_links_outside_the_sentence(capsys, corpus, parsed_prepared_dir, tmp_path, bad, fragment):
    *_, path = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    src, tgt, conllu = corpus["test"]["src"], corpus["test"]["tgt"], corpus["test"]["conllu"]
    gold = tmp_path / "gold"
    gold.write_text("\n".join([bad] + ["0-0"] * 29) + "\n")
    code, text, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "--ref", tgt, "--src-conllu", conllu, "--gold-align", gold, "-o", tmp_path / "r", "--device", "cpu")
    if fragment:
        assert_one_line_error(code, err, str(gold), fragment)
    else:
        assert code == 0 and "AER" in text


def test_several_models_side_by_side(capsys, corpus, parsed_prepared_dir, tmp_path):
    *_, base = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    *_, syn = load_tiny("syntax", corpus, parsed_prepared_dir, tmp_path)
    src, conllu = corpus["test"]["src"], corpus["test"]["conllu"]
    code, text, err = run_cli(capsys, "analyze-heads", "--checkpoint", f"base={base}", "--checkpoint", f"syn={syn}", "-i", src, "--src-conllu", conllu, "--sentences", "0-9", "-o", tmp_path / "cmp", "--device", "cpu")
    assert code == 0, err
    assert text == (tmp_path / "cmp.md").read_text()
    for label in ("base", "syn"):
        heads = _csv(tmp_path / f"cmp-{label}-heads.csv")
        best = max(heads, key=lambda r: float(r["parent"]))
        row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
        star = "*" if best["enriched"] else ""
        assert f"| {100 * float(best['parent']):.1f} ({best['layer']}-{best['head']}{star}) |" in row
    summary = _csv(tmp_path / "cmp-summary.csv")
    assert [r["model"] for r in summary] == ["base", "syn"] and all(r["sentences"] == "10" for r in summary)
    assert "| det |" in text  # the per-label comparison
    code, _, err = run_cli(capsys, "analyze-heads", "--checkpoint", base, "--checkpoint", base, "-i", src, "--src-conllu", conllu, "-o", tmp_path / "x")
    assert_one_line_error(code, err, "labelled alike")


def test_analyze_heads_translates_with_the_checkpoints_beam_by_default(capsys, corpus, parsed_prepared_dir, tmp_path, monkeypatch):
    """Without --ref and --beam, `analyze-heads` searches the translations it analyses with the
    checkpoint's decode.beam_size, as `translate`, `attention` and `plot` do (it was greedy, beam 1)."""
    import syntaxnmt.analysis.heads as heads_module

    monkeypatch.setitem(MODELS, "beam3", {"decode": {"beam_size": 3}})
    *_, cfg, _, path = load_tiny("beam3", corpus, parsed_prepared_dir, tmp_path)
    assert cfg.decode.beam_size == 3
    seen = []
    real = heads_module.attention_for_sentences
    monkeypatch.setattr(heads_module, "attention_for_sentences", lambda *a, **k: seen.append(k["beam"]) or real(*a, **k))
    src, conllu = corpus["test"]["src"], corpus["test"]["conllu"]
    code, _, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--sentences", "0-3", "-o", tmp_path / "r", "--device", "cpu")
    assert code == 0, err
    assert seen == [3]
    code, _, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--sentences", "0-3", "--beam", "2", "-o", tmp_path / "r2", "--device", "cpu")
    assert code == 0, err
    assert seen == [3, 2]
