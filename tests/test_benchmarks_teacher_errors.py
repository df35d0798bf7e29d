"""benchmarks/teacher_errors.py: per-word counts of an aligner's missed and wrong links against gold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "teacher_errors.py"


def test_counts_missed_and_wrong_links_per_target_word(tmp_path):
    module = load_script(SCRIPT)
    tgt = ["a ga b wo", "b ga"]
    gold = [{(0, 0), (0, 1), (1, 2), (1, 3)}, {(0, 0), (0, 1)}]
    hyp = [{(0, 0), (1, 1), (1, 2)}, {(0, 0), (0, 1), (1, 1)}]  # ga wrong once (and right once), wo missed
    missed, wrong, total = module.teacher_errors(tgt, gold, hyp)
    assert missed == {"wo": 1} and wrong == {"ga": 2} and total["ga"] == 2 and total["b"] == 2
    for name, lines in (("t", tgt), ("g", ["0-0 0-1 1-2 1-3", "0-0 0-1"]), ("h", ["0-0 1-1 1-2", "0-0 0-1 1-1"])):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    run = subprocess.run([sys.executable, SCRIPT, "--tgt", tmp_path / "t", "--gold", tmp_path / "g", "--hyp", tmp_path / "h"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "2 sentences, 6 target words" in run.stdout and "wo 1/1" in run.stdout and "ga 2/2" in run.stdout
