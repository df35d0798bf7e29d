"""benchmarks/native_training.py: each kernel alone against PyTorch's operators (tiny shapes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

from syntaxnmt.cpu.machine import native_kernels, native_training_kernels

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "native_training.py"


@pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")
def test_each_kernel_is_timed_with_both_settings_and_the_kernels_stay_on():
    bench = load_script(SCRIPT)
    figures = bench.kernels_alone((4, 6), 16, 2, 32, 50)
    assert len(figures) == 4 and any("causal" in name for name in figures) and any("loss" in name for name in figures)
    assert all(set(ms) == {"native", "torch"} and ms["native"] > 0 and ms["torch"] > 0 for ms in figures.values())
    assert native_training_kernels() is not None


def test_paired_updates_train_each_batch_once_per_setting_in_alternating_order():
    bench = load_script(SCRIPT)
    current, seen = [None], []

    class Task:
        def update(self, group, step):
            seen.append((current[0], group[0], step))
            return {"tokens": 10}

    stream = iter((0, i, f"b{i}") for i in range(100))
    settings = {"A": lambda: current.__setitem__(0, "A"), "B": lambda: current.__setitem__(0, "B")}
    run = bench.paired_updates(Task(), stream, settings, batches=3, warmup=2)
    assert [s[:2] for s in seen] == [("A", "b0"), ("B", "b1"), ("A", "b2"), ("B", "b2"), ("B", "b3"), ("A", "b3"), ("A", "b4"), ("B", "b4")]
    assert [s[2] for s in seen] == list(range(8))  # the update counter goes on
    assert run["tokens"] == 30 and len(run["ratios"]) == 3 and set(run["seconds"]) == {"A", "B"} and run["last_batch"] == "b4"


@pytest.mark.parametrize("name", ["row-granule", "row-packing"])
def test_each_switch_turns_its_part_off_and_on_again(name):
    """--switch NAME: the two settings flip exactly that part of the native path (row packing on
    for the others), and turning it on again restores the defaults."""
    from syntaxnmt.cpu.stack import PackedStacks

    bench = load_script(SCRIPT)

    class Task:
        raw = type("Model", (), {"stacks": type("Stacks", (), {"pack_granule": 128})()})()

    Task.raw.stacks.pack_granule = 0  # as a calibration that chose no packing leaves it
    settings = bench.switch(Task(), name)
    assert list(settings) == [f"{name} on", f"{name} off"]
    from syntaxnmt.cpu import linear, stack
    from syntaxnmt.training import losses

    library = lambda: stack.row_granule is linear.row_granule and losses.row_granule is linear.row_granule  # noqa: E731
    state = lambda: (library(), Task.raw.stacks.pack_granule)  # noqa: E731
    on = (True, 128)
    assert state() == (on if name != "row-packing" else (True, 0))
    settings[f"{name} off"]()
    off = bench.SWITCHES.index(name)
    assert state() == tuple(False if i == off == 0 else 0 if i == off else v for i, v in enumerate(on))
    settings[f"{name} on"]()
    assert state() == on
    assert PackedStacks.pack_granule == 128


def test_the_benchmark_only_switches_are_gone():
    """The fused kernels, packed layers and row maps are compared against a git revision (issue 48)."""
    bench = load_script(SCRIPT)
    assert bench.SWITCHES == ("row-granule", "row-packing")
