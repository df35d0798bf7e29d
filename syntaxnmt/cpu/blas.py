"""Float32 CPU matrix products through OpenBLAS, the BLAS that numpy's PyPI wheels bundle.

PyTorch's CPU ``mm``/``addmm`` call MKL's sgemm (or oneDNN's, :mod:`syntaxnmt.cpu.linear`).
On a 2-core AMD EPYC with AVX2 only (Zen 3), numpy's OpenBLAS (its Haswell kernels) ran the
products of the side-by-side model's update as fast as MKL beside torch's operators (134 against
133 GFLOP/s; alone MKL was faster, 153 against 132) and whole training updates about 1.04x
faster (paired; docs/benchmarks.md, "OpenBLAS products"). So OpenBLAS is one more candidate of
the whole-step calibration (:mod:`syntaxnmt.cpu.calibration`), not a rule.

:func:`mm` multiplies torch tensors in place through ``numpy.matmul`` (zero-copy views; a
transposed operand is passed to sgemm as transposed, not copied). OpenBLAS has its own thread
pool: :func:`mm` gives it torch's current thread count (which the thread policy may change while
a command runs, :class:`syntaxnmt.cpu.threads.ThreadWatch`) through ``threadpoolctl``
(:func:`openblas_threads`). Its idle
threads spin for ``2**OPENBLAS_THREAD_TIMEOUT`` cycles before they sleep; the ``syntaxnmt``
command sets a short spin (``syntaxnmt/__main__.py``), as for OpenMP, so that a spinning OpenBLAS
thread does not hold the core that torch's next operator needs.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor


@lru_cache(maxsize=1)
def _openblas():
    """threadpoolctl's controller of numpy's own OpenBLAS (the copy in its wheel: ``numpy.libs/``,
    not another package's, e.g. scipy's), or None (numpy built with another BLAS)."""
    from threadpoolctl import ThreadpoolController  # finds numpy's BLAS, loaded with numpy

    home = str(Path(np.__file__).resolve().parent)  # .../numpy; its wheel's libraries are in .../numpy.libs
    found = [c for c in ThreadpoolController().select(internal_api="openblas").lib_controllers if str(Path(c.filepath).resolve().parent).startswith(home)]
    return found[0] if found else None


_openblas_threads: int | None = None


def openblas_available() -> bool:
    """Whether numpy's BLAS is OpenBLAS (the PyPI wheels' scipy-openblas), whose threads this process can set."""
    return _openblas() is not None


def openblas_threads() -> None:
    """Give numpy's OpenBLAS torch's current thread count (the policy may change it while a command
    runs, :class:`syntaxnmt.cpu.threads.ThreadWatch`); a no-op when it already has it. Before each OpenBLAS product."""
    global _openblas_threads
    n = torch.get_num_threads()
    if n != _openblas_threads:
        _openblas().set_num_threads(n)
        _openblas_threads = n


def openblas_info() -> dict | None:
    """numpy's OpenBLAS for the machine record: version, kernel architecture, threads, threading layer and
    ``OPENBLAS_THREAD_TIMEOUT``; None when numpy has another BLAS."""
    lib = _openblas()
    if lib is None:
        return None
    info = lib.info()
    return {k: info.get(k) for k in ("version", "architecture", "num_threads", "threading_layer")} | {"thread_timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT")}


def _blasable(t: Tensor) -> bool:
    """Whether sgemm reads ``t`` (2-D) as it is: rows or columns contiguous (a transposed view)."""
    rows, cols = t.shape
    s0, s1 = t.stride()
    return (s1 == 1 and s0 >= max(cols, 1)) or (s0 == 1 and s1 >= max(rows, 1))


def mm(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    """``a @ b`` for 2-D float32 CPU tensors through OpenBLAS's sgemm, written into ``out``
    (contiguous, (M, N); new when None). Autograd does not see it: callers give the gradients."""
    a = a if _blasable(a) else a.contiguous()
    b = b if _blasable(b) else b.contiguous()
    if out is None:
        out = a.new_empty(a.size(0), b.size(1))
    if out.numel() == 0:
        return out
    if a.size(1) == 0:
        return out.zero_()
    openblas_threads()
    np.matmul(a.detach().numpy(), b.detach().numpy(), out=out.detach().numpy())
    return out


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` without autograd, through :func:`mm` (with autograd:
    ``syntaxnmt.cpu.linear``, whose autograd function gives the gradients through :func:`mm`)."""
    x2d = x.reshape(-1, x.size(-1))
    out = mm(x2d, weight.t())
    if bias is not None:
        out += bias
    return out.view(*x.shape[:-1], weight.size(0))
