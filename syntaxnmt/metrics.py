"""Evaluation with sacreBLEU: BLEU, chrF, their signatures, and paired bootstrap resampling.

Everything is computed by sacreBLEU's own API (``sacrebleu.metrics.BLEU``/``CHRF`` and
``sacrebleu.significance.PairedTest``, the code behind ``sacrebleu --paired-bs``); this
module only validates inputs, reads files and formats the report.

Hypotheses and references are detokenized text. ``refs`` is always a list of reference
*streams*: ``refs[k][i]`` is the k-th reference of line ``i``, as in ``sacrebleu.corpus_bleu``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

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
