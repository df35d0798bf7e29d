"""syntaxnmt.cpu.install: a model built by hand runs PyTorch's modules; installed, the CPU's
execution computes what they compute (same parameters and state-dict keys)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from syntaxnmt.config import ModelConfig
from syntaxnmt.cpu import install
from syntaxnmt.cpu.attention import CpuAttention
from syntaxnmt.cpu.dropout import Dropout
from syntaxnmt.cpu.linear import Linear
from syntaxnmt.cpu.stack import FusedFeedForward, FusedResidual, PackedStacks
from syntaxnmt.data.batches import make_batch
from syntaxnmt.decoding.search import beam_search
from syntaxnmt.inputs import PAD
from syntaxnmt.model.attention import AttentionKernel, MultiHeadAttention
from syntaxnmt.model.transformer import FeedForward, Residual, StackRunner, Transformer

V = 50


def _model(**kw) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(**{**dict(d_model=32, heads=4, ffn_dim=64, enc_layers=2, dec_layers=2, dropout=0.0, max_positions=64), **kw})
    return Transformer(cfg, V, V)


def _batch(n: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, V, int(rng.integers(2, 14))) for _ in range(n)]
    tgt = [rng.integers(4, V, int(rng.integers(2, 14))) for _ in range(n)]
    return make_batch(src, tgt, range(n))


def test_a_model_built_by_hand_runs_pytorchs_modules():
    model = _model()
    kinds = {type(m) for m in model.modules()}
    assert nn.Linear in kinds and nn.Dropout in kinds and not kinds & {Linear, Dropout, FusedFeedForward, FusedResidual}
    assert type(model.stacks) is StackRunner and not hasattr(model, "native_attention")
    assert all(type(m.kernel) is AttentionKernel for m in model.modules() if isinstance(m, MultiHeadAttention))


def test_install_replaces_the_execution_and_keeps_the_parameters():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert install(model) is model
    assert dict(model.state_dict()).keys() == before.keys() and all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    kinds = {type(m) for m in model.modules()}
    assert not kinds & {nn.Linear, nn.Dropout, FeedForward, Residual}
    assert type(model.output) is Linear and isinstance(model.stacks, PackedStacks)
    assert all(isinstance(m.kernel, CpuAttention) for m in model.modules() if isinstance(m, MultiHeadAttention))
    stacks = model.stacks
    install(model)  # twice: nothing changes
    assert model.stacks is stacks and type(model.output) is Linear


def test_a_model_on_another_device_keeps_pytorchs_modules():
    model = _model().to("meta")
    install(model)
    assert type(model.stacks) is StackRunner and type(model.output) is nn.Linear


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_installed_model_computes_what_pytorchs_modules_compute(norm):
    """Training (no dropout) gives the same states at the real positions and the same gradients;
    beam search gives the same translations with the same scores (float rounding apart)."""
    plain = _model(norm=norm)
    fast = install(copy.deepcopy(plain))
    fast.stacks.pack_granule = 8  # this small batch packed
    batch = _batch()
    real = batch.tgt_out.ne(PAD)
    found = []
    for model in (plain, fast):
        model.train()
        out = model(batch)
        (out.states[real] ** 2).sum().backward()
        found.append((out.states[real].detach(), [p.grad for p in model.parameters()]))
    assert fast(batch).real is not None  # the packed stacks ran
    torch.testing.assert_close(found[1][0], found[0][0], rtol=1e-5, atol=1e-5)
    for a, b in zip(found[0][1], found[1][1]):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)  # float32 rounding of other products
    with torch.no_grad():
        hyps = [beam_search(model.eval(), _batch(seed=1), 4, 20, min_len=3) for model in (plain, fast)]
    assert [h[0].tokens for h in hyps[0]] == [h[0].tokens for h in hyps[1]]
    np.testing.assert_allclose([h[0].score for h in hyps[1]], [h[0].score for h in hyps[0]], rtol=1e-5, atol=1e-5)
