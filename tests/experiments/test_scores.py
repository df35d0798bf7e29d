"""The scores file every run keeps (``scores.json.gz``) and the collected results folder."""

from __future__ import annotations

import gzip
import json

import pytest
import sacrebleu

from syntaxnmt.errors import UserError
from syntaxnmt.experiments.scores import SCORES_FILE, find_run_scores, label_slug, read_run_scores, results_file, write_run_scores
from syntaxnmt.metrics import bleu_from_statistics, chrf_from_statistics
from syntaxnmt.textio import write_lines

REFS = ["the cat sat on the mat", "A dog barked at the old man", "she reads a book"]
HYPS = ["the cat sat on a mat", "a dog barked at the man", "She reads a long book"]
RECORD = {"steps": 40, "train_seconds": 12.5, "train_tokens": 900, "best": 3.25, "params": 1234, "hyps": {"t": "ignored"}}


def test_scores_file_keeps_hypotheses_and_sentence_statistics(tmp_path):
    write_lines(tmp_path / "t.hyp", HYPS)
    path = write_run_scores(tmp_path / "run", "+ input features", 2, RECORD, {"t": str(tmp_path / "t.hyp")}, {"t": REFS}, [(20, 1.5), (40, 3.25)])
    assert path == tmp_path / "run" / SCORES_FILE
    record = read_run_scores(path)
    assert {k: record[k] for k in ("steps", "train_seconds", "train_tokens", "best", "params")} == {k: RECORD[k] for k in ("steps", "train_seconds", "train_tokens", "best", "params")}
    assert record["dev_curve"] == [[20, 1.5], [40, 3.25]]
    kept = record["tests"]["t"]
    assert kept["hyps"] == HYPS and kept["bleu"].shape == (3, 10)
    assert float(bleu_from_statistics(kept["bleu"].sum(0))) == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert float(bleu_from_statistics(kept["bleu_lc"].sum(0))) == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS], lowercase=True).score)
    assert chrf_from_statistics(kept["chrf"]) == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    # Byte-for-byte reproducible: gzip without a timestamp, sorted JSON.
    first = path.read_bytes()
    write_run_scores(tmp_path / "run", "+ input features", 2, RECORD, {"t": str(tmp_path / "t.hyp")}, {"t": REFS}, [(20, 1.5), (40, 3.25)])
    assert path.read_bytes() == first
    assert json.loads(gzip.decompress(first))["label"] == "+ input features"
    assert list((tmp_path / "run").iterdir()) == [path]  # no temporary left


def test_find_prefers_the_run_folder_then_the_results_folder(tmp_path):
    assert label_slug("+ input features, random-tree control") == "input-features-random-tree-control"
    committed = results_file(tmp_path / "results", "+ tree distance", 3)
    assert committed == tmp_path / "results" / "tree-distance-seed3.json.gz"
    assert find_run_scores(tmp_path / "run", tmp_path / "results", "+ tree distance", 3) is None
    committed.parent.mkdir()
    committed.write_bytes(b"x")
    assert find_run_scores(tmp_path / "run", tmp_path / "results", "+ tree distance", 3) == committed
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / SCORES_FILE).write_bytes(b"y")
    assert find_run_scores(tmp_path / "run", tmp_path / "results", "+ tree distance", 3) == tmp_path / "run" / SCORES_FILE


def test_unreadable_scores_file_is_a_user_error(tmp_path):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(UserError, match="bad.json.gz: not a readable scores file"):
        read_run_scores(bad)
    old = tmp_path / "old.json.gz"
    old.write_bytes(gzip.compress(json.dumps({"format": 0}).encode()))
    with pytest.raises(UserError, match="format 0, expected 1"):
        read_run_scores(old)


def test_scores_file_keeps_contrastive_outcomes_and_checks_them(tmp_path):
    """A run scored on a contrastive set keeps each item's outcome: read back as per-item
    statistics whose summed accuracy is the result's; a file without contrastive results reads as
    none, and outcomes outside 0..draws are named."""
    from syntaxnmt.experiments.scores import contrastive_statistics, encode
    from syntaxnmt.metrics import accuracy_from_statistics

    tests = {"t": {"hyps": HYPS, "bleu": [[0] * 10] * 3, "bleu_lc": [[0] * 10] * 3, "chrf": [[0] * 6] * 3}}
    result = {"outcomes": [2, 0, 1, 2], "draws": 2, "cells": {"it / distance 1": {"accuracy": 0.625, "items": 4, "chance": 0.5}}, "accuracy": 0.625}
    path = tmp_path / "r.json.gz"
    path.write_bytes(encode("han", 1, RECORD, tests, contrastive={"other-document": result}))
    kept = read_run_scores(path)["contrastive"]["other-document"]
    assert kept == {k: result[k] for k in ("outcomes", "draws", "cells")}  # the accuracy itself is recomputed, not kept
    assert float(accuracy_from_statistics(contrastive_statistics(kept).sum(0))) == pytest.approx(62.5)
    path.write_bytes(encode("han", 1, RECORD, tests))
    assert read_run_scores(path)["contrastive"] == {}
    path.write_bytes(encode("han", 1, RECORD, tests, contrastive={"true": {**result, "outcomes": [3, 0]}}))
    with pytest.raises(UserError, match=r"r\.json\.gz: contrastive result 'true' needs .* \(0 to draws\)"):
        read_run_scores(path)
