"""torch's CPU threads: how many a command uses (the thread policy) and how the C kernels split
their work between them.

The thread policy (:func:`configure_threads`, docs/benchmarks.md "Thread policy"): a command uses
every core it may run on, minus the cores other processes keep busy, and at least one. torch's
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

The C kernels (``syntaxnmt/cpu/_native.c``) split their work between torch's threads
(:func:`kernel_threads`, :func:`in_threads`).
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Collection, Mapping

import torch

from syntaxnmt.errors import UserError
from syntaxnmt.runtime import cpu_cores, usable_cpus

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


def thread_policy() -> str:
    """Why torch has the threads it has (``of 2 cores``, ``as requested``, ...; '' before
    :func:`configure_threads`): for the machine record (:func:`syntaxnmt.cpu.machine.machine_info`)."""
    return _threads_note
