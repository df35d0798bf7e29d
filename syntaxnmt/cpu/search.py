"""The next-token candidates of a search step from the output layer's logits, on the CPU.

Beam search needs, for every row of logits ``x`` (R, V), the k largest log-probabilities
``log_softmax(x)_j = x_j - m - log Σ_i exp(x_i - m)`` (m = max x) with their columns, never
choosing the ``forbidden`` columns (which still count in the normalizer: the model's distribution
is not renormalized). :func:`log_softmax_topk` computes exactly that, and the row's log-sum-exp,
in the C kernel ``syntaxnmt/cpu/_native.c`` (built by ``pip install``) without writing the (R, V)
log-probabilities: about 2.5x PyTorch's ``log_softmax`` followed by a top-k at beam search's
shapes (docs/deployment.md, "Speed"). Where the kernel was not built (no C compiler at install) or
the CPU lacks AVX2/FMA, :func:`available` is False and the search keeps PyTorch's operators;
``decode.cpu_softmax: torch`` keeps them everywhere (:func:`use_native`). Values agree with PyTorch's to a few units in
the last place (the kernel's exp is Cephes' polynomial, not Sleef's).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import torch
from torch import Tensor

from syntaxnmt.config import CpuSoftmax
from syntaxnmt.cpu.machine import native_kernels
from syntaxnmt.cpu.threads import kernel_threads

_native = native_kernels()

_MIN_ROWS_PER_THREAD = 32


def available() -> bool:
    """True when the kernel was built and runs its AVX2/FMA path on this CPU."""
    return _native is not None


def use_native(choice: CpuSoftmax, device: torch.device, model) -> bool:
    """Whether a search on ``device`` with ``model`` uses :func:`log_softmax_topk`:
    ``decode.cpu_softmax`` = ``choice`` is ``auto`` (``torch``: never), the device the CPU, the
    kernel :func:`available` and the model able to return logits from its step (``step_logits``)."""
    return choice == "auto" and device.type == "cpu" and getattr(model, "step_logits", False) and available()


@lru_cache(maxsize=8)
def _columns(columns: tuple[int, ...]) -> Tensor:
    """The forbidden columns as the int64 tensor the kernel reads (the same few every step)."""
    return torch.tensor(columns, dtype=torch.long)


def _run(x: Tensor, k: int, values: Tensor, indices: Tensor, lse: Tensor, forbidden: Tensor, threads: int = 1) -> None:
    _native.log_softmax_topk(x.data_ptr(), x.size(0), x.size(1), k, values.data_ptr(), indices.data_ptr(), lse.data_ptr(), forbidden.data_ptr(), forbidden.numel(), threads)


def log_softmax_topk(x: Tensor, k: int, forbidden: Sequence[int] = ()) -> tuple[Tensor, Tensor, Tensor]:
    """For float32 CPU logits ``x`` (R, V): the k largest values of ``log_softmax(x, -1)`` of each
    row outside the ``forbidden`` columns, best first (R, k), their columns (R, k) and the rows'
    ``logsumexp`` (R,). Rows are split between torch's intra-op threads (the kernel releases the
    GIL). Raises RuntimeError where the kernel is not :func:`available`."""
    if _native is None:
        raise RuntimeError("the native kernel syntaxnmt/cpu/_native.c was not built (install with a C compiler: pip install -e .) or this CPU lacks AVX2/FMA")
    if x.dim() != 2 or x.dtype != torch.float32 or x.device.type != "cpu" or not 1 <= k <= x.size(1):
        raise ValueError(f"log_softmax_topk takes float32 CPU logits (R, V) and 1 <= k <= V, not {tuple(x.shape)} {x.dtype} on {x.device} with k={k}")
    x = x.contiguous()
    r = x.size(0)
    values, indices, lse = x.new_empty(r, k), torch.empty(r, k, dtype=torch.long), x.new_empty(r)
    banned = _columns(tuple(forbidden))
    _run(x, k, values, indices, lse, banned, kernel_threads(r, _MIN_ROWS_PER_THREAD))
    return values, indices, lse
