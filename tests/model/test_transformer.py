"""Tests for syntaxnmt.model.transformer: causal masking, padding invariance, incremental decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syntaxnmt.config import ModelConfig, load_config
from syntaxnmt.data.batches import make_batch
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, PAD
from syntaxnmt.model import build_model
from syntaxnmt.model.attention import AttentionExtension
from syntaxnmt.model.transformer import Transformer, sinusoidal_table

V = 40
VARIANTS = [
    dict(norm="pre", positions="sinusoidal", tie_embeddings="decoder"),
    dict(norm="post", positions="learned", tie_embeddings="none", activation="gelu"),
    dict(norm="pre", positions="learned", tie_embeddings="all"),
]


def _model(seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(**{**dict(d_model=32, heads=4, ffn_dim=64, enc_layers=2, dec_layers=2, dropout=0.1, max_positions=64), **kw})
    return Transformer(cfg, V, V).eval()


def _seqs(lengths, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(4, V, n) for n in lengths]


def _batch(src_lens=(7, 3, 5), tgt_lens=(4, 8, 1), seed=0):
    return make_batch(_seqs(src_lens, seed), _seqs(tgt_lens, seed + 100), range(len(src_lens)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_decoder_cannot_see_the_future(variant):
    model = _model(**variant)
    batch = _batch(tgt_lens=(8, 8, 8))
    base = model(batch).logits
    for j in (1, 4, 8):
        changed = make_batch([s for s in _seqs((7, 3, 5), 0)], _seqs((8, 8, 8), 100), range(3))
        changed.tgt_in[:, j:] = torch.randint(4, V, changed.tgt_in[:, j:].shape, generator=torch.Generator().manual_seed(j))
        assert not torch.equal(changed.tgt_in, batch.tgt_in)
        logits = model(changed).logits
        assert torch.allclose(logits[:, :j], base[:, :j], atol=1e-6)
        assert not torch.allclose(logits[:, j:], base[:, j:], atol=1e-3)


@pytest.mark.parametrize("variant", VARIANTS)
def test_padded_batch_equals_sentences_alone(variant):
    model = _model(seed=1, **variant)
    src_lens, tgt_lens = (9, 2, 5, 1), (3, 10, 6, 1)
    srcs, tgts = _seqs(src_lens, 1), _seqs(tgt_lens, 2)
    batch = make_batch(srcs, tgts, range(4))
    out = model(batch, need_weights=True)
    for i in range(4):
        alone = model(make_batch([srcs[i]], [tgts[i]], [i]), need_weights=True)
        t = tgt_lens[i] + 1
        assert torch.allclose(out.logits[i, :t], alone.logits[0], atol=1e-5)
        s = src_lens[i] + 1
        assert torch.allclose(out.encoder.hidden[i, :s], alone.encoder.hidden[0], atol=1e-5)
        for w_batch, w_alone in zip(out.cross_attention, alone.cross_attention):
            assert torch.allclose(w_batch[i, :, :t, :s], w_alone[0], atol=1e-5)


def test_attention_weights_are_zero_on_source_padding():
    model = _model(seed=2)
    batch = _batch()
    out = model(batch, need_weights=True)
    mask = batch.src_pad_mask
    assert len(out.encoder.self_attention) == 2 and len(out.cross_attention) == 2
    for w in out.encoder.self_attention + out.cross_attention:
        assert torch.all(w.masked_select(mask[:, None, None, :].expand_as(w)) == 0)
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5)
    # Without the request no weights are returned, and the output is the same (fused path).
    plain = model(batch)
    assert plain.cross_attention == [] and plain.encoder.self_attention == []
    assert torch.allclose(plain.logits, out.logits, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_step_equals_full_forward(variant):
    model = _model(seed=3, **variant)
    batch = _batch(src_lens=(6, 2, 9), tgt_lens=(5, 9, 2), seed=3)
    full = torch.log_softmax(model(batch).logits, dim=-1)
    state = model.init_state(model.encode(batch))
    for t in range(batch.tgt_in.size(1)):
        log_probs, state = model.step(batch.tgt_in[:, t], state, need_weights=True)
        assert torch.allclose(log_probs, full[:, t], atol=1e-5), t
        att = state.last_cross_attention
        assert att.shape == batch.src.shape
        assert torch.all(att[batch.src_pad_mask] == 0)
    assert state.step == batch.tgt_in.size(1)


def test_reorder_state_equals_decoding_the_reordered_batch():
    model = _model(seed=4)
    batch = _batch(seed=4)
    index = torch.tensor([2, 0, 0, 1])
    state = model.init_state(model.encode(batch))
    for t in range(2):
        _, state = model.step(batch.tgt_in[:, t], state)
    state = model.reorder_state(state, index)

    reordered = make_batch(
        [batch.src[i][batch.src[i] != PAD][:-1].numpy() for i in index],
        [batch.tgt_out[i][batch.tgt_out[i] != PAD][:-1].numpy() for i in index],
        index.tolist(),
    )
    ref_state = model.init_state(model.encode(reordered))
    for t in range(2):
        _, ref_state = model.step(batch.tgt_in[index, t], ref_state)
    for t in range(2, 4):
        tokens = batch.tgt_in[index, t]
        a, state = model.step(tokens, state)
        b, ref_state = model.step(tokens, ref_state)
        assert torch.allclose(a, b, atol=1e-5)


def test_identity_extension_on_the_encoder_changes_nothing():
    model = _model(seed=5)
    batch = _batch(seed=5)
    before = model(batch).logits
    for layer in model.encoder:
        layer.self_attn.extensions.append(AttentionExtension())
    after = model(batch).logits
    assert torch.allclose(before, after, atol=1e-5)


def test_tied_embeddings():
    decoder_tied = _model(tie_embeddings="decoder")
    assert decoder_tied.output.weight is decoder_tied.tgt_embed.tokens.weight
    assert decoder_tied.src_embed.tokens is not decoder_tied.tgt_embed.tokens
    all_tied = _model(tie_embeddings="all")
    assert all_tied.src_embed.tokens is all_tied.tgt_embed.tokens
    assert all_tied.output.weight is all_tied.tgt_embed.tokens.weight
    untied = _model(tie_embeddings="none")
    assert untied.output.weight is not untied.tgt_embed.tokens.weight
    with pytest.raises(ValueError):
        Transformer(ModelConfig(d_model=32, heads=4, tie_embeddings="all"), V, V + 1)


def test_padding_embedding_is_zero_and_dropout_only_in_training():
    model = _model(seed=6, tie_embeddings="none")
    assert torch.all(model.src_embed.tokens.weight[PAD] == 0)
    batch = _batch(seed=6)
    assert torch.equal(model(batch).logits, model(batch).logits)  # eval: deterministic
    model.train()
    assert not torch.allclose(model(batch).logits, model(batch).logits)


def test_sinusoidal_table():
    table = sinusoidal_table(50, 8)
    assert table.shape == (50, 8)
    assert torch.allclose(table[0, 0::2], torch.zeros(4)) and torch.allclose(table[0, 1::2], torch.ones(4))
    pos, i = 7, 1
    assert table[pos, 2 * i].item() == pytest.approx(np.sin(pos / 10000 ** (2 * i / 8)), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(np.cos(pos / 10000 ** (2 * i / 8)), abs=1e-6)


def test_step_starts_from_bos_like_forward():
    model = _model(seed=7)
    batch = _batch(seed=7)
    state = model.init_state(model.encode(batch))
    first, _ = model.step(torch.full((3,), BOS), state)
    assert torch.allclose(first.exp().sum(-1), torch.ones(3), atol=1e-5)
    assert torch.allclose(first, torch.log_softmax(model(batch).logits[:, 0], -1), atol=1e-5)


@pytest.mark.parametrize("model, key", [({"ffn_dim": 10**12}, "model.ffn_dim 1000000000000"), ({"arch": "rnn", "rnn": {"hidden": 10**9}}, "model.rnn.hidden 1000000000")])
def test_a_model_too_large_to_allocate_is_a_user_error_naming_its_sizes(model, key):
    """An absurd size failed with PyTorch's allocation traceback (issue 25)."""
    with pytest.raises(UserError, match=r"the model of this config cannot be allocated \(one tensor needs [\d,.]+ GiB\): .*" + key.replace(".", r"\.")):
        build_model(load_config(None, {"model": model}), 200, 200)
