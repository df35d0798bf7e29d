"""The classical attention family of RNN encoder-decoders: score functions, normalization, local-p.

An attention step turns a decoder query ``s`` (the decoder state) and the encoder annotations
``h_1 .. h_S`` into energies ``e_j = score(s, h_j)``, weights ``alpha = softmax(e)`` over the
non-padding positions and a context vector ``c = sum_j alpha_j h_j`` (Bahdanau et al. 2015,
Eq. 5-6; Luong et al. 2015, Eq. 7).

Score functions (:data:`SCORES`, selected by name) are modules with
``score(query, keys) -> energies``: ``query`` is (N, d_q) -- or (N, T, d_q) for all target
positions at once (teacher forcing) -- and ``keys`` (N, S, d_k); the energies are (N, S) (or
(N, T, S)). The part that depends only on the keys (``W h_j``, ``V h_j``, ``W_1 h_j``) is computed
once per sentence by :meth:`Score.precompute` and reused at every decoding step through
:meth:`Score.energies`. Positions are counted from 0: ``j = 0 .. J-1`` over the source,
``i = 0, 1, ...`` over the target; lengths ``J`` and ``I`` count the EOS token and no padding.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn
from torch.nn import Linear  # the CPU path replaces it where it is installed (syntaxnmt.cpu.install)

from syntaxnmt.model.normalizers import HardMode, Normalizer, harden, normalize


def _dot(query: Tensor, keys: Tensor) -> Tensor:
    """``query . keys_j`` for every j: query (N, d) or (N, T, d), keys (N, S, d) -> (N, S) or (N, T, S)."""
    if query.dim() == 2:
        return torch.bmm(keys, query[:, :, None]).squeeze(2)
    return torch.bmm(query, keys.transpose(1, 2))


def _weighted_sum(alpha: Tensor, values: Tensor) -> Tensor:
    """``c = sum_j alpha_j h_j``: alpha (N, S) or (N, T, S), values (N, S, d) -> (N, d) or (N, T, d)."""
    if alpha.dim() == 2:
        return torch.bmm(alpha[:, None, :], values).squeeze(1)
    return torch.bmm(alpha, values)


class Score(nn.Module):
    """Base class: ``forward(query, keys) = energies(query, precompute(keys))``.

    ``features`` (position features, (N, S, F) or (N, T, S, F)) are accepted only by scores built
    with ``n_features > 0`` (the additive score).
    """

    n_features = 0

    def precompute(self, keys: Tensor) -> Tensor:
        """The key-only part of the score, cached once per sentence (default: the keys themselves)."""
        return keys

    def energies(self, query: Tensor, pre: Tensor, features: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    def forward(self, query: Tensor, keys: Tensor, features: Tensor | None = None) -> Tensor:
        return self.energies(query, self.precompute(keys), features)

    def _no_features(self, features: Tensor | None) -> None:
        if features is not None:
            raise ValueError(f"{type(self).__name__} takes no position features (they enter the mlp score)")


class DotScore(Score):
    """``e_j = s^T h_j`` (Luong et al. 2015, Eq. 8, *dot*): no parameters, so the query and the keys
    must have one size (``d_q == d_k``; an RNN decoder gets it with ``model.rnn.dec_hidden:
    annotations``, the config refusing other sizes). A projected query ``(W_q s)^T h_j`` would be
    the *general* score in all but its factorization: use :class:`GeneralScore` for that."""

    name = "dot"

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        if query_dim != key_dim:
            raise ValueError(f"the {self.name} score has no parameters: it needs queries and keys of one size (got {query_dim} and {key_dim})")
        self.scale = 1.0

    def energies(self, query: Tensor, pre: Tensor, features: Tensor | None = None) -> Tensor:
        self._no_features(features)
        return _dot(query, pre) * self.scale


class ScaledDotScore(DotScore):
    """``e_j = s^T h_j / sqrt(d)`` with ``d = d_q = d_k`` (Vaswani et al. 2017, Eq. 1); parameter-free as :class:`DotScore`."""

    name = "scaled_dot"

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__(query_dim, key_dim)
        self.scale = 1.0 / math.sqrt(key_dim)


class GeneralScore(Score):
    """Bilinear ``e_j = s^T W h_j`` (Luong et al. 2015, Eq. 8, *general*), ``W`` (d_q x d_k); ``W h_j`` is cached."""

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.W = Linear(key_dim, query_dim, bias=False)  # weight is W (d_q x d_k)

    def precompute(self, keys: Tensor) -> Tensor:
        return self.W(keys)

    def energies(self, query: Tensor, pre: Tensor, features: Tensor | None = None) -> Tensor:
        self._no_features(features)
        return _dot(query, pre)


class LowRankBilinearScore(Score):
    """Reduced-rank bilinear ``e_j = (U s)^T (V h_j)``, U (k x d_q), V (k x d_k): ``W = U^T V`` of rank <= k.

    (The low-rank factorization of the bilinear form of Luong et al. 2015, Eq. 8 *general*, as
    in the low-rank bilinear pooling of Kim et al. 2017, Sec. 3.) ``V h_j`` is cached.
    """

    def __init__(self, query_dim: int, key_dim: int, rank: int):
        super().__init__()
        self.U = Linear(query_dim, rank, bias=False)
        self.V = Linear(key_dim, rank, bias=False)

    def precompute(self, keys: Tensor) -> Tensor:
        return self.V(keys)

    def energies(self, query: Tensor, pre: Tensor, features: Tensor | None = None) -> Tensor:
        self._no_features(features)
        return _dot(self.U(query), pre)


class MLPScore(Score):
    """Additive / concat ``e_j = v^T tanh(W_1 h_j + W_2 s)`` (Bahdanau et al. 2015, Appendix A.1.2:
    ``e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)``; Luong et al. 2015, Eq. 8 *concat*); no biases.

    ``W_1 h_j`` is cached. With ``n_features > 0`` the position bias of Cohn et al. (2016, Sec. 3.1)
    enters the same non-linearity: ``v^T tanh(W_1 h_j + W_2 s + W_3 phi(i, j, I, J))``.
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int, n_features: int = 0):
        super().__init__()
        self.W1 = Linear(key_dim, attention_dim, bias=False)
        self.W2 = Linear(query_dim, attention_dim, bias=False)
        self.v = Linear(attention_dim, 1, bias=False)
        self.n_features = n_features
        self.W3 = Linear(n_features, attention_dim, bias=False) if n_features else None

    def precompute(self, keys: Tensor) -> Tensor:
        return self.W1(keys)

    def energies(self, query: Tensor, pre: Tensor, features: Tensor | None = None) -> Tensor:
        q = self.W2(query)
        if q.dim() == 2:  # (N, a) + (N, S, a)
            hidden = pre + q[:, None, :]
        else:  # (N, T, 1, a) + (N, 1, S, a)
            hidden = pre[:, None, :, :] + q[:, :, None, :]
        if features is not None:
            if self.W3 is None:
                raise ValueError("this mlp score was built without position features")
            hidden = hidden + self.W3(features.to(hidden.dtype))
        elif self.W3 is not None:
            raise ValueError("this mlp score needs position features phi(i, j, I, J)")
        return self.v(torch.tanh(hidden)).squeeze(-1)


# name -> builder(query_dim, key_dim, attention_dim, rank, n_features). A new score is its class
# and one entry here, plus its name in ``syntaxnmt.config.SCORE_NAMES`` (the config's allowed values).
SCORES: dict[str, Callable[[int, int, int, int, int], Score]] = {
    "dot": lambda q, k, a, r, f: DotScore(q, k),
    "scaled_dot": lambda q, k, a, r, f: ScaledDotScore(q, k),
    "general": lambda q, k, a, r, f: GeneralScore(q, k),
    "bilinear_lowrank": lambda q, k, a, r, f: LowRankBilinearScore(q, k, r),
    "mlp": lambda q, k, a, r, f: MLPScore(q, k, a, f),
}


def build_score(name: str, query_dim: int, key_dim: int, attention_dim: int = 256, rank: int = 32, n_features: int = 0) -> Score:
    """The score function called ``name`` (a key of :data:`SCORES`)."""
    if n_features and name != "mlp":
        raise ValueError("position features enter the additive score only (score: mlp)")
    if name not in SCORES:
        raise ValueError(f"unknown attention score {name!r} (choose from {', '.join(SCORES)})")
    return SCORES[name](query_dim, key_dim, attention_dim, rank, n_features)


def attend(energies: Tensor, keys_values: Tensor, pad_mask: Tensor, normalizer: Normalizer = "softmax") -> tuple[Tensor, Tensor]:
    """Global attention: ``alpha = softmax(e)`` over non-padding positions, ``c = sum_j alpha_j h_j``
    (Bahdanau et al. 2015, Eq. 5-6).

    ``energies`` (N, S) or (N, T, S), ``keys_values`` (N, S, d), ``pad_mask`` (N, S) True at
    padding, which gets a weight of exactly 0. Returns ``(context (N, [T,] d), alpha (N, [T,] S))``.
    ``normalizer``: softmax, or a sparse one (:mod:`syntaxnmt.model.normalizers`).
    """
    mask = pad_mask if energies.dim() == 2 else pad_mask[:, None, :]
    alpha = normalize(energies, normalizer, mask)
    return _weighted_sum(alpha, keys_values), alpha


def position_features(target_pos: Tensor, num_src: int, target_len: Tensor, source_len: Tensor) -> Tensor:
    """``phi(i, j, I, J) = [log(1+i), log(1+j), log(1+I), log(1+J)]`` (Cohn et al. 2016, Sec. 3.1).

    ``target_pos`` i is (N,) (one decoding step) or (N, T); j runs over ``0 .. num_src-1``;
    ``target_len`` I and ``source_len`` J are (N,). Returns (N, S, 4) or (N, T, S, 4).
    What the RNN model passes for I: the reference length when teacher forcing, the source
    length J at decoding time (see :meth:`syntaxnmt.model.rnn.RNNModel.init_state`).
    """
    dtype = torch.float32
    i = target_pos.to(dtype)[..., None]  # (N, [T,] 1)
    j = torch.arange(num_src, device=target_pos.device, dtype=dtype)  # (S,)
    extra = (1,) * (target_pos.dim() - 1)
    big_i = target_len.to(dtype).view(-1, *extra, 1)
    big_j = source_len.to(dtype).view(-1, *extra, 1)
    return torch.stack(torch.broadcast_tensors(i, j, big_i, big_j), dim=-1).log1p()


class LocalPosition(nn.Module):
    """Predicted aligned position ``p_t = S * sigmoid(v_p^T tanh(W_p s_t))`` (Luong et al. 2015, Eq. 9),
    with ``S`` the length of each source sentence (padding excluded); ``p_t`` lies in (0, S)."""

    def __init__(self, query_dim: int, attention_dim: int):
        super().__init__()
        self.W_p = Linear(query_dim, attention_dim, bias=False)
        self.v_p = Linear(attention_dim, 1, bias=False)

    def forward(self, query: Tensor, source_len: Tensor) -> Tensor:
        """``query`` (N, d) or (N, T, d), ``source_len`` (N,) -> p (N,) or (N, T)."""
        sig = torch.sigmoid(self.v_p(torch.tanh(self.W_p(query)))).squeeze(-1)
        length = source_len.to(sig.dtype)
        return sig * (length if sig.dim() == 1 else length[:, None])


def local_attend(energies: Tensor, keys_values: Tensor, pad_mask: Tensor, p: Tensor, window: int, normalizer: Normalizer = "softmax") -> tuple[Tensor, Tensor]:
    """Local-p attention (Luong et al. 2015, Sec. 3.2, Eq. 10):
    ``alpha_t(j) = align(s_t, h_j) * exp(-(j - p_t)^2 / (2 sigma^2))``, ``sigma = D / 2``.

    ``align`` is the softmax of the energies over the window ``[p_t - D, p_t + D]`` (non-padding
    positions only); every position outside the window gets a weight of exactly 0. The weights are
    not renormalized after the Gaussian (as in the paper). ``p`` is (N,) or (N, T); the window
    is never empty, since ``0 < p_t < S`` and ``D >= 1``.
    """
    if window < 1:
        raise ValueError("local attention needs a window D >= 1")
    j = torch.arange(energies.size(-1), device=energies.device, dtype=p.dtype)
    dist = j - p[..., None]  # (N, [T,] S)
    mask = pad_mask if energies.dim() == 2 else pad_mask[:, None, :]
    outside = (dist.abs() > window) | mask
    align = normalize(energies, normalizer, outside)
    sigma = window / 2.0
    alpha = (align * torch.exp(-dist.pow(2) / (2.0 * sigma**2))).masked_fill(outside, 0.0)
    return _weighted_sum(alpha, keys_values), alpha


class Attention(nn.Module):
    """One attention step of an RNN decoder: a score function, global or local-p weights, the
    optional position bias of Cohn et al. (2016).

    Use :meth:`precompute` once per sentence on the annotations, then call the module with the
    query of every step. ``forward(query, keys, pre, pad_mask, source_len, target_pos, target_len)``
    returns ``(context, alpha)``; ``target_pos``/``target_len`` are needed with ``position_bias``.
    """

    def __init__(self, score: str, query_dim: int, key_dim: int, attention_dim: int = 256, rank: int = 32, local_window: int = 0, position_bias: bool = False, normalizer: Normalizer = "softmax", hard: HardMode = "none"):
        """``normalizer`` and ``hard``: sparse or hard weights (see :mod:`syntaxnmt.model.normalizers`)."""
        super().__init__()
        self.normalizer, self.hard = normalizer, hard
        self.position_bias = position_bias
        self.score = build_score(score, query_dim, key_dim, attention_dim, rank, n_features=4 if position_bias else 0)
        self.window = local_window
        self.local = LocalPosition(query_dim, attention_dim) if local_window > 0 else None

    def precompute(self, keys: Tensor) -> Tensor:
        return self.score.precompute(keys)

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        pre: Tensor,
        pad_mask: Tensor,
        source_len: Tensor,
        target_pos: Tensor | None = None,
        target_len: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        features = None
        if self.position_bias:
            if target_pos is None or target_len is None:
                raise ValueError("position bias needs target positions and lengths")
            features = position_features(target_pos, keys.size(1), target_len, source_len)
        energies = self.score.energies(query, pre, features)
        if self.local is None:
            context, alpha = attend(energies, keys, pad_mask, self.normalizer)
        else:
            context, alpha = local_attend(energies, keys, pad_mask, self.local(query, source_len), self.window, self.normalizer)
        if self.hard == "none" or (self.hard == "decode" and self.training):
            return context, alpha
        alpha = harden(alpha, straight_through=self.training)
        return _weighted_sum(alpha, keys), alpha
