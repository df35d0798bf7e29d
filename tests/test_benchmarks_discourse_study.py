"""benchmarks/discourse_study.py's table (issue 50 item 1): under it, with several seeds, the BLEU
power line and A/A check on the sentence model's seeds, from made-up test translations (no
training); a run keeps the per-sentence BLEU statistics they resample."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from conftest import load_script

from syntaxnmt.metrics import bleu_from_statistics, bleu_statistics, corpus_bleu, minimum_detectable_difference

ROOT = Path(__file__).resolve().parents[1]
study = load_script(ROOT / "benchmarks" / "discourse_study.py", "discourse_study")

REFS = [f"der mann {k} sieht das grosse haus am fluss heute" for k in range(40)]
CELL = "pronoun / distance 1"
ITEMS = [SimpleNamespace(phenomenon="pronoun", distance=1)]


def hyps(k: int) -> list[str]:
    """The first ``k`` sentences right, the others cut short."""
    return [r if i < k else "der mann sieht" for i, r in enumerate(REFS)]


def run(k: int, accuracy: float = 0.5) -> dict:
    """A made-up result.json of a run whose test translation is :func:`hyps` ``(k)``."""
    out = hyps(k)
    contrastive = {mode: {"accuracy": accuracy if mode == "true" else 0.5, "cells": {CELL: {"accuracy": accuracy if mode == "true" else 0.5}}} for mode in study.CONTEXT_MODES}
    return {"bleu": corpus_bleu(out, [REFS]), "bleu_stats": bleu_statistics(out, [REFS]).astype(int).tolist(), "ms_per_update": 100.0, "decode_sent_per_s": 300.0, "contrastive": contrastive}


# The sentence model's four seeds: two good, two poor (only the split {good} vs {poor} differs);
# HAN's identical on every seed (s_opt 0), so lines from its seeds would read otherwise.
SENTENCE = [36, 34, 12, 10]


def results(seeds: int) -> dict[str, list[dict]]:
    return {"sentence": [run(k) for k in SENTENCE[:seeds]], "HAN (k = 3)": [run(20, 0.9) for _ in range(seeds)]}


def test_the_power_line_and_the_aa_check_of_the_sentence_models_seeds_follow_the_table():
    bleu = [corpus_bleu(hyps(k), [REFS]) for k in SENTENCE]
    assert bleu[0] > bleu[1] > bleu[2] > bleu[3] and bleu[1] - bleu[2] > 20
    sd = statistics.stdev(bleu)
    text = study.table(results(4), ITEMS, bootstrap=50)
    lines = text.splitlines()
    assert lines[2].startswith("| sentence | true | 50.0 ± 0.0 | 50.0 ± 0.0 | ")  # the table itself is unchanged
    power = next(line for line in lines if line.startswith("Power (BLEU)"))
    assert power.startswith("Power (BLEU): with 4 seeds of sentence and 4 seeds per other system, ")
    assert f"test {minimum_detectable_difference(sd, 4, 4):.2f} BLEU (s_opt {sd:.2f})" in power
    aa = next(line for line in lines if line.startswith("A/A check (BLEU"))
    assert aa.startswith("A/A check (BLEU, calibration): the 4 seeds of sentence split every way into two groups of 2 and 2 (3 splits;")
    assert "test: Welch over seeds 1/3 (33 %)" in aa
    # Three seeds: the power of 3 against 3, no A/A check (it takes 4); one seed: no lines.
    three = study.table(results(3), ITEMS, bootstrap=50)
    sd3 = statistics.stdev(bleu[:3])
    assert f"test {minimum_detectable_difference(sd3, 3, 3):.2f} BLEU (s_opt {sd3:.2f})" in three
    assert "A/A check (BLEU, calibration): not possible with 3 seeds of sentence" in three
    one = study.table(results(1), ITEMS, bootstrap=50)
    assert "Power (" not in one and "A/A" not in one


def test_runs_scored_before_the_statistics_were_kept_give_the_power_line_from_their_bleu():
    bleu = [corpus_bleu(hyps(k), [REFS]) for k in SENTENCE]
    old = results(4)
    for r in old["sentence"]:
        del r["bleu_stats"]
    text = study.table({s: runs[:3] for s, runs in old.items()}, ITEMS, bootstrap=50)
    sd3 = statistics.stdev(bleu[:3])
    assert "with 3 seeds of sentence and 3 seeds per other system, " in text and f"test {minimum_detectable_difference(sd3, 3, 3):.2f} BLEU (s_opt {sd3:.2f})" in text
    assert "A/A check (BLEU, calibration): not possible with 3 seeds of sentence" in text
    four = study.table(old, ITEMS, bootstrap=50)
    sd = statistics.stdev(bleu)
    assert f"test {minimum_detectable_difference(sd, 4, 4):.2f} BLEU (s_opt {sd:.2f})" in four
    assert "A/A check (BLEU, calibration): not computed -- it resamples the test sentences, and 4 of the sentence model's 4 runs were scored before" in four


def test_a_run_keeps_the_per_sentence_bleu_statistics_of_its_test_translation(tmp_path, monkeypatch):
    """run_system with its training, model and scoring stubbed: result.json holds ``bleu_stats``,
    sacreBLEU's statistics of the test translation, whose sums give its BLEU."""
    out = hyps(25)
    for name, lines in (("test.src", REFS), ("test.tgt", REFS), ("test.docs", ["0"] * len(REFS))):
        (tmp_path / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    corpus = {"test": {k: tmp_path / f"test.{k}" for k in ("src", "tgt", "docs")}}
    monkeypatch.setattr(study, "train", lambda cfg, log: SimpleNamespace(step=10))
    monkeypatch.setattr(study, "load_model", lambda path, device: (None, SimpleNamespace(decode=None), None))
    monkeypatch.setattr(study, "translate_lines", lambda model, cfg, toks, src, decode, device, docs: [[(h, 0.0)] for h in out])
    monkeypatch.setattr(study, "score_contrastive", lambda *a, **k: SimpleNamespace(as_json=lambda: {"accuracy": 0.5, "cells": {}}))
    (tmp_path / "run").mkdir()
    result = study.run_system(SimpleNamespace(work_dir=str(tmp_path / "run")), corpus, ITEMS, log=print)
    kept = json.loads((tmp_path / "run" / "result.json").read_text())
    assert kept["bleu_stats"] == result["bleu_stats"] == bleu_statistics(out, [REFS]).astype(int).tolist()
    assert len(kept["bleu_stats"]) == len(REFS) and kept["bleu"] == corpus_bleu(out, [REFS])
    assert abs(float(bleu_from_statistics(np.asarray(kept["bleu_stats"]).sum(0))) - kept["bleu"]) < 1e-9
