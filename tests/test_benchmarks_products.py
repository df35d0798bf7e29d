"""benchmarks/products.py: the product shapes of an update, and a tiny run's table and JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

from syntaxnmt.cpu.blas import openblas_available

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "products.py"


def test_the_shapes_are_an_updates_products():
    bench = load_script(SCRIPT)
    todo = bench.shapes(100, 8, 32, 50)
    assert len(todo) == 12
    assert ("d -> ffn x W^T", 100, 8, 32) in todo and ("d -> ffn g W", 100, 32, 8) in todo and ("d -> ffn g^T x", 32, 100, 8) in todo
    assert ("output x^T g", 8, 100, 50) in todo  # a chunk of at most 1024 rows


@pytest.mark.skipif(not openblas_available(), reason="numpy's BLAS is not OpenBLAS")
def test_a_tiny_run_prints_both_libraries_and_writes_its_json(tmp_path):
    out = tmp_path / "products.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--rows", "16", "--d-model", "8", "--ffn-dim", "16", "--vocab", "40", "--rounds", "1", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| MKL alone | OpenBLAS alone | MKL interleaved | OpenBLAS interleaved |" in done.stdout and "OpenBLAS / MKL interleaved: " in done.stdout
    doc = json.loads(out.read_text())
    assert set(doc["gflops_all"]) == {"alone", "interleaved"} and all(v > 0 for how in doc["gflops_all"].values() for v in how.values())
    assert len(doc["seconds"]["alone"]["mkl"]) == 12 and doc["machine"]["openblas"]["version"] and "load_average_after" in doc["machine"]
