"""Tests for benchmarks/constrained_decoding.py: a smoke run on the tiny model (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "constrained_decoding.py"


def test_a_smoke_run_reports_both_searches(trained_run, corpus, tmp_path, capsys):
    bench = load_script(SCRIPT, "constrained_decoding_bench")
    tgt = corpus["test"]["tgt"].read_text(encoding="utf-8").splitlines()
    cons = tmp_path / "cons.txt"  # every other line one term from its reference, two on line 1 (only the first is used)
    cons.write_text("".join(("\t".join(t.split()[1:3]) if i % 2 == 0 else "") + "\n" for i, t in enumerate(tgt)), encoding="utf-8")
    out = tmp_path / "bench.json"
    result = bench.main(["--checkpoint", f"{trained_run.work_dir}/best.pt", "--constraints", str(cons), "--src", str(corpus["test"]["src"]), "--ref", str(corpus["test"]["tgt"]), "--limit", "6", "--repeats", "1", "--beam", "3", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "6 sentences with one constraint each, beam 3" in printed and "x the time of plain beam 3" in printed
    assert result["constrained"]["terms"] == [6, 6] and result["plain"]["terms"][1] == 6
    assert json.loads(out.read_text())["sentences"] == 6
