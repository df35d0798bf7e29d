"""benchmarks/native_training.py: each kernel alone against PyTorch's operators (tiny shapes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

from syntaxnmt.runtime import native_kernels, native_training_kernels

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "native_training.py"


@pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/_native.c not built or no AVX2/FMA on this CPU")
def test_each_kernel_is_timed_with_both_settings_and_the_kernels_stay_on():
    bench = load_script(SCRIPT)
    figures = bench.kernels_alone((4, 6), 16, 2, 32, 50)
    assert len(figures) == 4 and any("causal" in name for name in figures) and any("loss" in name for name in figures)
    assert all(set(ms) == {"native", "torch"} and ms["native"] > 0 and ms["torch"] > 0 for ms in figures.values())
    assert native_training_kernels() is not None
