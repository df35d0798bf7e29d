"""``--isa {native,avx2}`` for the benchmarks: an AVX2 machine emulated on an AVX-512 one (issue 26).

The libraries torch computes with read an instruction-set limit from the environment once, when
they load: ATen's vectorized kernels ``ATEN_CPU_CAPABILITY=avx2`` (then
``torch.backends.cpu.get_cpu_capability()`` says ``AVX2``), oneDNN ``ONEDNN_MAX_CPU_ISA=AVX2``
(``ONEDNN_VERBOSE=1``: ``isa:Intel AVX2``, ``brg_matmul:avx2``), MKL's GEMM
``MKL_ENABLE_INSTRUCTIONS=AVX2`` (``MKL_VERBOSE=1``: ``Intel(R) AVX2 enabled processors``), and
CTranslate2 ``CT2_FORCE_CPU_ISA=AVX2`` for its own kernels (its bundled MKL follows
``MKL_ENABLE_INSTRUCTIONS``), and numpy's OpenBLAS (``cpu_kernels: openblas``)
``OPENBLAS_CORETYPE=Haswell`` (``threadpoolctl``: ``architecture: Haswell``, else ``SkylakeX``). So the limit must be in the environment before the process imports
torch: :func:`child_env` gives it to child processes (syntaxnmt's and the peers', whose venvs load
the same libraries), and :func:`reexec_for_isa` restarts a benchmark script with it before the
script imports torch. ``native`` removes these variables, so that a figure labelled native is one.

This module imports neither torch nor syntaxnmt (it runs before them). What the emulation is and
is not -- the same cores, caches, clock and memory; only the instructions differ -- is in
docs/benchmarks.md, "Emulating an AVX2 machine"; ``syntaxnmt.cpu.machine.machine_info`` records the
limit, so that no figure measured this way can pass for a real AVX2 machine's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

ISAS = ("native", "avx2")
# Every variable that limits the instruction set of a library these benchmarks load (the same
# list as syntaxnmt.cpu.machine.ISA_VARIABLES, which records them; a test keeps the two equal).
# DNNL_MAX_CPU_ISA is oneDNN's older name for ONEDNN_MAX_CPU_ISA: ``native`` removes it too.
VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "CT2_FORCE_CPU_ISA", "OPENBLAS_CORETYPE")
LIMITS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
}
HELP = (
    "instruction set of the libraries every measured process loads: native (the CPU's), or avx2 "
    "(ATen, oneDNN, MKL, CTranslate2 and OpenBLAS restricted to AVX2 through the environment: an emulation of "
    "an AVX2 machine on this CPU, recorded as such in the machine record)"
)


def child_env(isa: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process measured with ``isa``: ``base`` (default
    ``os.environ``) without any of :data:`VARIABLES`, plus the limits of ``isa``."""
    if isa not in LIMITS:
        raise ValueError(f"--isa {isa!r}: choose from {', '.join(ISAS)}")
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in VARIABLES}
    return env | LIMITS[isa]


def add_isa_argument(ap) -> None:
    """``--isa {native,avx2}`` on an ``argparse`` parser (default native)."""
    ap.add_argument("--isa", choices=ISAS, default="native", help=HELP)


def requested_isa(argv: Sequence[str]) -> str | None:
    """The value of ``--isa`` in ``argv`` (``--isa X`` or ``--isa=X``; the last one wins), ``native``
    without it, None for a value that is not one of :data:`ISAS` (argparse then reports it)."""
    isa = "native"
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--isa" and i + 1 < len(argv):
            isa = argv[i + 1]
        elif arg.startswith("--isa="):
            isa = arg.split("=", 1)[1]
    return isa if isa in ISAS else None


def reexec_for_isa(argv: Sequence[str] | None = None) -> None:
    """Restart this script with the environment of the ``--isa`` in ``argv`` (default
    ``sys.argv[1:]``) unless it has it already. Call it before anything imports torch (or
    CTranslate2): they read the limits when they load."""
    isa = requested_isa(sys.argv[1:] if argv is None else argv)
    if isa is None:
        return
    env = child_env(isa)
    if all(os.environ.get(k) == env.get(k) for k in VARIABLES):
        return
    loaded = [m for m in ("torch", "ctranslate2") if m in sys.modules]
    if loaded:  # a programming error of the script, not the user's
        raise RuntimeError(f"--isa {isa}: {', '.join(loaded)} already imported; call reexec_for_isa before importing it")
    removed = [f"{k}={os.environ[k]}" for k in VARIABLES if k in os.environ and k not in env]
    if removed:
        print(f"--isa {isa}: starting without {', '.join(removed)} (--isa avx2 restricts the libraries)", file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(sys.orig_argv), env)
