"""Attention normalizers: scores to weights, dense, sparse or hard.

* ``softmax``: exp(z_j) / Σ_k exp(z_k), every weight > 0.
* ``sparsemax`` (Martins & Astudillo 2016, Eq. 2): the Euclidean projection of z onto the
  probability simplex, argmin_{p ∈ Δ} ||p - z||²; low scores get a weight of exactly 0.
* ``entmax15`` (Peters et al. 2019, "Sparse Sequence-to-Sequence Models", α = 1.5): between the
  two, sparse but smoother than sparsemax. Both come from the ``entmax`` package.

Hard attention ("focus or not"; Xu et al. 2015 Sec. 4.1, Luong et al. 2015's further reading)
puts all the weight on the best-scored position: ``one_hot(argmax_j p_j)``. Trained with the
straight-through estimator (Bengio et al. 2013): the forward pass uses the one-hot weights, the
backward pass the gradient of the soft weights p, as if p had been used.
"""

from __future__ import annotations

from typing import Callable, Literal

import torch
from entmax import entmax15, sparsemax
from torch import Tensor

Normalizer = str  # a key of NORMALIZERS
HardMode = Literal["none", "decode", "train"]

# name -> scores (..., n) to weights over the last dimension. A new normalizer is one entry here
# and its name in ``syntaxnmt.config.NORMALIZER_NAMES`` (the config's allowed values).
NORMALIZERS: dict[str, Callable[[Tensor], Tensor]] = {
    "softmax": lambda scores: torch.softmax(scores, dim=-1),
    "sparsemax": lambda scores: sparsemax(scores.float(), dim=-1).to(scores.dtype),
    "entmax15": lambda scores: entmax15(scores.float(), dim=-1).to(scores.dtype),
}


def normalize(scores: Tensor, kind: Normalizer = "softmax", mask: Tensor | None = None) -> Tensor:
    """Weights over the last dimension of ``scores``; positions where ``mask`` (broadcastable) is True get exactly 0."""
    if kind not in NORMALIZERS:
        raise ValueError(f"unknown attention normalizer {kind!r} (choose from {', '.join(NORMALIZERS)})")
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = NORMALIZERS[kind](scores)
    return weights if mask is None else weights.masked_fill(mask, 0.0)


def one_hot_argmax(weights: Tensor) -> Tensor:
    """1 at each row's largest weight, 0 elsewhere."""
    return torch.zeros_like(weights).scatter_(-1, weights.argmax(-1, keepdim=True), 1.0)


class _StraightThrough(torch.autograd.Function):
    """Forward: exact one-hot weights; backward: the gradient passes to the soft weights unchanged."""

    @staticmethod
    def forward(ctx, weights: Tensor) -> Tensor:
        return one_hot_argmax(weights)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad


def harden(weights: Tensor, straight_through: bool) -> Tensor:
    """One-hot weights at each row's argmax; with ``straight_through`` the gradient flows as if
    the soft ``weights`` had been used (Bengio et al. 2013)."""
    return _StraightThrough.apply(weights) if straight_through else one_hot_argmax(weights.detach())


def attention_weights(scores: Tensor, mask: Tensor | None, kind: Normalizer = "softmax", hard: HardMode = "none", training: bool = False) -> Tensor:
    """Normalize ``scores`` (:func:`normalize`), then harden them: ``decode``: argmax in evaluation
    mode only (trained soft); ``train``: also in training, with the straight-through estimator."""
    weights = normalize(scores, kind, mask)
    if hard == "train" and training:
        return harden(weights, straight_through=True)
    if hard != "none" and not training:
        return harden(weights, straight_through=False)
    return weights
