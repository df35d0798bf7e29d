"""The machine that CPU execution runs on: whether it has the C kernels, and its description.

The C kernels (``syntaxnmt/cpu/_native.c``, :func:`native_kernels`) run where they were built and
the CPU has AVX2/FMA; :func:`machine_info` describes the machine for benchmarks (the CPU and its
instruction sets, the libraries, the threads: :mod:`syntaxnmt.cpu.threads` chooses them,
:mod:`syntaxnmt.cpu.blas` gives numpy's OpenBLAS its count).
"""

from __future__ import annotations

import os
import platform
import re
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import torch

from syntaxnmt.cpu.blas import openblas_info
from syntaxnmt.cpu.threads import load_average, thread_policy
from syntaxnmt.runtime import cpu_cores


def native_kernels():
    """The C kernels of incremental decoding (``syntaxnmt/cpu/_native.c``, an optional extension that
    ``pip install`` builds), or None where they were not built (no C compiler at install) or the
    CPU lacks the AVX2/FMA their fast paths need."""
    try:
        import syntaxnmt.cpu._native as _native
    except ImportError:
        return None
    return _native if _native.vectorized() else None


_native_training = True


def set_native_training(on: bool) -> None:
    """Let training use the C kernels (``train.cpu_native``: ``auto`` on, ``torch`` off) in this process."""
    global _native_training
    _native_training = on


def native_training_kernels():
    """:func:`native_kernels` for training's kernels (whole-sequence attention, dropout, the loss), or None
    where they are missing or turned off (:func:`set_native_training`)."""
    return native_kernels() if _native_training else None


_cpu_kernels: dict | None = None


def record_cpu_kernels(summary: dict | None) -> None:
    """Keep the CPU kernel choice of this process (:func:`syntaxnmt.cpu.calibration.prepare`) for
    :func:`machine_info`."""
    global _cpu_kernels
    _cpu_kernels = summary


ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
# Variables that limit a library's instruction set when it loads (``benchmarks/_isa.py``'s
# ``--isa avx2`` sets them; docs/benchmarks.md "Emulating an AVX2 machine"): the library each limits.
ISA_VARIABLES = {
    "ATEN_CPU_CAPABILITY": "ATen",
    "ONEDNN_MAX_CPU_ISA": "oneDNN",
    "DNNL_MAX_CPU_ISA": "oneDNN",
    "MKL_ENABLE_INSTRUCTIONS": "MKL",
    "CT2_FORCE_CPU_ISA": "CTranslate2",
    "OPENBLAS_CORETYPE": "OpenBLAS",
}
# OpenBLAS is limited by naming the core whose kernels it loads: the instruction set of each name.
OPENBLAS_CORE_ISA = {"HASWELL": "AVX2", "ZEN": "AVX2", "SKYLAKEX": "AVX512", "COOPERLAKE": "AVX512", "SAPPHIRERAPIDS": "AVX512"}


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str | None, frozenset[str], int | None]:
    """(model name, flags, physical cores) from /proc/cpuinfo (None, empty, None where absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None, frozenset(), None
    model, flags, cores, physical = None, frozenset(), set(), "0"
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key in ("model name", "Hardware", "cpu model") and model is None:
            model = value
        elif key in ("flags", "Features") and not flags:
            flags = frozenset(value.split())
        elif key == "physical id":
            physical = value
        elif key == "core id":
            cores.add((physical, value))
    return model, flags, len(cores) or None


def _config_version(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text)
    return m.group(1) if m else None


def _openmp_runtimes() -> list[str]:
    """The OpenMP libraries this process has loaded (libgomp, libiomp5, libomp), each as
    ``folder/file`` (e.g. ``lib/libgomp.so.1`` of torch; other packages may bring their own)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    found = re.findall(r"\s(/\S*/lib(?:gomp|iomp5|omp)\b[^/\s]*\.so[^/\s]*)$", maps, re.MULTILINE)
    return sorted({"/".join(Path(p).parts[-3 if Path(p).parent.name in ("lib", "lib64") else -2 :]) for p in found})


def _cpu_quota() -> float | None:
    """The cgroup v2 CPU limit in cores (``cpu.max``), None when unlimited or unknown."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def isa_limits(environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """The instruction-set limits set in ``environ`` (:data:`ISA_VARIABLES` that are set and not
    empty), None when there are none."""
    limits = {k: environ[k] for k in ISA_VARIABLES if environ.get(k, "").strip()}
    return limits or None


def _isa_level(variable: str, value: str) -> str:
    """The instruction set a limit names: its value, or for OpenBLAS that of the core it names."""
    level = value.strip().upper()
    return OPENBLAS_CORE_ISA.get(level, level) if variable == "OPENBLAS_CORETYPE" else level


def describe_isa_limits(limits: Mapping[str, str] | None) -> str:
    """``limits`` (:func:`isa_limits`) in words for the machine line: ``restricted to AVX2 by
    ATEN_CPU_CAPABILITY/ONEDNN_MAX_CPU_ISA/MKL_ENABLE_INSTRUCTIONS: an emulation of an AVX2 machine,
    not one``, naming the libraries among ATen, oneDNN, MKL and OpenBLAS left unrestricted (an
    ``OPENBLAS_CORETYPE`` counts as the instruction set of the core it names); '' without limits."""
    if not limits:
        return ""
    levels = {_isa_level(k, v) for k, v in limits.items()}
    if len(levels) == 1:
        level = levels.pop()
        text = f"restricted to {level} by {'/'.join(limits)}: an emulation of an {level} machine, not one"
    else:
        text = f"restricted by {', '.join(f'{k}={v}' for k, v in limits.items())}: an emulation, not a machine of that kind"
    covered = {ISA_VARIABLES[k] for k in limits}
    free = [lib for lib in ("ATen", "oneDNN", "MKL", "OpenBLAS") if lib not in covered]
    return text + (f"; {', '.join(free)} not restricted" if free else "")


def machine_info() -> dict:
    """What a benchmark figure depends on, as JSON-ready values: the CPU (model, logical CPUs,
    those usable by this process, physical cores, cgroup quota, the instruction-set flags of
    :data:`ISA_FLAGS` and any ``amx_*``, the kernels torch dispatches to, and the limits set on
    the libraries' instruction set (``isa_limits``: :data:`ISA_VARIABLES` set in the environment,
    e.g. by ``--isa avx2``, else None; ``isa_note`` in words)), torch and its oneDNN,
    MKL and OpenMP, numpy's OpenBLAS (``openblas``: version, kernel architecture, threads,
    ``OPENBLAS_THREAD_TIMEOUT``; None when numpy has another BLAS), the thread settings (torch's
    threads, :data:`THREAD_VARIABLES`, the thread policy's reason), the CPU kernel choice of the linear layers when a model has made one
    (``cpu_kernels``: :func:`syntaxnmt.cpu.calibration.prepare`'s summary: mode, choice and whole-step times, else None) and the load average when called (``load_average_before``; a benchmark adds
    ``load_average_after`` with :func:`with_load_after`)."""
    model, flags, physical = _cpuinfo()
    config = torch.__config__.show()
    return {
        "cpu": model or platform.processor() or platform.machine(),
        "arch": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": cpu_cores(),
        "physical_cores": physical,
        "cpu_quota": _cpu_quota(),
        "isa": {f: f in flags for f in [*ISA_FLAGS, *sorted(f for f in flags if f.startswith("amx_") and f not in ISA_FLAGS)]},
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "isa_limits": isa_limits(),
        "isa_note": describe_isa_limits(isa_limits()) or None,
        "python": platform.python_version(),
        "os": platform.platform(),
        "torch": torch.__version__,
        "onednn": _config_version(r"(?:MKL-DNN|oneDNN) v([\w.]+)", config) if torch.backends.mkldnn.is_available() else None,
        "mkl": _config_version(r"Math Kernel Library Version ([\w.]+)", config) if torch.backends.mkl.is_available() else None,
        "openmp": _config_version(r"OpenMP (\d+)", config),
        "openmp_runtimes": _openmp_runtimes(),
        "openblas": openblas_info(),
        "torch_threads": torch.get_num_threads(),
        "thread_policy": thread_policy() or None,
        "env": {k: os.environ.get(k) for k in THREAD_VARIABLES},
        "cpu_kernels": _cpu_kernels,
        "load_average_before": load_average(),
    }


def with_load_after(info: dict) -> dict:
    """``info`` with the load average now as ``load_average_after`` (at the end of a benchmark), and
    the CPU kernel choice a model made since ``info`` was taken (``cpu_kernels``)."""
    info["load_average_after"] = load_average()
    if _cpu_kernels is not None:
        info["cpu_kernels"] = _cpu_kernels
    return info


def _openmp_shown(info: dict) -> str:
    """torch's OpenMP library, and how many other copies are loaded."""
    libs = info.get("openmp_runtimes") or []
    ours = [lib for lib in libs if lib.startswith("torch/")] or libs[:1]
    shown = ours[0] if ours else info.get("openmp") or "-"
    others = len(libs) - len(ours[:1])
    return shown + (f" (+{others} other cop{'y' if others == 1 else 'ies'})" if others > 0 else "")


def _openblas_shown(info: dict) -> str:
    """numpy's OpenBLAS and its kernels' architecture (``0.3.31 Haswell``), ``-`` without one."""
    blas = info.get("openblas")
    return f"{blas['version']} {blas['architecture']}" if blas else "-"


def machine_summary(info: dict) -> str:
    """:func:`machine_info` in two lines for a benchmark's printed table."""
    isa = " ".join(f for f, present in info["isa"].items() if present) or "none of " + ", ".join(ISA_FLAGS[:4])
    if info.get("isa_note"):
        isa += f" ({info['isa_note']})"
    cores = f"{info['logical_cpus']} CPUs ({info['usable_cpus']} usable" + (f", {info['physical_cores']} physical cores" if info.get("physical_cores") else "") + (f", quota {info['cpu_quota']:g}" if info.get("cpu_quota") else "") + ")"
    env = ", ".join(f"{k} {v if v is not None else 'unset'}" for k, v in info["env"].items() if v is not None or k in THREAD_VARIABLES[:3])

    def load(key: str) -> str:
        avg = info.get(key)
        return "/".join(f"{x:.2f}" for x in avg) if avg else "?"

    after = f", after {load('load_average_after')}" if "load_average_after" in info else ""
    kernels = info.get("cpu_kernels")
    if kernels and kernels.get("ms"):
        tie = kernels.get("tie")  # a tie broken for memory (cpu.calibration.chosen)
        tie_shown = f"; within {100 * tie['margin']:g} % of {tie['fastest']}: lower memory" if tie else ""
        kernels_shown = f"; cpu kernels {kernels['mode']} -> {kernels['choice']} (" + ", ".join(f"{k} {v:.4g} ms" for k, v in kernels["ms"].items()) + tie_shown + ")"
    else:
        kernels_shown = f"; cpu kernels {kernels['mode']}" + (f" -> {kernels['choice']}" if kernels.get("choice") else "") if kernels else ""
    return (
        f"machine: {info['cpu']}, {cores}; ISA {isa} (torch kernels {info['torch_cpu_capability']}); "
        f"torch {info['torch']}, oneDNN {info['onednn'] or '-'}, MKL {info['mkl'] or '-'}, OpenBLAS {_openblas_shown(info)}, OpenMP {_openmp_shown(info)}\n"
        f"threads: torch {info['torch_threads']}" + (f" {info['thread_policy']}" if info.get("thread_policy") else "") + f", {env}; "
        f"load average (1/5/15 min) before {load('load_average_before')}{after}{kernels_shown}"
    )
