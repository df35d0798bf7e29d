"""The update budget from a baseline's dev curve (``syntaxnmt.experiments.budget``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from syntaxnmt.errors import UserError
from syntaxnmt.experiments.budget import budget_point, describe, read_curve

# The GPU curve of issue 50 (dev BLEU of the recipe model), one validation every 500 updates.
GPU_CURVE = [(500, 20.1), (1000, 30.2), (1500, 33.9), (2000, 35.7), (2500, 37.2), (3000, 37.3), (3500, 37.6), (4000, 37.7), (4500, 37.9), (5000, 37.8)]


# The CPU curve of stop 55 (syntax baseline, seed 1, one validation every 250 updates): one dip at 2000.
DIP_CURVE = [(250, 3.91), (500, 13.60), (750, 19.39), (1000, 27.57), (1250, 30.24), (1500, 31.80), (1750, 34.71), (2000, 34.53), (2250, 35.22)]


def test_budget_is_the_first_point_whose_smoothed_bleu_gains_under_the_threshold_over_the_next_fifth():
    # Means of 3 validations: 3000 36.73, 3500 37.37, 4000 37.53, 4500 37.73, 5000 37.80. 3500: the
    # next fifth (to 4200) gains 0.17 < 0.3; 3000 gains 0.63 (to 3600), earlier points more.
    assert budget_point(GPU_CURVE) == 3500
    # Unsmoothed: 2500 (the next fifth, to 3000, gains 0.1; 2000 -> 2400 holds no validation).
    assert budget_point(GPU_CURVE, smooth=1) == 2500
    # A stricter threshold: no point before 4500 qualifies, and 4500's window runs past the curve.
    assert budget_point(GPU_CURVE, min_gain=0.05) is None
    # Still rising at the end: no budget yet (the curve must be trained further).
    rising = [(s, s / 100) for s in range(500, 5001, 500)]
    assert budget_point(rising) is None
    assert "no budget yet" in describe(rising) and "budget: max_steps 3500" in describe(GPU_CURVE)


def test_one_dip_of_a_validation_does_not_fix_the_budget():
    # Unsmoothed, 1750 -> 2000 loses 0.18 and 2000 is the only validation within 1750's fifth: the
    # budget would be 1750, 3 BLEU below the plateau. Smoothed, 1750 -> 2000 gains 1.43: not yet.
    assert budget_point(DIP_CURVE, smooth=1) == 1750
    assert budget_point(DIP_CURVE) is None
    assert describe(DIP_CURVE).splitlines()[-1].startswith("no budget yet: dev BLEU (mean of 3 validations) still gains 0.3")
    assert budget_point(DIP_CURVE[:2]) is None  # fewer validations than the mean needs


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
