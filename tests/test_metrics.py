"""Tests for syntaxnmt.metrics (sacreBLEU BLEU/chrF, signatures, file checks, paired bootstrap)."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest
import sacrebleu

from syntaxnmt.errors import UserError
from syntaxnmt.metrics import Comparison, Scores, corpus_bleu, evaluate_report, load_eval_files, paired_bootstrap, score

WORDS = "the a cat dog sat on mat house red blue green big small runs quickly near old tree".split()


def _corpus(n: int = 100, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """References, a good system (~90% words kept) and a poor one (~40% kept)."""
    rng = random.Random(seed)
    refs = [" ".join(rng.choices(WORDS, k=10)) for _ in range(n)]

    def noisy(keep: float) -> list[str]:
        return [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split()) for r in refs]

    return refs, noisy(0.9), noisy(0.4)


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------- scores


def test_perfect_hypothesis_scores_100():
    refs = ["The cat sat on the mat.", "A quick brown fox jumps over the lazy dog."]
    s = score(refs, [refs])
    assert isinstance(s, Scores)
    assert s.bleu == pytest.approx(100.0)
    assert s.chrf == pytest.approx(100.0)
    assert corpus_bleu(refs, [refs]) == pytest.approx(100.0)


def test_agrees_with_sacrebleu_directly():
    hyps = ["the cat is on the mat", "there is a dog in the garden", "hello world"]
    refs = [["the cat sat on the mat", "a dog is in the garden", "hello there world"]]
    expected_bleu = sacrebleu.corpus_bleu(hyps, refs)
    expected_chrf = sacrebleu.corpus_chrf(hyps, refs)
    assert 0 < expected_bleu.score < 100
    assert corpus_bleu(hyps, refs) == pytest.approx(expected_bleu.score)
    s = score(hyps, refs)
    assert s.bleu == pytest.approx(expected_bleu.score)
    assert s.chrf == pytest.approx(expected_chrf.score)
    assert s.bleu_verbose == str(expected_bleu)
    assert s.bleu_verbose.startswith("BLEU = ")
    for part in ("BP =", "ratio =", "hyp_len =", "ref_len ="):
        assert part in s.bleu_verbose


def test_multiple_references_are_used():
    hyps = ["the cat sat on the mat", "a dog barked loudly at night"]
    ref1 = ["completely different words here", "nothing in common with it"]
    ref2 = list(hyps)
    assert corpus_bleu(hyps, [ref1]) < 10
    assert corpus_bleu(hyps, [ref1, ref2]) == pytest.approx(100.0)
    s = score(hyps, [ref1, ref2])
    assert s.bleu == pytest.approx(100.0)
    assert "nrefs:2" in s.bleu_signature and "nrefs:2" in s.chrf_signature


def test_signatures_contain_nrefs_and_version():
    s = score(["a b c d e"], [["a b c d e"]])
    for sig in (s.bleu_signature, s.chrf_signature):
        assert "nrefs:1" in sig
        assert f"version:{sacrebleu.__version__}" in sig
    assert "tok:13a" in s.bleu_signature


def test_corpus_bleu_tolerates_empty_lines():
    hyps = ["", "the cat sat on the mat", ""]
    refs = [["something", "the cat sat on the mat", "else"]]
    value = corpus_bleu(hyps, refs)
    assert 0.0 <= value < 100.0
    assert corpus_bleu(["", ""], [["a b", "c d"]]) == 0.0
    assert corpus_bleu([], [[]]) == 0.0


def test_reference_length_mismatch_is_rejected():
    # sacreBLEU itself would silently ignore the extra reference line
    with pytest.raises(ValueError, match="reference stream 0 has 2 lines"):
        corpus_bleu(["a"], [["a", "b"]])
    with pytest.raises(ValueError):
        score(["a", "b"], [["a"]])


# ---------------------------------------------------------------- files


def test_load_eval_files_reads_plain_and_gzip(tmp_path):
    hyp = _write(tmp_path / "hyp.txt", ["a b", "c d"])
    ref1 = _write(tmp_path / "ref1.txt", ["a b", "c e"])
    ref2 = tmp_path / "ref2.txt.gz"
    with gzip.open(ref2, "wt", encoding="utf-8") as f:
        f.write("a x\nc d\n")
    cmp = _write(tmp_path / "cmp.txt", ["a b", "c d"])
    hyps, refs, compared = load_eval_files(hyp, [ref1, str(ref2)], cmp)
    assert hyps == ["a b", "c d"]
    assert refs == [["a b", "c e"], ["a x", "c d"]]
    assert compared == ["a b", "c d"]
    assert load_eval_files(hyp, [ref1])[2] is None


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    hyp = _write(tmp_path / "hyp.txt", [f"line {i}" for i in range(99)])
    ref = _write(tmp_path / "ref.txt", [f"line {i}" for i in range(100)])
    with pytest.raises(UserError) as e:
        load_eval_files(hyp, [ref])
    msg = str(e.value)
    assert "hyp.txt" in msg and "ref.txt" in msg
    assert "99" in msg and "100" in msg
    assert msg == f"{hyp} has 99 lines but {ref} has 100"
    assert "\n" not in msg


def test_line_count_mismatch_of_compared_system(tmp_path):
    hyp = _write(tmp_path / "hyp.txt", ["a", "b", "c"])
    ref = _write(tmp_path / "ref.txt", ["a", "b", "c"])
    cmp = _write(tmp_path / "other.txt", ["a", "b"])
    with pytest.raises(UserError, match=r"hyp\.txt has 3 lines but .*other\.txt has 2"):
        load_eval_files(hyp, [ref], cmp)


def test_invalid_utf8_in_hypothesis_names_the_file(tmp_path):
    hyp = tmp_path / "bad_hyp.txt"
    hyp.write_bytes(b"fine line\nbroken \xff\xfe line\n")
    ref = _write(tmp_path / "ref.txt", ["fine line", "broken line"])
    with pytest.raises(UserError, match="bad_hyp.txt"):
        load_eval_files(str(hyp), [ref])
    with pytest.raises(UserError, match="bad_hyp.txt"):
        evaluate_report(str(hyp), [ref])


def test_missing_and_empty_files_are_user_errors(tmp_path):
    ref = _write(tmp_path / "ref.txt", ["a"])
    with pytest.raises(UserError, match="nope.txt"):
        load_eval_files(str(tmp_path / "nope.txt"), [ref])
    empty = _write(tmp_path / "empty.txt", [])
    empty_ref = _write(tmp_path / "empty_ref.txt", [])
    with pytest.raises(UserError, match="empty.txt"):
        load_eval_files(empty, [empty_ref])
    with pytest.raises(UserError):
        load_eval_files(ref, [])


# ---------------------------------------------------------------- paired bootstrap


def test_paired_bootstrap_detects_a_much_better_system():
    refs, good, poor = _corpus()
    cmp = paired_bootstrap(poor, good, [refs], n_samples=200, baseline_name="poor", system_name="good")
    assert isinstance(cmp, Comparison)
    assert cmp.system_bleu.score > cmp.baseline_bleu.score + 20
    assert cmp.system_chrf.score > cmp.baseline_chrf.score + 10
    assert cmp.bleu_p_value <= 0.05 and cmp.bleu_significant
    assert cmp.chrf_p_value <= 0.05 and cmp.chrf_significant
    # scores are sacreBLEU's corpus scores; CIs are positive half-widths around the bootstrap mean
    assert cmp.baseline_bleu.score == pytest.approx(sacrebleu.corpus_bleu(poor, [refs]).score)
    assert cmp.system_chrf.score == pytest.approx(sacrebleu.corpus_chrf(good, [refs]).score)
    for est in (cmp.baseline_bleu, cmp.system_bleu, cmp.baseline_chrf, cmp.system_chrf):
        assert est.ci > 0
        assert abs(est.mean - est.score) < 3 * est.ci
    assert "bs:200" in cmp.bleu_signature and "seed:12345" in cmp.bleu_signature
    assert "nrefs:1" in cmp.chrf_signature


def test_paired_bootstrap_identical_systems_not_significant():
    refs, _, poor = _corpus()
    cmp = paired_bootstrap(poor, list(poor), [refs], n_samples=200)
    assert cmp.bleu_p_value > 0.5 and not cmp.bleu_significant
    assert cmp.chrf_p_value > 0.5 and not cmp.chrf_significant
    assert cmp.system_bleu == cmp.baseline_bleu


def test_paired_bootstrap_near_identical_systems_not_significant():
    refs, good, poor = _corpus()
    other = list(poor)
    other[0], other[1] = good[0], poor[1][::-1]  # one line better, one line worse
    cmp = paired_bootstrap(poor, other, [refs], n_samples=200)
    assert cmp.system_bleu.score != cmp.baseline_bleu.score
    assert cmp.bleu_p_value > 0.05 and cmp.chrf_p_value > 0.05


def test_paired_bootstrap_is_deterministic_given_seed():
    refs, good, poor = _corpus()
    mixed = [g if i % 2 else p for i, (g, p) in enumerate(zip(good, poor))]
    a = paired_bootstrap(poor, mixed, [refs], n_samples=100, seed=7)
    b = paired_bootstrap(poor, mixed, [refs], n_samples=100, seed=7)
    c = paired_bootstrap(poor, mixed, [refs], n_samples=100, seed=8)
    assert a == b
    assert "seed:7" in a.bleu_signature
    assert (c.system_bleu.mean, c.system_bleu.ci) != (a.system_bleu.mean, a.system_bleu.ci)


def test_paired_bootstrap_leaves_sacrebleu_seed_env_alone(monkeypatch):
    refs, good, poor = _corpus(20)
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    paired_bootstrap(poor, good, [refs], n_samples=10, seed=3)
    assert "SACREBLEU_SEED" not in os.environ
    monkeypatch.setenv("SACREBLEU_SEED", "99")
    cmp = paired_bootstrap(poor, good, [refs], n_samples=10, seed=3)
    assert os.environ["SACREBLEU_SEED"] == "99"
    assert "seed:3" in cmp.bleu_signature


def test_paired_bootstrap_rejects_bad_arguments():
    refs, good, poor = _corpus(10)
    with pytest.raises(ValueError):
        paired_bootstrap(poor, good[:-1], [refs])
    with pytest.raises(ValueError):
        paired_bootstrap(poor, good, [refs], n_samples=0)
    with pytest.raises(ValueError):
        paired_bootstrap(poor, good, [refs], seed=0)


# ---------------------------------------------------------------- report


def test_evaluate_report_without_compare(tmp_path):
    refs, good, _ = _corpus(30)
    hyp = _write(tmp_path / "hyp.txt", good)
    ref = _write(tmp_path / "ref.txt", refs)
    report = evaluate_report(hyp, [ref])
    s = score(good, [refs])
    assert s.bleu_verbose in report
    assert s.bleu_signature in report and s.chrf_signature in report
    assert "chrF2 = " in report
    assert "bootstrap" not in report.lower()


def test_evaluate_report_with_compare(tmp_path):
    refs, good, poor = _corpus()
    hyp = _write(tmp_path / "base.txt", poor)
    ref = _write(tmp_path / "ref.txt", refs)
    cmp = _write(tmp_path / "new.txt", good)
    report = evaluate_report(hyp, [ref], compare=cmp, n_bootstrap=100)
    assert "Paired bootstrap resampling" in report and "100 resamples" in report
    assert f"Baseline: {hyp}" in report and cmp in report
    assert "p = " in report and "significant" in report
    assert "BLEU: the difference is significant" in report
    assert "bs:100|seed:12345" in report
    assert f"version:{sacrebleu.__version__}" in report

    same = evaluate_report(hyp, [ref], compare=_write(tmp_path / "same.txt", poor), n_bootstrap=50)
    assert "BLEU: the difference is not significant" in same
    assert "chrF: the difference is not significant" in same
    with pytest.raises(UserError):
        evaluate_report(hyp, [ref], compare=cmp, n_bootstrap=0)
