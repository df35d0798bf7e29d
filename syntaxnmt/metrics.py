"""Evaluation with sacreBLEU: BLEU, chrF, their signatures, paired bootstrap resampling, and
statistics over training seeds.

Scores are computed by sacreBLEU's own API (``sacrebleu.metrics.BLEU``/``CHRF`` and
``sacrebleu.significance.PairedTest``, the code behind ``sacrebleu --paired-bs``); this
module validates inputs, reads files and formats the report.

The statistics over seeds (:func:`seed_statistics`, :func:`stratified_approximate_randomization`,
:func:`aso_epsilon_min`) follow Clark, Dyer, Lavie & Smith (ACL 2011, "Better Hypothesis Testing
for Statistical Machine Translation: Controlling for Optimizer Instability"): the spread of a
system's score over training runs (s_opt), the test-set spread (s_sel, bootstrap), and
approximate randomization stratified over paired runs; and Dror, Shlomov & Reichart (ACL 2019,
"Deep Dominance"): Almost Stochastic Order over the per-seed scores. They work on sentence-level
sufficient statistics (:func:`bleu_statistics`), summed and scored with numpy, vectorised over
shuffles and resamples. Those two tests hold the trained models fixed (test-set variance only);
the seed-level inference -- :func:`two_level_bootstrap` (seeds, then sentences), :func:`welch_p`
over per-seed scores, :func:`minimum_detectable_difference` (80 % power, noncentral t),
:func:`aa_splits` for the A/A calibration check and :func:`aso_verdict` at deepsig's 0.2 -- treats
the training run as the unit of replication.

Hypotheses and references are detokenized text. ``refs`` is always a list of reference
*streams*: ``refs[k][i]`` is the k-th reference of line ``i``, as in ``sacrebleu.corpus_bleu``.
"""

from __future__ import annotations

import os
import statistics
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest, Result

from syntaxnmt.errors import UserError
from syntaxnmt.textio import read_lines

SIGNIFICANCE_LEVEL = 0.05


def _check_streams(hyps: Sequence[str], refs: Sequence[Sequence[str]], allow_empty: bool = False) -> None:
    """Raise ``ValueError`` unless there is at least one reference stream, each as long as ``hyps``.

    sacreBLEU does not check this itself (a longer reference stream is silently truncated).
    """
    if not refs:
        raise ValueError("at least one reference stream is required")
    for k, stream in enumerate(refs):
        if len(stream) != len(hyps):
            raise ValueError(f"reference stream {k} has {len(stream)} lines but there are {len(hyps)} hypotheses")
    if not hyps and not allow_empty:
        raise ValueError("cannot score an empty corpus")


def corpus_bleu(hyps: list[str], refs: list[list[str]]) -> float:
    """sacreBLEU corpus BLEU (0-100) of detokenized ``hyps`` against the reference streams ``refs``.

    Empty hypothesis lines are fine (they score nothing); an empty corpus scores 0.0.
    """
    _check_streams(hyps, refs, allow_empty=True)
    if not hyps:
        return 0.0
    return float(BLEU(force=True).corpus_score(hyps, refs).score)


@dataclass
class Scores:
    """Corpus BLEU and chrF of one system, with sacreBLEU's signatures and verbose BLEU line."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    bleu_verbose: str  # e.g. "BLEU = 35.10 66.0/42.3/28.9/20.1 (BP = 1.000 ratio = ... ref_len = ...)"
    chrf_verbose: str = ""  # e.g. "chrF2 = 58.31"


def score(hyps: list[str], refs: list[list[str]], force: bool = False) -> Scores:
    """BLEU and chrF (sacreBLEU defaults: 13a tokenization, chrF2) of ``hyps`` against ``refs``.

    ``force`` silences sacreBLEU's warning about tokenized text (the synthetic language is tokenized by design).
    """
    _check_streams(hyps, refs)
    bleu, chrf = BLEU(force=force), CHRF()
    b = bleu.corpus_score(hyps, refs)
    c = chrf.corpus_score(hyps, refs)
    return Scores(
        bleu=float(b.score),
        chrf=float(c.score),
        bleu_signature=bleu.get_signature().format(),
        chrf_signature=chrf.get_signature().format(),
        bleu_verbose=str(b),
        chrf_verbose=str(c),
    )


@dataclass
class Estimate:
    """A corpus score with its bootstrap mean and the half-width of its 95% confidence interval."""

    score: float
    mean: float
    ci: float

    def format(self) -> str:
        """``"score (mean ± ci)"`` with one decimal, as in sacreBLEU's table."""
        return f"{self.score:.1f} ({self.mean:.1f} ± {self.ci:.1f})"


@dataclass
class Comparison:
    """Paired bootstrap resampling of a baseline against one system (sacreBLEU ``--paired-bs``).

    The p-values are those of sacreBLEU's paired bootstrap test of the system against the
    baseline; a difference is significant when the p-value is below 0.05.
    """

    baseline_name: str
    system_name: str
    baseline_bleu: Estimate
    system_bleu: Estimate
    baseline_chrf: Estimate
    system_chrf: Estimate
    bleu_p_value: float
    chrf_p_value: float
    n_samples: int
    seed: int
    bleu_signature: str  # includes bs:<n_samples>|seed:<seed>
    chrf_signature: str

    @property
    def bleu_significant(self) -> bool:
        """Whether the BLEU difference is significant at p < 0.05."""
        return self.bleu_p_value < SIGNIFICANCE_LEVEL

    @property
    def chrf_significant(self) -> bool:
        """Whether the chrF difference is significant at p < 0.05."""
        return self.chrf_p_value < SIGNIFICANCE_LEVEL


@contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """Set ``SACREBLEU_SEED`` for the duration of the block.

    ``PairedTest`` takes its seed only from this environment variable, both for the test
    itself and for the baseline's confidence interval (computed in its constructor).
    """
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


def _estimate(result: Result) -> Estimate:
    return Estimate(score=float(result.score), mean=float(result.mean), ci=float(result.ci))


def _p_value(baseline: Result, system: Result, n_samples: int) -> float:
    """The p-value of ``system`` against ``baseline`` from sacreBLEU, with one degenerate case fixed.

    When both systems have the same sentence-level statistics (e.g. identical outputs), every
    resampled difference is 0 and sacreBLEU's statistic (``sum(centred diffs > observed diff)``)
    counts nothing, so it returns its smallest value 1/(n+1), i.e. "significant". A zero observed
    difference is no evidence of a difference at all, so that case is reported as p = 1.0.
    """
    p = float(system.p_value)
    if system.score == baseline.score and p <= 1.0 / (n_samples + 1) + 1e-12:
        return 1.0
    return p


def paired_bootstrap(
    baseline: list[str],
    system: list[str],
    refs: list[list[str]],
    n_samples: int = 1000,
    seed: int = 12345,
    baseline_name: str = "baseline",
    system_name: str = "system",
    force: bool = False,
) -> Comparison:
    """Paired bootstrap resampling test (Koehn 2004) of ``system`` against ``baseline`` for BLEU and chrF.

    Runs sacreBLEU's ``PairedTest(test_type="bs")`` with ``n_samples`` resamples; results are
    deterministic given ``seed`` (a positive integer).
    """
    if len(baseline) != len(system):
        raise ValueError(f"baseline has {len(baseline)} lines but system has {len(system)}")
    _check_streams(baseline, refs)
    if n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}")
    if seed < 1:
        # PairedTest treats a seed of 0 as "no seed" (and numpy rejects negative seeds).
        raise ValueError(f"seed must be a positive integer, got {seed}")

    metrics = {"BLEU": BLEU(references=refs, force=force), "chrF": CHRF(references=refs)}
    with _sacrebleu_seed(seed):
        test = PairedTest(
            [(baseline_name, baseline), (system_name, system)],
            metrics,
            references=None,  # the metrics cache their references, as in sacreBLEU's CLI
            test_type="bs",
            n_samples=n_samples,
        )
        signatures, results = test()

    # Result keys are sacreBLEU's score names ("BLEU", "chrF2"), in the order of ``metrics``.
    bleu_key, chrf_key = (k for k in results if k != "System")
    bl_bleu, sys_bleu = results[bleu_key]
    bl_chrf, sys_chrf = results[chrf_key]
    return Comparison(
        baseline_name=baseline_name,
        system_name=system_name,
        baseline_bleu=_estimate(bl_bleu),
        system_bleu=_estimate(sys_bleu),
        baseline_chrf=_estimate(bl_chrf),
        system_chrf=_estimate(sys_chrf),
        bleu_p_value=_p_value(bl_bleu, sys_bleu, n_samples),
        chrf_p_value=_p_value(bl_chrf, sys_chrf, n_samples),
        n_samples=n_samples,
        seed=seed,
        bleu_signature=signatures[bleu_key].format(),
        chrf_signature=signatures[chrf_key].format(),
    )


def load_eval_files(
    hyp: str, refs: list[str], compare: str | None = None
) -> tuple[list[str], list[list[str]], list[str] | None]:
    """Read the hypothesis, reference and optional compared-system files.

    Returns ``(hyps, ref_streams, compared)``. Raises :class:`UserError` when no reference is
    given, when a file is missing, empty or not valid UTF-8, or when line counts differ
    (e.g. ``"hyp.txt has 99 lines but ref.txt has 100"``).
    """
    if not refs:
        raise UserError("at least one reference file is required")
    hyps = read_lines(hyp)
    ref_streams = [read_lines(r) for r in refs]
    compared = read_lines(compare) if compare is not None else None
    others = list(zip(refs, ref_streams))
    if compare is not None and compared is not None:
        others.append((compare, compared))
    for path, lines in others:
        if len(lines) != len(hyps):
            raise UserError(f"{hyp} has {len(hyps)} lines but {path} has {len(lines)}")
    if not hyps:
        raise UserError(f"{hyp} is empty: nothing to evaluate")
    return hyps, ref_streams, compared


def _format_comparison(cmp: Comparison) -> list[str]:
    """The paired bootstrap table, in the spirit of ``sacrebleu --paired-bs``."""
    header = ["System", "BLEU (μ ± 95% CI)", "chrF (μ ± 95% CI)"]
    rows = [
        [f"Baseline: {cmp.baseline_name}", cmp.baseline_bleu.format(), cmp.baseline_chrf.format()],
        [cmp.system_name, cmp.system_bleu.format(), cmp.system_chrf.format()],
        [
            "  p-value",
            f"p = {cmp.bleu_p_value:.4f}" + (" *" if cmp.bleu_significant else ""),
            f"p = {cmp.chrf_p_value:.4f}" + (" *" if cmp.chrf_significant else ""),
        ],
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]

    def fmt(row: list[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()

    def verdict(metric: str, sig: bool, p: float) -> str:
        if sig:
            return f"  {metric}: the difference is significant (p = {p:.4f} < {SIGNIFICANCE_LEVEL})"
        return f"  {metric}: the difference is not significant (p = {p:.4f} >= {SIGNIFICANCE_LEVEL})"

    rule = "-" * len(fmt(header))
    return [
        f"Paired bootstrap resampling: {cmp.n_samples} resamples, seed {cmp.seed}",
        rule,
        fmt(header),
        rule,
        *(fmt(r) for r in rows),
        rule,
        f"* significantly different from the baseline at p < {SIGNIFICANCE_LEVEL}",
        verdict("BLEU", cmp.bleu_significant, cmp.bleu_p_value),
        verdict("chrF", cmp.chrf_significant, cmp.chrf_p_value),
        f"BLEU signature: {cmp.bleu_signature}",
        f"chrF signature: {cmp.chrf_signature}",
    ]


def evaluate_report(hyp: str, refs: list[str], compare: str | None = None, n_bootstrap: int = 1000) -> str:
    """The text printed by ``syntaxnmt evaluate``.

    BLEU (sacreBLEU's verbose line) and chrF of ``hyp`` with their full signatures; with
    ``compare``, a paired bootstrap table of ``hyp`` (the baseline) against ``compare``.
    """
    if n_bootstrap < 1:
        raise UserError(f"the number of bootstrap resamples must be positive, got {n_bootstrap}")
    hyps, ref_streams, compared = load_eval_files(hyp, refs, compare)
    s = score(hyps, ref_streams)
    lines = [
        f"{hyp} ({len(hyps)} lines, {len(refs)} reference{'s' if len(refs) != 1 else ''}: {', '.join(refs)})",
        s.bleu_verbose,
        f"  signature: {s.bleu_signature}",
        s.chrf_verbose,
        f"  signature: {s.chrf_signature}",
    ]
    if compared is not None:
        cmp = paired_bootstrap(
            hyps, compared, ref_streams, n_samples=n_bootstrap, baseline_name=hyp, system_name=compare
        )
        lines += ["", *_format_comparison(cmp)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- statistics over training seeds

BLEU_ORDER = 4
_LOG_ZERO = -9999999999.0  # sacreBLEU's log of a zero precision (``sacrebleu.utils.my_log``)
Metric = Callable[[np.ndarray], np.ndarray]
"""A corpus score from summed sentence statistics ``(..., K) -> (...)``, vectorised over the leading axes."""


class ReferenceScorer:
    """BLEU's sentence statistics and chrF of many outputs against one test set's reference streams,
    which sacreBLEU preprocesses once (the metrics cache them, as in its ``--paired-bs``).

    ``lowercase``: BLEU of lowercased text (sacreBLEU ``lowercase=True``, still its 13a tokenizer):
    the "lowercased tokenized BLEU" the Multi30k literature reports (e.g. ``sacrebleu -lc``)."""

    def __init__(self, refs: Sequence[Sequence[str]], lowercase: bool = False):
        if not refs:
            raise ValueError("at least one reference stream is required")
        self.refs = [list(r) for r in refs]
        self._bleu = BLEU(references=self.refs, force=True, lowercase=lowercase, tokenize="13a")
        self._chrf = CHRF(references=self.refs)

    def bleu_statistics(self, hyps: Sequence[str]) -> np.ndarray:
        """sacreBLEU's sentence-level sufficient statistics of BLEU (13a, cased, as :func:`score`):
        one row per sentence, ``[hyp_len, ref_len, correct_1..4, total_1..4]``. Their column sums
        give corpus BLEU (:func:`bleu_from_statistics`), so resampled or shuffled corpora cost a sum each."""
        _check_streams(hyps, self.refs)
        stats = self._bleu._extract_corpus_statistics(list(hyps), None)
        return np.asarray(stats, dtype=np.float64).reshape(len(hyps), 2 + 2 * BLEU_ORDER)

    def chrf(self, hyps: Sequence[str]) -> float:
        """Corpus chrF2, as :func:`score`."""
        _check_streams(hyps, self.refs)
        return float(self._chrf.corpus_score(list(hyps), None).score)

    def chrf_statistics(self, hyps: Sequence[str]) -> np.ndarray:
        """sacreBLEU's sentence-level sufficient statistics of chrF2 (one row per sentence); their
        column sums give corpus chrF (:func:`chrf_from_statistics`)."""
        _check_streams(hyps, self.refs)
        stats = self._chrf._extract_corpus_statistics(list(hyps), None)
        return np.asarray(stats, dtype=np.float64).reshape(len(hyps), -1)


def chrf_from_statistics(stats: np.ndarray) -> float:
    """Corpus chrF2 of summed (or per-sentence, then summed) chrF statistics: sacreBLEU's own
    ``CHRF._compute_score_from_stats`` (equal to ``CHRF.corpus_score`` on the sentences)."""
    stats = np.asarray(stats, dtype=np.float64)
    if stats.ndim == 2:
        stats = stats.sum(0)
    return float(CHRF()._compute_score_from_stats([float(x) for x in stats]).score)


def accuracy_from_statistics(stats: np.ndarray) -> np.ndarray:
    """Accuracy (%) from summed per-item statistics ``(..., 2)``: trials passed, trials (a
    contrastive test, :func:`syntaxnmt.experiments.scores.contrastive_statistics`)."""
    stats = np.asarray(stats, dtype=np.float64)
    return 100.0 * stats[..., 0] / np.maximum(stats[..., 1], 1.0)


def bleu_statistics(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> np.ndarray:
    """:meth:`ReferenceScorer.bleu_statistics` of one output (many outputs of one test set: a :class:`ReferenceScorer`)."""
    return ReferenceScorer(refs).bleu_statistics(hyps)


def bleu_from_statistics(stats: np.ndarray) -> np.ndarray:
    """Corpus BLEU (0-100) of summed statistics ``(..., 10)``: sacreBLEU's ``BLEU.compute_bleu``
    with its corpus defaults (exponential smoothing, no effective order), vectorised."""
    stats = np.asarray(stats, dtype=np.float64)
    sys_len, ref_len = stats[..., 0], stats[..., 1]
    correct, total = stats[..., 2 : 2 + BLEU_ORDER], stats[..., 2 + BLEU_ORDER :]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bp = np.where(sys_len < ref_len, np.where(sys_len > 0, np.exp(1.0 - ref_len / sys_len), 0.0), 1.0)
        counted = np.cumprod(total > 0, axis=-1).astype(bool)  # sacreBLEU stops at the first order with no n-gram
        zero = (correct == 0) & counted
        smooth = 2.0 ** np.cumsum(zero, axis=-1)  # 'exp' smoothing: 1/2, 1/4, ... matches for empty orders
        precision = np.where(counted, np.where(zero, 100.0 / (smooth * total), 100.0 * correct / total), 0.0)
        log_p = np.where(precision > 0, np.log(precision), _LOG_ZERO)
    return np.where(correct.sum(-1) > 0, bp * np.exp(log_p.mean(-1)), 0.0)


def _replicates(stats: np.ndarray, name: str) -> np.ndarray:
    stats = np.asarray(stats, dtype=np.float64)
    if stats.ndim == 2:
        stats = stats[None]
    if stats.ndim != 3 or stats.shape[0] == 0 or stats.shape[1] == 0:
        raise ValueError(f"{name}: expected (runs, sentences, statistics), got shape {stats.shape}")
    return stats


def stratified_approximate_randomization(
    baseline: np.ndarray, system: np.ndarray, metric: Metric = bleu_from_statistics, n_shuffles: int = 10_000, seed: int = 12345, chunk: int = 500
) -> float:
    """Two-sided p-value of approximate randomization stratified over paired runs (Noreen 1989;
    Riezler & Maxwell 2005; Clark et al. 2011, Sec. 4: MultEval's test).

    ``baseline`` and ``system`` are sentence statistics ``(R, N, K)`` of R paired runs (run k of
    the system with run k of the baseline: the same seed) on the same N test sentences, or
    ``(N, K)`` for one pair. The statistic is the mean over runs of ``metric(system_k)`` minus
    that of the baseline. Each shuffle swaps, for every sentence of every pair independently with
    probability 1/2, the two systems' outputs of that pair (a sentence never moves to another
    run); p = (1 + #{|shuffled| >= |observed|}) / (1 + n_shuffles). Identical systems give 1.
    Vectorised: the shuffled sums of a chunk of shuffles are one matrix product per run.
    """
    base, sys_ = _replicates(baseline, "baseline"), _replicates(system, "system")
    if base.shape != sys_.shape:
        raise ValueError(f"baseline statistics {base.shape} and system statistics {sys_.shape} differ in shape")
    if n_shuffles < 1:
        raise ValueError(f"n_shuffles must be positive, got {n_shuffles}")
    runs, n = base.shape[:2]
    base_sum, sys_sum = base.sum(1), sys_.sum(1)  # (R, K)
    observed = float(np.mean(metric(sys_sum)) - np.mean(metric(base_sum)))
    diff = (base - sys_).astype(np.float32)  # what a sentence swap adds to the system (integer counts: exact in float32)
    tolerance = 1e-9 * max(1.0, abs(observed))
    rng = np.random.default_rng(seed)
    at_least = 0
    for start in range(0, n_shuffles, chunk):
        size = min(chunk, n_shuffles - start)
        delta = np.zeros(size)
        for k in range(runs):
            # One fair coin per sentence: the bits of random bytes.
            swap = np.unpackbits(rng.integers(0, 256, size=(size, (n + 7) // 8), dtype=np.uint8), axis=1, count=n)
            moved = swap.astype(np.float32) @ diff[k]  # (size, K)
            delta += metric(sys_sum[k] + moved) - metric(base_sum[k] - moved)
        at_least += int(np.count_nonzero(np.abs(delta / runs) >= abs(observed) - tolerance))
    return (at_least + 1) / (n_shuffles + 1)


def paired_bootstrap_p(baseline: np.ndarray, system: np.ndarray, n_samples: int = 1000, seed: int = 12345) -> float:
    """The BLEU p-value of :func:`paired_bootstrap` (sacreBLEU's ``--paired-bs``, Koehn 2004) from
    sentence statistics ``(N, 10)``: the same resamples (``numpy.random.default_rng(seed)``), the
    same statistic and the same degenerate case, vectorised (a test pins the equality)."""
    base, sys_ = np.asarray(baseline, dtype=np.float32), np.asarray(system, dtype=np.float32)
    if base.shape != sys_.shape or base.ndim != 2 or len(base) == 0:
        raise ValueError(f"baseline statistics {base.shape} and system statistics {sys_.shape}: expected equal (sentences, 10)")
    n = len(base)
    idx = np.random.default_rng(seed).choice(n, size=(n_samples, n), replace=True)
    counts = np.bincount((idx + n * np.arange(n_samples)[:, None]).ravel(), minlength=n_samples * n).reshape(n_samples, n).astype(np.float32)
    base_score, sys_score = float(bleu_from_statistics(base.sum(0))), float(bleu_from_statistics(sys_.sum(0)))
    sample_diffs = np.abs(bleu_from_statistics(counts @ sys_) - bleu_from_statistics(counts @ base))
    centred = sample_diffs - sample_diffs.mean()
    p = (int(np.sum(centred > abs(base_score - sys_score))) + 1) / (n_samples + 1)
    if sys_score == base_score and p <= 1.0 / (n_samples + 1) + 1e-12:
        return 1.0  # as :func:`_p_value`
    return p


def selection_sd(stats: np.ndarray, metric: Metric = bleu_from_statistics, n_samples: int = 1000, seed: int = 12345, chunk: int = 200) -> float:
    """The test-set standard deviation of one run's corpus score: the sd over ``n_samples``
    bootstrap resamples of its N sentences (s_sel of Clark et al. 2011 for one replicate)."""
    stats = np.asarray(stats, dtype=np.float64)
    if stats.ndim != 2 or len(stats) == 0:
        raise ValueError(f"expected (sentences, statistics), got shape {stats.shape}")
    if n_samples < 2:
        raise ValueError(f"n_samples must be at least 2, got {n_samples}")
    rng = np.random.default_rng(seed)
    n = len(stats)
    table = stats.astype(np.float32)  # integer counts: exact
    scores = []
    for start in range(0, n_samples, chunk):
        size = min(chunk, n_samples - start)
        idx = rng.integers(0, n, size=(size, n))
        # How often each sentence is drawn in each resample, then the resampled sums as one product.
        counts = np.bincount((idx + n * np.arange(size)[:, None]).ravel(), minlength=size * n).reshape(size, n)
        scores.append(metric(counts.astype(np.float32) @ table))
    return float(np.std(np.concatenate(scores), ddof=1))


@dataclass
class SeedStatistics:
    """One system's corpus score over training seeds (Clark et al. 2011, Sec. 3)."""

    scores: list[float]
    """The corpus score of each seed's output."""
    mean: float
    s_opt: float | None
    """Standard deviation of the per-seed scores (n - 1 in the denominator); None with one seed."""
    s_sel: float
    """Test-set standard deviation (bootstrap over the test sentences), averaged over the seeds."""


def seed_statistics(per_seed: Sequence[np.ndarray], metric: Metric = bleu_from_statistics, n_bootstrap: int = 1000, seed: int = 12345) -> SeedStatistics:
    """Mean, s_opt and s_sel of a system from the sentence statistics of each seed's output."""
    if not per_seed:
        raise ValueError("no runs")
    scores = [float(metric(np.asarray(s, dtype=np.float64).sum(0))) for s in per_seed]
    s_sel = statistics.mean(selection_sd(s, metric, n_bootstrap, seed) for s in per_seed)
    return SeedStatistics(scores, statistics.mean(scores), statistics.stdev(scores) if len(scores) > 1 else None, s_sel)


def _violation_ratios(a: np.ndarray, b: np.ndarray, grid: int) -> np.ndarray:
    """ε_W2 of Dror et al. (2019, Eq. 4; del Barrio et al. 2018) for sorted samples ``a`` (..., n)
    and ``b`` (..., m): the share of the squared Wasserstein-2 distance between the empirical
    quantile functions F_a^-1 and F_b^-1 on the set where A's quantile is below B's (where
    "A is stochastically at least as large as B" is violated). The integral over t in (0, 1) is the
    midpoint rule on ``grid`` cells; 0.5 when the two distributions are equal."""
    t = (np.arange(grid) + 0.5) / grid
    qa = a[..., np.ceil(t * a.shape[-1]).astype(int) - 1]  # F^-1(t) = the ceil(t n)-th smallest
    qb = b[..., np.ceil(t * b.shape[-1]).astype(int) - 1]
    gap = (qb - qa) ** 2
    total = gap.sum(-1)
    violated = np.where(qa < qb, gap, 0.0).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, violated / total, 0.5)


def aso_violation_ratio(scores_a: Sequence[float], scores_b: Sequence[float], dt: float = 0.005) -> float:
    """The point estimate ε_W2(F_a, F_b) of :func:`aso_epsilon_min` (0: A better in every quantile, 1: worse in every one)."""
    a, b = np.sort(np.asarray(scores_a, dtype=np.float64)), np.sort(np.asarray(scores_b, dtype=np.float64))
    return float(_violation_ratios(a, b, round(1 / dt)))


def aso_epsilon_min(scores_a: Sequence[float], scores_b: Sequence[float], confidence: float = 0.95, n_bootstrap: int = 1000, dt: float = 0.005, seed: int = 12345) -> float:
    """ε_min of the Almost Stochastic Order test (Dror, Shlomov & Reichart 2019, Sec. 3, after del
    Barrio, Cuesta-Albertos & Matrán 2018): an upper confidence bound on the violation ratio
    ε_W2(F_a, F_b) of "A's scores (higher is better) stochastically dominate B's".

    ε_min = ε̂ + Φ^-1(confidence) σ̂ sqrt((n + m) / (n m)), clipped to [0, 1], where σ̂ is the
    standard deviation of sqrt(n m / (n + m)) (ε* - ε̂) over ``n_bootstrap`` resamples (with
    replacement) of both score lists. Below 0.5: A is almost stochastically better than B; near 0:
    better at every quantile. Written from the papers (the ``deepsig`` package computes the same
    statistic; it is GPL-3.0 and needs pandas, so it is not a dependency here).
    """
    a, b = np.sort(np.asarray(scores_a, dtype=np.float64)), np.sort(np.asarray(scores_b, dtype=np.float64))
    if len(a) == 0 or len(b) == 0:
        raise ValueError("both score lists must be non-empty")
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    grid = round(1 / dt)
    n, m = len(a), len(b)
    estimate = float(_violation_ratios(a, b, grid))
    rng = np.random.default_rng(seed)
    boot_a = np.sort(rng.choice(a, size=(n_bootstrap, n)), axis=1)
    boot_b = np.sort(rng.choice(b, size=(n_bootstrap, m)), axis=1)
    const = np.sqrt(n * m / (n + m))
    sigma = float(np.std(const * (_violation_ratios(boot_a, boot_b, grid) - estimate)))
    return float(np.clip(estimate + statistics.NormalDist().inv_cdf(confidence) * sigma / const, 0.0, 1.0))


# ---------------------------------------------------------------- seed-level inference

ASO_THRESHOLD = 0.2
"""ε_min below which ASO calls one system almost stochastically better (deepsig's recommendation:
Ulmer, Hardmeier & Frellsen 2022, "deep-significance"; Dror et al. 2019 used 0.5)."""
POWER = 0.8


def run_scores(runs: Sequence[np.ndarray], metric: Metric = bleu_from_statistics) -> np.ndarray:
    """The corpus score of each run from its sentence statistics ``(N, K)``."""
    return np.array([float(metric(np.asarray(r, dtype=np.float64).sum(0))) for r in runs])


def _resampled_means(runs: Sequence[np.ndarray], metric: Metric, rng: np.random.Generator, n_samples: int, chunk: int) -> np.ndarray:
    """``n_samples`` draws of the two-level bootstrap of one system: R seeds drawn with replacement
    from its R runs, then each drawn run's N sentences with replacement; the mean corpus score."""
    table = np.stack([np.asarray(r, dtype=np.float32) for r in runs])  # (R, N, K): integer counts, exact
    runs_n, n = table.shape[:2]
    out = []
    for start in range(0, n_samples, chunk):
        size = min(chunk, n_samples - start)
        which = rng.integers(0, runs_n, size=(size, runs_n))  # level 1: seeds
        idx = rng.integers(0, n, size=(size * runs_n, n))  # level 2: sentences of each drawn run
        counts = np.bincount((idx + n * np.arange(size * runs_n)[:, None]).ravel(), minlength=size * runs_n * n).reshape(size, runs_n, n).astype(np.float32)
        sums = np.einsum("brn,brnk->brk", counts, table[which])  # (size, R, K)
        out.append(metric(sums).mean(-1))
    return np.concatenate(out)


def two_level_bootstrap(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], metric: Metric = bleu_from_statistics, n_samples: int = 1000, seed: int = 12345, confidence: float = 0.95, chunk: int = 50) -> tuple[float, float]:
    """Percentile interval of mean(system) − mean(baseline) over seeds from a two-level bootstrap
    (Efron & Tibshirani 1993, Sec. 8; the hierarchical resampling of Clark et al. 2011 and Dror et
    al. 2019): in each of ``n_samples`` draws, each system's seeds are drawn with replacement, then
    the sentences of each drawn run with replacement, and the corpus scores (recomputed from the
    summed sentence statistics) averaged over the drawn runs. It samples training variance and
    test-set variance; the interval is the (α/2, 1−α/2) percentiles of the drawn differences.
    Deterministic given ``seed``."""
    if not baseline or not system:
        raise ValueError("both systems need at least one run")
    rng = np.random.default_rng(seed)
    return _percentile_interval(_resampled_means(system, metric, rng, n_samples, chunk) - _resampled_means(baseline, metric, rng, n_samples, chunk), confidence)


def _percentile_interval(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    """The (α/2, 1−α/2) percentiles of bootstrap ``draws``."""
    alpha = 1.0 - confidence
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def two_level_interval(runs: Sequence[np.ndarray], metric: Metric, n_samples: int = 1000, seed: int = 12345, confidence: float = 0.95, chunk: int = 50) -> tuple[float, float]:
    """Percentile interval of the mean corpus score over seeds of one set of ``runs`` from the
    two-level bootstrap of :func:`two_level_bootstrap` (seeds, then sentences). With statistics that
    hold two readings of the same items side by side and a ``metric`` that takes their difference,
    it is the paired interval of that difference (e.g. one model scored with and without context)."""
    if not runs:
        raise ValueError("at least one run")
    return _percentile_interval(_resampled_means(runs, metric, np.random.default_rng(seed), n_samples, chunk), confidence)


def welch_p(baseline_scores: Sequence[float], system_scores: Sequence[float]) -> float | None:
    """Two-sided p of Welch's t-test over per-seed scores (``scipy.stats.ttest_ind(equal_var=False)``):
    the seed-level test, whose unit of replication is the training run. None with fewer than two
    seeds on a side; 1.0 for equal means with no spread at all (scipy gives nan there)."""
    from scipy import stats

    a, b = np.asarray(baseline_scores, dtype=np.float64), np.asarray(system_scores, dtype=np.float64)
    if len(a) < 2 or len(b) < 2:
        return None
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 1.0 if a[0] == b[0] else 0.0  # no spread: any difference is exact
    return float(stats.ttest_ind(b, a, equal_var=False).pvalue)


def minimum_detectable_difference(sd: float, n_baseline: int, n_system: int, alpha: float = SIGNIFICANCE_LEVEL, power: float = POWER) -> float | None:
    """The smallest true difference of means a two-sided two-sample t-test at ``alpha`` detects with
    probability ``power``, for seeds with standard deviation ``sd`` (the baseline's s_opt) and
    ``n_baseline`` / ``n_system`` seeds: the δ solving
    P(|T| > t_{1−α/2, ν}) = power, T ~ noncentral t(ν, δ / (sd √(1/n₁ + 1/n₂))), ν = n₁ + n₂ − 2
    (scipy.stats.nct; Cohen 1988, Ch. 2). None when it cannot be computed (fewer than two seeds on
    a side or no sd)."""
    from scipy import optimize, stats

    if sd is None or not np.isfinite(sd) or n_baseline < 2 or n_system < 2:
        return None
    if sd == 0:
        return 0.0
    df = n_baseline + n_system - 2
    se = sd * np.sqrt(1.0 / n_baseline + 1.0 / n_system)
    crit = stats.t.ppf(1 - alpha / 2, df)

    def shortfall(nc: float) -> float:
        return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc)) - power

    high = 1.0
    while shortfall(high) < 0:  # widen the bracket (nct is unstable far beyond what is needed)
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high) * se)


def aa_splits(k: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every split of ``k`` runs into two groups of ⌊k/2⌋ and ⌈k/2⌉ (each unordered split once):
    the pairs of pseudo-systems of the A/A check. 10 splits of 6 seeds, 3 of 4, 35 of 7."""
    from itertools import combinations

    if k < 2:
        return []
    half = k // 2
    splits = []
    for first in combinations(range(k), half):
        if half * 2 == k and first[0] != 0:
            continue  # equal halves: each split once, with run 0 in the first group (its mirror came earlier)
        splits.append((first, tuple(i for i in range(k) if i not in first)))
    return splits


def aso_verdict(epsilon_better: float, epsilon_worse: float, threshold: float = ASO_THRESHOLD) -> str:
    """``better`` when ε_min(system ≻ baseline) < threshold, ``worse`` when ε_min(baseline ≻ system)
    < threshold, else ``""``: ε_min near 1 in one direction means *no evidence* of that dominance
    (two identical systems score 1.00 both ways with three seeds), not the opposite dominance."""
    if epsilon_better < threshold:
        return "better"
    if epsilon_worse < threshold:
        return "worse"
    return ""
