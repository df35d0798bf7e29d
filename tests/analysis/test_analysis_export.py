"""Tests for syntaxnmt.analysis.export: the exported weights are the model's own, word-level
aggregation, the file format, ``syntaxnmt attention`` and ``align`` on a model with source features."""

from __future__ import annotations

import json
import math
import zipfile

import numpy as np
import pytest
import torch
from conftest import deep_merge, parsed_data, tiny_tree, untrained_checkpoint
from test_cli import assert_one_line_error, run_cli, write_lines

from syntaxnmt.analysis.export import attention_for_sentences, read_attention, unit_labels, word_level, write_attention
from syntaxnmt.config import load_config
from syntaxnmt.data.batches import collate
from syntaxnmt.data.prepare import load_split
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.textio import read_lines

CPU = torch.device("cpu")
MODELS = {
    "transformer": {"model": {"enc_layers": 2, "dec_layers": 2}},
    "syntax": {
        "model": {
            "enc_layers": 2,
            "syntax": {
                "relations": [["tree_distance", "tree_path", "none", "none"]],
                "parent_scaled": [[False, False, True, False]],
                "qk_source": [["word", "word", "word", "upos"]],
                "input_features": ["upos", "bie"],
            },
        }
    },
    "rnn": {"model": {"arch": "rnn", "rnn": {"hidden": 16, "attention_dim": 16}}},
}


@pytest.fixture(params=list(MODELS))
def setup(request, corpus, parsed_prepared_dir, tmp_path):
    """(name, model, cfg, toks, checkpoint) of a freshly initialized tiny model on the parsed corpus."""
    return load_tiny(request.param, corpus, parsed_prepared_dir, tmp_path)


def load_tiny(name, corpus, prepared, tmp_path):
    tree = deep_merge(tiny_tree(corpus, tmp_path / name, prepared), {"data": parsed_data(corpus), **MODELS[name]})
    path = untrained_checkpoint(load_config(None, tree), tmp_path / f"{name}.pt")
    model, cfg, toks = load_model(path, CPU)
    return name, model, cfg, toks, path


def test_exported_weights_are_the_models_own(setup, corpus):
    name, model, cfg, toks, _ = setup
    src, ref = read_lines(corpus["dev"]["src"]), read_lines(corpus["dev"]["tgt"])
    got = attention_for_sentences(model, cfg, toks, src, refs=ref, conllu=str(corpus["dev"]["conllu"]), device=CPU, batch_size=7)
    split = load_split(cfg, "dev")
    assert len(got) == len(split) == len(src)
    L_enc, L_dec, H = cfg.model.enc_layers, cfg.model.dec_layers, cfg.model.heads
    for i in (0, 5, len(src) - 1):
        s = got[i]
        S, T = len(s.src_pieces), len(s.tgt_pieces)
        # the tokens are those of the prepared corpus (training's encoding), plus </s>
        assert s.src_pieces == [toks.src.id_to_piece(int(x)) for x in split["src"][i]] + ["</s>"]
        assert s.tgt_pieces == [toks.tgt.id_to_piece(int(x)) for x in split["tgt"][i]] + ["</s>"]
        assert s.src_word_of_piece[-1] == s.tgt_word_of_piece[-1] == -1 and s.forced
        assert s.parse is not None and s.parse.words == src[i].split()
        batch = collate(split, [i], model.feature_spec)
        with torch.no_grad():
            out = model(batch, need_weights=True)
        if name == "rnn":
            assert s.encoder is None and s.decoder is None and s.cross.shape == (1, 1, T, S)
        else:
            assert s.encoder.shape == (L_enc, H, S, S) and s.decoder.shape == (L_dec, H, T, T) and s.cross.shape == (L_dec, H, T, S)
            np.testing.assert_allclose(s.encoder, torch.stack(out.encoder.self_attention)[:, 0].numpy(), atol=1e-6)
            np.testing.assert_allclose(s.decoder, torch.stack(out.decoder_self_attention)[:, 0].numpy(), atol=1e-6)
            assert np.abs(np.triu(s.decoder, 1)).max() == 0  # causal: no weight on later inputs
            np.testing.assert_allclose(s.encoder.sum(-1), 1, atol=1e-5)
            np.testing.assert_allclose(s.decoder.sum(-1), 1, atol=1e-5)
        np.testing.assert_allclose(s.cross, torch.stack(out.cross_attention)[:, 0].numpy(), atol=1e-6)
        np.testing.assert_allclose(s.cross.sum(-1), 1, atol=1e-5)
        assert s.cross.dtype == np.float32 and s.cross.std() > 0


def test_need_weights_returns_softmax_of_the_scores(corpus, parsed_prepared_dir, tmp_path):
    """Layer 0 of the encoder recomputed by hand: softmax(q k^T / sqrt(d)) of the pre-norm input."""
    _, model, cfg, toks, _ = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    line = read_lines(corpus["test"]["src"])[0]
    [s] = attention_for_sentences(model, cfg, toks, [line], device=CPU)
    ids = torch.tensor([toks.src.encode(line) + [3]])
    layer = model.encoder[0]
    with torch.no_grad():
        h = layer.res_attn.norm(model.src_embed(ids))
        q, k = layer.self_attn._split(layer.self_attn.q_proj(h)), layer.self_attn._split(layer.self_attn.k_proj(h))
        expected = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), -1)[0]
    np.testing.assert_allclose(s.encoder[0], expected.numpy(), atol=1e-5)


def test_translation_mode_force_decodes_the_models_output(setup, corpus):
    name, model, cfg, toks, _ = setup
    src = read_lines(corpus["test"]["src"])[:4]
    kw = {"conllu": None}
    if name == "syntax":  # the model needs the trees: give the parses of these four lines
        from syntaxnmt.data.annotations import read_conllu

        kw = {"parses": read_conllu(corpus["test"]["conllu"])[:4]}
    got = attention_for_sentences(model, cfg, toks, src, device=CPU, **kw)
    decode = cfg.decode.model_copy(update={"beam_size": 1})
    if name != "syntax":
        expected = [nb[0][0] for nb in translate_lines(model, cfg, toks, src, decode, CPU)]
        assert [s.translation for s in got] == expected
    for s in got:
        assert not s.forced and s.tgt_pieces[-1] == "</s>" and len(s.tgt_words) == max(s.tgt_word_of_piece) + 1
        assert s.cross.shape[-2:] == (len(s.tgt_pieces), len(s.src_pieces))
        np.testing.assert_allclose(s.cross.sum(-1), 1, atol=1e-5)


def test_batching_does_not_change_the_weights(corpus, parsed_prepared_dir, tmp_path):
    _, model, cfg, toks, _ = load_tiny("syntax", corpus, parsed_prepared_dir, tmp_path)
    src, ref = read_lines(corpus["dev"]["src"]), read_lines(corpus["dev"]["tgt"])
    conllu = str(corpus["dev"]["conllu"])
    batched = attention_for_sentences(model, cfg, toks, src, refs=ref, conllu=conllu, device=CPU, batch_size=16)
    alone = attention_for_sentences(model, cfg, toks, src, refs=ref, conllu=conllu, device=CPU, batch_size=1)
    for a, b in zip(batched, alone):
        for kind in ("encoder", "decoder", "cross"):
            np.testing.assert_allclose(getattr(a, kind), getattr(b, kind), atol=1e-5)


# ---------------------------------------------------------------- word level


def test_word_level_on_a_hand_made_case():
    # keys: word 0 = two pieces, word 1 = one piece, then </s>
    keys = [0, 0, 1, -1]
    w = np.array(
        [
            [0.1, 0.2, 0.3, 0.4],
            [0.3, 0.3, 0.2, 0.2],
            [0.5, 0.0, 0.5, 0.0],
            [0.25, 0.25, 0.25, 0.25],
        ]
    )
    # to word 0 = sum of its two columns; from word 0 = mean of its two rows
    expected = np.array([[0.45, 0.25, 0.30], [0.50, 0.50, 0.00], [0.50, 0.25, 0.25]])
    np.testing.assert_allclose(word_level(w, keys, keys), expected, atol=1e-7)
    # rectangular, with a special token first (decoder inputs: <s>, then a two-piece word)
    np.testing.assert_allclose(word_level(w[[3, 0, 1]], [-1, 0, 0], keys), [[0.5, 0.25, 0.25], [0.45, 0.25, 0.30]], atol=1e-7)
    # leading dimensions (layers, heads) are kept
    stacked = np.stack([w, w[::-1]])[None]
    assert word_level(stacked, keys, keys).shape == (1, 2, 3, 3)
    np.testing.assert_allclose(word_level(stacked, keys, keys)[0, 0], expected, atol=1e-7)
    assert unit_labels(["▁ab", "c", "▁d", "</s>"], keys, ["abc", "d"]) == ["abc", "d", "</s>"]
    with pytest.raises(ValueError, match="not consecutive"):
        word_level(w, [0, 1, 0, -1], keys)


def test_word_level_of_a_sentence_with_split_words(corpus, parsed_prepared_dir, tmp_path):
    _, model, cfg, toks, _ = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    src = ["the dogxyzqwv sees a blorptastic cat ."]  # invented words split into several pieces
    [s] = attention_for_sentences(model, cfg, toks, src, refs=["sono inu ga aru neko wo miru ."], device=CPU)
    assert len(s.src_pieces) > len(s.src_words) + 1
    enc = s.word_level("encoder")
    n = len(s.src_words) + 1
    assert enc.shape == (2, 4, n, n)
    np.testing.assert_allclose(enc.sum(-1), 1, atol=1e-5)
    rows, cols = s.labels("encoder", words=True)
    assert rows == cols == s.src_words + ["</s>"]
    split = s.src_word_of_piece.index(1)  # the first piece of the split word "dogxyzqwv"
    pieces = [p for p, w in enumerate(s.src_word_of_piece) if w == 1]
    np.testing.assert_allclose(enc[..., 0, 1], s.encoder[..., 0, pieces].sum(-1), atol=1e-6)
    np.testing.assert_allclose(enc[..., 1, 0], s.encoder[..., pieces, 0].mean(-1), atol=1e-6)
    assert split == pieces[0]


# ---------------------------------------------------------------- file format and command


def test_files_are_readable_with_numpy_and_json(corpus, parsed_prepared_dir, tmp_path):
    _, model, cfg, toks, _ = load_tiny("syntax", corpus, parsed_prepared_dir, tmp_path)
    src, ref = read_lines(corpus["dev"]["src"]), read_lines(corpus["dev"]["tgt"])
    got = attention_for_sentences(model, cfg, toks, src, refs=ref, conllu=str(corpus["dev"]["conllu"]), device=CPU)
    jsonl, npz = write_attention(tmp_path / "out", got, {"arch": "transformer"})
    lines = jsonl.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "syntaxnmt-attention" and header["sentences"] == len(src) == len(lines) - 1
    with np.load(npz) as arrays:
        for line in lines[1:]:
            rec = json.loads(line)
            i = rec["index"]
            assert rec["parse"]["heads"] == got[i].parse.heads
            for kind in ("encoder", "decoder", "cross"):
                assert list(arrays[f"s{i}_{kind}"].shape) == rec["shapes"][kind]
                np.testing.assert_array_equal(arrays[f"s{i}_{kind}"], getattr(got[i], kind))
                np.testing.assert_allclose(arrays[f"s{i}_{kind}_words"], got[i].word_level(kind), atol=1e-7)
            assert arrays[f"s{i}_encoder_words"].shape[-1] == len(rec["src_units"])
            assert arrays[f"s{i}_cross_words"].shape[-2] == len(rec["tgt_units"])
    header2, back = read_attention(tmp_path / "out.jsonl")
    assert header2 == header and len(back) == len(got)
    assert back[3].src_words == got[3].src_words and back[3].parse == got[3].parse
    np.testing.assert_array_equal(back[3].decoder, got[3].decoder)


def _damage_member(path, member: str = "s0_cross.npy") -> None:
    """Flip bytes inside one compressed array of an ``.npz`` (a member that reading does load)."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 8  # into the compressed data
    data = bytearray(path.read_bytes())
    for k in range(start, start + 16):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "File is not a zip file"),
        (lambda p: p.write_bytes(b""), "No data left in file"),
        (_damage_member, ""),  # a damaged member: zlib's or zipfile's own words
        (lambda p: np.save(p.open("wb"), np.zeros(3)), "not an .npz archive"),
    ],
)
def test_damaged_arrays_of_an_export_are_one_line(capsys, corpus, parsed_prepared_dir, tmp_path, damage, reason):
    """A truncated ``OUT.npz`` ended ``syntaxnmt plot -a OUT`` in a traceback (issue 25)."""
    _, model, cfg, toks, _ = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    got = attention_for_sentences(model, cfg, toks, read_lines(corpus["dev"]["src"])[:12], device=CPU)
    _, npz = write_attention(tmp_path / "att", got)
    damage(npz)
    code, _, err = run_cli(capsys, "plot", "-a", tmp_path / "att", "--sentences", "11", "-o", tmp_path / "fig.png")
    assert_one_line_error(code, err, f"{npz}: the attention arrays are damaged ({reason}", "write them again with `syntaxnmt attention`")
    assert not (tmp_path / "fig.png").exists()


def test_attention_command(capsys, corpus, parsed_prepared_dir, tmp_path):
    *_, path = load_tiny("syntax", corpus, parsed_prepared_dir, tmp_path)
    src, tgt, conllu = corpus["test"]["src"], corpus["test"]["tgt"], corpus["test"]["conllu"]
    code, _, err = run_cli(capsys, "attention", "--checkpoint", path, "-i", src, "--ref", tgt, "--src-conllu", conllu, "--sentences", "0-2,7", "-o", tmp_path / "att", "--device", "cpu")
    assert code == 0, err
    assert "attention of 4 sentences" in err
    header, got = read_attention(tmp_path / "att")
    assert header["lines"] == [0, 1, 2, 7] and header["target"] == "reference" and header["arch"] == "transformer"
    assert [s.source for s in got] == [read_lines(src)[i] for i in (0, 1, 2, 7)]
    assert [s.translation for s in got] == [read_lines(tgt)[i] for i in (0, 1, 2, 7)]
    assert all(s.parse is not None for s in got)
    # errors: the model needs parses; files of different lengths; a bad selection
    code, _, err = run_cli(capsys, "attention", "--checkpoint", path, "-i", src, "-o", tmp_path / "x")
    assert_one_line_error(code, err, "--src-conllu")
    short = write_lines(tmp_path / "short", ["sono inu ."])
    code, _, err = run_cli(capsys, "attention", "--checkpoint", path, "-i", src, "--ref", short, "-o", tmp_path / "x")
    assert_one_line_error(code, err, "line-aligned")
    code, _, err = run_cli(capsys, "attention", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--sentences", "2-x", "-o", tmp_path / "x")
    assert_one_line_error(code, err, "--sentences")


def test_align_supports_models_with_source_features(capsys, corpus, parsed_prepared_dir, tmp_path):
    *_, path = load_tiny("syntax", corpus, parsed_prepared_dir, tmp_path)
    src, tgt, conllu = corpus["test"]["src"], corpus["test"]["tgt"], corpus["test"]["conllu"]
    out = tmp_path / "hyp.align"
    code, _, err = run_cli(capsys, "align", "--checkpoint", path, "--src", src, "--tgt", tgt, "--src-conllu", conllu, "-o", out, "--device", "cpu")
    assert code == 0, err
    for links, s, t in zip(read_lines(out), read_lines(src), read_lines(tgt)):
        pairs = [tuple(map(int, x.split("-"))) for x in links.split()]
        assert {j for _, j in pairs} == set(range(len(t.split())))
        assert all(i < len(s.split()) for i, _ in pairs)
    code, _, err = run_cli(capsys, "align", "--checkpoint", path, "--src", src, "--tgt", tgt)
    assert_one_line_error(code, err, "--src-conllu")


# ---------------------------------------------------------------- what the header says about the weights


def test_local_p_rows_do_not_sum_to_one_and_the_header_says_so(capsys, corpus, parsed_prepared_dir, tmp_path, monkeypatch):
    """Luong's local-p weights are the window's softmax times a Gaussian, not renormalized: rows
    sum to less than 1, and the export's header says so (docs/attention.md); softmax rows sum to 1."""
    monkeypatch.setitem(MODELS, "local", {"model": {"arch": "rnn", "rnn": {"hidden": 16, "attention_dim": 16, "decoder": "luong", "local_window": 2}}})
    src, tgt = corpus["test"]["src"], corpus["test"]["tgt"]
    for name, sums_to_one in (("local", False), ("rnn", True), ("transformer", True)):
        *_, path = load_tiny(name, corpus, parsed_prepared_dir, tmp_path)
        code, _, err = run_cli(capsys, "attention", "--checkpoint", path, "-i", src, "--ref", tgt, "--sentences", "0-4", "-o", tmp_path / name, "--device", "cpu")
        assert code == 0, err
        header, got = read_attention(tmp_path / name)
        assert header["cross_attention"]["rows_sum_to_one"] is sums_to_one
        assert header["cross_attention"]["local_window"] == (2 if name == "local" else None)
        sums = np.concatenate([s.cross.sum(-1).ravel() for s in got])
        if sums_to_one:
            np.testing.assert_allclose(sums, 1.0, atol=1e-4)
        else:
            assert sums.max() <= 1 + 1e-5 and sums.min() < 0.95


def test_lisa_and_injected_heads_are_marked(capsys, corpus, parsed_prepared_dir, tmp_path, monkeypatch):
    """A multi-task model's LISA heads are named in the export's header and the analyze-heads
    report; with inject_parse their weights are the parse's one-hot parent, marked as injected."""
    src, conllu = corpus["test"]["src"], corpus["test"]["conllu"]
    for inject in (False, True):
        name = f"lisa-{inject}"
        lisa = {"weight": 1.0, "layer": 1, "heads": [0, 2], "inject_parse": inject}
        monkeypatch.setitem(MODELS, name, {"model": {"enc_layers": 2}, "train": {"multitask": {"lisa": lisa}}})
        *_, path = load_tiny(name, corpus, parsed_prepared_dir, tmp_path)
        code, _, err = run_cli(capsys, "attention", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--sentences", "0-3", "-o", tmp_path / name, "--device", "cpu")
        assert code == 0, err
        header, got = read_attention(tmp_path / name)
        assert header["supervised_heads"] == {"layers": [1], "heads": [0, 2], "weight": 1.0, "inject_parse": inject}
        one_hot_parent = all(
            np.array_equal(s.word_level("encoder")[1, 0, : len(s.parse.words), : len(s.parse.words)].argmax(-1), [h - 1 if h else i for i, h in enumerate(s.parse.heads)])
            and np.allclose(s.encoder[1, 0].max(-1), 1.0)
            for s in got
        )
        assert one_hot_parent is inject
        code, report, err = run_cli(capsys, "analyze-heads", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--sentences", "0-9", "-o", tmp_path / f"{name}-report", "--device", "cpu")
        assert code == 0, err
        mark = "injected parse" if inject else "LISA-supervised"
        assert f"| 1 | 0 | {mark} |" in report and f"| 1 | 2 | {mark} |" in report and "| 1 | 1 | – |" in report
        if inject:
            assert "| 1 | 0 | injected parse | 100.0 |" in report


def test_attention_and_plot_translate_with_the_checkpoints_beam_by_default(capsys, trained_run, corpus, tmp_path, monkeypatch):
    """Without --beam, `attention` and `plot --checkpoint` search with the model's decode.beam_size
    (3 here), as `translate` does: the exported translations are translate's (they were greedy)."""
    import syntaxnmt.analysis.plot as plot_module

    ckpt, src = f"{trained_run.work_dir}/best.pt", corpus["test"]["src"]
    assert trained_run.decode.beam_size == 3
    code, _, err = run_cli(capsys, "attention", "--checkpoint", ckpt, "-i", src, "--sentences", "0-9", "-o", tmp_path / "att", "--device", "cpu")
    assert code == 0, err
    header, sents = read_attention(tmp_path / "att")
    assert header["beam"] == 3
    code, _, err = run_cli(capsys, "translate", "--checkpoint", ckpt, "-i", src, "-o", tmp_path / "hyp", "--device", "cpu")
    assert code == 0, err
    assert [s.translation for s in sents] == read_lines(tmp_path / "hyp")[:10]
    seen = []
    real = plot_module.attention_for_sentences
    monkeypatch.setattr(plot_module, "attention_for_sentences", lambda *a, **k: seen.append(k["beam"]) or real(*a, **k))
    code, _, err = run_cli(capsys, "plot", "--checkpoint", ckpt, "-i", src, "-o", tmp_path / "p.png", "--device", "cpu")
    assert code == 0, err
    assert seen == [3]
