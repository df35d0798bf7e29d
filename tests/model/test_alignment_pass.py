"""The supervised alignment attention built into the Transformer: the full-context pass (Garg et
al. 2019) and the leak slot (Mask-Align), for pre- and post-norm decoders."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syntaxnmt.config import load_config
from syntaxnmt.data.batches import make_batch
from syntaxnmt.model import build_model
from syntaxnmt.model.transformer import Transformer

V = 40


def _config(norm: str = "pre", dec_layers: int = 3, **alignment):
    tree = {
        "data": {"train_src": "s", "train_tgt": "t", "dev_src": "s", "dev_tgt": "t", "train_align": "a", "max_len": 60},
        "model": {"d_model": 32, "heads": 4, "ffn_dim": 64, "enc_layers": 2, "dec_layers": dec_layers, "dropout": 0.1, "max_positions": 64, "norm": norm},
        "train": {"alignment": {"guided_weight": 1.0, "layer": -2, "head": 1, **alignment}},
    }
    return load_config(None, tree)


def _model(seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    return build_model(_config(**kw), V, V).eval()


def _batch(src_lens=(7, 3, 5), tgt_lens=(4, 8, 1), seed=0):
    rng = np.random.default_rng(seed)
    return make_batch([rng.integers(4, V, n) for n in src_lens], [rng.integers(4, V, n) for n in tgt_lens], range(len(src_lens)))


def _unmasked_cross_attention(model: Transformer, batch, layer: int) -> torch.Tensor:
    """The cross-attention of decoder ``layer`` when its self-attention has no causal mask (the
    layers below unchanged): the same model run with that one mask lifted."""
    attn = model.decoder[layer].self_attn
    original = attn.forward

    def unmasked(query, key_value=None, **kw):
        kw["causal"] = False
        kw["key_padding_mask"] = batch.tgt_in.eq(0)
        return original(query, key_value, **kw)

    attn.forward = unmasked
    try:
        return model(batch, need_weights=True).cross_attention[layer]
    finally:
        del attn.forward


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_full_context_pass_is_the_supervised_layer_without_the_causal_mask(norm):
    model = _model(norm=norm, full_context=True)
    # layer -2 of 3 decoder blocks is block 1 in pre- and post-norm models alike
    assert model.alignment_pass.layer == 1
    batch = _batch()
    out = model(batch, need_weights=True)
    assert out.alignment_attention.shape == out.cross_attention[1].shape
    assert torch.allclose(out.alignment_attention, _unmasked_cross_attention(model, batch, 1), atol=1e-6)
    assert not torch.allclose(out.alignment_attention, out.cross_attention[1], atol=1e-3)
    # Row t sees the target after t: changing a later token changes it, not the causal pass's row.
    changed = _batch()
    changed.tgt_in[0, 3] = (changed.tgt_in[0, 3] + 1 - 4) % (V - 4) + 4
    again = model(changed, need_weights=True)
    assert not torch.allclose(again.alignment_attention[0, :, 1], out.alignment_attention[0, :, 1], atol=1e-4)
    assert torch.allclose(again.cross_attention[1][0, :, 1], out.cross_attention[1][0, :, 1], atol=1e-6)
    # Target padding stays hidden: each sentence's rows are those of the sentence alone.
    for i in range(3):
        alone = model(make_batch([batch.src[i][batch.src[i].ne(0)][:-1].numpy()], [batch.tgt_out[i][batch.tgt_out[i].ne(0)][:-1].numpy()], [0]), need_weights=True)
        t, s = alone.alignment_attention.shape[2:]
        assert torch.allclose(out.alignment_attention[i, :, :t, :s], alone.alignment_attention[0], atol=1e-5)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_full_context_leaves_translation_unchanged(norm):
    plain = _model(seed=3, norm=norm)
    assert plain.alignment_pass is None
    full = _model(seed=3, norm=norm, full_context=True, leaky=True)
    full.load_state_dict(plain.state_dict(), strict=False)  # the leak slot is the only extra weight
    assert {k for k in full.state_dict()} - set(plain.state_dict()) == {"decoder.1.cross_attn.leak.key", "decoder.1.cross_attn.leak.value"}
    batch = _batch(seed=5)
    a, b = plain(batch, need_weights=True), full(batch, need_weights=True)
    assert torch.equal(a.logits, b.logits)
    assert all(torch.equal(x, y) for x, y in zip(a.cross_attention, b.cross_attention))
    assert a.alignment_attention is None and b.alignment_attention is not None
    # Without the request for weights (translation, plain training) the extra pass is not run.
    assert full(batch).alignment_attention is None
    state = full.init_state(full.encode(batch))
    log_probs, _ = full.step(batch.tgt_in[:, 0], state)
    assert torch.allclose(log_probs, torch.log_softmax(a.logits[:, 0].float(), -1), atol=1e-5)


def test_leak_slot_on_the_supervised_head():
    model = _model(seed=4, leaky=True)
    batch = _batch(seed=6)
    out = model(batch, need_weights=True)
    w, leak = out.cross_attention[1], out.alignment_leak
    assert leak.shape == w.shape[:3]
    # Head 1 gives the leak a share; its real weights and the leak sum to 1; other heads have no leak.
    assert torch.all(leak[:, 1] > 0) and torch.all(leak[:, [0, 2, 3]] == 0)
    assert torch.allclose(w.sum(-1) + leak, torch.ones_like(leak), atol=1e-5)
    assert torch.all(w.masked_select(batch.src_pad_mask[:, None, None, :].expand_as(w)) == 0)
    assert torch.allclose(out.cross_attention[0].sum(-1), torch.ones_like(leak), atol=1e-5)
    # The leak's value enters the output: a non-zero value changes the translation.
    with torch.no_grad():
        model.decoder[1].cross_attn.leak.value.normal_()
    assert not torch.allclose(model(batch).logits, out.logits, atol=1e-4)


def test_leak_in_translation_decodes_step_by_step_like_forward():
    model = _model(seed=5, leaky=True, head="average")
    with torch.no_grad():
        model.decoder[1].cross_attn.leak.value.normal_()
    batch = _batch(src_lens=(6, 2, 9), tgt_lens=(5, 9, 2), seed=3)
    out = model(batch, need_weights=True)
    assert torch.all(out.alignment_leak > 0)  # every head of the layer
    full = torch.log_softmax(out.logits, dim=-1)
    state = model.init_state(model.encode(batch))
    for t in range(batch.tgt_in.size(1)):
        log_probs, state = model.step(batch.tgt_in[:, t], state, need_weights=True)
        assert torch.allclose(log_probs, full[:, t], atol=1e-5), t
        assert state.last_cross_attention.shape == batch.src.shape


@pytest.mark.parametrize(
    "alignment, fragment",
    [
        ({"full_context": True, "layer": "average"}, "set train.alignment.layer"),
        ({"leaky": True, "guided_weight": 0.0}, "guided_weight > 0"),
        ({"full_context": True, "layer": 3}, "layer 3 out of range"),
    ],
)
def test_config_checks(alignment, fragment):
    from syntaxnmt.errors import UserError

    with pytest.raises(UserError, match=fragment):
        _config(**alignment)


def test_config_refuses_leak_with_sparse_attention_and_the_rnn():
    from syntaxnmt.errors import UserError

    tree = _config().model_dump(mode="json")
    tree["train"]["alignment"]["leaky"] = True
    with pytest.raises(UserError, match="softmax"):
        load_config(None, {**tree, "model": {**tree["model"], "attention_normalizer": "sparsemax"}})
    tree["train"]["alignment"].update(layer=0, head=0)
    with pytest.raises(UserError, match="model.arch transformer"):
        load_config(None, {**tree, "model": {**tree["model"], "arch": "rnn"}})


# ---------------------------------------------------------------- the forced pass of alignment readers


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("alignment", [{"guided_weight": 0.0}, {}, {"full_context": True}, {"full_context": True, "leaky": True}, {"leaky": True}], ids=["plain", "guided", "full-context", "full-context-leaky", "leaky"])
def test_forced_attention_is_the_full_pass_cut_short(norm, alignment):
    """``Transformer.forced_attention`` returns, bit for bit, the attention of the whole forward
    pass for every layer it is asked for (and the full-context pass), and runs no block above
    the deepest one needed: no feed-forward block of that layer or above, no output layer."""
    model = _model(seed=7, norm=norm, **alignment)
    if alignment.get("leaky"):
        with torch.no_grad():  # a leak that changes the states above the supervised layer
            model.decoder[1].cross_attn.leak.value.normal_()
    ap = model.alignment_pass
    batch = _batch(src_lens=(6, 2, 9), tgt_lens=(5, 9, 2), seed=8)
    with torch.no_grad():
        full = model(batch, need_weights=True, self_weights=False)
    calls: list[str] = []
    hooks = [model.decoder[i].ffn.register_forward_hook(lambda *_a, i=i: calls.append(f"ffn {i}")) for i in range(3)]
    hooks.append(model.output.register_forward_hook(lambda *_a: calls.append("output")))
    try:
        for layers, full_context in (([0], False), ([1], False), ([-1], False), ([0, 2], False), ([0, 1, 2], False), ([], True), ([2], True)):
            calls.clear()
            with torch.no_grad():
                got = model.forced_attention(batch, layers, full_context)
            wanted = {i % 3 for i in layers}
            for i in range(3):
                if i in wanted or (ap is not None and ap.leaky and not ap.full_context and i == ap.layer):
                    assert torch.equal(got.cross_attention[i], full.cross_attention[i]), (layers, i)
                else:
                    assert got.cross_attention[i] is None
            if full_context and ap is not None and ap.full_context:
                assert torch.equal(got.alignment_attention, full.alignment_attention)
            elif not (ap is not None and ap.full_context and ap.leaky):
                assert got.alignment_attention is None
            if full.alignment_leak is None:
                assert got.alignment_leak is None
            else:  # the reading renormalizes by it
                assert torch.equal(got.alignment_leak, full.alignment_leak)
            deepest = max(wanted | ({ap.layer} if ap is not None and (ap.leaky or (ap.full_context and full_context)) else set()), default=-1)
            assert calls == [f"ffn {i}" for i in range(deepest)], (layers, full_context)
    finally:
        for h in hooks:
            h.remove()
    # An encoder output given (a source shared by several targets, encoded once) changes nothing.
    with torch.no_grad():
        again = model.forced_attention(batch, [0, 1, 2], True, enc=model.encode(batch))
    assert all(torch.equal(a, b) for a, b in zip(again.cross_attention, full.cross_attention))


def test_the_forced_pass_reads_a_residual_form_of_its_own():
    """A residual block whose sublayer reads something else (a `Residual` subclass overriding
    `sublayer_input`): the forced attention is still that of the whole forward pass (to rounding:
    the forced pass computes fewer rows at once); it asks the block what its sublayer reads
    instead of assuming the paper's norm."""
    from syntaxnmt.model.transformer import Residual

    class Scaled(Residual):
        def sublayer_input(self, x):
            return 2.0 * self.norm(x)

    model = _model(seed=5, norm="pre")
    for layer in model.decoder:
        layer.res_cross.__class__ = Scaled
    batch = _batch(seed=4)
    with torch.no_grad():
        full = model(batch, need_weights=True)
        forced = model.forced_attention(batch, [0, 1], False)
        plain = _model(seed=5, norm="pre")(batch, need_weights=True)
    for i in (0, 1):
        assert torch.allclose(forced.cross_attention[i], full.cross_attention[i], atol=1e-6)
    assert not torch.allclose(full.cross_attention[1], plain.cross_attention[1], atol=1e-4)  # the form of its own changed them
