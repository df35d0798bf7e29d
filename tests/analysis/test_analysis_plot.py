"""Tests for syntaxnmt.analysis.plot (``syntaxnmt plot``): figure files for Transformer, RNN and
syntax models, dependency arcs over the source tokens, alignment links on cross-attention."""

from __future__ import annotations

import pytest
from matplotlib.patches import Arc, Rectangle
from test_analysis_export import CPU, MODELS, load_tiny
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.analysis.export import attention_for_sentences
from syntaxnmt.analysis.plot import attention_figure
from syntaxnmt.data.annotations import read_conllu
from syntaxnmt.data.links import words_to_subwords
from syntaxnmt.textio import read_lines

MAGIC = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml"}


@pytest.mark.parametrize("name", list(MODELS))
def test_plot_files_are_written(capsys, name, corpus, parsed_prepared_dir, tmp_path):
    *_, path = load_tiny(name, corpus, parsed_prepared_dir, tmp_path)
    src, tgt, conllu, align = corpus["test"]["src"], corpus["test"]["tgt"], corpus["test"]["conllu"], corpus["test"]["align"]
    code, _, err = run_cli(capsys, "attention", "--checkpoint", path, "-i", src, "--ref", tgt, "--src-conllu", conllu, "--sentences", "0-3", "-o", tmp_path / "att", "--device", "cpu")
    assert code == 0, err
    cases = [("cross", "word", "png", "all"), ("cross", "subword", "svg", "0")]
    if name != "rnn":
        cases += [("encoder", "subword", "png", "all"), ("decoder", "word", "svg", "2")]
    for k, (kind, level, fmt, head) in enumerate(cases):
        out = tmp_path / f"{kind}-{level}.{fmt}"
        lines = ["1", "3"] if k == 0 else ["3"]  # several sentences: one file each, named by line
        code, _, err = run_cli(capsys, "plot", "-a", tmp_path / "att", "--sentences", ",".join(lines), "--kind", kind, "--level", level, "--head", head, "--align", align, "-o", out)
        assert code == 0, err
        for written in [tmp_path / f"{kind}-{level}-{line}.{fmt}" for line in lines] if k == 0 else [out]:
            assert written.read_bytes().startswith(MAGIC[fmt]) and written.stat().st_size > 1000, written
    # one head, computed from the checkpoint, as PDF
    code, _, err = run_cli(capsys, "plot", "--checkpoint", path, "-i", src, "--ref", tgt, "--src-conllu", conllu, "--sentences", "2", "--head", "0", "-o", tmp_path / "one.pdf", "--device", "cpu")
    assert code == 0, err
    assert (tmp_path / "one.pdf").read_bytes().startswith(b"%PDF")
    if name == "rnn":
        code, _, err = run_cli(capsys, "plot", "-a", tmp_path / "att", "--kind", "encoder", "-o", tmp_path / "x.png")
        assert_one_line_error(code, err, "no encoder self-attention")


def test_arcs_and_alignment_links_are_drawn(corpus, parsed_prepared_dir, tmp_path):
    _, model, cfg, toks, _ = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    line = read_lines(corpus["test"]["src"])[4]
    parse = read_conllu(corpus["test"]["conllu"])[4]
    [s] = attention_for_sentences(model, cfg, toks, [line], refs=[read_lines(corpus["test"]["tgt"])[4]], parses=[parse], device=CPU)
    sure = {(i, j) for i, j in (map(int, x.split("-")) for x in read_lines(corpus["test"]["align"])[4].split())}
    n_arcs = sum(h != 0 for h in parse.heads)
    for words in (True, False):
        fig = attention_figure(s, "cross", layer=0, head=None, words=words, links=(sure, set()))
        assert len(fig.axes) == 5  # a 2 x 2 grid and the colour bar
        assert fig.axes[-1].get_ylabel() == "attention weight" and fig.axes[-1].get_ylim() == (0.0, 1.0)
        ax = fig.axes[0]
        assert sum(isinstance(p, Arc) for p in ax.patches) == n_arcs
        assert {t.get_text() for t in ax.texts} >= set(parse.deprel) - {"root"}
        cells = len(sure) if words else len(words_to_subwords(sure, s.src_word_of_piece[:-1], s.tgt_word_of_piece[:-1]))
        assert sum(isinstance(p, Rectangle) for p in ax.patches) == cells
    fig = attention_figure(s, "decoder", layer=-1, head=1)  # target side: no source arcs
    assert len(fig.axes) == 2 and not any(isinstance(p, Arc) for p in fig.axes[0].patches)


def test_arc_labels_are_legible_and_never_overlap(corpus, parsed_prepared_dir, tmp_path):
    """On every test sentence, word and subword level, no two dependency labels' drawn boxes
    overlap (adjacent arcs once printed "amodnsubj"), and they are as large as the tick labels' 8 pt."""
    _, model, cfg, toks, _ = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    lines, parses = read_lines(corpus["test"]["src"])[:8], read_conllu(corpus["test"]["conllu"])[:8]
    for s in attention_for_sentences(model, cfg, toks, lines, parses=parses, device=CPU):
        labels = [d for d, h in zip(s.parse.deprel, s.parse.heads) if h]
        for words in (True, False):
            fig = attention_figure(s, "encoder", layer=-1, head=0, words=words)
            fig.canvas.draw()
            texts = [t for t in fig.axes[0].texts if t.get_text() in labels]
            assert sorted(t.get_text() for t in texts) == sorted(labels)
            assert min(t.get_fontsize() for t in texts) >= 8
            boxes = [t.get_window_extent() for t in texts]
            overlaps = [(texts[a].get_text(), texts[b].get_text()) for a in range(len(boxes)) for b in range(a + 1, len(boxes)) if boxes[a].overlaps(boxes[b])]
            assert overlaps == [], (s.source, words)


def test_plot_errors(capsys, corpus, parsed_prepared_dir, tmp_path):
    *_, path = load_tiny("transformer", corpus, parsed_prepared_dir, tmp_path)
    src, conllu = corpus["test"]["src"], corpus["test"]["conllu"]
    code, _, err = run_cli(capsys, "attention", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--sentences", "0,5", "-o", tmp_path / "att", "--device", "cpu")
    assert code == 0, err
    for args, fragments in [
        (["--head", "7"], ["head 7 out of range"]),
        (["--layer", "2"], ["layer 2 out of range"]),
        (["--head", "x"], ["--head"]),
        (["--sentences", "3"], ["line 3 is not in the export", "0, 5"]),
        (["-o", tmp_path / "fig.jpg"], [".png, .svg or .pdf"]),
    ]:
        argv = ["plot", "-a", tmp_path / "att", "-o", tmp_path / "fig.png", *args]
        code, _, err = run_cli(capsys, *argv)
        assert_one_line_error(code, err, *fragments)
    code, _, err = run_cli(capsys, "plot", "-a", tmp_path / "missing", "-o", tmp_path / "x.png")
    assert_one_line_error(code, err, "not found")
    code, _, err = run_cli(capsys, "plot", "-o", tmp_path / "x.png")
    assert_one_line_error(code, err, "-a OUT", "--checkpoint")
