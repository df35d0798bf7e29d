"""The machine that CPU execution runs on: its C kernels, its threads and its description.

CPU threads (:func:`configure_threads`, docs/benchmarks.md "Thread policy"): a command uses every
core it may run on, minus the cores other processes keep busy, and at least one. torch's
threads meet at a barrier after every parallel operation: when another process holds one of the
cores, every barrier waits for the thread it preempted, so two threads beside one busy process can
be several times slower than one thread. The other load is the smaller of the 1-minute load
average (scaled to this process's cores) and the cores that other processes kept busy over a
tenth of a second now (``/proc/stat``): the first alone still counts a run that has just ended,
the second alone a burst. A count the user gives (``--threads``, ``train.threads``,
``OMP_NUM_THREADS``) wins. Training keeps applying the policy while it runs (:class:`ThreadWatch`):
a job that starts or ends beside it changes its threads within half a minute. The other half of the
policy, a short OpenMP spin before a waiting thread sleeps, must be set before torch loads its
OpenMP runtime: ``syntaxnmt/__main__.py`` does it.

The C kernels (``syntaxnmt/cpu/_native.c``, :func:`native_kernels`) split their work between torch's
threads (:func:`kernel_threads`, :func:`in_threads`); :func:`machine_info` describes the machine
for benchmarks.
"""

from __future__ import annotations

import math
import os
import platform
import re
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Callable, Collection, Mapping

import torch

from syntaxnmt.errors import UserError
from syntaxnmt.runtime import cpu_cores, usable_cpus


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


_pool: ThreadPoolExecutor | None = None


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist: a part submitted to it would never run."""
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def kernel_threads(n: int, min_per_thread: int = 1) -> int:
    """The threads to split ``n`` items between: ``torch.get_num_threads()``, fewer when a thread
    would get under ``min_per_thread`` items (a native kernel's ``threads`` argument, torch's
    OpenMP threads: ``syntaxnmt/cpu/_native.c``, "Threads"; and :func:`in_threads`)."""
    return max(1, min(torch.get_num_threads(), n // max(1, min_per_thread)))


def in_threads(work: Callable[[int, int], None], n: int, min_per_thread: int = 1) -> None:
    """Run ``work(a, b)`` over the parts ``[a, b)`` of ``range(n)`` on ``torch.get_num_threads()``
    threads (fewer when a part would have under ``min_per_thread`` items): one part in this
    thread, the others in a shared pool. For work that releases the GIL in Python (NumPy's fills
    of :func:`syntaxnmt.cpu.dropout.uniform_like`; the C kernels split their own range,
    :func:`kernel_threads`); an exception of any part is raised here after all parts ended."""
    threads = kernel_threads(n, min_per_thread)
    if threads == 1:
        work(0, n)
        return
    global _pool
    if _pool is None or _pool._max_workers < threads - 1:
        _pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="syntaxnmt-native")
    bounds = [n * i // threads for i in range(threads + 1)]
    futures = [_pool.submit(work, a, b) for a, b in zip(bounds[1:-1], bounds[2:])]
    try:
        work(bounds[0], bounds[1])
    finally:
        for f in futures:
            f.exception()  # wait for every part before raising
    for f in futures:
        f.result()


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _cpu_jiffies(cpus: Collection[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks of ``cpus`` since boot, from /proc/stat; iowait counts as idle and
    steal (time the hypervisor gave to another machine) as busy."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, *fields = line.split() or [""]
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in (fields + ["0"] * 8)[:8])
            busy += user + nice + system + irq + softirq + steal
            total += user + nice + system + idle + iowait + irq + softirq + steal
    return (busy, total) if total else None


def _others_busy(before: tuple[int, int] | None, after: tuple[int, int] | None, n_cpus: int, own_cpu: float, wall: float) -> float | None:
    """Cores of ``n_cpus`` other processes kept busy between two :func:`_cpu_jiffies` readings,
    ``wall`` seconds apart, during which this process used ``own_cpu`` CPU seconds."""
    if before is None or after is None or after[1] <= before[1] or wall <= 0:
        return None
    share = (after[0] - before[0]) / (after[1] - before[1])
    return max(0.0, share * n_cpus - own_cpu / wall)


def busy_cores(seconds: float = 0.1, cpus: Collection[int] | None = None) -> float | None:
    """How many of ``cpus`` (default: those this process may run on) other processes keep busy:
    their busy share over the next ``seconds``, times their number, less this process's own CPU
    time; None where /proc/stat cannot be read."""
    cpus = usable_cpus() if cpus is None else cpus
    before, own, start = _cpu_jiffies(cpus), time.process_time(), time.perf_counter()
    time.sleep(seconds)
    after, own, wall = _cpu_jiffies(cpus), time.process_time() - own, time.perf_counter() - start
    return _others_busy(before, after, len(cpus), own, wall)


def policy_threads(cores: int, other_load: float) -> int:
    """Threads for a machine with ``cores`` cores of which other processes keep ``other_load``
    busy: the free cores, rounded to the nearest whole core (halves up), at least one."""
    return max(1, min(cores, cores - math.floor(other_load + 0.5)))


def other_load(cores: int) -> tuple[float, str]:
    """The cores' worth of work other processes are running now, and how it was measured: the
    smaller of the 1-minute load average (scaled from all CPUs to this process's ``cores``) and
    :func:`busy_cores`, measured only when the load average alone would take a core away."""
    avg = load_average()
    if avg is None:
        busy = busy_cores()
        return (0.0, "no load average") if busy is None else (busy, f"{busy:.1f} cores busy now")
    scaled = avg[0] * cores / (os.cpu_count() or cores)
    if policy_threads(cores, scaled) == cores:
        return scaled, f"load average {avg[0]:.2f}"
    busy = busy_cores()
    if busy is None:
        return scaled, f"load average {avg[0]:.2f}"
    return min(scaled, busy), f"load average {avg[0]:.2f}, {busy:.1f} cores busy now"


_threads_note = ""
_policy_cores: int | None = None  # the cores the thread policy chose for (None: the user chose the threads)
_watch: "ThreadWatch | None" = None  # the process's watch over them (ThreadWatch.for_this_process)


def configure_threads(requested: int | None = None, *, environ: Mapping[str, str] = os.environ, cores: int | None = None, load: float | None = None) -> int:
    """Set torch's CPU threads for a command and return them. ``requested`` (``--threads N``,
    ``train.threads``; None or 0: not given) wins; else a valid ``OMP_NUM_THREADS`` in ``environ``; else
    :func:`policy_threads` of ``cores`` (default :func:`cpu_cores`) and the other processes' load
    (default :func:`other_load`; ``cores`` and ``load`` are given by tests)."""
    global _threads_note, _policy_cores, _watch
    if requested is not None and requested < 0:
        raise UserError(f"--threads {requested}: give at least 1 (or 0 for the default)")
    omp = environ.get("OMP_NUM_THREADS", "").strip()
    _policy_cores, _watch = None, None
    if requested:
        threads, _threads_note = requested, "as requested"
    elif omp.isdigit() and int(omp) > 0:
        threads, _threads_note = int(omp), "from OMP_NUM_THREADS"
    else:
        cores = _policy_cores = cores or cpu_cores()
        measured, how = (load, f"other load {load:.1f}") if load is not None else other_load(cores)
        threads = policy_threads(cores, measured)
        _threads_note = f"of {cores} cores" + ("" if threads == cores else f" (busy machine: {how}; --threads N to choose)")
    torch.set_num_threads(threads)
    return threads


THREAD_WATCH_SECONDS = 30.0  # how often a long command re-applies the thread policy


class ThreadWatch:
    """Keeps applying the thread policy while a long command runs (issue 26): every ``interval``
    seconds (:data:`THREAD_WATCH_SECONDS`) it measures the cores other processes kept busy since its
    last look (``/proc/stat`` less this process's own CPU time, over the whole interval: no
    sleeping, and a burst counts as little as it lasted) and sets torch's threads to
    :func:`policy_threads` of them. A training run started on a quiet machine gives a core back
    when another job starts beside it, and takes it again when the job ends. Training looks after
    each update, translation (``translate``, ``serve``'s worker, the Python API) between batches,
    on the thread that computes (torch keeps a thread count per thread).
    :meth:`for_this_process` gives one only where the policy chose the threads; the clocks are
    injectable for tests."""

    def __init__(self, cores: int, interval: float | None = None, cpus: Collection[int] | None = None, *,
                 clock: Callable[[], float] = time.perf_counter, cpu_clock: Callable[[], float] = time.process_time):
        self.cores, self.clock, self.cpu_clock = cores, clock, cpu_clock
        self.interval = THREAD_WATCH_SECONDS if interval is None else interval
        self.cpus = usable_cpus() if cpus is None else cpus
        self._mark()

    @classmethod
    def for_this_process(cls) -> "ThreadWatch | None":
        """The watch over the threads :func:`configure_threads` chose by the policy: one per process,
        shared by training, translation and serving (one measurement from look to look, whoever
        looks); None where the user chose them (``--threads``, ``train.threads``,
        ``OMP_NUM_THREADS``) or /proc/stat is missing."""
        global _watch
        if _policy_cores is None:
            return None
        if _watch is None:
            _watch = cls(_policy_cores)
        return _watch if _watch.j0 is not None else None

    def _mark(self) -> None:
        self.t0, self.own0, self.j0 = self.clock(), self.cpu_clock(), _cpu_jiffies(self.cpus)

    def due(self) -> bool:
        """Whether the interval has passed (the next :meth:`poll` looks)."""
        return self.clock() - self.t0 >= self.interval

    def poll(self, log: Callable[[str], None]) -> int | None:
        """Once the interval has passed: apply the policy; the new thread count if it changed (logged), else None."""
        wall = self.clock() - self.t0
        if wall < self.interval:
            return None
        own, before = self.cpu_clock() - self.own0, self.j0
        self._mark()
        other = _others_busy(before, self.j0, len(self.cpus), own, wall)
        if other is None:
            return None
        threads, now = policy_threads(self.cores, other), torch.get_num_threads()
        if threads == now:
            return None
        torch.set_num_threads(threads)
        log(f"threads {now} -> {threads}: other processes kept {other:.1f} of {self.cores} cores busy over the last {wall:.0f} s (--threads N to fix the count)")
        return threads


def describe_threads() -> str:
    """torch's CPU threads now and why, for a command's log: ``2 threads of 2 cores``, ``1 thread
    of 2 cores (busy machine: ...)``, ``3 threads as requested``."""
    n = torch.get_num_threads()
    return f"{n} thread{'s' if n != 1 else ''}" + (f" {_threads_note}" if _threads_note else "")


_cpu_kernels: dict | None = None


@lru_cache(maxsize=1)
def _openblas():
    """threadpoolctl's controller of numpy's own OpenBLAS (the copy in its wheel: ``numpy.libs/``,
    not another package's, e.g. scipy's), or None (numpy built with another BLAS)."""
    import numpy  # loads numpy's BLAS, so that threadpoolctl finds it
    from threadpoolctl import ThreadpoolController

    home = str(Path(numpy.__file__).resolve().parent)  # .../numpy; its wheel's libraries are in .../numpy.libs
    found = [c for c in ThreadpoolController().select(internal_api="openblas").lib_controllers if str(Path(c.filepath).resolve().parent).startswith(home)]
    return found[0] if found else None


_openblas_threads: int | None = None


def openblas_available() -> bool:
    """Whether numpy's BLAS is OpenBLAS (the PyPI wheels' scipy-openblas), whose threads this process can set."""
    return _openblas() is not None


def openblas_threads() -> None:
    """Give numpy's OpenBLAS torch's current thread count (the policy may change it while a command
    runs, :class:`ThreadWatch`); a no-op when it already has it. Before each OpenBLAS product."""
    global _openblas_threads
    n = torch.get_num_threads()
    if n != _openblas_threads:
        _openblas().set_num_threads(n)
        _openblas_threads = n


def _openblas_info() -> dict | None:
    lib = _openblas()
    if lib is None:
        return None
    info = lib.info()
    return {k: info.get(k) for k in ("version", "architecture", "num_threads", "threading_layer")} | {"thread_timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT")}


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
        "openblas": _openblas_info(),
        "torch_threads": torch.get_num_threads(),
        "thread_policy": _threads_note or None,
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
        kernels_shown = f"; cpu kernels {kernels['mode']} -> {kernels['choice']} (" + ", ".join(f"{k} {v:.4g} ms" for k, v in kernels["ms"].items()) + ")"
    else:
        kernels_shown = f"; cpu kernels {kernels['mode']}" + (f" -> {kernels['choice']}" if kernels.get("choice") else "") if kernels else ""
    return (
        f"machine: {info['cpu']}, {cores}; ISA {isa} (torch kernels {info['torch_cpu_capability']}); "
        f"torch {info['torch']}, oneDNN {info['onednn'] or '-'}, MKL {info['mkl'] or '-'}, OpenBLAS {_openblas_shown(info)}, OpenMP {_openmp_shown(info)}\n"
        f"threads: torch {info['torch_threads']}" + (f" {info['thread_policy']}" if info.get("thread_policy") else "") + f", {env}; "
        f"load average (1/5/15 min) before {load('load_average_before')}{after}{kernels_shown}"
    )
