"""Tests for syntaxnmt.experiments.decoding: one tiny word-vocabulary system trained with two seeds,
decoded as it is, with unknown-word replacement, averaged checkpoints, an ensemble, GNMT's
length penalty and each seed on its own (with the seed-aware statistics); the table lands in a
Markdown file."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import REFS, deep_merge, tiny_tree

from syntaxnmt.cli import main
from syntaxnmt.experiments.runner import run_set
from syntaxnmt.metrics import bleu_statistics, score, stratified_approximate_randomization, two_level_bootstrap
from syntaxnmt.textio import read_lines, write_lines

torch.set_num_threads(1)


def _yaml(path: Path, tree: dict) -> Path:
    path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    return path


def test_a_decoding_set_tabulates_every_row(corpus, tmp_path):
    tree = deep_merge(tiny_tree(corpus, tmp_path / "runs" / "word", tmp_path / "prep"), {"data": {"vocab": "word", "vocab_size": 6, "joint_vocab": False}, "model": {"tie_embeddings": "decoder"}, "train": {"keep_checkpoints": 2}})
    _yaml(tmp_path / "word.yaml", tree)
    src, ref = read_lines(corpus["test"]["src"])[:6], read_lines(corpus["test"]["tgt"])[:6]
    write_lines(tmp_path / "t.src", src)
    write_lines(tmp_path / "t.ref", ref)
    overrides = ["--train.threads=1", "--train.max_steps=10", "--train.valid_every=5", "--train.valid_max_sentences=5", "--decode.beam_size=2"]
    systems = {"name": "tiny-systems", "baseline": "word", "configs": {"word": "word.yaml"}, "seeds": [1, 2], "overrides": overrides, "test_sets": {"test": {"src": str(tmp_path / "t.src"), "ref": str(tmp_path / "t.ref")}}, "output": str(tmp_path / "systems.md")}
    run_set(_yaml(tmp_path / "systems.set.yaml", systems), log=lambda *a: None)
    lex = tmp_path / "lex.tsv"
    lex.write_text("apple\tRINGO\t1.0\t5\n")
    rows = {
        "plain": {"system": "word", "average": 2},
        "copy": {"system": "word", "average": 2, "decode": {"unk_replace": "copy"}},
        "dictionary": {"system": "word", "average": 2, "decode": {"unk_replace": "dictionary", "unk_dictionary": str(lex)}},
        "gnmt": {"system": "word", "decode": {"length_penalty_type": "gnmt", "length_penalty": 0.6}},
        "last": {"system": "word", "checkpoint": "last"},
        "ensemble": {"system": "word", "seeds": [1, 2]},
        "each seed": {"system": "word", "seeds": [1, 2], "per_seed": True},
        "each seed, copied": {"system": "word", "seeds": [1, 2], "per_seed": True, "decode": {"unk_replace": "copy"}},
    }
    out = tmp_path / "decoding.md"
    _yaml(tmp_path / "d.yaml", {"name": "tiny-decoding", "systems": "systems.set.yaml", "rows": rows, "output": str(out)})
    main(["decode-experiment", str(tmp_path / "d.yaml")])
    text = out.read_text()
    main(["decode-experiment", str(tmp_path / "d.yaml")])  # again: every row is read from its files
    assert out.read_text() == text
    assert "<!-- results:tiny-decoding -->" in text
    table = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| row")]
    assert [line.split(" | ")[0][2:] for line in table] == list(rows)
    cells = {line.split(" | ")[0][2:]: line.split(" | ") for line in table}
    assert "average of the last 2, seed 1" in cells["plain"][1] and "seeds 1+2 (ensemble)" in cells["ensemble"][1] and "last, seed 1" in cells["last"][1]
    n_unk = int(cells["plain"][9])
    assert cells["copy"][9] == str(n_unk) and cells["copy"][10].endswith(f"/ {n_unk}")  # every <unk> replaced
    work = tmp_path / "runs" / "word-seed1"
    assert (work / "averaged-last2.pt").is_file()
    hyps = read_lines(work / "test.tiny-decoding.copy.hyp")
    assert len(hyps) == 6 and not any("<unk>" in h for h in hyps)
    plain = read_lines(work / "test.tiny-decoding.plain.hyp")
    assert n_unk > 0 and sum(h.split().count("<unk>") for h in plain) == n_unk  # 2 words per language: unknowns abound

    # Each seed decoded on its own: one hypothesis file per seed's run, BLEU mean ± sd over them,
    # s_opt the sd, and the tests against the first row (one output, paired with each seed).
    assert "seeds 1, 2 (each alone)" in cells["each seed"][1]
    per_seed = [read_lines(tmp_path / "runs" / f"word-seed{s}" / "test.tiny-decoding.each-seed.hyp") for s in (1, 2)]
    bleus = [score(h, [ref], force=True).bleu for h in per_seed]
    assert cells["each seed"][3] == f"{statistics.mean(bleus):.2f} ± {statistics.stdev(bleus):.2f}"
    assert cells["each seed"][5].split(" / ")[1] == f"{statistics.stdev(bleus):.2f}"
    first = bleu_statistics(plain, [ref])
    p = stratified_approximate_randomization(np.stack([first, first]), np.stack([bleu_statistics(h, [ref]) for h in per_seed]))
    assert float(cells["each seed"][6].split()[0]) == pytest.approx(p, abs=5e-5)
    assert cells["each seed"][7] == "–" and cells["plain"][6] == cells["plain"][8] == "–"  # ASO: 3 seeds per row; the first row is the reference
    assert cells["each seed"][8] != "–"
    # The seed-level cell: Δ over seeds [two-level bootstrap CI]; Welch's p (the first row's one output paired with each seed).
    assert cells["plain"][12] == "– |"
    low, high = two_level_bootstrap([first, first], [bleu_statistics(h, [ref]) for h in per_seed], n_samples=1000)  # the decoding set's default bootstrap
    assert cells["each seed"][12].startswith(f"{statistics.mean(bleus) - score(plain, [ref], force=True).bleu:+.2f} [{low:+.2f}, {high:+.2f}]; p ")
    copied = [read_lines(tmp_path / "runs" / f"word-seed{s}" / "test.tiny-decoding.each-seed-copied.hyp") for s in (1, 2)]
    unk = sum(h.split().count("<unk>") for hyps in per_seed for h in hyps)
    assert unk > 0 and cells["each seed"][9] == str(unk) and cells["each seed, copied"][10].endswith(f"/ {unk}")
    assert not any("<unk>" in h for hyps in copied for h in hyps)
    assert "stratified over seed pairs" in text


# ---------------------------------------------------------------- the table, from made-up outputs (no training)

EDITS = [lambda r: r.replace("the", "a"), lambda r: " ".join(r.split()[:-1]), lambda r: " ".join(r.split()[1:]), lambda r: r.replace("a", "the")]


def _decoding_table(rows: dict[str, dict], outputs: dict[str, dict]) -> str:
    """decode-experiment's section for made-up outputs: ``outputs``: row -> seed (None: one output) -> hypotheses."""
    from syntaxnmt.experiments.decoding import DecodeSet, _table

    spec = DecodeSet.model_validate({"name": "made-up", "systems": "s.set.yaml", "rows": rows, "bootstrap": 100, "shuffles": 200})
    results = {label: {"test": {seed: {"hyps": hyps, "unk": 0, "seconds": 1.0} for seed, hyps in by_seed.items()}} for label, by_seed in outputs.items()}
    return _table(spec, results, {"test": (REFS, REFS)}, "d.yaml")


def test_a_decoding_table_with_rows_per_seed_states_its_power_and_the_aa_check():
    """Issue 50: rows decoded per seed get the lines of the experiment tables under the table: the
    smallest difference their seeds detect with 80 % power (from the first row's s_opt) and the
    A/A check on the first row's seeds (each split's Welch test counted here with scipy)."""
    import scipy.stats

    from syntaxnmt.metrics import aa_splits, minimum_detectable_difference

    # Seeds 1-2 near the references, 3-4 far from them: the A/A split {1, 2} / {3, 4} is a Welch false positive.
    first = {s: [" ".join(r.split()[:-1]) if i in dropped else r for i, r in enumerate(REFS)] for s, dropped in ((1, {0}), (2, {0, 1}), (3, set(range(8)) - {5}), (4, set(range(8)) - {5, 6}))}
    other = {s: [EDITS[s - 1](r) if i % 2 else r for i, r in enumerate(REFS)] for s in (1, 2, 3)}
    rows = {"each seed": {"system": "x", "seeds": [1, 2, 3, 4], "per_seed": True}, "other, each seed": {"system": "x", "seeds": [1, 2, 3], "per_seed": True}, "ensemble": {"system": "x", "seeds": [1, 2]}}
    text = _decoding_table(rows, {"each seed": first, "other, each seed": other, "ensemble": {None: REFS}})
    bleus = [score(first[s], [REFS], force=True).bleu for s in (1, 2, 3, 4)]
    sd = statistics.stdev(bleus)
    assert "Power (BLEU): with 4 seeds of 'each seed' and 3 seeds per other row, the smallest true difference of mean BLEU" in text
    assert f"test {minimum_detectable_difference(sd, 4, 3):.2f} BLEU (s_opt {sd:.2f})" in text
    welch = sum(scipy.stats.ttest_ind([bleus[i] for i in a], [bleus[i] for i in b], equal_var=False).pvalue < 0.05 for a, b in aa_splits(4))
    assert "A/A check (BLEU, calibration): the 4 seeds of 'each seed' split every way into two groups of 2 and 2 (3 splits; approximate randomization with 200 shuffles)" in text
    assert welch == 1 and "test: Welch over seeds 1/3 (33 %), 95 % CI excluding 0 " in text
    assert text.index("| each seed |") < text.index("Power (BLEU)") < text.index("A/A check")  # under the table

    # Two seeds of the first row: the power line, and the A/A check says why there is none.
    two = _decoding_table({"each seed": {"system": "x", "seeds": [1, 2], "per_seed": True}, "ensemble": {"system": "x", "seeds": [1, 2]}}, {"each seed": {s: first[s] for s in (1, 2)}, "ensemble": {None: REFS}})
    sd2 = statistics.stdev(bleus[:2])
    assert "Power (BLEU): with 2 seeds of 'each seed' and as many seeds per other row" in two and f"test {minimum_detectable_difference(sd2, 2, 2):.2f} BLEU (s_opt {sd2:.2f})" in two
    assert "A/A check (BLEU, calibration): not possible with 2 seeds of 'each seed'" in two
    # No row decoded per seed (one output each, as the recipes' tables): no such lines.
    single = _decoding_table({"plain": {"system": "x"}, "ensemble": {"system": "x", "seeds": [1, 2]}}, {"plain": {None: first[1]}, "ensemble": {None: REFS}})
    assert "Power" not in single and "A/A check" not in single
