"""``--isa avx2`` of the benchmarks (benchmarks/_isa.py): the environment every measured process
gets, the restart before torch loads, and a machine record that says the ISA was restricted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import load_script

from syntaxnmt.cpu import calibration as kernels
from syntaxnmt.cpu import machine
from syntaxnmt.cpu.machine import describe_isa_limits, isa_limits, machine_info, machine_summary

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell"}
NOTE = "restricted to AVX2 by ATEN_CPU_CAPABILITY/ONEDNN_MAX_CPU_ISA/MKL_ENABLE_INSTRUCTIONS/CT2_FORCE_CPU_ISA/OPENBLAS_CORETYPE: an emulation of an AVX2 machine, not one"
# The capability of a torch that loaded without a limit (this test process: the variables are
# removed from the environment of the subprocesses that must be unrestricted).
NATIVE = torch.backends.cpu.get_cpu_capability()
HAS_AVX2 = NATIVE in ("AVX2", "AVX512")


def load(name: str):
    return load_script(BENCHMARKS / f"{name}.py")


@pytest.fixture(scope="module")
def isa():
    return load("_isa")


def without_limits() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in machine.ISA_VARIABLES}


# ---------------------------------------------------------------- the child environment


def test_avx2_adds_every_limit_and_native_removes_them(isa, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE")
    monkeypatch.setenv("SOME_USER_VARIABLE", "kept")
    env = isa.child_env("avx2")
    assert {k: env.get(k) for k in machine.ISA_VARIABLES} == AVX2 | {"DNNL_MAX_CPU_ISA": None}
    assert env["SOME_USER_VARIABLE"] == "kept" and env["PATH"] == os.environ["PATH"]
    native = isa.child_env("native")
    assert not set(machine.ISA_VARIABLES) & set(native) and native["SOME_USER_VARIABLE"] == "kept"
    assert isa.child_env("avx2", {"A": "1"}) == {"A": "1", **AVX2}
    with pytest.raises(ValueError, match="avx512"):
        isa.child_env("avx512")
    # one list of variables for the benchmarks (which cannot import syntaxnmt before the restart) and the record
    assert isa.VARIABLES == tuple(machine.ISA_VARIABLES)


@pytest.mark.parametrize(
    "argv, expected",
    [([], "native"), (["--isa", "avx2"], "avx2"), (["--updates", "5", "--isa=avx2"], "avx2"), (["--isa", "avx2", "--isa", "native"], "native"),
     (["--isa", "avx9"], None), (["--isa"], "native"), (["--", "--isa", "avx2"], "native")],
)
def test_the_isa_is_read_from_the_command_line_before_argparse(isa, argv, expected):
    assert isa.requested_isa(argv) == expected


def test_side_by_side_and_busy_machine_give_the_limits_to_every_toolkit(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    sbs = load("side_by_side")
    env = sbs.clean_env(2, "avx2")
    assert {k: env[k] for k in AVX2} == AVX2 and env["OMP_NUM_THREADS"] == "2" and "PYTHONPATH" not in env
    assert not set(AVX2) & set(sbs.clean_env(0))
    bm = load("busy_machine")
    syntaxnmt_env, _ = bm.syntaxnmt_env("default", "avx2")
    for env in (syntaxnmt_env, bm.peer_env("1", "avx2"), bm.peer_env("default", "avx2")):
        assert {k: env.get(k) for k in AVX2} == AVX2
    assert not set(AVX2) & set(bm.peer_env("1"))


def test_results_of_another_isa_are_not_merged(tmp_path):
    sbs = load("side_by_side")
    path = tmp_path / "side_by_side.json"
    path.write_text(json.dumps({"setting": {"tiny": False}, "runs": []}))  # written before --isa: native
    assert sbs.read_previous(path, {"tiny": False, "isa": "native"}) is not None
    assert sbs.read_previous(path, {"tiny": False, "isa": "avx2"}) is None


# ---------------------------------------------------------------- the machine record


def test_the_record_says_when_and_how_the_isa_is_restricted(monkeypatch):
    for k in machine.ISA_VARIABLES:
        monkeypatch.delenv(k, raising=False)
    info = machine_info()
    assert info["isa_limits"] is None and info["isa_note"] is None and "restricted" not in machine_summary(info)
    for k, v in AVX2.items():
        monkeypatch.setenv(k, v)
    info = machine_info()
    assert info["isa_limits"] == AVX2 and info["isa_note"] == NOTE
    assert f"({NOTE})" in machine_summary(info).splitlines()[0]
    # a partial restriction names the libraries left alone; mixed levels are spelled out
    assert describe_isa_limits(isa_limits({"ATEN_CPU_CAPABILITY": "avx2"})).endswith("; oneDNN, MKL, OpenBLAS not restricted")
    mixed = describe_isa_limits({"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX512"})
    assert mixed.startswith("restricted by ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX512: an emulation")
    assert isa_limits({"ATEN_CPU_CAPABILITY": " "}) is None


SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import _isa
_isa.reexec_for_isa(sys.argv[2:])
import torch
from syntaxnmt.cpu.machine import machine_info
info = machine_info()
print(torch.backends.cpu.get_cpu_capability(), info["torch_cpu_capability"], (info["openblas"] or {}).get("architecture"), info["isa_note"])
"""


@pytest.mark.skipif(not HAS_AVX2, reason="an AVX2 limit changes nothing on a CPU without AVX2")
def test_the_restart_limits_torch_before_it_loads(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT)
    env = without_limits() | {"PYTHONPATH": str(ROOT)}

    def run(*argv: str, extra: dict | None = None) -> list[str]:
        r = subprocess.run([sys.executable, str(script), str(BENCHMARKS), *argv], env=env | (extra or {}), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.split(maxsplit=3)

    # numpy's OpenBLAS (cpu_kernels: openblas) loads its Haswell (AVX2) kernels too, not SkylakeX's
    assert run("--isa", "avx2") == ["AVX2", "AVX2", "Haswell", NOTE + "\n"]
    # native: limits the user left in the environment are removed, and the restart says so
    r = subprocess.run([sys.executable, str(script), str(BENCHMARKS)], env=env | {"ATEN_CPU_CAPABILITY": "default"}, capture_output=True, text=True, timeout=120)
    assert r.stdout.split()[:2] == [NATIVE, NATIVE] and r.stdout.split()[-1] == "None" and "starting without ATEN_CPU_CAPABILITY=default" in r.stderr


def test_speed_benchmark_measures_and_records_an_emulated_avx2_machine(make_config, tmp_path):
    """benchmarks/speed.py --isa avx2 end to end on the tiny model: one update, the printed machine
    line and the JSON record."""
    cfg = make_config()
    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")
    out = tmp_path / "speed.json"
    cmd = [sys.executable, str(BENCHMARKS / "speed.py"), "--config", str(cfg_path), "--updates", "1", "--warmup", "0", "--skip-decoding",
           "--device", "cpu", "--json", str(out), "--isa", "avx2"]
    r = subprocess.run(cmd, env=without_limits() | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    machine = json.loads(out.read_text())["machine"]
    assert machine["isa_limits"] == AVX2 and machine["isa_note"] == NOTE
    assert f"({NOTE})" in r.stdout
    if HAS_AVX2:
        assert machine["torch_cpu_capability"] == "AVX2" and "(torch kernels AVX2)" in r.stdout


def test_busy_machine_runs_syntaxnmt_restricted_and_says_so(make_config, corpus, tmp_path):
    """benchmarks/busy_machine.py --isa avx2 on the tiny model (syntaxnmt alone, one setting, quiet):
    the training and decoding processes it starts report torch's AVX2 kernels, and the record the limits."""
    cfg = make_config()
    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")
    out = tmp_path / "busy.json"
    cmd = [sys.executable, str(BENCHMARKS / "busy_machine.py"), "--config", str(cfg_path), "--test-src", str(corpus["test"]["src"]),
           "--toolkits", "syntaxnmt", "--updates", "2", "--warmup", "1", "--sentences", "3", "--settings", "1", "--conditions", "quiet",
           "--work", str(tmp_path / "work"), "--json", str(out), "--isa", "avx2"]
    r = subprocess.run(cmd, env=without_limits() | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["setting"]["isa"] == "avx2" and doc["machine"]["isa_limits"] == AVX2 and f"({NOTE})" in r.stdout
    [m] = doc["measurements"]
    assert m["train_tok_s"] > 0 and m["sentences"] == 3
    if HAS_AVX2:
        assert m["torch_cpu_capability"] == "AVX2" and doc["machine"]["torch_cpu_capability"] == "AVX2"


def test_the_kernel_choice_of_an_emulated_machine_is_cached_apart(monkeypatch):
    """train.cpu_kernels auto times kernels per machine key: AVX2-limited timings never stand for native ones."""
    for k in machine.ISA_VARIABLES:
        monkeypatch.delenv(k, raising=False)
    native = kernels.machine_key(1)
    for k, v in AVX2.items():
        monkeypatch.setenv(k, v)
    limited = kernels.machine_key(1)
    assert limited != native and "ATEN_CPU_CAPABILITY=avx2" in limited
