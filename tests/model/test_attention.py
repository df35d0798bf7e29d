"""Tests for syntaxnmt.model.attention: masks, the fused and explicit paths, extensions, the cache."""

from __future__ import annotations

import math

import pytest
import torch

from syntaxnmt.inputs import SourceFeatures
from syntaxnmt.model.attention import AttentionExtension, MultiHeadAttention, reorder_cache

D, H = 16, 4


def _mha(seed: int = 0, extensions=(), dropout: float = 0.0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(D, H, dropout=dropout, extensions=extensions).eval()


def _inputs(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 6, D, generator=g)
    mem = torch.randn(3, 5, D, generator=g)
    # sentence 0: no padding; 1: two padded keys; 2: four padded keys
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] + [True] * 4])
    return x, mem, mask


def test_padding_gets_exactly_zero_weight():
    mha = _mha()
    x, mem, mask = _inputs()
    out, w = mha(x, mem, key_padding_mask=mask, need_weights=True)
    assert w.shape == (3, H, 6, 5)
    assert torch.all(w.masked_select(mask[:, None, None, :].expand_as(w)) == 0)
    assert torch.allclose(w.sum(-1), torch.ones(3, H, 6))
    assert torch.all(w[:, :, :, 0] > 0)  # unmasked keys do get weight


def test_padding_values_do_not_matter():
    mha = _mha()
    x, mem, mask = _inputs()
    garbage = mem.clone()
    garbage[mask] = torch.randn(int(mask.sum()), D) * 100
    for need_weights in (False, True):
        a, _ = mha(x, mem, key_padding_mask=mask, need_weights=need_weights)
        b, _ = mha(x, garbage, key_padding_mask=mask, need_weights=need_weights)
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_fused_path_equals_explicit_path(causal, masked):
    mha = _mha(dropout=0.3)  # dropout must be off in eval mode on both paths
    x, _, _ = _inputs()
    mask = torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [False] * 2 + [True] * 4]) if masked else None
    fused, none = mha(x, key_padding_mask=mask, causal=causal)
    explicit, w = mha(x, key_padding_mask=mask, causal=causal, need_weights=True)
    assert none is None and w is not None
    assert torch.allclose(fused, explicit, atol=1e-6)
    if causal:
        future = torch.ones(6, 6, dtype=torch.bool).triu(1)
        assert torch.all(w[:, :, future] == 0)


def test_causal_self_attention_ignores_the_future():
    mha = _mha()
    x, _, _ = _inputs()
    changed = x.clone()
    changed[:, 4:] = torch.randn(3, 2, D)
    for need_weights in (False, True):
        a, _ = mha(x, causal=True, need_weights=need_weights)
        b, _ = mha(changed, causal=True, need_weights=need_weights)
        assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
        assert not torch.allclose(a[:, 4:], b[:, 4:], atol=1e-3)


def test_identity_extension_changes_nothing():
    plain = _mha(seed=3)
    extended = _mha(seed=3, extensions=[AttentionExtension(), AttentionExtension()])
    x, mem, mask = _inputs()
    a, _ = plain(x, mem, key_padding_mask=mask)  # fused path
    b, wb = extended(x, mem, key_padding_mask=mask)  # explicit path (extensions present)
    assert wb is not None  # the explicit path ran
    assert torch.allclose(a, b, atol=1e-6)
    c, _ = plain(x, causal=True)
    d, _ = extended(x, causal=True)
    assert torch.allclose(c, d, atol=1e-6)


class _Recorder(AttentionExtension):
    """Checks the hook shapes and that the source features are passed through."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def queries_keys(self, q, k, features):
        self.seen["qk"] = (q.shape, k.shape, features.upos)
        return q, k

    def scores(self, scores, q, features):
        self.seen["scores"] = scores.shape
        return scores

    def values(self, out, weights, features):
        self.seen["values"] = (out.shape, weights.shape)
        return out


def test_extension_hooks_get_shapes_and_features():
    rec = _Recorder()
    mha = _mha(extensions=[rec])
    x, mem, mask = _inputs()
    tags = torch.ones(3, 5, dtype=torch.long)
    mha(x, mem, key_padding_mask=mask, features=SourceFeatures(upos=tags))
    d = D // H
    assert rec.seen["qk"][:2] == ((3, H, 6, d), (3, H, 5, d)) and rec.seen["qk"][2] is tags
    assert rec.seen["scores"] == (3, H, 6, 5)
    assert rec.seen["values"] == ((3, H, 6, d), (3, H, 6, 5))


def test_score_extension_is_applied_before_the_mask():
    class Boost(AttentionExtension):  # a huge bonus for the last key, which is padding in row 1
        def scores(self, scores, q, features):
            scores = scores.clone()
            scores[..., -1] += 1e4
            return scores

    mha = _mha(extensions=[Boost()])
    x, mem, mask = _inputs()
    _, w = mha(x, mem, key_padding_mask=mask, need_weights=True)
    assert torch.all(w[0, :, :, -1] > 0.99)  # row 0 has no padding: the bonus wins
    assert torch.all(w[1, :, :, -1] == 0)  # row 1: the key is padding, still zero weight


def test_hand_computed_single_head_attention():
    mha = MultiHeadAttention(3, 1).eval()
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.weight.copy_(torch.eye(3))
            proj.bias.zero_()
    x = [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0]]

    expected = []
    for qi in x:
        energies = [sum(a * b for a, b in zip(qi, kj)) / math.sqrt(3) for kj in x]
        exps = [math.exp(e) for e in energies]
        weights = [e / sum(exps) for e in exps]
        expected.append([sum(w * vj[c] for w, vj in zip(weights, x)) for c in range(3)])

    tensor = torch.tensor([x])
    for need_weights in (False, True):
        out, _ = mha(tensor, need_weights=need_weights)
        assert torch.allclose(out[0], torch.tensor(expected), atol=1e-6)

    # Masking the last key renormalizes over the first two.
    out, w = mha(tensor, key_padding_mask=torch.tensor([[False, False, True]]), need_weights=True)
    e = [[sum(a * b for a, b in zip(qi, kj)) / math.sqrt(3) for kj in x[:2]] for qi in x]
    w_expected = [[math.exp(v) / sum(math.exp(u) for u in row) for v in row] + [0.0] for row in e]
    assert torch.allclose(w[0, 0], torch.tensor(w_expected), atol=1e-6)


def test_incremental_self_attention_with_cache_equals_full():
    mha = _mha(seed=5)
    x, _, _ = _inputs()
    full, _ = mha(x, causal=True)
    cache: dict = {}
    steps = [mha(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(x.size(1))]
    assert cache["k"].shape == (3, H, 6, D // H)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_several_new_positions_after_a_cache_equal_full(need_weights):
    """Queries after a cache are the newest positions: both paths hide the keys after each one
    (the fused path used to align them with the first keys instead)."""
    mha = _mha(seed=5)
    x, _, _ = _inputs()
    full, _ = mha(x, causal=True)
    cache: dict = {}
    first, _ = mha(x[:, :4], causal=True, cache=cache, need_weights=need_weights)
    rest, _ = mha(x[:, 4:], causal=True, cache=cache, need_weights=need_weights)
    assert torch.allclose(torch.cat([first, rest], dim=1), full, atol=1e-5)


def test_static_cross_attention_cache_is_computed_once():
    mha = _mha(seed=6)
    x, mem, mask = _inputs()
    cache: dict = {}
    first, _ = mha(x[:, :1], mem, key_padding_mask=mask, cache=cache, static_kv=True)
    k = cache["k"]
    # The memory argument is ignored once cached: the cached projections are reused.
    second, _ = mha(x[:, 1:2], torch.zeros_like(mem), key_padding_mask=mask, cache=cache, static_kv=True)
    assert cache["k"] is k
    full, _ = mha(x[:, :2], mem, key_padding_mask=mask)
    assert torch.allclose(torch.cat([first, second], 1), full, atol=1e-6)


def test_reorder_cache_selects_rows():
    cache = {"k": torch.arange(3.0)[:, None].expand(3, 4).clone(), "v": torch.arange(3.0)[:, None, None].expand(3, 2, 2).clone()}
    reorder_cache(cache, torch.tensor([2, 2, 0]))
    assert cache["k"][:, 0].tolist() == [2.0, 2.0, 0.0]
    assert cache["v"][:, 0, 0].tolist() == [2.0, 2.0, 0.0]


def test_dropout_is_active_in_training_mode_only():
    mha = MultiHeadAttention(D, H, dropout=0.5)
    x, _, _ = _inputs()
    mha.train()
    torch.manual_seed(0)
    a, _ = mha(x, need_weights=True)
    torch.manual_seed(1)
    b, _ = mha(x, need_weights=True)
    assert not torch.allclose(a, b)
    mha.eval()
    assert torch.allclose(mha(x)[0], mha(x, need_weights=True)[0], atol=1e-6)
