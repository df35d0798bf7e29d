"""The label-smoothed cross-entropy of CPU training in the C kernel (its gradient in the same pass).

:func:`syntaxnmt.training.losses.sequence_loss` computes the loss of a bias-free output layer chunk
by chunk (:class:`~syntaxnmt.training.losses._ChunkedLinearCrossEntropy`); on the CPU with the
native training kernels each chunk's logits go through :func:`native_smoothed_xent`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from syntaxnmt.cpu.machine import native_training_kernels
from syntaxnmt.cpu.threads import kernel_threads


def native_smoothed_xent(z: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The summed label-smoothed cross-entropy and NLL of logits ``z`` (N, V; float32, contiguous,
    CPU) for classes ``target`` (N,), as :func:`smoothed_cross_entropy` defines them, computed
    in the C kernel ``smoothed_xent`` (``syntaxnmt/cpu/_native.c``: one read of each row from memory
    instead of about seven passes over the chunk), which **overwrites z with dloss/dz** =
    ``softmax(z) - eps / V - (1 - eps) onehot(target)``. Rows are split between torch's threads.
    Only where :func:`~syntaxnmt.cpu.machine.native_training_kernels` is not None."""
    native = native_training_kernels()
    if native is None or z.dtype != torch.float32 or z.device.type != "cpu" or not z.is_contiguous():
        raise ValueError("native_smoothed_xent takes contiguous float32 CPU logits, with the native kernels built and on")
    n, v = z.shape
    if n == 0:
        return z.new_zeros(()), z.new_zeros(())
    target = target.to(torch.long).contiguous()
    rows = z.new_empty(2, n)  # per-row loss, per-row NLL
    native.smoothed_xent(z.data_ptr(), n, v, target.data_ptr(), eps, rows[0].data_ptr(), rows[1].data_ptr(), kernel_threads(n, 16))
    total = rows.sum(dim=1)
    return total[0], total[1]
