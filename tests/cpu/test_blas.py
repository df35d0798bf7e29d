"""Products through numpy's OpenBLAS (cpu.blas) and the ``openblas`` kernel choice of the linear
layers: the same values and gradients as ATen's, any operand layout, OpenBLAS given torch's thread
count. No assertion here is about speed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from syntaxnmt.cpu import blas, machine
from syntaxnmt.cpu import linear as lin

pytestmark = pytest.mark.skipif(not blas.openblas_available(), reason="numpy's BLAS is not OpenBLAS")


@pytest.fixture
def openblas():
    before = lin.kernels()
    lin.set_kernels("openblas")
    yield
    lin.set_kernels(before)


def operand(rows: int, cols: int, layout: str) -> torch.Tensor:
    """A (rows, cols) operand stored row-major, transposed (column-major) or as a strided slice."""
    if layout == "t":
        return torch.randn(cols, rows).t()
    if layout == "slice":  # every other column: neither rows nor columns contiguous
        return torch.randn(rows, 2 * cols)[:, ::2]
    return torch.randn(rows, cols)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 5, 3), (64, 256, 96), (300, 33, 1), (2, 1000, 40)])
@pytest.mark.parametrize("layouts", [("c", "c"), ("t", "c"), ("c", "t"), ("t", "t"), ("slice", "c"), ("c", "slice")])
def test_mm_is_the_product_for_every_layout(m, k, n, layouts):
    torch.manual_seed(m * 1000 + k + n)
    a, b = operand(m, k, layouts[0]), operand(k, n, layouts[1])
    want = (a.double() @ b.double()).float()
    torch.testing.assert_close(blas.mm(a, b), want, rtol=1e-5, atol=1e-4)
    out = torch.full((m, n), float("nan"))
    assert blas.mm(a, b, out) is out
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)


def test_mm_of_empty_operands():
    assert blas.mm(torch.randn(0, 4), torch.randn(4, 3)).shape == (0, 3)
    assert torch.equal(blas.mm(torch.randn(2, 0), torch.randn(0, 3)), torch.zeros(2, 3))  # an empty sum
    assert blas.mm(torch.randn(2, 4), torch.randn(4, 0)).shape == (2, 0)


def test_the_openblas_is_numpys_own_copy():
    """Not another package's copy (scipy's wheel loads one of its own)."""
    scipy = pytest.importorskip("scipy.linalg")  # noqa: F841  (when installed: both copies loaded)
    blas._openblas.cache_clear()
    assert Path(blas._openblas().filepath).resolve().parent.name.startswith("numpy")


def test_openblas_gets_torchs_thread_count():
    before = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            blas.mm(torch.randn(8, 8), torch.randn(8, 8))
            assert machine.machine_info()["openblas"]["num_threads"] == n
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bias", [True, False])
def test_openblas_linear_matches_aten_with_gradients(openblas, bias):
    torch.manual_seed(0)
    layer = lin.Linear(24, 40, bias=bias)
    x, g = torch.randn(3, 17, 24), torch.randn(3, 17, 40)
    xa = x.clone().requires_grad_()
    y = layer(xa)
    assert y.grad_fn.kernels == "openblas"  # not ATen's AddmmBackward
    params = [layer.weight] + ([layer.bias] if bias else [])
    got = torch.autograd.grad(y, [xa, *params], g)
    xb = x.clone().requires_grad_()
    yb = F.linear(xb, layer.weight, layer.bias)
    want = torch.autograd.grad(yb, [xb, *params], g)
    torch.testing.assert_close(y, yb, rtol=1e-5, atol=1e-5)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), yb.detach(), rtol=1e-5, atol=1e-5)


def test_openblas_linear_only_for_float32_cpu(openblas):
    layer = lin.Linear(4, 3).double()
    y = layer(torch.randn(2, 4, dtype=torch.float64, requires_grad=True))
    assert y.dtype == torch.float64 and getattr(y.grad_fn, "kernels", None) is None  # ATen's


def test_kernel_choice_is_checked():
    with pytest.raises(ValueError, match="kernels 'mkl'"):
        lin.set_kernels("mkl")
