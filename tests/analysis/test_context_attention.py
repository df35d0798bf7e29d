"""Attention of context models (docs/documents.md): ``syntaxnmt attention --docs`` exports HAN's
sentence-level weights, word-level weights and gate (read from the model's own forward pass) --
for a target-side HAN model also the decoder-side block's, over its own previous translations --
marks a concatenation model's context pieces, and ``syntaxnmt plot`` draws HAN's panels and the
shading."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import deep_merge, quiet, tiny_tree, untrained_checkpoint, write_doc_ids
from test_cli import assert_one_line_error, run_cli

import syntaxnmt
from syntaxnmt.analysis.export import read_attention
from syntaxnmt.analysis.plot import attention_figure
from syntaxnmt.config import load_config
from syntaxnmt.textio import read_lines

DOC_SIZES = [1, 4, 2, 3]  # a one-sentence document, then documents longer and shorter than k


def _docs(n: int) -> list[str]:
    ids = [f"d{k}" for k, size in enumerate(DOC_SIZES) for _ in range(size)]
    return (ids + [f"rest{i // 3}" for i in range(n)])[:n]


@pytest.fixture(scope="module")
def doc_corpus(corpus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("context_attention")
    files = write_doc_ids(corpus, folder, 3, prefix="doc")
    n = sum(DOC_SIZES)
    files["src"] = folder / "test.src"
    files["src"].write_text("\n".join(read_lines(corpus["test"]["src"])[:n]) + "\n")
    files["ref"] = folder / "test.ref"
    files["ref"].write_text("\n".join(read_lines(corpus["test"]["tgt"])[:n]) + "\n")
    files["docs"] = folder / "test.docs"
    files["docs"].write_text("\n".join(_docs(n)) + "\n")
    return files


def _train(corpus, doc_corpus, work, context: dict, **train) -> str:
    from syntaxnmt.training.train import train as run

    tree = deep_merge(tiny_tree(corpus, work / "run", work / "prepared"), {"data": {"train_docs": str(doc_corpus["train"]), "dev_docs": str(doc_corpus["dev"])}, "model": {"context": context}, "train": {"max_steps": 6, **train}})
    cfg = load_config(None, tree)
    run(cfg, log=quiet)
    return f"{cfg.work_dir}/best.pt"


@pytest.fixture(scope="module")
def han(corpus, doc_corpus, tmp_path_factory) -> str:
    return _train(corpus, doc_corpus, tmp_path_factory.mktemp("han"), {"kind": "han", "sentences": 2})


def _positions() -> list[int]:
    """Each test line's position in its document."""
    return [p for size in DOC_SIZES for p in range(size)]


def _translate_docs(capsys, checkpoint, doc_corpus) -> list[str]:
    """`translate --docs` with the model's beam: what `attention`/`plot` translate with by default."""
    code, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"])
    assert code == 0, err
    return out.splitlines()


@pytest.mark.parametrize("target", ["translation", "reference"])
def test_han_export_holds_the_sentence_weights_and_the_gate(han, doc_corpus, tmp_path, capsys, target):
    out = tmp_path / "att"
    ref = ["--ref", doc_corpus["ref"]] if target == "reference" else []
    code, _, err = run_cli(capsys, "attention", "--checkpoint", han, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"], *ref, "-o", out)
    assert code == 0, err
    header, sentences = read_attention(out)
    assert header["context"]["kind"] == "han" and header["context"]["sentences"] == 2
    records = [json.loads(line) for line in (tmp_path / "att.jsonl").read_text().splitlines()[1:]]
    arrays = np.load(tmp_path / "att.npz")
    lines = read_lines(doc_corpus["src"])
    heads = header["heads"]
    for i, (position, s, rec) in enumerate(zip(_positions(), sentences, records)):
        present = min(position, 2)
        S = len(s.src_pieces)
        assert rec["context_sources"] == [lines[i - j] for j in range(1, present + 1)]  # nearest first
        assert [p[:-1] for p in rec["context_pieces"]] == [sentences[i - j].src_pieces[:-1] for j in range(1, present + 1)]
        sent, word, gate = arrays[f"s{i}_han_sentence"], arrays[f"s{i}_han_word"], arrays[f"s{i}_han_gate"]
        assert sent.shape == (heads, S, 2) and gate.shape == (S,) and word.shape[:3] == (2, heads, S)
        np.testing.assert_array_equal(sent, s.han_sentence)
        # Rows sum to 1 over the previous sentences that exist; a missing one has no weight.
        np.testing.assert_allclose(sent[:, :, :present].sum(-1), np.ones((heads, S)) if present else np.zeros((heads, S)), atol=1e-5)
        assert np.abs(sent[:, :, present:]).max(initial=0) == 0 and np.abs(word[present:]).max(initial=0) == 0
        for j in range(present):  # word level: over the pieces (and </s>) of previous sentence j, not its padding
            n = len(rec["context_pieces"][j])
            np.testing.assert_allclose(word[j, :, :, :n].sum(-1), np.ones((heads, S)), atol=1e-5)
            assert np.abs(word[j, :, :, n:]).max(initial=0) == 0
        if present:
            assert ((gate > 0) & (gate < 1)).all()
        else:  # a document's first sentence: the sentence model's states, the gate shut
            assert np.abs(gate).max() == 0 and np.abs(sent).max() == 0
        words_sent, words_gate = arrays[f"s{i}_han_sentence_words"], arrays[f"s{i}_han_gate_words"]
        assert words_sent.shape == (heads, len(rec["src_units"]), 2) and words_gate.shape == (len(rec["src_units"]),)
    if target == "translation":  # the weights are those of the translation `translate --docs` gives
        assert [s.translation for s in sentences] == _translate_docs(capsys, han, doc_corpus)


def test_without_docs_a_han_export_has_no_context_weights(han, doc_corpus, tmp_path, capsys):
    code, _, err = run_cli(capsys, "attention", "--checkpoint", han, "-i", doc_corpus["src"], "--sentences", "1-2", "-o", tmp_path / "att")
    assert code == 0, err
    header, sentences = read_attention(tmp_path / "att")
    assert all(s.han_sentence is None and s.context_sources is None for s in sentences)
    assert not [k for k in np.load(tmp_path / "att.npz").files if "han" in k]


def test_plot_draws_han_panel(han, doc_corpus, tmp_path, capsys):
    code, _, err = run_cli(capsys, "attention", "--checkpoint", han, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"], "--sentences", "3", "-o", tmp_path / "att")
    assert code == 0, err
    png = tmp_path / "han.png"
    code, _, err = run_cli(capsys, "plot", "-a", tmp_path / "att", "--sentences", "3", "-o", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The same with the weights computed on the fly (--checkpoint -i --docs).
    code, _, err = run_cli(capsys, "plot", "--checkpoint", han, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"], "--sentences", "3", "-o", tmp_path / "direct.png")
    assert code == 0, err and (tmp_path / "direct.png").read_bytes()[:4] == b"\x89PNG"
    code, _, err = run_cli(capsys, "plot", "-a", tmp_path / "att", "--docs", doc_corpus["docs"], "--sentences", "3", "-o", tmp_path / "x.png")
    assert_one_line_error(code, err, "--docs goes with --checkpoint")
    _, (s,) = read_attention(tmp_path / "att")
    fig = attention_figure(s, "cross", -1, 0, True)
    panel = next(ax for ax in fig.axes if ax.get_title().startswith("HAN"))
    image = panel.get_images()[0].get_array()
    sentence, gate = s.han_word_level()
    np.testing.assert_allclose(image[:, :2], sentence.mean(0), atol=1e-6)  # tokens x previous sentences
    np.testing.assert_allclose(image[:, 2], gate, atol=1e-6)  # then the gate
    assert f"mean gate {gate.mean():.2f}" in panel.get_title()


@pytest.mark.parametrize("side", ["source", "both"])
def test_concat_export_marks_the_context(corpus, doc_corpus, tmp_path, capsys, side):
    checkpoint = _train(corpus, doc_corpus, tmp_path / side, {"kind": "concat", "sentences": 1, "side": side})
    code, _, err = run_cli(capsys, "attention", "--checkpoint", checkpoint, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"], "-o", tmp_path / "att")
    assert code == 0, err
    _, with_docs = read_attention(tmp_path / "att")
    code, _, err = run_cli(capsys, "attention", "--checkpoint", checkpoint, "-i", doc_corpus["src"], "-o", tmp_path / "alone")
    assert code == 0, err
    _, alone = read_attention(tmp_path / "alone")
    assert [s.translation for s in with_docs] == _translate_docs(capsys, checkpoint, doc_corpus)
    for i, (position, s, a) in enumerate(zip(_positions(), with_docs, alone)):
        assert s.han_sentence is None and s.cross.shape[-1] == len(s.src_pieces)
        if position == 0:
            assert s.src_context == 0 and s.tgt_context == 0 and s.context_sources == []
            continue
        # The source is the previous sentence, <sep>, the current one: the context is marked.
        assert s.src_pieces[s.src_context - 1] == "<sep>" and s.src_pieces[s.src_context :] == a.src_pieces
        assert s.src_pieces[: s.src_context - 1] == alone[i - 1].src_pieces[:-1]
        assert s.context_units("source", True) == len(alone[i - 1].src_words) + 1
        if side == "both":  # the target too: what the model wrote before the current sentence (an undertrained model may write no <sep>)
            assert (s.tgt_context == 0 or s.tgt_pieces[s.tgt_context - 1] == "<sep>") and "<sep>" not in s.translation
        else:
            assert s.tgt_context == 0
    if side == "both":  # with --ref: the target context is the previous line's reference
        code, _, err = run_cli(capsys, "attention", "--checkpoint", checkpoint, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"], "--ref", doc_corpus["ref"], "-o", tmp_path / "ref")
        assert code == 0, err
        code, _, err = run_cli(capsys, "attention", "--checkpoint", checkpoint, "-i", doc_corpus["src"], "--ref", doc_corpus["ref"], "-o", tmp_path / "ref-alone")
        assert code == 0, err
        (_, forced), (_, forced_alone) = read_attention(tmp_path / "ref"), read_attention(tmp_path / "ref-alone")
        for i, (position, s) in enumerate(zip(_positions(), forced)):
            previous = forced_alone[i - 1].tgt_pieces[:-1] + ["<sep>"] if position else []
            assert s.tgt_pieces[: s.tgt_context] == previous and s.tgt_pieces[s.tgt_context :] == forced_alone[i].tgt_pieces
            assert s.cross.shape[-2] == len(s.tgt_pieces) and s.context_units("decoder_input", False) == s.tgt_context + (1 if position else 0)
    s = next(s for s, p in zip(with_docs, _positions()) if p)
    fig = attention_figure(s, "cross", -1, 0, True)
    shaded = [p for p in fig.axes[0].patches if p.get_alpha() == pytest.approx(0.22)]
    assert shaded and np.isclose(shaded[0].get_x() + shaded[0].get_width(), s.context_units("source", True) - 0.5)
    code, _, err = run_cli(capsys, "plot", "-a", tmp_path / "att", "--sentences", str(_positions().index(1)), "-o", tmp_path / "c.png")
    assert code == 0, err and (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_a_bad_doc_id_file_is_a_one_line_error(han, doc_corpus, tmp_path, capsys):
    short = tmp_path / "short.docs"
    short.write_text("\n".join(read_lines(doc_corpus["docs"])[:-1]) + "\n")
    code, _, err = run_cli(capsys, "attention", "--checkpoint", han, "-i", doc_corpus["src"], "--docs", short, "-o", tmp_path / "att")
    assert_one_line_error(code, err, f"{sum(DOC_SIZES) - 1} document ids for {sum(DOC_SIZES)} lines of {doc_corpus['src']}")
    split = tmp_path / "split.docs"
    split.write_text("\n".join(["a", "b", "a"] + ["c"] * (sum(DOC_SIZES) - 3)) + "\n")
    code, _, err = run_cli(capsys, "attention", "--checkpoint", han, "-i", doc_corpus["src"], "--docs", split, "-o", tmp_path / "att")
    assert_one_line_error(code, err, ":3: document 'a' continues after another document began")


# ---------------------------------------------------------------- target-side HAN


@pytest.fixture(scope="module", params=["target", "both"])
def han_target(request, corpus, doc_corpus, shared_prepared_dir, tmp_path_factory) -> tuple[str, str]:
    """(side, checkpoint) of an untrained HAN model over 2 previous sentences reading the target side."""
    work = tmp_path_factory.mktemp(f"han_{request.param}")
    context = {"kind": "han", "sentences": 2, "side": request.param}
    tree = deep_merge(tiny_tree(corpus, work / "run", shared_prepared_dir), {"data": {"train_docs": str(doc_corpus["train"]), "dev_docs": str(doc_corpus["dev"])}, "model": {"context": context}})
    return request.param, str(untrained_checkpoint(load_config(None, tree), work / "untrained.pt", seed=2))


@pytest.mark.parametrize("target", ["translation", "reference"])
def test_target_side_han_export_holds_the_decoder_side_weights(han_target, doc_corpus, tmp_path, capsys, target):
    """The decoder-side block's weights per target token over the previous target sentences --
    the model's own translations of them (as ``translate --docs`` makes them), or the references
    with --ref -- summing to 1 over those that exist, 0 for a missing one, the gate 0 at a
    document's start; the encoder-side block's too for ``side: both``."""
    side, checkpoint = han_target
    out = tmp_path / "att"
    ref = ["--ref", doc_corpus["ref"]] if target == "reference" else []
    code, _, err = run_cli(capsys, "attention", "--checkpoint", checkpoint, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"], *ref, "-o", out)
    assert code == 0, err
    header, sentences = read_attention(out)
    assert header["context"]["side"] == side
    records = [json.loads(line) for line in (tmp_path / "att.jsonl").read_text().splitlines()[1:]]
    arrays = np.load(tmp_path / "att.npz")
    previous = _translate_docs(capsys, checkpoint, doc_corpus) if target == "translation" else read_lines(doc_corpus["ref"])
    if target == "translation":  # the weights are those of the translations `translate --docs` gives
        assert [s.translation for s in sentences] == previous
    assert sum(len(s.tgt_pieces) > 2 for s in sentences) >= 5  # what makes the sums worth checking
    heads = header["heads"]
    for i, (position, s, rec) in enumerate(zip(_positions(), sentences, records)):
        present, T = min(position, 2), len(s.tgt_pieces)
        assert rec["context_translations"] == [previous[i - j] for j in range(1, present + 1)]  # its own outputs, nearest first
        if target == "translation":  # as the decoder read them: <s>, then the pieces of the earlier sentence's output
            assert rec["context_target_pieces"] == [["<s>"] + sentences[i - j].tgt_pieces[:-1] for j in range(1, present + 1)]
        sent, word, gate = arrays[f"s{i}_han_target_sentence"], arrays[f"s{i}_han_target_word"], arrays[f"s{i}_han_target_gate"]
        assert sent.shape == (heads, T, 2) and gate.shape == (T,) and word.shape[:3] == (2, heads, T)
        assert rec["shapes"]["han_target_sentence"] == [heads, T, 2]
        np.testing.assert_array_equal(sent, s.han_target_sentence)
        np.testing.assert_allclose(sent[:, :, :present].sum(-1), np.ones((heads, T)) if present else np.zeros((heads, T)), atol=1e-5)
        assert np.abs(sent[:, :, present:]).max(initial=0) == 0 and np.abs(word[present:]).max(initial=0) == 0
        for j in range(present):  # word level: over the decoder inputs of previous target sentence j, not its padding
            n = len(rec["context_target_pieces"][j])
            np.testing.assert_allclose(word[j, :, :, :n].sum(-1), np.ones((heads, T)), atol=1e-5)
            assert np.abs(word[j, :, :, n:]).max(initial=0) == 0
        if present:
            assert ((gate > 0) & (gate < 1)).all()
        else:  # a document's first sentence: the sentence model's states, the gate shut
            assert np.abs(gate).max() == 0 and np.abs(sent).max() == 0
        units = len(rec["tgt_units"])
        assert arrays[f"s{i}_han_target_sentence_words"].shape == (heads, units, 2) and arrays[f"s{i}_han_target_gate_words"].shape == (units,)
        assert (f"s{i}_han_sentence" in arrays.files) == (side == "both") == (s.han_sentence is not None)


def test_target_side_han_plot_draws_the_decoder_panel(han_target, doc_corpus, tmp_path, capsys):
    side, checkpoint = han_target
    line = str(_positions().index(2))  # a sentence with two previous ones
    code, _, err = run_cli(capsys, "attention", "--checkpoint", checkpoint, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"], "--sentences", line, "-o", tmp_path / "att")
    assert code == 0, err
    for name, source in (("export.png", ["-a", tmp_path / "att"]), ("direct.png", ["--checkpoint", checkpoint, "-i", doc_corpus["src"], "--docs", doc_corpus["docs"]])):
        code, _, err = run_cli(capsys, "plot", *source, "--sentences", line, "-o", tmp_path / name)
        assert code == 0, err
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _, (s,) = read_attention(tmp_path / "att")
    fig = attention_figure(s, "cross", -1, 0, True)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title().startswith("HAN")]
    assert len(titles) == (2 if side == "both" else 1)
    panel = next(ax for ax in fig.axes if ax.get_title().startswith("HAN (decoder)"))
    image = panel.get_images()[0].get_array()
    sentence, gate = s.han_word_level("target")
    assert image.shape == (len(s.labels("cross", True)[0]), 3)  # target tokens x (2 previous translations, gate)
    np.testing.assert_allclose(image[:, :2], sentence.mean(0), atol=1e-6)
    np.testing.assert_allclose(image[:, 2], gate, atol=1e-6)


def test_target_side_han_attention_from_the_python_api(han_target, doc_corpus):
    """``Translator.translate(docs=..., attention=True)``: the weights of the model reading its own
    previous translations -- the texts of the results before it in the document."""
    _, checkpoint = han_target
    lines, docs = read_lines(doc_corpus["src"]), read_lines(doc_corpus["docs"])
    results = syntaxnmt.Translator.from_checkpoint(checkpoint, device="cpu").translate(lines, beam=2, docs=docs, attention=True)
    for i, (position, r) in enumerate(zip(_positions(), results)):
        (member,) = r.attention.members
        present = min(position, 2)
        assert member.translation == r.text
        assert member.context_translations == [results[i - j].text for j in range(1, present + 1)]
        assert member.han_target_sentence.shape[1:] == (len(member.tgt_pieces), 2)
        np.testing.assert_allclose(member.han_target_sentence[..., :present].sum(-1), 1.0 if present else 0.0, atol=1e-5)
