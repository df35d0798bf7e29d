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
