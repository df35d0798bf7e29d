"""Per-position products on the non-padding rows only (CPU training).

Bucketed CPU batches (``train.shape_bucket``: a few static shapes, so that oneDNN keeps a few
primitives, :mod:`syntaxnmt.cpu.linear`) are about a fifth padding (``benchmarks/cpu_floor.py``).
Every linear map that works position by position -- the attention projections and the FFN --
gives the padding rows nothing anybody reads (keys at padding are masked, outputs at padding are
not in the loss), so training computes them on the gathered real rows and scatters the result
back, with zeros at padding. The row count is topped up to a multiple of a granule so the
products still see only a few shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor


def packed_rows(pad: Tensor, granule: int) -> Tensor | None:
    """The flat indices of the non-padding positions of ``pad`` (B, T; True at padding), topped up
    with padding positions to a multiple of ``granule`` rows; None when that would be every position.
    The positions left out ride along as the tensor's ``rest`` attribute (:func:`rest_of`)."""
    flat = pad.reshape(-1)
    real = (~flat).nonzero()[:, 0]
    n = -(-real.numel() // granule) * granule
    if n >= flat.numel():
        return None
    padding = flat.nonzero()[:, 0]
    rows = torch.cat([real, padding[: n - real.numel()]])
    rows.rest = padding[n - real.numel() :]
    return rows


def rest_of(rows: Tensor, total: int) -> Tensor:
    """The flat positions of ``range(total)`` that ``rows`` leaves out (kept by :func:`packed_rows`,
    else computed)."""
    rest = getattr(rows, "rest", None)
    if rest is None:
        keep = torch.ones(total, dtype=torch.bool, device=rows.device)
        keep[rows] = False
        rest = keep.nonzero()[:, 0]
    return rest


class Place(NamedTuple):
    """Where the rows of a packed tensor (R, D) lie in a (batch, length) layout: row i is the flat
    position ``rows[i]`` (None: every position in order, R = batch * length)."""

    rows: Tensor | None
    batch: int
    length: int

    def row_map(self) -> Tensor:
        """(batch * length,) int64: the row of each position, -1 where it has none (kept on
        ``rows``, which must not be None)."""
        found = getattr(self.rows, "row_map", None)
        if found is None:
            found = torch.full((self.batch * self.length,), -1, dtype=torch.int64)
            found[self.rows] = torch.arange(self.rows.numel())
            self.rows.row_map = found
        return found

    def placed(self, y: Tensor) -> Tensor:
        """(batch, length, E): the rows ``y`` (R, E) at their positions, zeros elsewhere."""
        return _placed_as(y, self.rows, (self.batch, self.length))


class PlacedRows(Sequence[Tensor]):
    """Packed tensors (R, E) of one :class:`Place` read as (batch, length, E) tensors, each placed
    (zeros at the other positions) when first read: the per-layer states of a packed encoder,
    which only some objectives read (multi-task heads)."""

    def __init__(self, packed: Sequence[Tensor], place: Place):
        self.packed, self.place, self._placed = list(packed), place, {}

    def __len__(self) -> int:
        return len(self.packed)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        i = range(len(self))[i]  # negative indices; IndexError beyond
        if i not in self._placed:
            self._placed[i] = self.place.placed(self.packed[i])
        return self._placed[i]


def _placed(y: Tensor, rows: Tensor, rest: Tensor, total: int) -> Tensor:
    """(total, E): ``y`` (len(rows), E) at ``rows``, zeros at ``rest`` -- only the left-out rows are
    zero-filled, not the whole tensor first."""
    out = y.new_empty(total, y.size(1))
    out.index_copy_(0, rows, y)
    return out.index_fill_(0, rest, 0.0)


class _Gather(torch.autograd.Function):
    """``flat.index_select(0, rows)``, whose gradient is placed with :func:`_placed` (rows are
    distinct: a copy, not the zero fill and scatter-add of ``index_select``'s own backward)."""

    @staticmethod
    def forward(ctx, flat: Tensor, rows: Tensor) -> Tensor:
        ctx.rows, ctx.rest, ctx.total = rows, rest_of(rows, flat.size(0)), flat.size(0)
        return flat.index_select(0, rows)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return _placed(grad.contiguous(), ctx.rows, ctx.rest, ctx.total), None


class _Scatter(torch.autograd.Function):
    """:func:`_placed` with the gradient ``grad.index_select(0, rows)``."""

    @staticmethod
    def forward(ctx, y: Tensor, rows: Tensor, total: int) -> Tensor:
        ctx.rows = rows
        return _placed(y.contiguous(), rows, rest_of(rows, total), total)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad.index_select(0, ctx.rows), None, None


def gather_rows(x: Tensor, rows: Tensor | None) -> Tensor:
    """``x`` (..., D) as (len(rows), D): the rows ``rows`` of its flattened positions (all of them if None)."""
    flat = x.reshape(-1, x.size(-1))
    return flat if rows is None else _Gather.apply(flat, rows)


def scatter_rows(y: Tensor, rows: Tensor | None, like: Tensor) -> Tensor:
    """The inverse of :func:`gather_rows` for ``like``'s positions: ``y`` (len(rows), E) placed at
    ``rows``, zeros elsewhere, shaped (*like.shape[:-1], E)."""
    return _placed_as(y, rows, like.shape[:-1])


def _placed_as(y: Tensor, rows: Tensor | None, positions: tuple[int, ...]) -> Tensor:
    """``y`` (len(rows), E) at ``rows`` of ``positions`` (a shape), zeros elsewhere: (*positions, E)."""
    shape = (*positions, y.size(-1))
    return y.view(shape) if rows is None else _Scatter.apply(y, rows, math.prod(positions)).view(shape)


def on_rows(f: Callable[[Tensor], Tensor], x: Tensor, rows: Tensor | None) -> Tensor:
    """``f`` applied position-wise to ``x`` (..., D), computed on ``rows`` only (None: every row)."""
    if rows is None:
        return f(x)
    return scatter_rows(f(gather_rows(x, rows)), rows, x)
