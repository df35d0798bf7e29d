"""``nn.Linear`` whose float32 CPU products can go through oneDNN.

PyTorch's CPU ``addmm``/``mm`` call MKL's sgemm. On the AMD EPYC (Zen 4) machines this project
runs on, profiling the recipe model showed MKL reaching about 40-60 GFLOP/s per core, while
oneDNN's float32 inner-product kernel (``torch.ops.mkldnn._linear_pointwise``, the op
TorchInductor uses for CPU linears) reaches 100-150 at the model's shapes.

oneDNN keeps state per problem shape (primitives, their scratch memory): fed a new shape at
every update, training grew from 1.4 to 3.4 GB over its first 80 updates without levelling off.
With bucketed batch shapes (``train.shape_bucket``: a few static shapes) it sees a handful of
shapes and the memory stays flat (``benchmarks/memory_curve.py``). ``SYNTAXNMT_ONEDNN_LINEAR``
chooses where :class:`Linear` uses it:

- ``auto`` (default): without autograd (beam search, validation decoding: about 1.5x faster
  beam search), and in training inside :func:`onednn_in_training` -- which training enters when
  its batch shapes are bucketed on CPU (forward and both gradients ``g W``, ``g^T x``; 1.38x
  more training tokens/s in issue 6's measurement, a few percent in issue 14's: docs/benchmarks.md);
- ``train``: in training with every batch shape too (memory grows with each new shape);
- ``infer``: never in training; ``0``: never.

Where oneDNN may run, the kernel choice (:func:`set_kernels`, made by :mod:`syntaxnmt.cpu.calibration`
from ``train.cpu_kernels`` / ``--cpu-kernels`` and a whole-step calibration on the machine at hand)
says whether it does or ATen's ``F.linear`` runs instead, for every product of the process. The
third choice, ``openblas``, sends every float32 CPU product of :func:`linear` (with and without
autograd, any shape: OpenBLAS keeps no state per shape) to numpy's OpenBLAS
(:mod:`syntaxnmt.cpu.blas`).

Same parameters, state-dict keys and numbers (up to float32 rounding) as ``nn.Linear``; outside
float32 CPU work without autocast, and where the op is missing, it is ``nn.Linear``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.cpu import blas
from syntaxnmt.cpu.blas import openblas_available
from syntaxnmt.errors import UserError

_OP = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
MODES = ("auto", "infer", "train", "0")
# Read from SYNTAXNMT_ONEDNN_LINEAR on first use (:func:`configure`), not at import: a bad value is
# a user error of the command that computes, not of every import.
MODE: str | None = None
ENABLED = False
TRAIN = False
# The kernel choice (cpu.calibration): oneDNN where it may run, else ATen; or OpenBLAS everywhere.
ONEDNN = True
OPENBLAS = False
KERNELS = ("onednn", "aten", "openblas")


def configure(mode: str | None = None) -> bool:
    """Set the mode (default: ``SYNTAXNMT_ONEDNN_LINEAR``, else ``auto``); returns whether oneDNN
    linears are on. A value other than auto, infer, train or 0 is a user error."""
    global MODE, ENABLED, TRAIN
    mode = os.environ.get("SYNTAXNMT_ONEDNN_LINEAR", "auto") if mode is None else mode
    if mode not in MODES:
        raise UserError(f"SYNTAXNMT_ONEDNN_LINEAR must be auto, infer, train or 0, not {mode!r}")
    MODE = mode
    ENABLED = _OP is not None and torch.backends.mkldnn.is_available() and mode != "0"
    TRAIN = ENABLED and mode == "train"
    return ENABLED


def enabled() -> bool:
    """Whether oneDNN linears are on (reading the environment the first time)."""
    return configure() if MODE is None else ENABLED


def train_allowed() -> bool:
    """Whether oneDNN may run with autograd in some training (modes auto and train)."""
    return enabled() and MODE in ("auto", "train")


def set_kernels(kernels: str) -> None:
    """Choose the kernels of every product of the process: ``onednn`` (where it may run, else
    ATen), ``aten`` or ``openblas`` (where numpy's BLAS is OpenBLAS; else ATen)."""
    global ONEDNN, OPENBLAS
    if kernels not in KERNELS:
        raise ValueError(f"kernels {kernels!r}: expected one of {', '.join(KERNELS)}")
    ONEDNN, OPENBLAS = kernels == "onednn", kernels == "openblas" and openblas_available()


def kernels() -> str:
    """The kernel choice in force (:func:`set_kernels`)."""
    return "openblas" if OPENBLAS else "onednn" if ONEDNN else "aten"


def row_granule(granule: int) -> int:
    """The multiple to which a product's row count is rounded up: ``granule`` where oneDNN may
    compute it (oneDNN keeps state per shape: a few row counts), else 8 (ATen's and OpenBLAS's
    products take any shape; fewer zero or padding rows are computed)."""
    return granule if ONEDNN and not OPENBLAS else min(granule, 8)


@contextmanager
def onednn_in_training(enabled: bool = True) -> Iterator[None]:
    """Inside, :class:`Linear` also uses oneDNN with autograd (``SYNTAXNMT_ONEDNN_LINEAR`` auto
    or train), when ``enabled``: for training on a few static batch shapes."""
    global TRAIN
    on = globals()["enabled"]()
    before = TRAIN
    TRAIN = before or (enabled and on and MODE == "auto")
    try:
        yield
    finally:
        TRAIN = before


def _dnn(x2d: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return _OP(x2d, weight, bias, "none", [], "")


def _weight_grad(g2d: Tensor, x2d: Tensor) -> Tensor:
    """``g^T x`` (out x in) for row-major ``g`` (N x out) and ``x`` (N x in). oneDNN copies a
    transposed input to row-major first; that copy is the larger the wider the operand, so the
    narrower one is transposed: ``(x^T g)^T`` when out > in (the FFN's first layer)."""
    if g2d.size(1) > x2d.size(1):
        return _dnn(x2d.t().contiguous(), g2d.t(), None).t()
    return _dnn(g2d.t(), x2d.t(), None)


_PRODUCTS = {  # per kernels: x W^T + b, g W, g^T x (x, g: 2-D)
    "onednn": (_dnn, lambda g2d, weight: _dnn(g2d, weight.t(), None), _weight_grad),
    "openblas": (blas.linear, blas.mm, lambda g2d, x2d: blas.mm(g2d.t(), x2d)),
}


class _KernelLinear(torch.autograd.Function):
    """``F.linear`` with its gradients (``g W``, ``g^T x``, the column sums of ``g``) through
    oneDNN or OpenBLAS (:data:`_PRODUCTS`); ``grad_fn.kernels`` says which."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, kernels: str) -> Tensor:
        x2d = x.reshape(-1, x.size(-1))
        ctx.save_for_backward(x2d, weight)
        ctx.has_bias, ctx.shape, ctx.kernels = bias is not None, x.shape, kernels
        return _PRODUCTS[kernels][0](x2d, weight, bias).view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad: Tensor):
        x2d, weight = ctx.saved_tensors
        _, times_weight, weight_grad = _PRODUCTS[ctx.kernels]
        g2d = grad.reshape(-1, grad.size(-1))
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = times_weight(g2d, weight).view(ctx.shape)  # g W
        if ctx.needs_input_grad[1]:
            grad_w = weight_grad(g2d, x2d)  # g^T x
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g2d.sum(0)
        return grad_x, grad_w, grad_b, None


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear`` through oneDNN or OpenBLAS for float32 CPU tensors without autocast (see the module docstring)."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32 or torch.is_autocast_enabled("cpu"):
        return F.linear(x, weight, bias)
    grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    if OPENBLAS:
        return _KernelLinear.apply(x, weight, bias, "openblas") if grad else blas.linear(x, weight, bias)
    if not (ENABLED if MODE is not None else enabled()) or not ONEDNN or not x.numel() or (grad and not TRAIN):
        return F.linear(x, weight, bias)
    if grad:
        return _KernelLinear.apply(x, weight, bias, "onednn")
    return _dnn(x.reshape(-1, x.size(-1)), weight, bias).view(*x.shape[:-1], weight.size(0))


def add_weight_grad(acc: Tensor | None, g2d: Tensor, x2d: Tensor) -> Tensor:
    """``acc + g^T x`` (out x in; ``acc`` None: ``g^T x``) for row-major ``g`` (N x out) and ``x``
    (N x in), outside autograd, with the kernels of :func:`linear`: ATen's in place, one product
    with beta 1 on the transposed operand (no temporary, no transposed copy, no separate sum);
    oneDNN and OpenBLAS compute the product and add it. For gradients summed over chunks of rows
    (:class:`syntaxnmt.training.losses._ChunkedLinearCrossEntropy`)."""
    if x2d.device.type == "cpu" and x2d.dtype == torch.float32 and not torch.is_autocast_enabled("cpu") and (OPENBLAS or (ONEDNN and enabled())):
        w = _PRODUCTS["openblas" if OPENBLAS else "onednn"][2](g2d, x2d)
        return w if acc is None else acc.add_(w)
    return torch.mm(g2d.t(), x2d) if acc is None else torch.addmm(acc, g2d.t(), x2d, out=acc)  # in place (addmm_ too, but the profiler counts this one's operations)


class Linear(nn.Linear):
    """Drop-in for ``nn.Linear`` (see the module docstring)."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)

