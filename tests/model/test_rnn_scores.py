"""Attention score functions, normalization, position bias and local-p attention against their formulas."""

from __future__ import annotations

import math

import pytest
import torch

from syntaxnmt.model.rnn_scores import Attention, DotScore, GeneralScore, LocalPosition, LowRankBilinearScore, MLPScore, ScaledDotScore, attend, build_score, local_attend, position_features


def _set(linear: torch.nn.Linear, weight) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))


S_QUERY = torch.tensor([[1.0, 2.0]])  # (N=1, d=2)
KEYS = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]]])  # (1, S=3, 2)


def test_dot_is_the_inner_product():
    e = DotScore(2, 2)(S_QUERY, KEYS)
    assert torch.equal(e, torch.tensor([[1.0, 2.0, -1.0]]))


def test_scaled_dot_divides_by_sqrt_d():
    e = ScaledDotScore(2, 2)(S_QUERY, KEYS)
    assert torch.allclose(e, torch.tensor([[1.0, 2.0, -1.0]]) / math.sqrt(2))


def test_dot_and_scaled_dot_are_parameter_free_and_need_one_size():
    """The lecture's dot product has no parameters and needs equal sizes: no hidden query projection
    (which made `dot` the `general` score's bilinear form)."""
    for cls in (DotScore, ScaledDotScore):
        assert list(cls(4, 4).parameters()) == []
        with pytest.raises(ValueError, match=r"no parameters: it needs queries and keys of one size \(got 3 and 2\)"):
            cls(3, 2)
    assert list(GeneralScore(3, 2).parameters())  # the bilinear form is `general`


def test_general_is_bilinear():
    score = GeneralScore(2, 2)
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    _set(score.W, w)
    e = score(S_QUERY, KEYS)
    expected = torch.tensor([[float(S_QUERY[0] @ w @ KEYS[0, j]) for j in range(3)]])
    assert torch.allclose(e, expected)
    assert torch.allclose(e, torch.tensor([[7.0, 10.0, -3.0]]))


def test_general_with_different_query_and_key_sizes():
    torch.manual_seed(0)
    score = GeneralScore(3, 4)
    q, k = torch.randn(2, 3), torch.randn(2, 5, 4)
    w = score.W.weight  # (d_q, d_k)
    expected = torch.einsum("nq,qk,nsk->ns", q, w, k)
    assert torch.allclose(score(q, k), expected, atol=1e-6)


def test_lowrank_bilinear_factorizes_w():
    score = LowRankBilinearScore(2, 2, rank=1)
    _set(score.U, [[1.0, 1.0]])
    _set(score.V, [[2.0, -1.0]])
    e = score(S_QUERY, KEYS)
    # (U s) = 3, (V h_j) = 2, -1, 3
    assert torch.allclose(e, torch.tensor([[6.0, -3.0, 9.0]]))
    w = score.U.weight.T @ score.V.weight  # the bilinear W it stands for
    assert torch.linalg.matrix_rank(w) == 1
    assert torch.allclose(e, torch.stack([S_QUERY[0] @ w @ KEYS[0, j] for j in range(3)])[None])


def test_mlp_is_additive():
    score = MLPScore(2, 2, attention_dim=2)
    w1, w2, v = [[1.0, 0.0], [0.0, -1.0]], [[0.5, 0.0], [0.0, 0.5]], [[2.0, 1.0]]
    _set(score.W1, w1)
    _set(score.W2, w2)
    _set(score.v, v)
    e = score(S_QUERY, KEYS)
    expected = []
    for j in range(3):
        h = KEYS[0, j].tolist()
        s = S_QUERY[0].tolist()
        pre = [sum(w1[a][b] * h[b] for b in range(2)) + sum(w2[a][b] * s[b] for b in range(2)) for a in range(2)]
        expected.append(sum(v[0][a] * math.tanh(pre[a]) for a in range(2)))
    assert torch.allclose(e, torch.tensor([expected]), atol=1e-6)
    # the keys projection W_1 h_j is what gets cached
    assert torch.allclose(score.precompute(KEYS), KEYS @ torch.tensor(w1).T)
    assert all(m.bias is None for m in (score.W1, score.W2, score.v))


def test_mlp_position_bias_enters_the_tanh():
    torch.manual_seed(0)
    score = MLPScore(2, 2, attention_dim=3, n_features=4)
    feats = position_features(torch.tensor([1.0]), 3, torch.tensor([4.0]), torch.tensor([3.0]))  # (1, 3, 4)
    e = score(S_QUERY, KEYS, feats)
    hidden = KEYS[0] @ score.W1.weight.T + S_QUERY[0] @ score.W2.weight.T + feats[0] @ score.W3.weight.T
    assert torch.allclose(e[0], torch.tanh(hidden) @ score.v.weight[0], atol=1e-6)
    with pytest.raises(ValueError):
        score(S_QUERY, KEYS)  # built for features: they must be given
    with pytest.raises(ValueError):
        MLPScore(2, 2, 3)(S_QUERY, KEYS, feats)


@pytest.mark.parametrize("name", ["dot", "scaled_dot", "general", "bilinear_lowrank", "mlp"])
def test_time_dimension_and_cache_agree_with_single_queries(name):
    torch.manual_seed(0)
    d_q = 4 if name in ("dot", "scaled_dot") else 3  # the dot scores need one size
    score = build_score(name, d_q, 4, attention_dim=5, rank=2)
    q, k = torch.randn(2, 6, d_q), torch.randn(2, 5, 4)
    pre = score.precompute(k)
    all_t = score.energies(q, pre)
    assert all_t.shape == (2, 6, 5)
    for t in range(6):
        assert torch.allclose(all_t[:, t], score(q[:, t], k), atol=1e-6)


def test_build_score_rejects_unknown_names_and_features_outside_mlp():
    with pytest.raises(ValueError):
        build_score("cosine", 2, 2)
    with pytest.raises(ValueError):
        build_score("dot", 2, 2, n_features=4)


def test_attend_softmax_over_non_padding():
    energies = torch.tensor([[0.0, math.log(2.0), 5.0]])
    pad = torch.tensor([[False, False, True]])
    values = torch.tensor([[[3.0, 0.0], [0.0, 3.0], [100.0, 100.0]]])
    context, alpha = attend(energies, values, pad)
    assert torch.allclose(alpha, torch.tensor([[1 / 3, 2 / 3, 0.0]]))
    assert alpha[0, 2].item() == 0.0  # exactly
    assert torch.allclose(context, torch.tensor([[1.0, 2.0]]))


def test_attend_with_time_dimension_zero_at_padding():
    torch.manual_seed(0)
    energies = torch.randn(2, 4, 5)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    values = torch.randn(2, 5, 3)
    context, alpha = attend(energies, values, pad)
    assert torch.all(alpha[1, :, 3:] == 0)
    assert torch.allclose(alpha.sum(-1), torch.ones(2, 4))
    assert torch.allclose(context, torch.einsum("nts,nsd->ntd", alpha, values), atol=1e-6)


def test_position_features():
    f = position_features(torch.tensor([0.0, 2.0]), 3, torch.tensor([5.0, 7.0]), torch.tensor([3.0, 2.0]))
    assert f.shape == (2, 3, 4)
    assert torch.allclose(f[1, 2], torch.tensor([math.log(3), math.log(3), math.log(8), math.log(3)]))
    assert torch.allclose(f[0, :, 1], torch.log1p(torch.arange(3.0)))
    assert torch.all(f[0, :, 0] == 0)
    ft = position_features(torch.arange(4.0).expand(2, 4), 3, torch.tensor([5.0, 7.0]), torch.tensor([3.0, 2.0]))
    assert ft.shape == (2, 4, 3, 4)
    assert torch.allclose(ft[:, 2], position_features(torch.full((2,), 2.0), 3, torch.tensor([5.0, 7.0]), torch.tensor([3.0, 2.0])))


def test_local_position_formula():
    pos = LocalPosition(2, 2)
    _set(pos.W_p, [[1.0, 0.0], [0.0, 1.0]])
    _set(pos.v_p, [[1.0, -1.0]])
    q = torch.tensor([[0.5, 0.2], [0.5, 0.2]])
    p = pos(q, torch.tensor([4.0, 10.0]))
    sig = 1 / (1 + math.exp(-(math.tanh(0.5) - math.tanh(0.2))))
    assert torch.allclose(p, torch.tensor([4 * sig, 10 * sig]))


def test_local_attention_vanishes_outside_the_window():
    torch.manual_seed(0)
    n, s, d, window = 2, 12, 3, 2
    energies = torch.randn(n, s)
    values = torch.randn(n, s, d)
    pad = torch.zeros(n, s, dtype=torch.bool)
    pad[1, 9:] = True
    p = torch.tensor([5.3, 8.6])
    context, alpha = local_attend(energies, values, pad, p, window)
    j = torch.arange(s, dtype=torch.float32)
    for row in range(n):
        inside = ((j - p[row]).abs() <= window) & ~pad[row]
        assert torch.all(alpha[row][~inside] == 0)  # exactly
        align = torch.softmax(energies[row][inside], -1)
        gauss = torch.exp(-((j[inside] - p[row]) ** 2) / (2 * (window / 2) ** 2))
        assert torch.allclose(alpha[row][inside], align * gauss, atol=1e-6)
    assert torch.nonzero(alpha[0]).view(-1).tolist() == [4, 5, 6, 7]
    assert torch.nonzero(alpha[1]).view(-1).tolist() == [7, 8]  # 9, 10 are padding
    assert torch.allclose(context, torch.einsum("ns,nsd->nd", alpha, values), atol=1e-6)


def test_attention_module_local_window_with_time_dimension():
    torch.manual_seed(0)
    att = Attention("general", 4, 6, attention_dim=5, local_window=1)
    keys = torch.randn(2, 7, 6)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 4:] = True
    src_len = (~pad).sum(1)
    q = torch.randn(2, 3, 4)
    context, alpha = att(q, keys, att.precompute(keys), pad, src_len)
    p = att.local(q, src_len)
    assert torch.all((p > 0) & (p < src_len[:, None]))
    outside = (torch.arange(7.0) - p[..., None]).abs() > 1
    assert torch.all(alpha[outside] == 0) and torch.all(alpha[0, :, 4:] == 0)
    for t in range(3):  # one step at a time gives the same weights
        _, alpha_t = att(q[:, t], keys, att.precompute(keys), pad, src_len)
        assert torch.allclose(alpha_t, alpha[:, t], atol=1e-6)


def test_attention_module_position_bias_needs_positions():
    torch.manual_seed(0)
    att = Attention("mlp", 4, 6, attention_dim=5, position_bias=True)
    keys = torch.randn(2, 3, 6)
    pad = torch.zeros(2, 3, dtype=torch.bool)
    src_len = torch.tensor([3, 3])
    with pytest.raises(ValueError):
        att(torch.randn(2, 4), keys, att.precompute(keys), pad, src_len)
    q = torch.randn(2, 4)
    _, a1 = att(q, keys, att.precompute(keys), pad, src_len, torch.tensor([0.0, 0.0]), torch.tensor([3, 3]))
    _, a2 = att(q, keys, att.precompute(keys), pad, src_len, torch.tensor([4.0, 4.0]), torch.tensor([3, 3]))
    assert not torch.allclose(a1, a2)  # the target position moves the attention


def test_the_config_allows_exactly_the_registered_scores():
    from syntaxnmt.config import SCORE_NAMES, RNNConfig
    from syntaxnmt.model.rnn_scores import SCORES

    assert set(SCORE_NAMES) == set(SCORES)
    for name in SCORES:
        assert RNNConfig(score=name, dec_hidden="annotations").score == name
        assert isinstance(build_score(name, 6, 6, attention_dim=4, rank=2), torch.nn.Module)
