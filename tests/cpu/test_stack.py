"""The CPU's stack runner and fused blocks (syntaxnmt.cpu.stack): CPU training on the real rows
only, its states packed between the layers, and the fused dropout kernels of the blocks, give
what the plain model's layers give one by one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syntaxnmt.config import ModelConfig
from syntaxnmt.cpu import install
from syntaxnmt.cpu import stack as cpu_stack
from syntaxnmt.cpu.machine import native_training_kernels
from syntaxnmt.cpu.packing import packed_rows
from syntaxnmt.cpu.stack import embedded_rows
from syntaxnmt.data.batches import make_batch
from syntaxnmt.inputs import PAD
from syntaxnmt.model.transformer import Residual, Transformer

V = 40


def _model(seed: int = 0, **kw) -> Transformer:
    """An installed model (the CPU's execution)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(**{**dict(d_model=32, heads=4, ffn_dim=64, enc_layers=2, dec_layers=2, dropout=0.1, max_positions=64), **kw})
    return install(Transformer(cfg, V, V).eval())


def _seqs(lengths, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(4, V, n) for n in lengths]


def _batch(src_lens=(7, 3, 5), tgt_lens=(4, 8, 1), seed=0):
    return make_batch(_seqs(src_lens, seed), _seqs(tgt_lens, seed + 100), range(len(src_lens)))


@pytest.mark.parametrize("norm,need_weights", [("pre", False), ("post", False), ("pre", True)])
def test_training_on_packed_rows_equals_every_row(norm, need_weights, monkeypatch):
    """CPU training computes the layers on the non-padding rows only (topped up to a multiple of
    the granule): same states at every real position, same gradients. With the native kernels and
    no weights asked for, the stacks' states stay packed between their layers; asked for weights,
    the layers run one by one on every row."""
    calls = []
    run = cpu_stack._run
    monkeypatch.setattr(cpu_stack, "_run", lambda x, blocks, per_layer, *a: calls.append(per_layer) or run(x, blocks, per_layer, *a))
    batch = _batch(src_lens=(9, 3, 5, 2), tgt_lens=(4, 10, 1, 6))
    results = []
    for granule in (0, 8):
        model = _model(dropout=0.0, norm=norm).train()
        model.stacks.pack_granule = granule
        assert granule or model(batch).real is None
        rows = model.stacks.rows
        assert (rows(model, batch.src_pad_mask) is None) == (granule == 0) and (rows(model, batch.tgt_in.eq(PAD)) is None) == (granule == 0)
        out = model(batch, need_weights=need_weights)
        real = batch.tgt_out.ne(PAD)
        (out.states[real] ** 2).sum().backward()
        src = ~out.encoder.pad_mask
        results.append((out.states[real].detach(), out.encoder.hidden[src].detach(), [x[src].detach() for x in out.encoder.layers], [p.grad for p in model.parameters()]))
    through = native_training_kernels() is not None and not need_weights
    assert calls == ([2, 3] if through else [])  # the encoder's stack (2 blocks a layer), the decoder's (3), in the run with a granule
    if through:  # the loss's rows come without a placement: the states at the real positions, in order
        assert torch.equal(out.real[0], batch.tgt_in.ne(PAD)) and torch.equal(out.real[1], out.states[out.real[0]])
    else:
        assert out.real is None
    (s0, e0, l0, g0), (s1, e1, l1, g1) = results
    torch.testing.assert_close(s1, s0)
    torch.testing.assert_close(e1, e0)
    torch.testing.assert_close(l1, l0)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a)


class _ScaledResidual(Residual):
    """A residual form of a researcher's own: ``x + 0.5 * dropout(f(norm(x)))`` (pre-norm)."""

    def forward(self, x, f):
        y, aux = f(self.norm(x) if self.pre else x)
        x = x + 0.5 * self.dropout(y)
        return (x if self.pre else self.norm(x)), aux


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_a_residual_form_of_its_own_is_computed_by_its_own_forward_on_the_cpu(norm):
    """A Residual subclass written in the model (the one place a new residual form touches) keeps its
    forward under :func:`install`: the CPU's packed stacks (and, pre-norm, the fused chain they would
    otherwise run) give the states and gradients the uninstalled model gives, and those differ from the
    paper's residual."""
    batch = _batch(src_lens=(9, 3, 5, 2), tgt_lens=(4, 10, 1, 6))

    def run(installed: bool, own: bool):
        torch.manual_seed(0)
        cfg = ModelConfig(d_model=32, heads=4, ffn_dim=64, enc_layers=2, dec_layers=2, dropout=0.0, max_positions=64, norm=norm)
        model = Transformer(cfg, V, V)
        if own:
            for layer in [*model.encoder, *model.decoder]:
                for name in ("res_attn", "res_self", "res_cross", "res_ffn"):
                    if hasattr(layer, name):
                        getattr(layer, name).__class__ = _ScaledResidual
        if installed:
            install(model)
            model.stacks.pack_granule = 8
        model.train()
        out = model(batch)
        real = batch.tgt_out.ne(PAD)
        (out.states[real] ** 2).sum().backward()
        return out.states[real].detach(), [p.grad for p in model.parameters()]

    plain, ours = run(False, True), run(True, True)
    torch.testing.assert_close(ours[0], plain[0])
    for a, b in zip(plain[1], ours[1]):
        torch.testing.assert_close(b, a)
    assert not torch.allclose(run(True, False)[0], plain[0], atol=1e-3)  # the paper's residual gives other states


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "none"])
def test_embeddings_of_packed_rows_are_those_rows_of_the_batch_embeddings(positions):
    """embedded_rows embeds only the given positions (their tokens and their positions in the
    sentence), as the rows of the whole batch's embeddings, and the gradient reaches the same
    embedding rows."""
    model = _model(positions=positions)
    batch = _batch(src_lens=(9, 3, 5))
    rows = packed_rows(batch.src_pad_mask, 4)
    embed = model.src_embed
    whole = embed(batch.src).reshape(-1, 32)[rows]
    part = embedded_rows(embed, batch.src, rows)
    torch.testing.assert_close(part, whole)
    part.sum().backward()
    g_rows = embed.tokens.weight.grad.clone()
    embed.zero_grad()
    whole.sum().backward()
    torch.testing.assert_close(g_rows, embed.tokens.weight.grad)


def test_the_pre_norm_chain_with_fused_residual_norms_is_the_layers_one_by_one(monkeypatch):
    """Training with dropout on packed states: each residual connection and the next norm in one
    pass of the C kernel (the stacks' final norms included) give the states, the per-layer states
    and the gradients of the layers run one by one with the separate operators, under the same seed."""
    from syntaxnmt.cpu import dropout as dropout_module

    if native_training_kernels() is None:
        pytest.skip("the fused kernel needs the native training kernels")
    batch = _batch(src_lens=(9, 3, 5, 2), tgt_lens=(4, 10, 1, 6))
    found, kinds = [], []
    apply = dropout_module._NativeAddNorm.apply
    monkeypatch.setattr(dropout_module._NativeAddNorm, "apply", lambda *a: kinds.append(len(found)) or apply(*a))
    def unfused(residual, y, p, training, norm=None):  # the separate operators, the same masks
        x = residual + dropout_module.dropout(y, p, training)
        return x if norm is None else (x, norm(x))

    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(cpu_stack, "dropout_add_norm", unfused)
            monkeypatch.setattr(cpu_stack, "dropout_add", unfused)
            monkeypatch.setattr(cpu_stack, "fuses_bias", lambda *a: False)
        model = _model(d_model=64, ffn_dim=128, dropout=0.2).train()
        model.stacks.pack_granule = 8
        torch.manual_seed(11)
        out = model(batch)
        real = batch.tgt_out.ne(PAD)
        (out.states[real] ** 2).sum().backward()
        found.append((out.states[real].detach(), [x.detach() for x in out.encoder.layers], [p.grad for p in model.parameters()]))
    assert kinds == [0] * (2 * 2 + 2 * 3)  # every block of both stacks (2 layers each) fused, and only in the fused run
    (s0, l0, g0), (s1, l1, g1) = found
    torch.testing.assert_close(s0, s1)
    torch.testing.assert_close(l0, l1)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # float32 rounding through 10 blocks; a wrong mask or norm is off by O(1)


@pytest.mark.parametrize("kernels, multiple", [("onednn", 128), ("aten", 8), ("openblas", 8)])
def test_packed_rows_are_topped_up_to_the_granule_of_the_kernels(kernels, multiple, monkeypatch):
    from syntaxnmt.cpu import linear as lin

    monkeypatch.setattr(lin, "ONEDNN", kernels == "onednn")
    monkeypatch.setattr(lin, "OPENBLAS", kernels == "openblas")
    model = _model().train()
    pad = torch.ones(30, 20, dtype=torch.bool)
    pad[:, :5] = False  # 150 real positions of 600
    rows = model.stacks.rows(model, pad)
    assert rows.numel() == -(-150 // multiple) * multiple
    assert model.stacks.rows(model.eval(), pad) is None


@pytest.mark.skipif(native_training_kernels() is None, reason="the native kernels are not built for this CPU")
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_training_with_the_fused_dropout_kernels_equals_the_separate_operators(norm, monkeypatch):
    """With dropout on, CPU training runs bias + ReLU + dropout of each FFN and every residual's
    dropout + add in one kernel pass each: same states under the same seed, same gradients."""
    from syntaxnmt.cpu import dropout as drop

    tr = cpu_stack
    batch = _batch(src_lens=(9, 3, 5, 2), tgt_lens=(4, 10, 1, 6))
    calls = []
    fused = tr.bias_relu_dropout
    monkeypatch.setattr(tr, "bias_relu_dropout", lambda *a: calls.append("ffn") or fused(*a))
    results = []
    for plain in (False, True):
        if plain:
            monkeypatch.setattr(tr, "fuses_bias", lambda *a: False)
            monkeypatch.setattr(tr, "dropout_add", lambda r, y, p, training: r + drop.dropout(y, p, training))
        model = _model(norm=norm).train()
        torch.manual_seed(11)
        out = model(batch)
        (out.states ** 2).sum().backward()
        results.append((out.states.detach(), [p.grad for p in model.parameters()]))
    assert calls.count("ffn") == 4  # every FFN of the fused run, none of the plain one
    (s0, g0), (s1, g1) = results
    torch.testing.assert_close(s1, s0)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a)


@pytest.mark.skipif(native_training_kernels() is None, reason="the native kernels are not built for this CPU")
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_a_target_that_fills_its_shape_still_reads_the_sources_packed_rows(norm, monkeypatch):
    """Issue 48: a batch whose target has no padding to leave out (``packed_rows`` None) runs the
    decoder's stack on every target row, and its cross-attentions still project keys and values
    on the source's packed rows only (the layers one by one project every source row, padding
    included, as the code of issue 48 did for such batches); the same states and gradients."""
    from syntaxnmt.cpu import attention as cpu_attention

    batch = _batch(src_lens=(9, 3, 5, 2), tgt_lens=(6, 6, 6, 6))
    src_rows = packed_rows(batch.src_pad_mask, 8)
    assert packed_rows(batch.tgt_in.eq(PAD), 8) is None and src_rows.numel() < batch.src.numel()
    kv_rows, calls = [], []
    kernel, run = cpu_attention.packed_attention, cpu_stack._run
    monkeypatch.setattr(cpu_attention, "packed_attention", lambda q, k, v, places, *a: (places[1] is not places[0] and kv_rows.append(k.size(0))) or kernel(q, k, v, places, *a))  # a cross-attention's keys
    monkeypatch.setattr(cpu_stack, "_run", lambda x, blocks, per_layer, *a: calls.append((per_layer, x.size(0))) or run(x, blocks, per_layer, *a))
    results = []
    for granule in (0, 8):
        kv_rows.clear()
        model = _model(dropout=0.0, norm=norm).train()
        model.stacks.pack_granule = granule
        out = model(batch)
        real = batch.tgt_out.ne(PAD)
        (out.states[real] ** 2).sum().backward()
        results.append((out.states[real].detach(), [p.grad for p in model.parameters()]))
    assert kv_rows == [src_rows.numel()] * 2 and out.real is None  # each decoder layer's keys and values: the source's packed rows
    assert calls == [(2, src_rows.numel()), (3, batch.tgt_in.numel())]  # both stacks packed through, the decoder's on every row
    (s0, g0), (s1, g1) = results
    torch.testing.assert_close(s1, s0)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a)
