"""Per-position products on the non-padding rows only (CPU training).

Bucketed CPU batches (``train.shape_bucket``: a few static shapes, so that oneDNN keeps a few
primitives, :mod:`syntaxnmt.model.linear`) are about a fifth padding (``benchmarks/cpu_floor.py``).
Every linear map that works position by position -- the attention projections and the FFN --
gives the padding rows nothing anybody reads (keys at padding are masked, outputs at padding are
not in the loss), so training computes them on the gathered real rows and scatters the result
back, with zeros at padding. The row count is topped up to a multiple of a granule so the
products still see only a few shapes.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def packed_rows(pad: Tensor, granule: int) -> Tensor | None:
    """The flat indices of the non-padding positions of ``pad`` (B, T; True at padding), topped up
    with padding positions to a multiple of ``granule`` rows; None when that would be every position."""
    flat = pad.reshape(-1)
    real = (~flat).nonzero()[:, 0]
    n = -(-real.numel() // granule) * granule
    if n >= flat.numel():
        return None
    return torch.cat([real, flat.nonzero()[: n - real.numel(), 0]])


def gather_rows(x: Tensor, rows: Tensor | None) -> Tensor:
    """``x`` (..., D) as (len(rows), D): the rows ``rows`` of its flattened positions (all of them if None)."""
    flat = x.reshape(-1, x.size(-1))
    return flat if rows is None else flat.index_select(0, rows)


def scatter_rows(y: Tensor, rows: Tensor | None, like: Tensor) -> Tensor:
    """The inverse of :func:`gather_rows` for ``like``'s positions: ``y`` (len(rows), E) placed at
    ``rows``, zeros elsewhere, shaped (*like.shape[:-1], E)."""
    shape = (*like.shape[:-1], y.size(-1))
    if rows is None:
        return y.view(shape)
    return y.new_zeros(like.numel() // like.size(-1), y.size(-1)).index_copy(0, rows, y).view(shape)


def on_rows(f: Callable[[Tensor], Tensor], x: Tensor, rows: Tensor | None) -> Tensor:
    """``f`` applied position-wise to ``x`` (..., D), computed on ``rows`` only (None: every row)."""
    if rows is None:
        return f(x)
    return scatter_rows(f(gather_rows(x, rows)), rows, x)
