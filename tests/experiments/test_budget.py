"""The update budget from a baseline's dev curve (``syntaxnmt.experiments.budget``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from syntaxnmt.errors import UserError
from syntaxnmt.experiments.budget import budget_point, describe, read_curve

# The GPU curve of issue 50 (dev BLEU of the recipe model), one validation every 500 updates.
GPU_CURVE = [(500, 20.1), (1000, 30.2), (1500, 33.9), (2000, 35.7), (2500, 37.2), (3000, 37.3), (3500, 37.6), (4000, 37.7), (4500, 37.9), (5000, 37.8)]


# The CPU curve of stop 55 (syntax baseline, seed 1, one validation every 250 updates) to 4,000: a
# dip at 2,000 and a stall at 2,750-3,250 that the curve leaves at 3,500.
CPU_CURVE = [(250, 3.91), (500, 13.60), (750, 19.39), (1000, 27.57), (1250, 30.24), (1500, 31.80), (1750, 34.71), (2000, 34.53), (2250, 35.22),
             (2500, 36.12), (2750, 35.60), (3000, 36.12), (3250, 35.56), (3500, 37.45), (3750, 36.69), (4000, 37.24)]


def _next_fifth(curve, smooth):
    """The rule this module replaced, for the record: the first point after which the (smoothed)
    curve gains under 0.3 over the next fifth of the updates."""
    from syntaxnmt.experiments.budget import smoothed

    points = smoothed(curve, smooth)
    for i, (step, bleu) in enumerate(points):
        later = [b for s, b in points[i + 1 :] if s <= 1.2 * step]
        if later and max(later) - bleu < 0.3:
            return step


def test_budget_is_the_first_point_within_the_tolerance_of_the_plateaued_curves_best():
    # Means of 3 validations: 3000 36.73, 3500 37.37, 4000 37.53, 4500 37.73, 5000 37.80. The last fifth
    # (4500, 5000) raises the best by 0.27 < 0.3: a plateau; the first mean within 0.5 of 37.80 is 3500's.
    assert budget_point(GPU_CURVE) == 3500
    assert budget_point(GPU_CURVE, tolerance=0.1) == 4500 and budget_point(GPU_CURVE, tolerance=1.1) == 3000
    # A stricter plateau: the last fifth's 0.27 is not under 0.2, so the curve must be trained further.
    assert budget_point(GPU_CURVE, min_gain=0.2) is None
    # Still rising at the end: no budget yet.
    rising = [(s, s / 100) for s in range(500, 5001, 500)]
    assert budget_point(rising) is None
    assert "no budget yet" in describe(rising) and "budget: max_steps 3500" in describe(GPU_CURVE)


def test_local_stalls_of_a_real_curve_do_not_fix_the_budget():
    # Looking a fifth ahead fixes a stall: unsmoothed 1750 (one dip), smoothed 2750 -- 1.5 BLEU below
    # the mean the curve reached by 4000. Judged as a whole, the curve is still rising (+1.18).
    assert _next_fifth(CPU_CURVE, 1) == 1750 and _next_fifth(CPU_CURVE, 3) == 2750
    assert budget_point(CPU_CURVE) is None and budget_point(CPU_CURVE[:9]) is None
    assert describe(CPU_CURVE).splitlines()[-1] == (
        "no budget yet: the last 20% of the updates (to 4000) still raise the best dev BLEU (mean of 3 validations) by 0.3 or more (+1.18); train the curve further"
    )
    assert budget_point(CPU_CURVE[:2]) is None  # fewer validations than the mean needs


def test_the_committed_converged_curve_plateaued_lower_and_says_so():
    """The converged study's curve (issue 50): its last fifth lowered the best mean of 3, in words."""
    curve = read_curve(Path(__file__).resolve().parents[2] / "results" / "multi30k-study-converged" / "baseline-seed1-curve.valid.log")
    assert describe(curve).splitlines()[-1].endswith("the last 20% of the updates lowered the best by 0.16, a gain under 0.3)")


def test_read_curve_from_a_training_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "update 50 | loss 5.1\nupdate 500 | dev loss 3.100 ppl 22.198 BLEU 20.10 | new best\n"
        "train:  40%|####| 400/1000\rupdate 1000 | dev loss 2.500 ppl 12.182 BLEU 30.20 | new best\n"
        "update 1000 | dev loss 2.500 ppl 12.182 BLEU 30.25\n",  # a resumed run validates 1000 again: the last line wins
        encoding="utf-8",
    )
    assert read_curve(log) == [(500, 20.1), (1000, 30.25)]
    (tmp_path / "none.log").write_text("update 50 | loss 5.1\n", encoding="utf-8")
    with pytest.raises(UserError, match="none.log: no 'update N | dev ... BLEU X' line"):
        read_curve(tmp_path / "none.log")


def test_budget_command_prints_the_point_and_errors_in_one_line(tmp_path):
    log = tmp_path / "valid.log"
    log.write_text("".join(f"update {s} | dev loss 1.000 BLEU {b:.2f}\n" for s, b in GPU_CURVE), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "syntaxnmt.experiments.budget", str(log)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "budget: max_steps 3500" in out.stdout and "  3500     37.60      37.37  <- budget" in out.stdout
    out = subprocess.run([sys.executable, "-m", "syntaxnmt.experiments.budget", str(tmp_path / "missing.log")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == f"syntaxnmt: error: {tmp_path / 'missing.log'}: validation log not found"
