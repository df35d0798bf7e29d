"""Tests for syntaxnmt.model.normalizers: softmax, sparsemax, entmax15 and hard attention, and
their use in the Transformer's cross-attention and the RNN's attention."""

from __future__ import annotations

import pytest
import torch

from syntaxnmt.config import ModelConfig, load_config
from syntaxnmt.errors import UserError
from syntaxnmt.model.attention import MultiHeadAttention
from syntaxnmt.model.normalizers import attention_weights, harden, normalize
from syntaxnmt.model.rnn_scores import Attention

SPARSE = ["sparsemax", "entmax15"]


@pytest.mark.parametrize("kind", SPARSE)
def test_sparse_rows_sum_to_one_and_contain_exact_zeros(kind):
    torch.manual_seed(0)
    scores = torch.randn(4, 3, 9) * 3
    mask = torch.zeros(4, 1, 9, dtype=torch.bool)
    mask[1, :, 6:] = True
    w = normalize(scores, kind, mask)
    assert torch.allclose(w.sum(-1), torch.ones(4, 3), atol=1e-5)
    assert (w >= 0).all()
    assert (w == 0).any(dim=-1).all()  # every row has exact zeros at these score ranges
    assert (w[1, :, 6:] == 0).all()
    assert (normalize(scores, "softmax", mask) > 0).sum() > (w > 0).sum()


def test_sparsemax_is_the_projection_onto_the_simplex():
    """z = (1, 1.5, 0): τ = (1.5 + 1 - 1) / 2 = 0.75, p = max(z - τ, 0) = (0.25, 0.75, 0)."""
    assert torch.allclose(normalize(torch.tensor([1.0, 1.5, 0.0]), "sparsemax"), torch.tensor([0.25, 0.75, 0.0]))
    assert torch.equal(normalize(torch.tensor([1.0, 2.5, 0.0]), "sparsemax"), torch.tensor([0.0, 1.0, 0.0]))


def test_entmax15_lies_between_softmax_and_sparsemax():
    z = torch.tensor([2.0, 1.0, 0.2, -1.0])
    support = {k: int((normalize(z, k) > 0).sum()) for k in ("softmax", "entmax15", "sparsemax")}
    assert support["softmax"] == 4 and support["sparsemax"] <= support["entmax15"] < 4


def test_unknown_normalizer():
    with pytest.raises(ValueError, match="sparsemax"):
        normalize(torch.zeros(3), "cosine")
    with pytest.raises(UserError, match="attention_normalizer"):
        load_config(None, {"model": {"attention_normalizer": "cosine"}})


def test_hard_weights_and_straight_through_gradients():
    scores = torch.tensor([[0.3, 2.0, 1.0]], requires_grad=True)
    target = torch.tensor([[1.0, -2.0, 3.0]])
    soft = torch.softmax(scores, -1)
    (soft * target).sum().backward()
    soft_grad = scores.grad.clone()
    scores.grad = None
    hard = harden(torch.softmax(scores, -1), straight_through=True)
    assert torch.equal(hard.detach(), torch.tensor([[0.0, 1.0, 0.0]]))
    (hard * target).sum().backward()
    assert torch.allclose(scores.grad, soft_grad)
    assert not harden(torch.softmax(scores, -1), straight_through=False).requires_grad


@pytest.mark.parametrize("mode,training,expect_hard", [("none", False, False), ("decode", True, False), ("decode", False, True), ("train", True, True), ("train", False, True)])
def test_hard_modes(mode, training, expect_hard):
    scores = torch.tensor([[0.1, 0.4, 0.2]])
    w = attention_weights(scores, None, "softmax", mode, training)
    assert torch.equal(w.detach() == 1, torch.tensor([[False, True, False]])) == expect_hard


@pytest.mark.parametrize("kind", SPARSE)
def test_multi_head_cross_attention_with_a_sparse_normalizer(kind):
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 2, normalizer=kind).eval()
    q, kv = torch.randn(2, 3, 16) * 4, torch.randn(2, 7, 16) * 4
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 5:] = True
    out, w = mha(q, kv, key_padding_mask=pad, need_weights=True)
    assert torch.allclose(w.sum(-1), torch.ones(2, 2, 3), atol=1e-5) and (w[0, :, :, 5:] == 0).all()
    assert (w == 0).sum() > 2 * 2 * 3 * 2  # zeros beyond the padding
    out_again, _ = mha(q, kv, key_padding_mask=pad)  # no weights requested: same path, same output
    assert torch.allclose(out, out_again, atol=1e-6)
    v = mha._split(mha.v_proj(kv))
    expected = mha.out_proj(torch.matmul(w, v).transpose(1, 2).reshape(2, 3, 16))
    assert torch.allclose(out, expected, atol=1e-5)


def test_rnn_attention_sparse_and_hard():
    torch.manual_seed(2)
    keys, query = torch.randn(3, 6, 8) * 3, torch.randn(3, 5) * 3
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[2, 4:] = True
    lengths = (~pad).sum(1)
    sparse = Attention("general", 5, 8, normalizer="sparsemax").eval()
    ctx, alpha = sparse(query, keys, sparse.precompute(keys), pad, lengths)
    assert torch.allclose(alpha.sum(-1), torch.ones(3), atol=1e-5) and (alpha == 0).any() and (alpha[2, 4:] == 0).all()
    hard = Attention("general", 5, 8, hard="train")
    hard.load_state_dict(sparse.state_dict())
    hard.train()
    ctx, alpha = hard(query, keys, hard.precompute(keys), pad, lengths)
    assert torch.equal((alpha.detach() == 1).sum(-1), torch.ones(3, dtype=torch.long))
    assert torch.allclose(ctx, keys[torch.arange(3), alpha.detach().argmax(-1)], atol=1e-6)  # the context is the chosen h_j
    ctx.sum().backward()
    assert hard.score.W.weight.grad.abs().sum() > 0  # straight-through: the score still learns


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
@pytest.mark.parametrize("kind,hard", [("entmax15", "none"), ("sparsemax", "train"), ("softmax", "decode")])
def test_models_train_and_decode_with_sparse_or_hard_attention(arch, kind, hard):
    from syntaxnmt.data.batches import make_batch
    from syntaxnmt.decoding.search import beam_search
    from syntaxnmt.model import build_model

    cfg = ModelConfig(arch=arch, d_model=16, heads=2, ffn_dim=32, enc_layers=1, dec_layers=1, dropout=0.0, attention_normalizer=kind, hard_attention=hard, rnn={"hidden": 12, "attention_dim": 8})
    torch.manual_seed(3)
    model = build_model(cfg, 20, 20)
    batch = make_batch([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14, 15]], [0, 1])
    out = model(batch, need_weights=True)
    out.logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        w = model(batch, need_weights=True).cross_attention[-1]
    if hard != "none":
        assert torch.equal((w == 1).sum(-1), torch.ones(w.shape[:-1], dtype=torch.long))
    elif kind != "softmax":
        assert (w == 0).any()
    hyps = beam_search(model, batch, beam=2, max_len=5, coverage_penalty=0.2)
    assert len(hyps) == 2


def test_the_config_allows_exactly_the_registered_normalizers():
    from syntaxnmt.config import NORMALIZER_NAMES, ModelConfig
    from syntaxnmt.model.normalizers import NORMALIZERS

    assert set(NORMALIZER_NAMES) == set(NORMALIZERS)
    for name in NORMALIZERS:
        assert ModelConfig(attention_normalizer=name).attention_normalizer == name
