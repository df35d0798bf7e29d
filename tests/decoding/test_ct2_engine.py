"""CTranslate2 engine: an exported model searches like ours (the same greedy output) through the same text pipeline."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from test_cli import run_cli

from syntaxnmt.data.prepare import load_tokenizers
from syntaxnmt.decoding.ct2_engine import CT2Engine
from syntaxnmt.decoding.ct2_export import export_ct2
from syntaxnmt.decoding.loading import checkpoint_path, load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.decoding.sources import encode_source_lines
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.inputs import EOS
from syntaxnmt.textio import read_lines
from tests.conftest import parsed_data, untrained_checkpoint

pytest.importorskip("ctranslate2")


def greedy_ours_and_ct2(ckpt, out_dir, lines, **settings):
    """Greedy outputs (subword ids) of our search and of the exported model's, after checking that
    CTranslate2 gives our outputs our log-probabilities (the whole network, not only the argmax)."""
    model, cfg, toks = load_model(ckpt, torch.device("cpu"))
    decode = cfg.decode.model_copy(update={"beam_size": 1, **settings})
    engine = CT2Engine(export_ct2(ckpt, out_dir), threads=1)
    sources, annotations = encode_source_lines(cfg, toks, lines, model.feature_spec)
    ours = [nb[0] for nb in translate_ids(model, sources, decode, torch.device("cpu"), annotations=annotations)]
    theirs = [nb[0].tokens for nb in engine.translate_ids(sources, decode)]
    piece = lambda vocab, ids: [vocab.id_to_piece(int(i)) for i in ids]  # noqa: E731
    scored = engine.translator.score_batch([piece(toks.src, s) for s in sources], [piece(toks.tgt, h.tokens) for h in ours])
    for hyp, result in zip(ours, scored):
        assert sum(result.log_probs) == pytest.approx(hyp.log_prob, abs=1e-3)
    return [h.tokens for h in ours], theirs


def sharpen(ckpt, eos_boost: float) -> None:
    """Sharper output distributions than the initialization's, so that greedy choices are clear,
    and EOS made likely enough that outputs end at different lengths."""
    state = torch.load(ckpt, weights_only=False)
    weights = {k: v * 4 if k.startswith("output") or "tokens" in k else v for k, v in state["model"].items()}
    cfg = state["config"]["model"]
    final = "dec_norm.bias" if cfg["norm"] == "pre" else f"decoder.{cfg['dec_layers'] - 1}.res_ffn.norm.bias"
    eos = weights["output.weight"][EOS]
    weights[final] = weights[final] + eos_boost * eos / eos.norm()
    state["model"] = weights
    torch.save(state, ckpt)


@pytest.mark.parametrize("settings", [{}, {"max_len_a": 0.5, "max_len_b": 1}], ids=["default", "max-length"])
def test_trained_model_same_greedy_output(trained_run, corpus, tmp_path, settings):
    lines = read_lines(corpus["test"]["src"])
    ours, theirs = greedy_ours_and_ct2(checkpoint_path(trained_run, "best"), tmp_path / "ct2", lines, **settings)
    assert any(ours)  # the comparison is about real outputs, not empty ones
    assert theirs == ours
    if settings:  # the settings bind
        default, _ = greedy_ours_and_ct2(checkpoint_path(trained_run, "best"), tmp_path / "ct2-default", lines)
        assert ours != default


@pytest.mark.parametrize(
    "extra, eos_boost",
    [
        ({"model": {"norm": "post", "positions": "learned", "activation": "gelu", "tie_embeddings": "none"}}, 1.5),
        ({"model": {"tie_embeddings": "all", "enc_layers": 2, "dec_layers": 2}}, 2.0),
        ({"model": {"positions": "none", "syntax": {"relations": [["linear"] * 4], "max_relative_position": 3}}}, 1.7),
        ({"model": {"positions": "none", "syntax": {"relations": [["linear"] * 4], "relation_values": False}}}, 0.0),
    ],
    ids=["post-norm-learned-gelu-untied", "tie-all", "shaw", "shaw-keys-only"],
)
def test_architectures_same_greedy_output(make_config, corpus, tmp_path, extra, eos_boost):
    cfg = make_config(extra)
    ckpt = untrained_checkpoint(cfg, tmp_path / "init.pt", seed=3)
    sharpen(ckpt, eos_boost)
    lines = read_lines(corpus["test"]["src"])[:12]
    ours, theirs = greedy_ours_and_ct2(ckpt, tmp_path / "ct2", lines)
    assert len({tuple(o) for o in ours}) > 1
    if eos_boost:  # some outputs end with EOS before their length limit (1.2 |x| + 5), not all at once
        limits = [int(1.2 * len(ids) + 5) for ids in load_tokenizers(cfg).src.encode_batch(lines)]
        assert 0 < sum(len(o) < n for o, n in zip(ours, limits)) < len(lines)
    assert theirs == ours


def test_cli_translate_engine_ctranslate2(trained_run, corpus, tmp_path):
    """``translate --engine ctranslate2`` on an exported folder prints what the PyTorch engine prints."""
    ckpt = checkpoint_path(trained_run, "best")
    out = tmp_path / "ct2"
    run = lambda *a: subprocess.run([sys.executable, "-m", "syntaxnmt", *a], capture_output=True, text=True)  # noqa: E731
    r = run("export-ct2", "--checkpoint", str(ckpt), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "model.bin").is_file()
    src = str(corpus["test"]["src"])
    r_ct2 = run("translate", "--checkpoint", str(out), "--engine", "ctranslate2", "--beam", "1", "-i", src, "-o", str(tmp_path / "ct2.txt"))
    assert r_ct2.returncode == 0, r_ct2.stderr
    model, cfg, toks = load_model(ckpt, torch.device("cpu"))
    lines = read_lines(src)
    ours = [nb[0][0] for nb in translate_lines(model, cfg, toks, lines, cfg.decode.model_copy(update={"beam_size": 1}), torch.device("cpu"))]
    assert read_lines(tmp_path / "ct2.txt") == ours


def test_parsed_corpus_model_reads_the_parsers_words(make_config, corpus, parsed_prepared_dir, tmp_path):
    """A model trained on a parsed corpus gets the parser's words (here from --src-conllu) with either engine."""
    cfg = make_config({"data": parsed_data(corpus)}, prepared_dir=parsed_prepared_dir)
    ckpt = untrained_checkpoint(cfg, tmp_path / "init.pt", seed=5)
    model, cfg, toks = load_model(ckpt, torch.device("cpu"))
    lines, conllu = read_lines(corpus["test"]["src"]), str(corpus["test"]["conllu"])
    decode = cfg.decode.model_copy(update={"beam_size": 1})
    ours = translate_lines(model, cfg, toks, lines, decode, torch.device("cpu"), conllu=conllu)
    theirs = CT2Engine(ckpt, threads=1).translate_outputs(lines, decode, conllu=conllu)
    assert [nb[0].text for nb in theirs] == [nb[0][0] for nb in ours]


def test_word_vocabulary_model_same_greedy_output(make_config, corpus, tmp_path):
    """A word-level vocabulary (``data.vocab: word``, pieces "▁word" and "▁<unk>") exports and searches alike."""
    from syntaxnmt.data.prepare import prepare

    cfg = make_config({"data": {"vocab": "word", "vocab_size": 60}}, prepared_dir=tmp_path / "prepared")
    prepare(cfg, log=lambda *_: None)
    ckpt = untrained_checkpoint(cfg, tmp_path / "init.pt", seed=3)
    sharpen(ckpt, 1.5)
    ours, theirs = greedy_ours_and_ct2(ckpt, tmp_path / "ct2", read_lines(corpus["test"]["src"])[:12])
    assert len({tuple(o) for o in ours}) > 1
    assert theirs == ours


def test_cli_translate_engine_ctranslate2_keeps_empty_lines_in_place(trained_run, corpus, tmp_path, capsys):
    """Through :class:`syntaxnmt.Translator` as for the PyTorch engine: an empty or blank line is
    an empty output line in its place, never searched; ``--nbest 2`` gives it one empty entry of
    score 0; the other lines are those the engine gives them alone."""
    ckpt = checkpoint_path(trained_run, "best")
    out = export_ct2(ckpt, tmp_path / "ct2")
    first, second = read_lines(corpus["test"]["src"])[:2]
    src = tmp_path / "in.txt"
    src.write_text(f"{first}\n{second}\n", encoding="utf-8")
    code, alone, err = run_cli(capsys, "translate", "--checkpoint", out, "--engine", "ctranslate2", "--beam", "1", "-i", src)
    assert code == 0, err
    src.write_text(f"\n{first}\n  \t \n{second}\n", encoding="utf-8")
    code, mixed, err = run_cli(capsys, "translate", "--checkpoint", out, "--engine", "ctranslate2", "--beam", "1", "-i", src)
    assert code == 0, err
    assert mixed.split("\n") == ["", *alone.splitlines()[:1], "", *alone.splitlines()[1:], ""]
    src.write_text(f"{first}\n\n", encoding="utf-8")
    code, nbest, err = run_cli(capsys, "translate", "--checkpoint", out, "--engine", "ctranslate2", "--beam", "2", "--nbest", "2", "-i", src)
    assert code == 0 and nbest.splitlines()[-1] == "1 |||  ||| 0.0000", err


@pytest.mark.parametrize(
    "options, message",
    [
        (["--docs", "DOCS"], "--docs: document context needs --engine torch"),
        (["--checkpoint", "CKPT", "CKPT"], "--engine ctranslate2 translates with one model: give one --checkpoint (ensembles run with --engine torch)"),
        (["--model.hard_attention=decode"], "--model.hard_attention: CTranslate2's attention is softmax (translate with --engine torch)"),
    ],
    ids=["docs", "ensemble", "hard-attention"],
)
def test_what_ctranslate2_cannot_do_is_refused_in_one_line(trained_run, corpus, tmp_path, capsys, options, message):
    ckpt = checkpoint_path(trained_run, "best")
    src = tmp_path / "in.txt"
    src.write_text("\n".join(read_lines(corpus["test"]["src"])[:2]) + "\n", encoding="utf-8")
    docs = tmp_path / "docs.txt"
    docs.write_text("d1\nd1\n", encoding="utf-8")
    options = [{"DOCS": docs, "CKPT": ckpt}.get(o, o) for o in options]
    code, out, err = run_cli(capsys, "translate", "--engine", "ctranslate2", "-i", src, *(options if "--checkpoint" in options else ["--checkpoint", ckpt, *options]))
    assert code == 2 and err == f"syntaxnmt: error: {message}\n" and out == ""


@pytest.mark.parametrize(
    "option, message",
    [
        ("--decode.unk_replace=copy", "decode.unk_replace copy reads our cross-attention: translate with --engine torch"),
        ("--decode.length_penalty_type=gnmt", "decode.length_penalty_type gnmt: CTranslate2 normalizes by |y|^alpha only (power); translate with --engine torch"),
    ],
)
def test_search_settings_ctranslate2_lacks_are_refused(trained_run, corpus, option, message):
    r = subprocess.run(
        [sys.executable, "-m", "syntaxnmt", "translate", "--checkpoint", str(checkpoint_path(trained_run, "best")), "--engine", "ctranslate2", "-i", str(corpus["test"]["src"]), option],
        capture_output=True, text=True,
    )
    assert r.returncode == 2
    assert r.stderr == f"syntaxnmt: error: {message}\n"


def test_batches_side_by_side_follow_decode_workers(trained_run, corpus, tmp_path):
    """Like the PyTorch engine, CTranslate2 searches one batch per thread by default
    (``decode.workers`` 0 -> ``inter_threads`` = threads when there are several batches), one
    batch at a time with ``decode.workers: 1`` or one batch only; the outputs are the same."""
    ckpt = checkpoint_path(trained_run, "best")
    model, cfg, toks = load_model(ckpt, torch.device("cpu"))
    sources, _ = encode_source_lines(cfg, toks, read_lines(corpus["test"]["src"]), model.feature_spec)
    engine = CT2Engine(export_ct2(ckpt, tmp_path / "ct2"), threads=2)
    decode = cfg.decode.model_copy(update={"beam_size": 2, "batch_size": 3})
    assert len(sources) > 3
    side_by_side = engine.translate_ids(sources, decode)
    assert (2, 1) in engine._translators
    one_at_a_time = engine.translate_ids(sources, decode.model_copy(update={"workers": 1}))
    assert (1, 2) in engine._translators
    assert [[h.tokens for h in nb] for nb in side_by_side] == [[h.tokens for h in nb] for nb in one_at_a_time]
    engine.translate_ids(sources[:3], decode)  # one batch: one translator with both threads
    assert set(engine._translators) == {(2, 1), (1, 2)}
