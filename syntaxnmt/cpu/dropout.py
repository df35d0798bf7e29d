"""Dropout (Srivastava et al. 2014) with a faster mask on CPU.

``torch.nn.Dropout`` draws its mask with ``bernoulli_``, and even ``torch.rand`` is slow on CPU:
its Mersenne-Twister fill runs on one thread, at about 3 ns a number. At the recipe size the
masks cost about a tenth of a training update on 2 cores (docs/benchmarks.md, issue 14's
profile). :class:`Dropout` keeps a unit with probability 1 - p and scales kept units by
1 / (1 - p), exactly as ``nn.Dropout`` does, in one of two ways on CPU:

- float32 with the native kernels (:func:`~syntaxnmt.cpu.machine.native_training_kernels`; not
  ``train.cpu_native: torch``): ``dropout_forward`` of ``syntaxnmt/cpu/_native.c`` draws Philox4x32-10
  words (Salmon et al. 2011; the generator of PyTorch's and JAX's GPU dropout), keeps a unit when
  its 16-bit half of a word is at least ceil(p 2^16) (two units per word: the generator is most
  of the kernel's time; the keep probability is 1 - p to within 2^-16), writes the result and
  keeps the mask as bits for the backward pass: one pass over the tensor instead of five (fill,
  compare, scale, multiply, and the gradient's multiply read a float mask);
- otherwise ``u >= p`` for float32 ``u ~ U[0, 1)`` from NumPy's PCG64 (:func:`uniform_like`), in
  blocks filled on torch's threads.

The C kernel also fuses dropout with its neighbours in a Transformer layer:
:func:`bias_relu_dropout` (the feed-forward block's hidden layer, whose product then runs without
its bias) and :func:`dropout_add` (the residual connection) each make one pass forward and one
back instead of three (or two), with the masks and values of the separate operators;
:func:`dropout_add_norm` adds the next block's layer norm to the residual connection's pass.

Either way the seed (of every block) is drawn from torch's CPU generator, so ``torch.manual_seed``
and a resumed run's saved RNG state still decide every mask, whatever the number of threads. On
other devices, whose dropout kernels are fused, it calls ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.cpu.machine import native_kernels, native_training_kernels
from syntaxnmt.cpu.threads import in_threads, kernel_threads

BLOCK = 1 << 18  # uniform numbers per seed: the result does not depend on the thread count


def _fill(out: np.ndarray, seed: int) -> None:
    np.random.Generator(np.random.PCG64(seed)).random(out.size, dtype=np.float32, out=out)


def uniform_like(x: Tensor) -> Tensor:
    """float32 numbers ~ U[0, 1) shaped like ``x`` (CPU): NumPy's PCG64, one stream per block of
    :data:`BLOCK` numbers seeded from torch's generator, blocks filled on ``torch.get_num_threads()``
    threads (:func:`~syntaxnmt.cpu.threads.in_threads`; NumPy releases the GIL while filling)."""
    n = x.numel()
    out = np.empty(n, dtype=np.float32)
    starts = range(0, n, BLOCK)
    seeds = torch.randint(0, 2**62, (len(starts),), dtype=torch.int64).tolist()
    jobs = [(out[s : s + BLOCK], seed) for s, seed in zip(starts, seeds)]

    def fill(a: int, b: int) -> None:
        for job in jobs[a:b]:
            _fill(*job)

    in_threads(fill, len(jobs))
    return torch.from_numpy(out).view(x.shape)


_GROUP = 64  # elements per Philox group of the kernel: four words of eight counters, two halves each
_MIN_GROUPS_PER_THREAD = 512  # 32K elements


class _NativeDropout(torch.autograd.Function):
    """Dropout in the C kernels (see the module docstring); the mask is kept as bits. Optionally
    fused: ``residual + dropout(relu(x + bias))`` in one pass, whose bits (kept and, with ``relu``,
    positive) give the gradient of ``x`` alone, and the backward pass adds up the bias's gradient
    (column sums) in the same pass."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float, bias: Tensor | None = None, relu: bool = False, residual: Tensor | None = None) -> Tensor:
        native = native_training_kernels()
        x = x.contiguous()
        n = x.numel()
        groups = -(-n // _GROUP)
        out, bits = torch.empty_like(x), torch.empty(groups * 8, dtype=torch.uint8)
        seed = int(torch.randint(0, 2**63 - 1, (1,)).item())  # torch's generator decides the mask
        threshold, scale = max(1, math.ceil(p * 2**16)), 1.0 / (1.0 - p)
        cols = x.size(-1)
        residual = None if residual is None else residual.contiguous()  # kept alive while the kernel reads it
        extra = (0 if bias is None else bias.data_ptr(), cols, relu, 0 if residual is None else residual.data_ptr())
        native.dropout_forward(x.data_ptr(), out.data_ptr(), bits.data_ptr(), n, threshold, scale, seed, 0, groups, *extra, kernel_threads(groups, _MIN_GROUPS_PER_THREAD))
        ctx.save_for_backward(bits)
        ctx.scale, ctx.cols, ctx.has_residual = scale, cols, residual is not None
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        native = native_kernels()  # the forward pass ran the kernel: whatever the switch says now
        (bits,) = ctx.saved_tensors
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        colsum = torch.zeros(ctx.cols, dtype=torch.float64) if ctx.needs_input_grad[2] else None  # the bias's gradient
        groups = bits.numel() // 8
        native.dropout_backward(grad.data_ptr(), out.data_ptr(), bits.data_ptr(), grad.numel(), ctx.scale, 0, groups, 0 if colsum is None else colsum.data_ptr(), ctx.cols, kernel_threads(groups, _MIN_GROUPS_PER_THREAD))
        grad_bias = None if colsum is None else colsum.float()
        return out, None, grad_bias, None, grad if ctx.has_residual else None


def _native_ok(x: Tensor, p: float, training: bool) -> bool:
    return training and 0.0 < p < 1.0 and x.device.type == "cpu" and x.dtype == torch.float32 and x.numel() > 0 and native_training_kernels() is not None


def fuses_bias(x: Tensor, p: float, training: bool, width: int) -> bool:
    """Whether :func:`bias_relu_dropout` runs in one pass of the C kernel for inputs like ``x``
    (``width`` units a row, a bias of as many): where :func:`dropout` does and ``width`` is a
    multiple of 8."""
    return width % 8 == 0 and _native_ok(x, p, training) and not torch.is_autocast_enabled("cpu")  # under autocast the product is bf16


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    if _native_ok(x, p, training):
        return _NativeDropout.apply(x, p, None, False, None)
    u = uniform_like(x) if x.dtype == torch.float32 else torch.rand_like(x)
    mask = u.ge_(p).mul_(1.0 / (1.0 - p))
    return x * mask


def bias_relu_dropout(x: Tensor, bias: Tensor | None, p: float, training: bool) -> Tensor:
    """``dropout(relu(x + bias))`` (a feed-forward block's hidden layer, Vaswani et al. 2017, Eq. 2),
    in one pass of the C kernel where :func:`dropout` runs it (and ``bias``, if any, is float32 with a
    length that is a multiple of 8): the same values and masks as the three operators, and one pass
    instead of three back too, the bias's gradient included."""
    if fuses_bias(x, p, training, x.size(-1)) and (bias is None or (bias.dtype == torch.float32 and bias.shape == x.shape[-1:])):
        return _NativeDropout.apply(x, p, None if bias is None else bias.contiguous(), True, None)
    return dropout(F.relu(x if bias is None else x + bias), p, training)


def dropout_add(residual: Tensor, y: Tensor, p: float, training: bool) -> Tensor:
    """``residual + dropout(y)`` (a residual connection, Vaswani et al. 2017, Sec. 5.4), in one pass
    of the C kernel where :func:`dropout` runs it: the same values and mask as the two operators."""
    if _native_ok(y, p, training) and residual.shape == y.shape and residual.dtype == y.dtype:
        return _NativeDropout.apply(y, p, None, False, residual)
    return residual + dropout(y, p, training)


_MIN_ROWS_ELEMENTS = 32768  # elements per thread of add_norm's rows


class _NativeAddNorm(torch.autograd.Function):
    """``xo = x + dropout(y)`` and ``h = layer_norm(xo)`` in one pass of the C kernels, forward and
    back: the mask of :class:`_NativeDropout` with the same seed, the norm on each row while it is
    in L1; back, the residual path's gradient, the norm's and the mask in one pass (the sum of the
    two gradients of ``xo`` is not a separate operator)."""

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor, p: float, weight: Tensor, bias: Tensor, eps: float):
        native = native_training_kernels()
        x, y = x.contiguous(), y.contiguous()
        rows, cols = y.numel() // y.size(-1), y.size(-1)
        xo, h = torch.empty_like(y), torch.empty_like(y)
        bits, stats = torch.empty(y.numel() // 8, dtype=torch.uint8), torch.empty(rows, 2)
        seed = int(torch.randint(0, 2**63 - 1, (1,)).item())  # drawn as _NativeDropout draws it: the same mask
        threshold, scale = max(1, math.ceil(p * 2**16)), 1.0 / (1.0 - p)
        w, b = weight.contiguous(), bias.contiguous()
        native.add_norm_forward(x.data_ptr(), y.data_ptr(), xo.data_ptr(), h.data_ptr(), bits.data_ptr(), stats.data_ptr(), w.data_ptr(), b.data_ptr(), rows, cols, threshold, scale, seed, eps, 0, rows, kernel_threads(rows, _MIN_ROWS_ELEMENTS // cols))
        ctx.save_for_backward(xo, stats, w, bits)
        ctx.scale = scale
        ctx.set_materialize_grads(False)
        return xo, h

    @staticmethod
    def backward(ctx, gxo: Tensor | None, gh: Tensor | None):
        xo, stats, w, bits = ctx.saved_tensors
        if gh is None and gxo is None:
            return None, None, None, None, None, None
        gh = torch.zeros_like(xo) if gh is None else gh.contiguous()  # the norm's output unused (not in a Transformer's chain)
        native = native_kernels()
        rows, cols = xo.numel() // xo.size(-1), xo.size(-1)
        gxo = None if gxo is None else gxo.contiguous()
        gx, gy = torch.empty_like(xo), torch.empty_like(xo)
        sums = torch.zeros(2, cols, dtype=torch.float64)  # the norm's weight's and bias's gradients
        native.add_norm_backward(0 if gxo is None else gxo.data_ptr(), gh.data_ptr(), xo.data_ptr(), stats.data_ptr(), w.data_ptr(), bits.data_ptr(), gx.data_ptr(), gy.data_ptr(), rows, cols, ctx.scale, 0, rows, sums[0].data_ptr(), sums[1].data_ptr(), kernel_threads(rows, _MIN_ROWS_ELEMENTS // cols))
        gw, gb = sums.float()
        return gx, gy, None, gw, gb, None


def dropout_add_norm(residual: Tensor, y: Tensor, p: float, training: bool, norm: nn.Module) -> tuple[Tensor, Tensor]:
    """``x = residual + dropout(y)`` and ``norm(x)``: a pre-norm residual connection and the next
    block's layer norm (Ba et al. 2016; Xiong et al. 2020). One pass of the C kernel each way
    where :func:`dropout_add` runs it, ``norm`` is an ``nn.LayerNorm`` of the last dimension with
    weight and bias, and the rows are a multiple of 64 floats; else the two operators. The same
    mask as :func:`dropout_add` with the same generator state."""
    if (
        isinstance(norm, nn.LayerNorm)
        and norm.normalized_shape == (y.size(-1),)
        and y.size(-1) % 64 == 0
        and norm.weight is not None
        and norm.bias is not None
        and norm.weight.dtype == torch.float32
        and _native_ok(y, p, training)
        and residual.shape == y.shape
        and residual.dtype == y.dtype
        and not torch.is_autocast_enabled("cpu")
    ):
        return _NativeAddNorm.apply(residual, y, p, norm.weight, norm.bias, norm.eps)
    x = dropout_add(residual, y, p, training)
    return x, norm(x)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with :func:`dropout`'s masks (see the module docstring); :func:`syntaxnmt.cpu.install` gives it to a model's dropouts."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
