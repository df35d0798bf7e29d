"""Tests for syntaxnmt.metrics (sacreBLEU BLEU/chrF, signatures, file checks, paired bootstrap, and the
statistics over training seeds: BLEU from sufficient statistics, stratified approximate
randomization, s_sel / s_opt, Almost Stochastic Order)."""

from __future__ import annotations

import gzip
import itertools
import os
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

from syntaxnmt.errors import UserError
from syntaxnmt.metrics import (
    Comparison,
    ReferenceScorer,
    Scores,
    aso_epsilon_min,
    aso_violation_ratio,
    bleu_from_statistics,
    bleu_statistics,
    corpus_bleu,
    evaluate_report,
    load_eval_files,
    paired_bootstrap,
    paired_bootstrap_p,
    score,
    seed_statistics,
    selection_sd,
    stratified_approximate_randomization,
)

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


# ---------------------------------------------------------------- statistics over training seeds


def _mean(stats: np.ndarray) -> np.ndarray:
    """The metric of hand-made sentence scores: statistics ``[score, 1]`` per sentence, their mean."""
    return stats[..., 0] / stats[..., 1]


def _scored(scores: np.ndarray) -> np.ndarray:
    return np.stack([scores, np.ones_like(scores)], axis=-1)


def test_bleu_from_statistics_is_sacrebleu_corpus_bleu():
    """Every subset of sentences (short ones included: orders without n-grams, no match, empty
    hypotheses) scores what sacreBLEU's corpus_score gives."""
    rng = random.Random(3)
    refs = [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(200)]
    hyps = [" ".join(w if rng.random() < 0.6 else rng.choice(WORDS) for w in r.split()[: rng.randint(0, 12)]) for r in refs]
    stats = bleu_statistics(hyps, [refs])
    assert stats.shape == (200, 10)
    for _ in range(300):
        idx = rng.sample(range(200), rng.choice([1, 2, 3, 10, 200]))
        expected = sacrebleu.metrics.BLEU(force=True).corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score
        assert bleu_from_statistics(stats[idx].sum(0)) == pytest.approx(expected, abs=1e-9)
    # Vectorised over leading axes.
    sums = np.stack([stats[:100].sum(0), stats[100:].sum(0)])
    assert bleu_from_statistics(sums).shape == (2,)
    # Two reference streams.
    stats2 = bleu_statistics(hyps[:50], [refs[:50], hyps[:50]])
    assert bleu_from_statistics(stats2.sum(0)) == pytest.approx(sacrebleu.metrics.BLEU(force=True).corpus_score(hyps[:50], [refs[:50], hyps[:50]]).score)


def test_test_set_scorer_and_the_vectorised_sentence_bootstrap_are_sacrebleus():
    """The tables score many outputs against one test set (references processed once) and compute
    the sentence bootstrap from the statistics: the same figures as score() and paired_bootstrap()."""
    refs, good, poor = _corpus(120)
    scorer = ReferenceScorer([refs])
    for hyps in (good, poor):
        assert bleu_from_statistics(scorer.bleu_statistics(hyps).sum(0)) == pytest.approx(score(hyps, [refs], force=True).bleu, abs=1e-9)
        assert scorer.chrf(hyps) == score(hyps, [refs], force=True).chrf
    for n_samples, seed in ((1000, 12345), (200, 7)):
        for a, b in ((poor, good), (good, poor), (good, [h if i % 7 else p for i, (h, p) in enumerate(zip(good, poor))])):
            expected = paired_bootstrap(a, b, [refs], n_samples=n_samples, seed=seed, force=True).bleu_p_value
            assert paired_bootstrap_p(scorer.bleu_statistics(a), scorer.bleu_statistics(b), n_samples, seed) == expected
    assert paired_bootstrap_p(scorer.bleu_statistics(good), scorer.bleu_statistics(good)) == 1.0
    with pytest.raises(ValueError, match="reference stream"):
        scorer.bleu_statistics(good[:10])


def test_approximate_randomization_identical_systems_give_one():
    rng = np.random.default_rng(0)
    runs = _scored(rng.normal(20, 5, size=(3, 200)))
    assert stratified_approximate_randomization(runs, runs.copy(), _mean, n_shuffles=2000) == 1.0
    refs, good, _ = _corpus(80)
    bleu = np.stack([bleu_statistics(good, [refs])] * 2)
    assert stratified_approximate_randomization(bleu, bleu.copy(), n_shuffles=500) == 1.0


def test_approximate_randomization_constant_shift_is_significant():
    """A shift of 0.5 on every sentence of every seed (sentence sd 5, 3 seeds x 200 sentences)."""
    rng = np.random.default_rng(1)
    base = rng.normal(20, 5, size=(3, 200))
    p = stratified_approximate_randomization(_scored(base), _scored(base + 0.5), _mean, n_shuffles=10_000)
    assert p < 0.01
    assert p == pytest.approx(1 / 10_001)  # no shuffle reaches a difference of 0.5: swaps only cancel it
    # The direction does not matter (two-sided), and a smaller shift in noisier runs is not found.
    assert stratified_approximate_randomization(_scored(base + 0.5), _scored(base), _mean, n_shuffles=2000) == pytest.approx(1 / 2001)
    other = base + rng.normal(0, 5, size=base.shape)
    assert stratified_approximate_randomization(_scored(base), _scored(other + 0.05), _mean, n_shuffles=2000) > 0.05


def test_approximate_randomization_matches_the_exact_stratified_test():
    """Two seeds x 4 sentences: all 2^8 within-pair swaps enumerated give the exact p-value."""
    base = np.array([[1.0, 4.0, 2.0, 7.0], [3.0, 0.0, 5.0, 1.0]])
    sys_ = np.array([[2.0, 6.0, 2.5, 7.0], [3.5, 2.0, 5.0, 4.0]])
    observed = abs(sys_.mean() - base.mean())
    hits = 0
    for swaps in itertools.product([False, True], repeat=8):
        m = np.array(swaps).reshape(2, 4)
        s, b = np.where(m, base, sys_), np.where(m, sys_, base)
        hits += abs(s.mean(1).mean() - b.mean(1).mean()) >= observed - 1e-12
    exact = hits / 256
    approx = stratified_approximate_randomization(_scored(base), _scored(sys_), _mean, n_shuffles=40_000, seed=7)
    assert 0.02 < exact < 0.5
    assert approx == pytest.approx(exact, abs=0.01)
    # Deterministic for a seed; a single pair is accepted as (N, K).
    assert stratified_approximate_randomization(_scored(base), _scored(sys_), _mean, n_shuffles=500, seed=3) == stratified_approximate_randomization(_scored(base), _scored(sys_), _mean, n_shuffles=500, seed=3)
    assert 0 < stratified_approximate_randomization(_scored(base[0]), _scored(sys_[0]), _mean, n_shuffles=500) <= 1
    with pytest.raises(ValueError, match="shape"):
        stratified_approximate_randomization(_scored(base), _scored(sys_[:1]), _mean)


def test_approximate_randomization_on_bleu_of_replicates():
    refs, good, poor = _corpus(150)
    base = np.stack([bleu_statistics(poor, [refs]), bleu_statistics(_corpus(150, seed=5)[2], [refs])])
    better = np.stack([bleu_statistics(good, [refs]), bleu_statistics(_corpus(150, seed=5)[1], [refs])])
    assert stratified_approximate_randomization(base, better, n_shuffles=1000) < 0.01


def test_s_opt_is_the_sd_of_per_seed_bleu_and_s_sel_the_bootstrap_sd():
    refs = _corpus(120)[0]
    outputs = [_corpus(120, seed=s)[1] for s in (11, 12, 13)]
    # _corpus(seed) draws new references too: score every output against the same ones.
    stats = [bleu_statistics(o, [refs]) for o in outputs]
    result = seed_statistics(stats, n_bootstrap=300)
    bleus = [score(o, [refs], force=True).bleu for o in outputs]
    assert result.scores == pytest.approx(bleus)
    assert result.mean == pytest.approx(statistics.mean(bleus))
    assert result.s_opt == pytest.approx(statistics.stdev(bleus))
    assert result.s_sel == pytest.approx(statistics.mean(selection_sd(s, n_samples=300) for s in stats))
    assert seed_statistics(stats[:1], n_bootstrap=50).s_opt is None
    # s_sel of a mean over N sentences of sd 4: about 4 / sqrt(N).
    scores = np.random.default_rng(2).normal(0, 4, size=400)
    assert selection_sd(_scored(scores), _mean, n_samples=2000) == pytest.approx(np.std(scores) / 20, rel=0.1)
    # A test set of one sentence repeated has no test-set variance.
    assert selection_sd(np.repeat(stats[0][:1], 50, axis=0), n_samples=100) == pytest.approx(0.0, abs=1e-9)


def test_aso_known_cases():
    # Every score of A above every score of B: A dominates, no violation at all.
    assert aso_violation_ratio([30, 31, 32], [20, 21, 22]) == 0.0
    assert aso_epsilon_min([30, 31, 32], [20, 21, 22]) == 0.0
    assert aso_epsilon_min([20, 21, 22], [30, 31, 32]) == 1.0
    # The violation ratio of A ~ N(0, 1) against B ~ N(c, 2^2): the quantiles differ by c + z_t, so
    # eps = E[(Z + c)^2; Z > -c] / E[(Z + c)^2] = (c phi(c) + (1 + c^2) Phi(c)) / (1 + c^2).
    c, normal = 0.3, statistics.NormalDist()
    exact = (c * normal.pdf(c) + (1 + c * c) * normal.cdf(c)) / (1 + c * c)
    # Samples: the two distributions' quantiles at (i + 0.5) / n (random draws are noisy in the tails).
    z = np.array([normal.inv_cdf((i + 0.5) / 4000) for i in range(4000)])
    assert aso_violation_ratio(z, c + 2 * z, dt=0.0001) == pytest.approx(exact, abs=0.003)
    assert aso_violation_ratio(z, 0.5 + z) == 1.0 and aso_violation_ratio(z + 0.5, z) == 0.0  # a shift: total order
    rng = np.random.default_rng(4)
    # Symmetry of the estimate; eps_min is an upper confidence bound on it.
    a, b = rng.normal(1, 1, 8), rng.normal(0, 1, 8)
    assert aso_violation_ratio(a, b) + aso_violation_ratio(b, a) == pytest.approx(1.0)
    assert aso_violation_ratio(a, b) <= aso_epsilon_min(a, b) <= 1.0
    assert aso_epsilon_min(a, b, seed=9) == aso_epsilon_min(a, b, seed=9)
    assert aso_violation_ratio([1, 2, 3], [1, 2, 3]) == 0.5  # equal distributions: no order


# ---------------------------------------------------------------- seed-level inference


def _runs(rng, n_runs: int, n: int = 60, shift: float = 0.0) -> list[np.ndarray]:
    """Synthetic BLEU statistics of ``n_runs`` runs: plausible counts, ``shift`` more matches."""
    out = []
    for _ in range(n_runs):
        length = rng.integers(8, 15, size=n).astype(float)
        total = np.stack([np.maximum(length - k, 1) for k in range(4)], 1)
        correct = np.minimum(total, np.floor(total * np.clip(rng.normal(0.5 + shift, 0.15, size=(n, 1)), 0, 1)))
        out.append(np.concatenate([length[:, None], length[:, None] + 1, correct, total], 1))
    return out


def test_two_level_bootstrap_interval_brackets_the_difference_and_is_deterministic():
    from syntaxnmt.metrics import run_scores, two_level_bootstrap

    rng = np.random.default_rng(3)
    base, better = _runs(rng, 4), _runs(rng, 4, shift=0.2)
    low, high = two_level_bootstrap(base, better, n_samples=300)
    difference = run_scores(better).mean() - run_scores(base).mean()
    assert 0 < low < difference < high
    assert two_level_bootstrap(base, better, n_samples=300) == (low, high)
    # It samples seeds: the interval of a system against itself is wider with a seed spread than
    # the same sentences repeated (every run equal), where only test-set variance remains.
    same = [base[0]] * 4
    one_low, one_high = two_level_bootstrap(same, same, n_samples=300)
    all_low, all_high = two_level_bootstrap(base, base, n_samples=300)
    assert all_high - all_low > one_high - one_low > 0


def test_two_level_bootstrap_recomputes_corpus_bleu_from_the_statistics():
    """With one run of one sentence set and a degenerate draw (all runs identical, every sentence
    the same), each draw's score is the corpus BLEU: the interval collapses onto the difference."""
    from syntaxnmt.metrics import two_level_bootstrap

    refs = ["the cat sat on the mat", "a dog barked at the old man"]
    a = bleu_statistics(["the cat sat on the mat", "a dog barked at the old man"], [refs])
    b = bleu_statistics(["the cat sat on a mat", "a dog barked at the man"], [refs])
    row_a, row_b = np.repeat(a[:1], 5, 0), np.repeat(b[:1], 5, 0)  # five copies of one sentence
    low, high = two_level_bootstrap([row_a], [row_b], n_samples=20)
    expected = sacrebleu.corpus_bleu(["the cat sat on a mat"] * 5, [["the cat sat on the mat"] * 5]).score - 100.0
    assert low == pytest.approx(expected) and high == pytest.approx(expected)


def test_two_level_interval_of_paired_readings_is_narrower_than_the_unpaired_one():
    """One model read twice on 40 items (a control right on items 0-19, the context on 0-23): the
    paired difference moves only with the 4 items they disagree on, so its interval is much
    narrower than two_level_bootstrap's, which resamples the two readings' items independently;
    both bracket the 10 points; identical readings give exactly 0."""
    from syntaxnmt.metrics import accuracy_from_statistics, two_level_bootstrap, two_level_interval

    control = np.array([[1.0 if i < 20 else 0.0, 1.0] for i in range(40)])
    context = np.array([[1.0 if i < 24 else 0.0, 1.0] for i in range(40)])
    difference = lambda stats: accuracy_from_statistics(stats[..., 0:2]) - accuracy_from_statistics(stats[..., 2:4])  # noqa: E731
    paired = [np.concatenate([context, control], 1)] * 3
    low, high = two_level_interval(paired, difference, n_samples=400)
    u_low, u_high = two_level_bootstrap([control] * 3, [context] * 3, accuracy_from_statistics, n_samples=400)
    assert 0 < low < 10 < high and u_low < 10 < u_high
    assert (high - low) * 2 < u_high - u_low
    assert two_level_interval([np.concatenate([context, context], 1)], difference, n_samples=50) == (0.0, 0.0)
    assert two_level_interval(paired, difference, n_samples=400) == (low, high)  # deterministic


def test_welch_p_is_scipys_and_handles_degenerate_seeds():
    from scipy import stats

    from syntaxnmt.metrics import welch_p

    a, b = [20.1, 20.6, 19.8, 20.3], [20.9, 21.4, 21.0]
    assert welch_p(a, b) == pytest.approx(stats.ttest_ind(b, a, equal_var=False).pvalue)
    assert welch_p(a, a) == pytest.approx(1.0)
    assert welch_p([20.0, 20.0], [20.0, 20.0]) == 1.0 and welch_p([20.0, 20.0], [21.0, 21.0]) == 0.0
    assert welch_p([20.0], [21.0, 22.0]) is None


def test_minimum_detectable_difference_has_the_power_it_claims():
    """80 % power at α = 0.05: the normal approximation for many seeds, and a simulation of the
    two-sample t-test at the returned difference for six against four seeds."""
    from scipy import stats

    from syntaxnmt.metrics import minimum_detectable_difference

    many = minimum_detectable_difference(1.0, 200, 200)
    assert many == pytest.approx((1.959964 + 0.841621) * np.sqrt(2 / 200), rel=0.01)
    delta = minimum_detectable_difference(0.4, 6, 4)
    rng = np.random.default_rng(0)
    a = rng.normal(0.0, 0.4, size=(4000, 6))
    b = rng.normal(delta, 0.4, size=(4000, 4))
    power = np.mean(stats.ttest_ind(b, a, axis=1).pvalue < 0.05)
    assert power == pytest.approx(0.8, abs=0.03)
    assert minimum_detectable_difference(0.4, 1, 4) is None and minimum_detectable_difference(0.0, 3, 3) == 0.0
    assert minimum_detectable_difference(1.0, 2, 2) > minimum_detectable_difference(1.0, 3, 3) > minimum_detectable_difference(1.0, 6, 4)


def test_aa_splits_are_every_split_once():
    from syntaxnmt.metrics import aa_splits

    six = aa_splits(6)
    assert len(six) == 10 and all(len(a) == len(b) == 3 and set(a) | set(b) == set(range(6)) for a, b in six)
    assert len({frozenset([a, b]) for a, b in six}) == 10  # no split twice (A|B and B|A are one)
    assert len(aa_splits(5)) == 10 and len(aa_splits(4)) == 3 and aa_splits(1) == []


def test_aso_identical_systems_are_no_evidence_either_way():
    """Issue 51 item 5: three seeds of two identical systems give ε_min 1.00 -- in both directions,
    so it is no evidence of "worse"; the verdict at deepsig's 0.2 says nothing."""
    from syntaxnmt.metrics import ASO_THRESHOLD, aso_verdict

    scores = [20.1, 20.5, 19.8]
    forward, backward = aso_epsilon_min(scores, scores), aso_epsilon_min(scores, scores)
    assert forward == backward == 1.0 and aso_verdict(forward, backward) == ""
    better, worse = [25.0, 25.4, 25.2], [20.1, 20.5, 19.8]
    assert aso_verdict(aso_epsilon_min(better, worse), aso_epsilon_min(worse, better)) == "better"
    assert aso_verdict(aso_epsilon_min(worse, better), aso_epsilon_min(better, worse)) == "worse"
    assert ASO_THRESHOLD == 0.2


def test_lowercased_bleu_and_chrf_statistics_match_sacrebleu():
    from syntaxnmt.metrics import ReferenceScorer, chrf_from_statistics

    hyps = ["The Cat sat on the mat .", "A dog barked at THE old man"]
    refs = ["the cat sat on the mat.", "A dog barked at the old man"]
    lower = ReferenceScorer([refs], lowercase=True)
    assert float(bleu_from_statistics(lower.bleu_statistics(hyps).sum(0))) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score)
    assert float(bleu_from_statistics(ReferenceScorer([refs]).bleu_statistics(hyps).sum(0))) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert chrf_from_statistics(ReferenceScorer([refs]).chrf_statistics(hyps)) == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
