"""benchmarks/busy_machine.py: the environments of its settings and the targets it reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

from syntaxnmt.cpu.machine import THREAD_VARIABLES

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bm():
    return load_script(ROOT / "benchmarks" / "busy_machine.py")


def test_every_setting_starts_from_an_environment_without_the_users_thread_variables(bm, monkeypatch):
    for k in THREAD_VARIABLES:
        monkeypatch.setenv(k, "7")
    env, threads = bm.syntaxnmt_env("default")
    assert threads == "policy" and not set(THREAD_VARIABLES) & set(env) and env["PYTHONPATH"] == str(ROOT)
    env, threads = bm.syntaxnmt_env("2")
    assert threads == "2" and not set(THREAD_VARIABLES) & set(env)
    env, threads = bm.syntaxnmt_env("torch")  # libgomp's own waiting: the command then leaves OMP_WAIT_POLICY unset
    assert threads == "torch" and env["GOMP_SPINCOUNT"] == "300000" and "OMP_WAIT_POLICY" not in env
    env, threads = bm.syntaxnmt_env("2:3000")  # N threads, GOMP_SPINCOUNT=S
    assert threads == "2" and env["GOMP_SPINCOUNT"] == "3000" and "OMP_WAIT_POLICY" not in env
    assert bm.peer_env("1")["OMP_NUM_THREADS"] == bm.peer_env("1")["MKL_NUM_THREADS"] == "1"
    assert not set(THREAD_VARIABLES) & set(bm.peer_env("default"))


def test_settings_with_a_spin_count_are_syntaxnmt_only_and_checked(bm):
    assert [s for s in ("default", "1", "torch", "2:0", "2:30000") if bm.syntaxnmt_only(s)] == ["torch", "2:0", "2:30000"]
    assert all(bm.valid_setting(s) for s in ("default", "torch", "1", "2:0", "4:300000"))
    assert not any(bm.valid_setting(s) for s in ("", "0", "two", "2:", ":3000", "2:x", "0:3000"))


def measurement(toolkit: str, setting: str, condition: str, train: float, decode: float) -> dict:
    return {"toolkit": toolkit, "setting": setting, "condition": condition, "train_tok_s": train, "decode_tok_s": decode, "threads": "x"}


def test_the_targets_are_computed_from_the_medians(bm):
    rows = [
        measurement("syntaxnmt", "default", "quiet", 2000, 900), measurement("syntaxnmt", "default", "quiet", 2200, 1100),  # medians 2100, 1000
        measurement("syntaxnmt", "1", "quiet", 1200, 700), measurement("syntaxnmt", "2", "quiet", 2150, 1000),
        measurement("syntaxnmt", "default", "busy", 1000, 600), measurement("syntaxnmt", "1", "busy", 1100, 580),
        measurement("syntaxnmt", "2", "busy", 500, 200),
        measurement("onmt", "default", "quiet", 1000, 500), measurement("onmt", "default", "busy", 400, 320),
        measurement("onmt", "1", "quiet", 700, 400), {"toolkit": "onmt", "setting": "2", "condition": "busy", "error": "failed"},
    ]
    medians, ratios, targets, lines = bm.summarize(rows, ["onmt", "syntaxnmt"], ["default", "1", "2"], ["quiet", "busy"])
    assert medians["syntaxnmt/default/quiet"]["train_tok_s"] == 2100 and medians["syntaxnmt/default/quiet"]["runs"] == 2
    assert ratios["default/quiet"]["train_tok_s"] == pytest.approx(2.1) and ratios["default/busy"]["train_tok_s"] == pytest.approx(2.5)
    assert ratios["2/busy"]["train_tok_s"] is None  # the peer's measurement failed
    assert targets["train: busy ratio to the peer no worse than quiet"]["met"] is True
    assert targets["decode: busy ratio to the peer no worse than quiet"]["met"] is False  # 600/320 busy < 1000/500 quiet
    busy = targets[f"train: busy, default / 1 thread >= {bm.TOLERANCE}"]
    assert busy["ratio"] == pytest.approx(1000 / 1100) and busy["met"] is False
    quiet = targets[f"train: quiet, default / best fixed setting (2) >= {bm.TOLERANCE}"]
    assert quiet["ratio"] == pytest.approx(2100 / 2150) and quiet["met"] is True
    assert any(line.startswith("target train: busy, default / 1 thread") and line.endswith("not met") for line in lines)
