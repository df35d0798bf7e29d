"""``syntaxnmt translate --alignments``: word links with every translation, equal to ``align`` on the same output."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_cli import NBEST_LINE, assert_one_line_error, run_cli, write_lines

from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint


def _align(capsys, tmp_path, ckpt, src_lines, tgt_lines, *options) -> list[str]:
    """What `syntaxnmt align --normalize` prints for these pairs."""
    src, tgt = write_lines(tmp_path / "a.src", src_lines), write_lines(tmp_path / "a.tgt", tgt_lines)
    code, out, err = run_cli(capsys, "align", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--normalize", *options)
    assert code == 0, err
    return out.splitlines()


@pytest.fixture(scope="module")
def configured_checkpoint(trained_run, tmp_path_factory) -> Path:
    """The trained run's model, its config saying train.alignment.layer 0, head 2."""
    state = load_checkpoint(Path(trained_run.work_dir) / "best.pt")
    state["config"]["train"]["alignment"].update(layer=0, head=2)
    path = tmp_path_factory.mktemp("configured") / "head2.pt"
    save_checkpoint(path, state)
    return path


def test_beam_nbest_batched_links_equal_align_on_the_output(capsys, trained_run, corpus, tmp_path):
    ckpt = Path(trained_run.work_dir) / "best.pt"
    inputs = corpus["test"]["src"].read_text().splitlines()[:9]
    inputs.insert(4, "")  # an empty line gets an empty translation and no links
    src = write_lines(tmp_path / "in.txt", inputs)
    links_path = tmp_path / "out.align"
    code, out, err = run_cli(capsys, "translate", "--checkpoint", ckpt, "-i", src, "--beam", "3", "--nbest", "2", "--batch-size", "4", "--alignments", links_path)
    assert code == 0, err
    rows = [NBEST_LINE.match(line) for line in out.splitlines()]
    links = links_path.read_text().splitlines()
    assert len(links) == len(rows) == 2 * (len(inputs) - 1) + 1
    pairs = [(inputs[int(m.group(1))], m.group(2)) for m in rows]
    assert links[8] == "" and pairs[8] == ("", "")
    kept = [k for k, (s, t) in enumerate(pairs) if s and t]
    expected = _align(capsys, tmp_path, ckpt, [pairs[k][0] for k in kept], [pairs[k][1] for k in kept])
    assert [links[k] for k in kept] == expected
    assert all(links[k] for k in kept)  # argmax: every output word has a link
    assert len({pairs[k][1] for k in kept}) > len(inputs) - 1  # the second hypotheses differ from the first


def test_the_configured_head_is_the_one_used(capsys, configured_checkpoint, corpus, tmp_path):
    inputs = corpus["test"]["src"].read_text().splitlines()[:12]
    src = write_lines(tmp_path / "in.txt", inputs)
    got = {}
    for name, options in (("configured", []), ("override", ["--align-layer", "0", "--align-head", "1"]), ("shifted", ["--align-shift"])):
        path = tmp_path / f"{name}.align"
        code, out, err = run_cli(capsys, "translate", "--checkpoint", configured_checkpoint, "-i", src, "--beam", "1", "--batch-size", "5", "--alignments", path, *options)
        assert code == 0, err
        got[name] = path.read_text().splitlines()
        outputs = out.splitlines()
    head2 = _align(capsys, tmp_path, configured_checkpoint, inputs, outputs, "--layer", "0", "--head", "2")
    averaged = _align(capsys, tmp_path, configured_checkpoint, inputs, outputs, "--layer", "average", "--head", "average")
    head1 = _align(capsys, tmp_path, configured_checkpoint, inputs, outputs, "--layer", "0", "--head", "1")
    shifted = _align(capsys, tmp_path, configured_checkpoint, inputs, outputs, "--shift")
    assert head2 != averaged and head2 != head1 and head2 != shifted  # the readings are distinguishable here
    assert got["configured"] == head2 == _align(capsys, tmp_path, configured_checkpoint, inputs, outputs)
    assert got["override"] == head1
    assert got["shifted"] == shifted


def test_alignments_for_translations_api(trained_run, corpus):
    """The function a server calls: n-best lists in, one link set per hypothesis out."""
    from syntaxnmt.alignment.extract import AttentionReading, alignments_for_translations
    from syntaxnmt.decoding.loading import load_model
    from syntaxnmt.errors import UserError

    model, cfg, toks = load_model(Path(trained_run.work_dir) / "best.pt", torch.device("cpu"))
    src = corpus["test"]["src"].read_text().splitlines()[:2]
    tgt = corpus["test"]["tgt"].read_text().splitlines()[:2]
    links = alignments_for_translations(model, cfg, toks, [src[0], "", src[1]], [[tgt[0], ""], [""], [tgt[1]]], torch.device("cpu"), reading=AttentionReading(0, 1, shift=True))
    assert [len(x) for x in links] == [2, 1, 1] and links[0][1] == set() and links[1][0] == set()
    assert {j for _, j in links[0][0]} == set(range(len(tgt[0].split())))
    with pytest.raises(UserError, match="head 4 out of range"):
        alignments_for_translations(model, cfg, toks, src, [[t] for t in tgt], torch.device("cpu"), reading=AttentionReading(0, 4))


@pytest.mark.parametrize(
    "options, fragments",
    [
        (["--align-head", "1"], ["--align-layer/--align-head/--align-shift", "--alignments FILE"]),
        (["--alignments", "x.align", "--align-layer", "3"], ["alignment layer 3 out of range"]),
        (["--alignments", "x.align", "--align-head", "first"], ["--layer/--head takes an integer or 'average'"]),
        (["--alignments", "x.align", "--engine", "ctranslate2"], ["--alignments reads one PyTorch model's attention"]),
    ],
)
def test_alignment_option_errors(capsys, trained_run, corpus, tmp_path, options, fragments):
    options = [str(tmp_path / o) if o.endswith(".align") else o for o in options]
    code, out, err = run_cli(capsys, "translate", "--checkpoint", Path(trained_run.work_dir) / "best.pt", "-i", corpus["test"]["src"], *options)
    assert_one_line_error(code, err, *fragments)
    assert out == "" and not (tmp_path / "x.align").exists()
