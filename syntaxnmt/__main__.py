"""The ``syntaxnmt`` command (the console script, ``python -m syntaxnmt``, ``torchrun -m syntaxnmt``):
sets OpenMP's defaults for a machine shared with other work, then runs :func:`syntaxnmt.cli.main`.

torch's OpenMP runtime (libgomp) reads ``OMP_*`` once, when ``import torch`` loads it, so the
defaults are set here, before the first import of torch (a value set later has no effect).
``GOMP_SPINCOUNT=3000``: a thread waiting at a barrier spins for about 3,000 pauses (tens of
microseconds) and then sleeps. libgomp's own default spins 100 times longer (300,000: milliseconds),
which on a busy machine burns the core that the other thread of the same operation, preempted,
needs; sleeping at once (``OMP_WAIT_POLICY=PASSIVE``, this command's default until 2026-11-29)
wakes the threads through the kernel before every operation, 12 % of quiet training speed on a
2-core AVX2 EPYC (KVM). The short spin keeps most of the quiet speed and 95-97 % of passive waiting's
speed beside a busy process (docs/benchmarks.md, "Thread policy"). A user who sets
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` keeps them. The number of threads is chosen later, by
:func:`syntaxnmt.cpu.threads.configure_threads`.

numpy's OpenBLAS (the third kernel choice of the linear layers, :mod:`syntaxnmt.cpu.blas`) has
a thread pool of its own, whose idle threads spin for ``2**OPENBLAS_THREAD_TIMEOUT`` cycles
(default 2**28, about 0.1 s) before they sleep -- holding the core that torch's next operator
wants. ``OPENBLAS_THREAD_TIMEOUT=4`` (the least it takes) makes them sleep at once, which costs a
wake-up of some microseconds per product of a millisecond or more; read when numpy loads OpenBLAS,
so set here too. Paired training updates on a 2-core AVX2 EPYC: OpenBLAS 0.94x ATen with the
default spin, 1.03-1.11x with this one (docs/benchmarks.md, "OpenBLAS products").
"""

from __future__ import annotations

import os
from typing import Mapping

OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "3000"}
USER_WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # either one means the user chose how threads wait
OPENBLAS_DEFAULTS = {"OPENBLAS_THREAD_TIMEOUT": "4"}
USER_OPENBLAS_SETTINGS = ("OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT")


def openmp_defaults(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to ``environ``: :data:`OPENMP_DEFAULTS`, unless the user set how
    OpenMP threads wait, and :data:`OPENBLAS_DEFAULTS`, unless the user set how OpenBLAS threads
    wait (an empty value counts as unset)."""
    chosen = lambda names: any(environ.get(k, "").strip() for k in names)  # noqa: E731
    return {**({} if chosen(USER_WAIT_SETTINGS) else OPENMP_DEFAULTS), **({} if chosen(USER_OPENBLAS_SETTINGS) else OPENBLAS_DEFAULTS)}


os.environ.update(openmp_defaults(os.environ))

from syntaxnmt.cli import main  # noqa: E402  (after the environment: this import loads torch)

if __name__ == "__main__":
    main()
