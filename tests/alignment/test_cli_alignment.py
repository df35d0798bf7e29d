"""The word-alignment commands: ``aer``, ``align-external``, ``align`` and ``train-joint``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import deep_merge, tiny_tree
from test_cli import assert_one_line_error, run_cli, write_lines

from syntaxnmt.data.links import aer, format_links, read_alignments, subwords_to_words

# ---------------------------------------------------------------- aer


@pytest.fixture
def gold_files(tmp_path):
    gold = write_lines(tmp_path / "gold", ["1-1 2p2 2-3", "1-1"])  # 1-indexed, one possible link
    src = write_lines(tmp_path / "src", ["a b", "c"])
    tgt = write_lines(tmp_path / "tgt", ["x y z", "w v"])
    return gold, src, tgt


def test_aer_on_hand_made_files(capsys, tmp_path, gold_files):
    gold, src, tgt = gold_files
    # S = {0-0, 1-2, 0-0'}, P = S + {1-1}; A = {0-0, 1-1, 0-1'}: |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 3.
    hyp = write_lines(tmp_path / "hyp", ["0-0 1-1", "0-1"])
    code, out, err = run_cli(capsys, "aer", "--gold", gold, "--hyp", hyp, "--one-indexed-gold", "--src", src, "--tgt", tgt)
    assert code == 0, err
    assert out.strip() == "AER 50.00  precision 66.67  recall 33.33"
    perfect = write_lines(tmp_path / "perfect", ["0-0 1-2", "0-0"])
    code, out, _ = run_cli(capsys, "aer", "--gold", gold, "--hyp", perfect, "--one-indexed-gold")
    assert out.startswith("AER 0.00  precision 100.00  recall 100.00")


@pytest.mark.parametrize(
    "hyp_lines, extra, fragments",
    [
        (["0-0", "0-x"], [], ["hyp:2", "malformed alignment link '0-x'"]),
        (["0-0 5-1", "0-0"], ["--src", "src", "--tgt", "tgt"], ["hyp:1", "'5-1': source index out of range"]),
        (["0-0", "0-2"], ["--bitext", "bitext"], ["hyp:2", "'0-2': target index out of range"]),
        (["0-0 1p1", "0-0"], [], ["hyp:1", "possible (ipj) links"]),
        (["0-0"], [], ["2 lines", "1 lines"]),
    ],
)
def test_aer_errors_name_the_line(capsys, tmp_path, gold_files, hyp_lines, extra, fragments):
    gold, _, _ = gold_files
    write_lines(tmp_path / "bitext", ["a b ||| x y z", "c ||| w v"])
    hyp = write_lines(tmp_path / "hyp", hyp_lines)
    extra = [str(tmp_path / e) if e in ("src", "tgt", "bitext") else e for e in extra]
    code, _, err = run_cli(capsys, "aer", "--gold", gold, "--hyp", hyp, "--one-indexed-gold", *extra)
    assert_one_line_error(code, err, *fragments)


def test_aer_zero_in_one_indexed_gold(capsys, tmp_path):
    gold = write_lines(tmp_path / "gold", ["1-1", "0-1"])
    hyp = write_lines(tmp_path / "hyp", ["0-0", "0-0"])
    code, _, err = run_cli(capsys, "aer", "--gold", gold, "--hyp", hyp, "--one-indexed-gold")
    assert_one_line_error(code, err, "gold:2", "index 0")


# ---------------------------------------------------------------- align-external


def _config(path: Path, tree: dict) -> Path:
    path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    return path


def test_align_external_on_a_tiny_corpus(capsys, tmp_path, corpus):
    n = 300
    src_lines = corpus["train"]["src"].read_text().splitlines()[:n]
    tgt_lines = corpus["train"]["tgt"].read_text().splitlines()[:n]
    gold = [s for s, _ in read_alignments(corpus["train"]["align"])[:n]]
    src = write_lines(tmp_path / "train.src", src_lines[:5] + [""] + src_lines[5:])  # line 6 is an empty pair
    tgt = write_lines(tmp_path / "train.tgt", tgt_lines[:5] + ["ignored"] + tgt_lines[5:])
    out = tmp_path / "train.align"
    cfg = _config(tmp_path / "c.yaml", {"data": {"train_src": str(src), "train_tgt": str(tgt), "dev_src": str(src), "dev_tgt": str(tgt), "train_align": str(out)}})
    code, _, err = run_cli(capsys, "align-external", cfg, "--symmetrize", "intersection")
    assert code == 0, err
    lines = out.read_text().splitlines()
    assert len(lines) == n + 1 and lines[5] == ""
    links = [s for s, _ in read_alignments(out, src_lengths=[len(x.split()) for x in src.read_text().splitlines()], tgt_lengths=[len(x.split()) for x in tgt.read_text().splitlines()])]
    links = links[:5] + links[6:]
    assert aer(gold, gold, links).precision > 0.8  # intersection: precise links
    other = tmp_path / "union.align"
    code, _, err = run_cli(capsys, "align-external", cfg, "--symmetrize", "union", "-o", other)
    assert code == 0, err
    union, inter = read_alignments(other), read_alignments(out)
    # eflomal cannot be seeded, so the two runs differ in detail (their intersections by a few
    # percent); a union has clearly more links (about 1.2-1.3x here; 1.19x was seen once).
    assert len(union) == len(inter) and sum(len(u[0]) for u in union) > 1.05 * sum(len(i[0]) for i in inter)
    code, _, err = run_cli(capsys, "align-external", cfg, "--symmetrize", "diagonal")
    assert_one_line_error(code, err, "unknown symmetrization 'diagonal'")


# ---------------------------------------------------------------- align and train-joint


def test_align_with_a_tiny_trained_model(capsys, trained_run, corpus, tmp_path):
    src, tgt = corpus["test"]["src"], corpus["test"]["tgt"]
    out = tmp_path / "hyp.align"
    code, _, err = run_cli(capsys, "align", "--checkpoint", Path(trained_run.work_dir) / "best.pt", "--src", src, "--tgt", tgt, "-o", out)
    assert code == 0, err
    links = read_alignments(out)
    src_lines, tgt_lines = src.read_text().splitlines(), tgt.read_text().splitlines()
    assert len(links) == len(src_lines)
    for (sure, _), s, t in zip(links, src_lines, tgt_lines):
        assert {j for _, j in sure} == set(range(len(t.split())))  # argmax: every target word gets a link
        assert all(i < len(s.split()) for i, _ in sure)
    code, out_text, err = run_cli(capsys, "aer", "--gold", corpus["test"]["align"], "--hyp", out, "--src", src, "--tgt", tgt)
    assert code == 0 and out_text.startswith("AER "), err
    # With a config and one head, to stdout; a threshold of 0 links every word pair.
    code, text, err = run_cli(capsys, "align", _config(tmp_path / "c.yaml", trained_run.model_dump(mode="json")), "--src", src, "--tgt", tgt, "--layer", "0", "--head", "2", "--method", "threshold", "--threshold", "0")
    assert code == 0, err
    first = text.splitlines()[0].split()
    assert len(first) == len(src_lines[0].split()) * len(tgt_lines[0].split())


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--layer", "3"], ["alignment layer 3 out of range"]),
        (["--head", "middle"], ["--layer/--head", "'middle'"]),
        (["--symmetrize", "gdfa", "--reverse-checkpoint", "missing.pt"], ["missing.pt", "checkpoint not found"]),
    ],
)
def test_align_errors(capsys, trained_run, corpus, tmp_path, args, fragments):
    args = [str(tmp_path / a) if a.endswith(".pt") else a for a in args]
    code, _, err = run_cli(capsys, "align", "--checkpoint", Path(trained_run.work_dir) / "best.pt", "--src", corpus["test"]["src"], "--tgt", corpus["test"]["tgt"], *args)
    assert_one_line_error(code, err, *fragments)


def test_align_line_count_mismatch(capsys, trained_run, corpus, tmp_path):
    short = write_lines(tmp_path / "short", ["the dog sleeps ."])
    code, _, err = run_cli(capsys, "align", "--checkpoint", Path(trained_run.work_dir) / "best.pt", "--src", corpus["test"]["src"], "--tgt", short)
    assert_one_line_error(code, err, "line-aligned")


def test_train_joint_and_symmetrized_align(capsys, corpus, shared_prepared_dir, tmp_path):
    tree = deep_merge(tiny_tree(corpus, tmp_path / "joint", shared_prepared_dir), {"train": {"max_steps": 4, "valid_every": 4, "alignment": {"symmetry_weight": 1.0}}})
    cfg = _config(tmp_path / "joint.yaml", tree)
    code, _, err = run_cli(capsys, "train-joint", cfg)
    assert code == 0, err
    fwd, rev = tmp_path / "joint" / "forward" / "best.pt", tmp_path / "joint" / "reverse" / "best.pt"
    assert fwd.is_file() and rev.is_file()
    code, _, err = run_cli(capsys, "train-joint", cfg)
    assert_one_line_error(code, err, "--resume")
    code, _, err = run_cli(capsys, "train", cfg)
    assert_one_line_error(code, err, "train-joint")
    # The reverse model translates target-language text.
    code, out, err = run_cli(capsys, "translate", "--checkpoint", rev, "-i", corpus["test"]["tgt"])
    assert code == 0 and len(out.splitlines()) == len(corpus["test"]["tgt"].read_text().splitlines()), err
    src, tgt = corpus["test"]["src"], corpus["test"]["tgt"]
    results = {}
    for name, extra in (("fwd", []), ("inter", ["--reverse-checkpoint", rev, "--symmetrize", "intersection"]), ("gdfa", ["--reverse-checkpoint", rev, "--symmetrize", "gdfa"])):
        out = tmp_path / f"{name}.align"
        code, _, err = run_cli(capsys, "align", "--checkpoint", fwd, "--src", src, "--tgt", tgt, "-o", out, *extra)
        assert code == 0, err
        results[name] = [s for s, _ in read_alignments(out)]
    assert all(i <= f for i, f in zip(results["inter"], results["fwd"]))
    assert all(i <= g for i, g in zip(results["inter"], results["gdfa"]))
    # --shift reads both directions Shift-Att's way before they are symmetrized.
    for name, ckpt, a, b, extra in (
        ("fwd-shift", fwd, src, tgt, []),
        ("rev-shift", rev, tgt, src, []),
        ("inter-shift", fwd, src, tgt, ["--reverse-checkpoint", rev, "--symmetrize", "intersection"]),
    ):
        out = tmp_path / f"{name}.align"
        code, _, err = run_cli(capsys, "align", "--checkpoint", ckpt, "--src", a, "--tgt", b, "-o", out, "--shift", *extra)
        assert code == 0, err
        results[name] = [s for s, _ in read_alignments(out)]
    assert results["fwd-shift"] != results["fwd"]
    expected = [f & {(i, j) for j, i in r} for f, r in zip(results["fwd-shift"], results["rev-shift"])]
    assert any(expected) and results["inter-shift"] == expected


# ---------------------------------------------------------------- full-context and leaky heads, self-training


def test_align_reads_the_full_context_pass_as_trained(capsys, make_config, corpus, tmp_path):
    import torch

    from syntaxnmt.alignment.extract import attention_links
    from syntaxnmt.checkpoint import save_checkpoint
    from syntaxnmt.data.batches import make_batch
    from syntaxnmt.data.prepare import load_tokenizers
    from syntaxnmt.decoding.loading import load_model
    from syntaxnmt.model import build_model

    cfg = make_config({"data": {"train_align": str(corpus["train"]["align"])}, "model": {"dec_layers": 2}, "train": {"alignment": {"guided_weight": 1.0, "layer": -2, "head": 1, "full_context": True, "leaky": True}}})
    toks = load_tokenizers(cfg)
    torch.manual_seed(3)
    ckpt = tmp_path / "full.pt"  # an untrained model with its full-context pass and leak slot
    model = build_model(cfg, len(toks.src), len(toks.tgt))
    leak = model.decoder[0].cross_attn.leak
    with torch.no_grad():  # a leak key that some queries prefer to every source word, others not
        leak.key.mul_(6.0)
    save_checkpoint(ckpt, {"config": cfg.model_dump(mode="json"), "model": model.state_dict()})
    src, tgt = corpus["test"]["src"], corpus["test"]["tgt"]
    code, default, err = run_cli(capsys, "align", "--checkpoint", ckpt, "--src", src, "--tgt", tgt)
    assert code == 0, err
    code, renormalized, err = run_cli(capsys, "align", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--no-null")
    assert code == 0, err
    # By hand: head 1 of the full-context pass, argmax per target piece; by default a piece whose
    # leak weight is at least its largest source weight has no link (the leak as null), with
    # --no-null the rows are renormalized without the leak and every piece is linked.
    model, _, toks = load_model(ckpt, torch.device("cpu"))
    src_lines, tgt_lines = src.read_text().splitlines(), tgt.read_text().splitlines()
    s_ids, s_words = toks.src.encode_words([x.split() for x in src_lines])
    t_ids, t_words = toks.tgt.encode_words([x.split() for x in tgt_lines])
    with torch.no_grad():
        out = model(make_batch(s_ids, t_ids, range(len(s_ids))), need_weights=True)
    w, lam = out.alignment_attention[:, 1], out.alignment_leak[:, 1]
    assert torch.all(lam > 0)
    lens = [len(x) for x in s_ids], [len(x) for x in t_ids]
    for text, pieces in ((renormalized, attention_links(w / w.sum(-1, keepdim=True), *lens)), (default, attention_links(w, *lens, null=lam))):
        expected = [format_links(subwords_to_words(p, sw, tw)) for p, sw, tw in zip(pieces, s_words, t_words)]
        assert text.splitlines() == expected
    n_links = [sum(len(line.split()) for line in text.splitlines()) for text in (default, renormalized)]
    assert 0 < n_links[0] < n_links[1]  # the null took some target words, not all
    # --layer reads the model's own (causal) pass instead.
    code, causal, err = run_cli(capsys, "align", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--layer", "0", "--head", "1")
    assert code == 0 and causal != default, err
    # The sweep has the full-context readings too, named with the options that reproduce them.
    code, out_text, err = run_cli(capsys, "align-sweep", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--gold", corpus["test"]["align"], "-o", tmp_path / "s.json")
    assert code == 0, err
    readings = json.loads((tmp_path / "s.json").read_text())["readings"]
    rows = [r for r in readings if r["full_context"] and not r["null"]]
    assert [(r["head"], r["shift"]) for r in rows] == [(h, s) for s in (False, True) for h in (0, 1, 2, 3, None)]
    assert rows[1]["options"] == "--head 1 --no-null" and "| 0 (full context) | 1 |" in out_text
    # and, with the leak as null as align reads it by default, the one head that has the leak slot
    # (train.alignment.head 1): no "leak as null" rows for heads 0, 2, 3 or their average, which have none
    nulls = [r for r in readings if r["null"]]
    assert [(r["head"], r["shift"]) for r in nulls] == [(1, False), (1, True)]
    assert nulls[0]["options"] == "--head 1" and "| 0 (full context) (leak as null) | 1 |" in out_text
    assert "| 0 (full context) (leak as null) | 0 |" not in out_text and "(leak as null) | average |" not in out_text
    sweep_aer = {(r["head"], r["null"]): r["aer"] for r in readings if r["full_context"] and not r["shift"]}
    gold = read_alignments(corpus["test"]["align"])
    for text, null in ((default, True), (renormalized, False)):  # the sweep's figures are those of align's output
        hyp = [{tuple(map(int, x.split("-"))) for x in line.split()} for line in text.splitlines()]
        assert sweep_aer[(1, null)] == pytest.approx(aer([s for s, _ in gold], [p for _, p in gold], hyp).aer)


def test_self_training_links_load_as_train_align(capsys, trained_run, corpus, tmp_path):
    """The self-training recipe: the model's own shifted links of its training corpus become data.train_align."""
    from conftest import deep_merge, quiet, tiny_tree

    from syntaxnmt.config import load_config
    from syntaxnmt.data.prepare import load_split, prepare

    links = tmp_path / "self.align"
    code, _, err = run_cli(capsys, "align", "--checkpoint", Path(trained_run.work_dir) / "best.pt", "--src", corpus["train"]["src"], "--tgt", corpus["train"]["tgt"], "--shift", "-o", links)
    assert code == 0, err
    tree = deep_merge(tiny_tree(corpus, tmp_path / "self", tmp_path / "prepared"), {"data": {"train_align": str(links)}, "train": {"alignment": {"guided_weight": 1.0, "layer": -1, "head": 0}}})
    cfg = load_config(None, tree)
    prepare(cfg, log=quiet)
    split = load_split(cfg, "train")
    written = read_alignments(links)
    assert len(written) == len(corpus["train"]["src"].read_text().splitlines()) and all(s for s, _ in written)
    lines = [int(x) for x in (tmp_path / "prepared" / "train.lines").read_text().split()]
    for k in range(len(split)):  # the prepared subword links are the model's word links
        pieces = {tuple(x) for x in split["align"][k].reshape(-1, 2).tolist()}
        assert subwords_to_words(pieces, split["src_word"][k], split["tgt_word"][k]) == written[lines[k] - 1][0]
