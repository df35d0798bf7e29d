"""Every benchmark and recipe script still imports against the package, and every shell script
parses: a module renamed or moved shows here, not when someone next runs the benchmark
(benchmarks/cpu_kernels.py imported ``syntaxnmt.model.kernels`` for weeks after it moved to
``syntaxnmt.cpu.calibration``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("benchmarks", "recipes") for p in (ROOT / folder).rglob("*.py") if not {"out", "venvs"} & set(p.relative_to(ROOT).parts))


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_benchmark_script_imports(path):
    before = dict(sys.modules)
    try:
        module = load_script(path, f"benchmark_import_{path.stem}", register=True)  # dataclasses look their module up
    finally:  # the scripts import each other by bare name: leave no half-loaded module behind
        for name in set(sys.modules) - set(before):
            if not name.startswith(("syntaxnmt", "torch", "numpy")):
                sys.modules.pop(name, None)
    assert module.__doc__, f"{path}: no docstring saying what it measures and how to run it"


SHELL_SCRIPTS = sorted(p for folder in ("benchmarks", "recipes", ".ci") for p in (ROOT / folder).rglob("*") if p.is_file() and (p.suffix == ".sh" or p.name == "run") and not {"out", "venvs"} & set(p.relative_to(ROOT).parts))


@pytest.mark.parametrize("path", SHELL_SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SHELL_SCRIPTS])
def test_shell_script_parses(path):
    """``bash -n``: the script's syntax (the recipes' and the GPU machine's scripts run rarely)."""
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
