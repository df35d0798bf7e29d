"""The threads of the C kernels (``syntaxnmt/cpu/_native.c``, "Threads"): a kernel's range split
between torch's OpenMP threads gives the values of one thread, bit for bit, whatever the number of
threads, with two Python threads calling at once, and in a forked child with one thread; the
kernels load no OpenMP runtime besides torch's."""

from __future__ import annotations

import math
import os
import threading

import pytest
import torch

from syntaxnmt.cpu.machine import native_kernels
from syntaxnmt.cpu.threads import kernel_threads

native = native_kernels()
pytestmark = pytest.mark.skipif(native is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")


def _dropout_both_ways(threads: int, rows: int = 300, cols: int = 128) -> list[torch.Tensor]:
    """dropout_forward with bias, ReLU and residual, then dropout_backward with column sums."""
    gen = torch.Generator().manual_seed(0)
    x, res, bias, grad = torch.randn(rows, cols, generator=gen), torch.randn(rows, cols, generator=gen), torch.randn(cols, generator=gen), torch.randn(rows, cols, generator=gen)
    n, groups = rows * cols, -(-rows * cols // 64)
    out, bits = torch.empty(rows, cols), torch.empty(groups * 8, dtype=torch.uint8)
    native.dropout_forward(x.data_ptr(), out.data_ptr(), bits.data_ptr(), n, math.ceil(0.3 * 2**16), 1 / 0.7, 1234, 0, groups, bias.data_ptr(), cols, True, res.data_ptr(), threads)
    back, colsum = torch.empty(rows, cols), torch.zeros(cols, dtype=torch.float64)
    native.dropout_backward(grad.data_ptr(), back.data_ptr(), bits.data_ptr(), n, 1 / 0.7, 0, groups, colsum.data_ptr(), cols, threads)
    return [out, bits, back, colsum]


def _add_norm_both_ways(threads: int, rows: int = 200, cols: int = 128) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x, y, gamma, beta, gxo, gh = (torch.randn(*s, generator=gen) for s in ((rows, cols), (rows, cols), (cols,), (cols,), (rows, cols), (rows, cols)))
    xo, h, bits, stats = torch.empty(rows, cols), torch.empty(rows, cols), torch.empty(rows * cols // 8, dtype=torch.uint8), torch.empty(rows, 2)
    native.add_norm_forward(x.data_ptr(), y.data_ptr(), xo.data_ptr(), h.data_ptr(), bits.data_ptr(), stats.data_ptr(), gamma.data_ptr(), beta.data_ptr(), rows, cols, 6554, 1 / 0.9, 99, 1e-5, 0, rows, threads)
    gx, gy, sums = torch.empty(rows, cols), torch.empty(rows, cols), torch.zeros(2, cols, dtype=torch.float64)
    native.add_norm_backward(gxo.data_ptr(), gh.data_ptr(), xo.data_ptr(), stats.data_ptr(), gamma.data_ptr(), bits.data_ptr(), gx.data_ptr(), gy.data_ptr(), rows, cols, 1 / 0.9, 0, rows, sums[0].data_ptr(), sums[1].data_ptr(), threads)
    return [xo, h, stats, gx, gy, sums]


def _xent(threads: int, rows: int = 40, vocab: int = 300) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    z, target = torch.randn(rows, vocab, generator=gen), torch.randint(0, vocab, (rows,), generator=gen)
    losses = torch.empty(2, rows)
    native.smoothed_xent(z.data_ptr(), rows, vocab, target.data_ptr(), 0.1, losses[0].data_ptr(), losses[1].data_ptr(), threads)
    return [losses, z]


def _attention(threads: int, b: int = 37, t: int = 9, heads: int = 2, d: int = 16) -> list[torch.Tensor]:
    from syntaxnmt.cpu import attention as native_attention

    gen = torch.Generator().manual_seed(3)
    q, k, v, g = (torch.randn(b, heads, t, d, generator=gen).requires_grad_() for _ in range(4))
    pad = torch.zeros(b, t, dtype=torch.bool)
    pad[::3, -2:] = True
    torch.set_num_threads(threads)
    out = native_attention.attention(q, k, v, pad, False)
    return [out.detach(), *torch.autograd.grad(out, (q, k, v), g.detach())]


@pytest.mark.parametrize("kernels", [_dropout_both_ways, _add_norm_both_ways, _xent, _attention])
def test_every_thread_count_gives_the_values_of_one_thread(kernels):
    """2, 3 and 64 threads (more than the cores, and the most the kernels take) against 1."""
    before = torch.get_num_threads()
    try:
        one = kernels(1)
        for threads in (2, 3, 64):
            for a, b in zip(one, kernels(threads)):
                assert torch.equal(a, b), f"{kernels.__name__} with {threads} threads"
    finally:
        torch.set_num_threads(before)


def test_kernels_run_beside_another_python_thread_and_in_a_forked_child():
    """Two Python threads calling at once each get their own values (each has its own OpenMP
    team); a child forked after the parent's parallel regions computes them with torch's threads
    at 1 (libgomp is not fork-safe, for torch's operators as for these: torch's DataLoader workers
    run with one thread)."""
    expected = _dropout_both_ways(1)
    assert all(torch.equal(a, b) for a, b in zip(expected, _dropout_both_ways(2)))  # a parallel region in the parent
    found: list[bool] = []

    def run() -> None:
        for _ in range(20):
            found.append(all(torch.equal(a, b) for a, b in zip(expected, _dropout_both_ways(2))))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == [True] * 40
    if hasattr(os, "fork"):
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if its kernels give the parent's values
            torch.set_num_threads(1)
            ok = all(torch.equal(a, b) for a, b in zip(expected, _dropout_both_ways(kernel_threads(10**6))))
            os._exit(0 if ok else 1)
        assert os.waitpid(pid, 0)[1] == 0


def test_the_kernels_use_torchs_openmp_runtime():
    """The module is linked with -fopenmp and loaded after torch: its libgomp.so.1 is the copy
    torch loaded, not a second OpenMP runtime with threads of its own (Linux: /proc/self/maps)."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "def gomp(): return sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libgomp' in l})\n"
        "before = gomp()\n"
        "from syntaxnmt.cpu.machine import native_kernels\n"
        "assert native_kernels() is not None\n"
        "print(before == gomp(), before)\n"
    )
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("no /proc/self/maps")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("True"), out


def test_kernel_threads_follow_torch_and_the_smallest_part():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert kernel_threads(1000) == 2 and kernel_threads(1000, 600) == 1 and kernel_threads(0) == 1
        torch.set_num_threads(1)
        assert kernel_threads(10**6) == 1
    finally:
        torch.set_num_threads(before)
