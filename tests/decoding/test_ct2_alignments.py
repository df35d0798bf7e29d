"""Word alignments through CTranslate2: ``export-ct2`` names the layer and head the model aligns
with (its guided head), CTranslate2 returns exactly that attention (the head permuted to the
front, translations unchanged), and ``translate --engine ctranslate2 --alignments`` writes the
links the PyTorch path writes for the same outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_cli import assert_one_line_error, run_cli

import syntaxnmt
from syntaxnmt.alignment.extract import AttentionReading, TranslationPairs, configured_reading, force_decode
from syntaxnmt.data.batches import make_batch
from syntaxnmt.decoding.ct2_engine import CT2Engine
from syntaxnmt.decoding.ct2_export import CONFIG_FILE, ct2_alignment, export_ct2, head_order
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.textio import read_lines

pytest.importorskip("ctranslate2")

GUIDED = {"guided_weight": 1.0, "layer": -1, "head": 1}


@pytest.fixture(scope="module")
def guided(corpus, tmp_path_factory) -> Path:
    """A tiny model trained (24 updates) with guided alignment on head 1 of its last decoder layer."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from conftest import deep_merge, quiet, tiny_tree

    from syntaxnmt.config import load_config
    from syntaxnmt.data.prepare import prepare
    from syntaxnmt.training.train import train

    tmp = tmp_path_factory.mktemp("guided")
    tree = deep_merge(tiny_tree(corpus, tmp / "run", tmp / "prepared"), {"data": {"train_align": str(corpus["train"]["align"])}, "model": {"dec_layers": 2}, "train": {"alignment": GUIDED, "max_steps": 24}})
    cfg = load_config(None, tree)
    prepare(cfg, log=quiet)
    train(cfg, log=quiet)
    return tmp / "run" / "best.pt"


@pytest.fixture(scope="module")
def exported(guided, tmp_path_factory) -> Path:
    return export_ct2(guided, tmp_path_factory.mktemp("guided_ct2") / "ct2")


def test_the_export_names_the_guided_layer_and_head(exported, guided):
    written = json.loads((exported / CONFIG_FILE).read_text(encoding="utf-8"))
    assert written["alignment"] == {"layer": 1, "head": 1, "label": "layer 1, head 1"}
    _, cfg, _ = load_model(guided, torch.device("cpu"))
    assert configured_reading(cfg) == AttentionReading(-1, 1)  # the reading the PyTorch path takes: the same layer and head


@pytest.mark.parametrize(
    "alignment, expected",
    [
        ({}, "averages every decoder layer"),
        ({"layer": 0}, {"layer": 0, "head": None, "label": "layer 0, heads averaged"}),
        ({"layer": -2, "head": -1}, {"layer": 0, "head": 3, "label": "layer 0, head 3"}),
        ({"guided_weight": 1.0, "layer": 1, "head": 0, "full_context": True}, "full-context pass of layer 1"),
    ],
)
def test_what_ct2_can_return_as_alignment(make_config, corpus, alignment, expected):
    got = ct2_alignment(make_config({"data": {"train_align": str(corpus["train"]["align"])}, "model": {"dec_layers": 2}, "train": {"alignment": alignment}}))
    if isinstance(expected, str):
        assert set(got) == {"unsupported"} and expected in got["unsupported"]
    else:
        assert got == expected


def test_head_order_moves_one_head_to_the_front():
    assert head_order(3, 2, 2).tolist() == [4, 5, 0, 1, 2, 3]
    assert head_order(3, 2, 0).tolist() == [0, 1, 2, 3, 4, 5]


def _native_attention(model, reading, src_ids, tgt_ids):
    batch = make_batch([np.asarray(s, dtype=np.int64) for s in src_ids], [np.asarray(t, dtype=np.int64) for t in tgt_ids], list(range(len(src_ids))))
    weights = reading.attention(force_decode(model, batch, [reading])).float().numpy()
    return [w[: len(t), : len(s) + 1] for w, s, t in zip(weights, src_ids, tgt_ids)]


@pytest.mark.parametrize("alignment", [GUIDED, {"layer": 0}, {"layer": 1, "head": 3}], ids=["guided-head-1", "layer-0-heads-averaged", "layer-1-head-3"])
def test_ct2_returns_the_attention_the_pytorch_model_is_read_from(alignment, guided, corpus, tmp_path):
    """Exactness where the math must agree: on the same forced pieces, CTranslate2's alignment
    attention is the PyTorch model's configured reading (the head moved to the front, the layer's
    heads averaged), to float32 rounding; and the permuted export translates as before."""
    state = torch.load(guided, weights_only=False)
    state["config"]["train"]["alignment"] = {**state["config"]["train"]["alignment"], **{"layer": "average", "head": "average"}, **alignment}
    ckpt = tmp_path / "model.pt"
    torch.save(state, ckpt)
    model, cfg, toks = load_model(ckpt, torch.device("cpu"))
    engine = CT2Engine(export_ct2(ckpt, tmp_path / "ct2"), threads=1)
    lines = read_lines(corpus["test"]["src"])[:12]
    refs = read_lines(corpus["test"]["tgt"])[:12]
    pairs = TranslationPairs.encode(toks, lines, [[r] for r in refs], cfg.model.max_positions - 1)
    src_ids = [pairs.source[0][k] for k in pairs.source_of()]
    tgt_ids = pairs.targets()[0]
    theirs = engine.forced_attention(src_ids, tgt_ids, batch_size=5)
    ours = _native_attention(model, configured_reading(cfg), src_ids, tgt_ids)
    for a, b, s, t in zip(theirs, ours, src_ids, tgt_ids):
        assert a.shape == (len(t), len(s))  # CTranslate2 leaves out the column of the source's EOS
        np.testing.assert_allclose(a, b[:, :-1], atol=2e-5)
    ours_text = [t.text for t in syntaxnmt.Translator.from_checkpoint(ckpt, device="cpu").translate(lines, beam=1)]
    assert [t.text for t in syntaxnmt.Translator.from_checkpoint(tmp_path / "ct2", device="cpu", engine="ctranslate2", threads=1).translate(lines, beam=1)] == ours_text


def _links(text: str) -> list[set[str]]:
    return [set(line.split()) for line in text.splitlines()]


def test_translate_with_ctranslate2_writes_the_native_links(guided, exported, corpus, tmp_path, capsys):
    """The parity figure: ``translate --engine ctranslate2 --alignments`` against ``--engine torch
    --alignments`` on the same input, greedy (the same outputs) and with a beam of 3 and 2-best
    lists (compared where the outputs agree); the API gives the command's links."""
    src = corpus["test"]["src"]
    lines = read_lines(src)
    shares = []
    for flags in (["--beam", "1"], ["--beam", "3", "--nbest", "2"]):
        out = {}
        for engine, ckpt in (("torch", guided), ("ctranslate2", exported)):
            align = tmp_path / f"{engine}{len(flags)}.align"
            code, text, err = run_cli(capsys, "translate", "--checkpoint", ckpt, "--engine", engine, "-i", src, "--alignments", align, *flags)
            assert code == 0, err
            out[engine] = (text.splitlines(), _links(align.read_text(encoding="utf-8")))
        (torch_text, torch_links), (ct2_text, ct2_links) = out["torch"], out["ctranslate2"]
        assert len(ct2_links) == len(ct2_text) == len(torch_text) and any(ct2_links)
        for line in ct2_links:  # Pharaoh: i-j with i a source word and j a target word
            assert all(len(link.split("-")) == 2 and all(x.isdigit() for x in link.split("-")) for link in line)
        text = lambda line: line.split(" ||| ")[1] if " ||| " in line else line  # noqa: E731 -- the scores may differ in the last digit
        same = [k for k, (a, b) in enumerate(zip(torch_text, ct2_text)) if text(a) == text(b) and text(a).strip()]
        if flags[1] == "1":
            assert len(same) == len(torch_text)  # greedy: the same outputs
        identical = sum(ct2_links[k] == torch_links[k] for k in same)
        shares.append((identical, len(same)))
        assert identical / len(same) >= 0.95, shares  # float32, the same pieces and reading: a link differs only at a near tie
    with capsys.disabled():
        print(f"\nparity (identical link sets where the outputs agree): greedy {shares[0][0]}/{shares[0][1]}, beam 3 2-best {shares[1][0]}/{shares[1][1]}")
    api = syntaxnmt.Translator.from_checkpoint(exported, device="cpu", engine="ctranslate2", threads=1).translate(lines, beam=1, alignments=True)
    code, _, err = run_cli(capsys, "translate", "--checkpoint", exported, "--engine", "ctranslate2", "-i", src, "--alignments", tmp_path / "again.align", "--beam", "1")
    assert code == 0, err
    assert [{f"{i}-{j}" for i, j in t.alignment or ()} for t in api] == _links((tmp_path / "again.align").read_text(encoding="utf-8"))


def test_an_export_that_cannot_name_the_reading_refuses_alignments(trained_run, corpus, tmp_path, capsys):
    """A model read with every layer averaged (the default): one line, before any search; so is an
    export written without the alignment record."""
    ckpt = Path(trained_run.work_dir) / "best.pt"
    code, out, err = run_cli(capsys, "translate", "--checkpoint", ckpt, "--engine", "ctranslate2", "-i", corpus["test"]["src"], "--alignments", tmp_path / "x.align")
    assert_one_line_error(code, err, "--alignments through CTranslate2: its alignment reading averages every decoder layer", "--engine torch")
    assert out == "" and not (tmp_path / "x.align").exists()
    old = export_ct2(ckpt, tmp_path / "old")
    meta = json.loads((old / CONFIG_FILE).read_text(encoding="utf-8"))
    del meta["alignment"]
    (old / CONFIG_FILE).write_text(json.dumps(meta), encoding="utf-8")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", old, "--engine", "ctranslate2", "-i", corpus["test"]["src"], "--markup")
    assert_one_line_error(code, err, "this export does not name the model's alignment layer and heads", "export it again")
