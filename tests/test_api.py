"""The public Python API (``syntaxnmt.Translator``), through its public names only: the README's
lines run, translations and n-best scores are those of ``syntaxnmt translate``, a reference's score
is the log-probability the search gave the same output, alignments those ``syntaxnmt translate
--alignments`` writes (a plain and a full-context model; refused for an ensemble, as there),
attention of Transformer, RNN and ensembles, options honoured or refused, and ``import syntaxnmt``
stays cheap."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import deep_merge, tiny_tree, untrained_checkpoint
from test_cli import NBEST_LINE, run_cli, subprocess_env, write_lines

import syntaxnmt
from syntaxnmt.config import load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def best(trained_run) -> Path:
    return Path(trained_run.work_dir) / "best.pt"


@pytest.fixture(scope="module")
def sources(corpus) -> list[str]:
    return corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:6]


@pytest.fixture(scope="module")
def references(corpus) -> list[str]:
    return corpus["test"]["tgt"].read_text(encoding="utf-8").splitlines()[:6]


@pytest.fixture
def rnn_checkpoint(make_config, tmp_path) -> Path:
    cfg = make_config({"model": {"arch": "rnn", "rnn": {"hidden": 16, "attention_dim": 16}}})
    return untrained_checkpoint(cfg, tmp_path / "rnn.pt", seed=3)


def readme_python() -> str:
    """The README's Python block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "the README shows one Python block"
    return blocks[0]


def test_the_readmes_python_lines_run(best, tmp_path, monkeypatch):
    """The README's lines, run as written in a folder holding a run where the demo leaves it."""
    code = readme_python()
    assert len(code.strip().splitlines()) == 4  # import, load, translate, score
    run = tmp_path / "syntaxnmt-demo" / "run"
    run.mkdir(parents=True)
    shutil.copy(best, run / "best.pt")  # the checkpoint alone: its tokenizers travel with it
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    [result], [scored] = namespace["results"], namespace["scored"]
    assert isinstance(result, syntaxnmt.Translation) and result.source == "a house eats a red woman ."
    assert len(result.nbest) == 2 and result.nbest[0].score >= result.nbest[1].score
    assert (result.text, result.score) == (result.nbest[0].text, result.nbest[0].score)
    att = result.attention
    assert att.weights.shape == (len(att.target), len(att.source))
    assert att.source[-1] == "</s>" and att.target[-1] == "</s>"
    np.testing.assert_allclose(att.weights.sum(1), 1.0, atol=1e-4)
    src_words, tgt_words = result.alignment_words
    assert result.alignment and all(0 <= i < len(src_words) and 0 <= j < len(tgt_words) for i, j in result.alignment)
    assert (result.alignment, result.alignment_words) == (result.nbest[0].alignment, result.nbest[0].alignment_words)
    assert result.nbest[1].alignment and result.nbest[1].alignment_words == (src_words, result.nbest[1].text.split())  # every candidate its own
    assert scored.forced and scored.text == "aru ie ga aru akai onna wo taberu ." and scored.log_prob < 0
    assert scored.alignment and scored.attention is None
    assert scored.alignment_words == ("a house eats a red woman .".split(), "aru ie ga aru akai onna wo taberu .".split())


def test_translations_and_scores_are_those_of_the_translate_command(best, sources, capsys, monkeypatch, tmp_path):
    translator = syntaxnmt.Translator.from_checkpoint(best, device="cpu")
    results = translator.translate(sources, beam=3, nbest=2)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", "3", "--nbest", "2")
    assert code == 0, err
    lines = [NBEST_LINE.match(line) for line in out.splitlines()]
    assert [(int(m.group(1)), m.group(2), float(m.group(3))) for m in lines] == [
        (i, c.text, round(c.score, 4)) for i, r in enumerate(results) for c in r.nbest
    ]
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", "3")
    assert code == 0, err
    assert out.splitlines() == [r.text for r in results]


def test_scores_of_given_references(best, sources, references, rnn_checkpoint):
    """log P(reference | source) and the search's length-normalized score of it, for a model, an
    RNN and an ensemble (whose scores lie between its members'). That the score of the model's own
    output is the log-probability the search gave it is tested on token ids in
    tests/decoding/test_forced.py (a barely trained model's outputs do not re-encode alike)."""
    by_family = {}
    for name, paths in (("transformer", [best]), ("rnn", [rnn_checkpoint]), ("ensemble", [best, rnn_checkpoint])):
        translator = syntaxnmt.Translator.from_checkpoint(paths, device="cpu", length_penalty=0.6)
        scored = translator.score(sources, references, attention=True, alignments=name != "ensemble")
        for s, ref in zip(scored, references):
            assert s.forced and s.text == ref and s.nbest[0].text == ref and s.attention.members[0].forced
            n = len(s.attention.members[0].tgt_pieces)  # the reference's pieces and </s>
            assert s.log_prob < 0 and s.score == pytest.approx(s.log_prob / n**0.6)
            if name != "ensemble":
                assert {j for _, j in s.alignment} == set(range(len(ref.split())))
        by_family[name] = [s.log_prob for s in scored]
    assert by_family["transformer"] != by_family["rnn"]
    one = syntaxnmt.Translator.from_checkpoint([best, best], device="cpu").score(sources, references)
    np.testing.assert_allclose([s.log_prob for s in one], by_family["transformer"], rtol=1e-4)  # an ensemble of two copies


@pytest.mark.parametrize("family", ["transformer", "rnn", "ensemble"])
def test_alignments_and_attention_of_every_family(family, best, rnn_checkpoint, sources):
    paths = {"transformer": [best], "rnn": [rnn_checkpoint], "ensemble": [best, rnn_checkpoint]}[family]
    translator = syntaxnmt.Translator.from_checkpoint(paths, device="cpu")
    aligning = family != "ensemble"
    results = translator.translate(sources[:3] + [""], beam=2, nbest=2, alignments=aligning, attention=True)
    empty = results[-1]
    assert (empty.text, empty.score, empty.alignment, empty.attention) == ("", 0.0, None, None)
    for r in results[:-1]:
        att = r.attention
        assert len(att.members) == len(paths)
        assert att.members[0].translation == r.text and not att.members[0].forced
        if family == "rnn":
            assert att.members[0].encoder is None and att.members[0].cross.shape[:2] == (1, 1)
        # the word-level matrix is the mean of the members' layer/head means, pieces combined
        pieces = np.mean([m.cross.mean((0, 1)) for m in att.members], axis=0)
        rows = np.array([np.bincount(units, weights=row, minlength=len(att.source)) for units, row in [(_units(att.members[0].src_word_of_piece), p) for p in pieces]])
        by_target = np.array([rows[_units(att.members[0].tgt_word_of_piece) == u].mean(0) for u in range(len(att.target))])
        np.testing.assert_allclose(att.weights, by_target, atol=1e-5)
        if aligning:  # every target word gets a link (argmax of each of its pieces), to a real source word
            src_words, tgt_words = r.alignment_words
            assert {j for _, j in r.alignment} == set(range(len(tgt_words)))
            assert all(0 <= i < len(src_words) for i, _ in r.alignment)
    if not aligning:  # as translate --alignments, alignments read one model
        with pytest.raises(syntaxnmt.UserError, match="alignments read one model's attention"):
            translator.translate(sources[:1], alignments=True)
        with pytest.raises(syntaxnmt.UserError, match="load one checkpoint"):
            translator.score(sources[:1], sources[:1], alignments=True)


@pytest.fixture(scope="module")
def aligned_checkpoints(corpus, shared_prepared_dir, tmp_path_factory) -> dict[str, Path]:
    """Untrained models whose translations have many words: a plain one (the mean of every layer
    and head read as alignment) and one with a full-context alignment pass and a leak slot (its
    layer 0, head 1, read from that pass)."""
    tmp = tmp_path_factory.mktemp("api_alignments")
    plain = load_config(None, tiny_tree(corpus, tmp / "plain", shared_prepared_dir))
    aligned = {
        "data": {"train_align": str(corpus["train"]["align"])},
        "model": {"dec_layers": 2},
        "train": {"alignment": {"guided_weight": 1.0, "layer": -2, "head": 1, "full_context": True, "leaky": True}},
    }
    full = load_config(None, deep_merge(tiny_tree(corpus, tmp / "full", shared_prepared_dir), aligned))
    return {"plain": untrained_checkpoint(plain, tmp / "plain.pt", seed=1), "full_context": untrained_checkpoint(full, tmp / "full.pt", seed=3)}


def _links(line: str) -> list[tuple[int, int]]:
    return [(int(i), int(j)) for i, j in (link.split("-") for link in line.split())]


@pytest.mark.parametrize("model", ["plain", "full_context"])
def test_alignments_are_those_of_translate_alignments(model, aligned_checkpoints, corpus, capsys, tmp_path):
    """Beam 3, batches of 2, an empty line among them: the API's links of every translation (and of
    the same pairs scored) are the lines ``translate --alignments`` writes; another reading of the
    attention (for the full-context model: its translation pass, same layer and head) differs."""
    ckpt = aligned_checkpoints[model]
    lines = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:7]
    lines.insert(3, "")
    src = write_lines(tmp_path / "in.txt", lines)
    translator = syntaxnmt.Translator.from_checkpoint(ckpt, device="cpu")
    results = translator.translate(lines, beam=3, batch_size=2, alignments=True)
    other = {"plain": ["--align-head", "0"], "full_context": ["--align-layer", "0", "--align-head", "1"]}[model]
    written = {}
    for name, options in (("configured", []), ("other", other)):
        path = tmp_path / f"{name}.align"
        code, out, err = run_cli(capsys, "translate", "--checkpoint", ckpt, "-i", src, "--beam", "3", "--batch-size", "2", "--alignments", path, *options)
        assert code == 0, err
        assert out.splitlines() == [r.text for r in results]
        written[name] = [_links(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert sum(len(r.text.split()) > 1 for r in results) >= 4  # what makes the comparison worth making
    assert [r.alignment or [] for r in results] == written["configured"]
    assert written["other"] != written["configured"]
    assert results[3].alignment is None and results[3].alignment_words is None
    assert all(r.alignment for k, r in enumerate(results) if k != 3)
    for r in results[:3] + results[4:]:
        src_words, tgt_words = r.alignment_words
        assert {j for _, j in r.alignment} == set(range(len(tgt_words))) and all(0 <= i < len(src_words) for i, _ in r.alignment)
    scored = translator.score(lines, [r.text for r in results], alignments=True, batch_size=2)
    assert [s.alignment for s in scored] == [r.alignment for r in results]
    assert [s.alignment_words for s in scored] == [r.alignment_words for r in results]


def _units(word_of_piece: list[int]) -> np.ndarray:
    """The unit of every piece: its word, and the final </s> a unit of its own."""
    w = np.asarray(word_of_piece)
    return np.where(w >= 0, w, w.max() + 1)


def test_hard_attention_at_decoding_is_honoured(best, sources, capsys, tmp_path):
    soft = syntaxnmt.Translator.from_checkpoint(best, device="cpu").translate(sources, beam=2, attention=True)
    hard_translator = syntaxnmt.Translator.from_checkpoint(best, device="cpu", hard_attention="decode")
    hard = hard_translator.translate(sources, beam=2, attention=True)
    for r in hard:  # every cross-attention row of every layer and head is one-hot
        cross = r.attention.members[0].cross
        assert np.all(cross.max(-1) == 1.0) and np.all((cross == 0) | (cross == 1))
    assert all(np.any((r.attention.members[0].cross > 0) & (r.attention.members[0].cross < 1)) for r in soft)
    assert [r.score for r in hard] != [r.score for r in soft]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", "2", "--nbest", "1", "--model.hard_attention=decode")
    assert code == 0, err
    assert [float(NBEST_LINE.match(line).group(3)) for line in out.splitlines()] == [round(r.score, 4) for r in hard]


def test_options_are_validated(best, sources):
    translator = syntaxnmt.Translator.from_checkpoint(best, device="cpu")
    with pytest.raises(syntaxnmt.UserError, match="unknown option 'beams'"):
        syntaxnmt.Translator.from_checkpoint(best, device="cpu", beams=3)
    with pytest.raises(syntaxnmt.UserError, match="decode.length_penalty"):
        translator.translate(sources, length_penalty="long")
    with pytest.raises(syntaxnmt.UserError, match="given to from_checkpoint"):
        translator.translate(sources, hard_attention="decode")
    with pytest.raises(syntaxnmt.UserError, match="nbest 4 is larger than the beam size 2"):
        translator.translate(sources, beam=2, nbest=4)
    with pytest.raises(syntaxnmt.UserError, match="cannot change after training"):
        syntaxnmt.Translator.from_checkpoint(best, device="cpu", overrides={"model": {"attention_normalizer": "sparsemax"}})
    with pytest.raises(syntaxnmt.UserError, match="2 sources but 1 references"):
        translator.score(sources[:2], ["a"])
    with pytest.raises(TypeError, match="a list of strings"):
        translator.translate("the dog sleeps .")
    # an option for one call changes that call only
    greedy = translator.translate(sources, beam=1, length_penalty=0.0)
    assert [r.score for r in greedy] == [pytest.approx(r.log_prob) for r in greedy]
    assert translator.decode.length_penalty == 1.0 and translator.decode.beam_size == 3


def test_a_run_folder_loads_its_best_checkpoint(trained_run, sources):
    from_folder = syntaxnmt.Translator.from_checkpoint(trained_run.work_dir, device="cpu")
    assert from_folder.checkpoints == [Path(trained_run.work_dir) / "best.pt"]
    with pytest.raises(syntaxnmt.UserError, match="without best.pt or last.pt"):
        syntaxnmt.Translator.from_checkpoint(Path(trained_run.work_dir).parent, device="cpu")


def test_ctranslate2_engine_translates_behind_the_same_interface(best, sources, tmp_path):
    """``engine="ctranslate2"``: the same :meth:`Translator.translate` searched by CTranslate2 --
    greedy texts those of the PyTorch engine, an empty line empty in its place -- and what reads
    the PyTorch model (scoring, alignments, attention, document context, ensembles) refused in one line."""
    pytest.importorskip("ctranslate2")
    torch_results = syntaxnmt.Translator.from_checkpoint(best, device="cpu").translate(["", *sources], beam=1)
    ct2 = syntaxnmt.Translator.from_checkpoint(best, device="cpu", engine="ctranslate2", threads=1)
    results = ct2.translate(["", *sources], beam=1)
    assert [r.text for r in results] == [r.text for r in torch_results] and results[0].text == "" and results[1].text
    assert ct2.members == [] and ct2.decode.beam_size == syntaxnmt.Translator.from_checkpoint(best, device="cpu").decode.beam_size
    for call, message in [
        (lambda: ct2.score(sources[:1], ["a"]), "scoring reads the PyTorch model"),
        (lambda: ct2.translate(sources[:1], alignments=True), "alignments reads the PyTorch model"),
        (lambda: ct2.translate(sources[:1], attention=True), "attention reads the PyTorch model"),
        (lambda: ct2.translate(sources[:1], docs=["d"]), "--docs: document context needs --engine torch"),
        (lambda: syntaxnmt.Translator.from_checkpoint([best, best], device="cpu", engine="ctranslate2"), "translates with one model"),
        (lambda: syntaxnmt.Translator.from_checkpoint(best, device="cpu", engine="onnx"), "engine 'onnx': give one of torch, ctranslate2"),
    ]:
        with pytest.raises(syntaxnmt.UserError, match=re.escape(message)):
            call()


def test_import_syntaxnmt_is_cheap_and_exports_the_api():
    probe = "import sys, syntaxnmt; print('torch' in sys.modules, sorted(n for n in syntaxnmt.__all__))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=subprocess_env(), cwd=ROOT, timeout=120, check=True).stdout
    assert out.split(" ", 1)[0] == "False"  # the API (and torch) load on first use
    assert syntaxnmt.Translator.__module__ == "syntaxnmt.api" and {"Translator", "Translation", "Candidate", "Attention", "UserError"} <= set(dir(syntaxnmt))
    with pytest.raises(AttributeError):
        syntaxnmt.no_such_name  # noqa: B018
