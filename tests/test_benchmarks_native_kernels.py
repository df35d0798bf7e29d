"""benchmarks/native_kernels.py: the C kernels of training alone, and against another build (tiny shapes)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syntaxnmt.cpu.machine import native_training_kernels

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "native_kernels.py"

pytestmark = pytest.mark.skipif(native_training_kernels() is None, reason="the native kernels are not built for this CPU")


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs cc and a git checkout")
def test_times_the_kernels_and_a_build_of_another_revision(tmp_path):
    """The table lists both builds for each attention case and every dropout form; the JSON holds
    the same figures and the machine record; the other build is compiled from git, not this tree."""
    out = tmp_path / "kernels.json"
    cmd = [sys.executable, str(SCRIPT), "--sentences", "3", "--length", "6", "--heads", "2", "--d-head", "8", "--rows", "16", "--ffn-dim", "64",
           "--repeats", "2", "--threads", "1", "--against", "HEAD", "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert sum(line.startswith("| non-causal, padded keys | ") for line in rows) == 2 and sum(line.startswith("| causal | HEAD |") for line in rows) == 1
    assert any(line.startswith("| bias + ReLU + dropout | ") for line in rows) and any(line.startswith("| x * 1.1 (memory only) | ") and line.endswith("| - |") for line in rows)
    doc = json.loads(out.read_text())
    assert set(doc["attention_ms"]["causal"]) == {"this tree", "HEAD"} and all(v > 0 for v in doc["attention_ms"]["causal"]["HEAD"])
    assert doc["dropout_ms"]["dropout"][0] > 0 and "load_average_after" in doc["machine"]
    assert not list(tmp_path.glob("_native*"))  # built in a temporary folder, removed


def test_an_unknown_revision_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--sentences", "2", "--length", "4", "--heads", "1", "--d-head", "8", "--rows", "8", "--ffn-dim", "8",
                        "--repeats", "1", "--threads", "1", "--against", "no-such-revision", "--json", str(tmp_path / "k.json")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode != 0 and "native_kernels: --against no-such-revision" in r.stderr and "Traceback" not in r.stderr
