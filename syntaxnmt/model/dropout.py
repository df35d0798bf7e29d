"""Dropout (Srivastava et al. 2014) with a faster mask on CPU.

``torch.nn.Dropout`` draws its mask with ``bernoulli_``, and even ``torch.rand`` is slow on CPU:
its Mersenne-Twister fill runs on one thread, at about 3 ns a number. At the recipe size the
masks cost about a tenth of a training update on 2 cores (docs/benchmarks.md, issue 14's
profile). :class:`Dropout` keeps a unit with probability 1 - p (``u >= p`` for float32
``u ~ U[0, 1)``) and scales kept units by 1 / (1 - p), exactly as ``nn.Dropout`` does; the
uniform numbers come from NumPy's PCG64 (:func:`uniform_like`), in blocks filled on torch's
threads. Every block's seed is drawn from torch's CPU generator, so ``torch.manual_seed`` and a
resumed run's saved RNG state still decide every mask, whatever the number of threads. On other
devices, whose dropout kernels are fused, it calls ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

BLOCK = 1 << 18  # uniform numbers per seed: the result does not depend on the thread count
_pool: ThreadPoolExecutor | None = None


def _fill(out: np.ndarray, seed: int) -> None:
    np.random.Generator(np.random.PCG64(seed)).random(out.size, dtype=np.float32, out=out)


def uniform_like(x: Tensor) -> Tensor:
    """float32 numbers ~ U[0, 1) shaped like ``x`` (CPU): NumPy's PCG64, one stream per block of
    :data:`BLOCK` numbers seeded from torch's generator, blocks filled on ``torch.get_num_threads()``
    threads (NumPy releases the GIL while filling)."""
    global _pool
    n = x.numel()
    out = np.empty(n, dtype=np.float32)
    starts = range(0, n, BLOCK)
    seeds = torch.randint(0, 2**62, (len(starts),), dtype=torch.int64).tolist()
    jobs = [(out[s : s + BLOCK], seed) for s, seed in zip(starts, seeds)]
    threads = torch.get_num_threads()
    if threads > 1 and len(jobs) > 1:
        if _pool is None or _pool._max_workers != threads:
            _pool = ThreadPoolExecutor(threads, thread_name_prefix="syntaxnmt-dropout")
        for f in [_pool.submit(_fill, *job) for job in jobs]:
            f.result()
    else:
        for job in jobs:
            _fill(*job)
    return torch.from_numpy(out).view(x.shape)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    u = uniform_like(x) if x.dtype == torch.float32 else torch.rand_like(x)
    mask = u.ge_(p).mul_(1.0 / (1.0 - p))
    return x * mask


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout`` (see the module docstring)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
