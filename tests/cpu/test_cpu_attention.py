"""The CPU's attention (syntaxnmt.cpu.attention): the C kernels of whole sequences against a
float64 reference, through MultiHeadAttention and a training step; the kernels on rows and the
native decoding step against the plain model's attention."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from syntaxnmt.cpu import attention as native_attention
from syntaxnmt.cpu import install
from syntaxnmt.cpu.attention import CPU_ATTENTION, _CrossState, _SelfState, rows_attention, rows_usable
from syntaxnmt.cpu.machine import native_kernels, set_native_training
from syntaxnmt.cpu.packing import Place
from syntaxnmt.model.attention import MultiHeadAttention, defer_reorder, reorder_cache

pytestmark = pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")


def reference(q, k, v, pad, causal):
    """softmax(q k^T / sqrt(d) + mask) v in float64; a query with no key left gets zeros."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    masked = torch.zeros(s.shape, dtype=torch.bool)
    if causal:
        masked = masked | torch.ones(s.size(-2), s.size(-1), dtype=torch.bool).triu(1)
    if pad is not None:
        masked = masked | pad[:, None, None, :]
    weights = s.masked_fill(masked, float("-inf")).softmax(-1).nan_to_num(0.0)
    return weights @ v


def heads(x: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, H * d) -> the (B, H, T, d) view MultiHeadAttention makes of a projection."""
    b, t, e = x.shape
    return x.view(b, t, h, e // h).transpose(1, 2)


def run(fn, q, k, v, pad, causal, grad, dtype):
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    out = fn(*(heads(t, 4) for t in leaves), pad, causal)
    out.backward(heads(grad.to(dtype), 4))
    return [out.double(), *(t.grad.double() for t in leaves)]


@pytest.mark.parametrize("b, tq, tk, d, causal, padded", [
    (5, 7, 9, 64, False, True),   # cross-attention lengths, padded keys
    (4, 12, 12, 64, True, False),  # the decoder's self-attention
    (3, 10, 10, 64, True, True),   # causal and padded
    (6, 13, 11, 24, False, True),  # d not a multiple of 32
    (2, 5, 5, 8, True, False),     # fewer keys than one vector
    (2, 33, 33, 128, False, True),
])
def test_values_and_gradients_equal_the_reference(b, tq, tk, d, causal, padded):
    g = torch.Generator().manual_seed(tq * 100 + tk)
    q, grad = (torch.randn(b, tq, 4 * d, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(b, tk, 4 * d, generator=g, dtype=torch.float64) for _ in range(2))
    pad = None
    if padded:
        pad = torch.zeros(b, tk, dtype=torch.bool)
        pad[0, tk - 2:] = True
        pad[1, 1:] = True  # one key left
    want = run(reference, q, k, v, pad, causal, grad, torch.float64)
    got = run(native_attention.attention, q, k, v, pad, causal, grad, torch.float32)
    for name, a, w in zip(("output", "dq", "dk", "dv"), got, want):
        assert torch.allclose(a, w, atol=2e-5, rtol=1e-4), (name, (a - w).abs().max().item())


def test_a_query_without_keys_gets_zeros_and_no_gradient():
    q, k, v = (torch.randn(2, 4, 3, 16, requires_grad=True) for _ in range(3))
    pad = torch.tensor([[True, True, True], [False, True, True]])
    out = native_attention.attention(q, k, v, pad)
    assert torch.equal(out[0], torch.zeros(4, 3, 16))
    out.sum().backward()
    assert torch.equal(q.grad[0], torch.zeros(4, 3, 16)) and torch.equal(k.grad[0], torch.zeros(4, 3, 16))
    assert torch.equal(k.grad[1, :, 1:], torch.zeros(4, 2, 16))  # padded keys get nothing
    assert torch.allclose(out[1], v[1, :, :1].expand(4, 3, 16))  # the one key left takes all the weight


def test_the_thread_count_does_not_change_a_bit():
    g = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(64, 4, 12, 64, generator=g) for _ in range(4))
    results = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            out = native_attention.attention(*leaves, causal=True)
            out.backward(grad)
            results.append([out, *(t.grad for t in leaves)])
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


def test_multi_head_attention_trains_the_same_with_either_kernel():
    torch.manual_seed(0)
    attn = install(MultiHeadAttention(64, 4).train())  # the CPU kernel, its native kernels on and off
    x, mem = torch.randn(3, 9, 64), torch.randn(3, 7, 64)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[2, 4:] = True
    results = []
    try:
        for on in (True, False):
            set_native_training(on)
            attn.zero_grad()
            self_out, _ = attn(x, causal=True)
            cross_out, _ = attn(x, mem, key_padding_mask=pad)
            (self_out.square().sum() + cross_out.square().sum()).backward()
            results.append([self_out.detach(), cross_out.detach(), *(p.grad.clone() for p in attn.parameters())])
    finally:
        set_native_training(True)
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_when_the_native_path_is_taken():
    q, k = torch.randn(2, 4, 10, 64), torch.randn(2, 4, 12, 64)
    assert native_attention.usable(q, k, 0.0, False)
    assert not native_attention.usable(q, k, 0.1, False)  # attention dropout: PyTorch's kernel
    assert not native_attention.usable(q, k, 0.0, True)  # causal over unequal lengths
    assert not native_attention.usable(q.double(), k.double(), 0.0, False)
    assert not native_attention.usable(torch.randn(2, 4, 10, 12), torch.randn(2, 4, 10, 12), 0.0, False)  # d % 8
    long = torch.randn(1, 4, native_attention.MAX_LENGTH + 1, 64)
    assert not native_attention.usable(long, long, 0.0, True)
    try:
        set_native_training(False)
        assert not native_attention.usable(q, k, 0.0, False)
    finally:
        set_native_training(True)


def test_bad_arguments_are_refused():
    q = torch.randn(2, 4, 5, 16)
    with pytest.raises(ValueError, match="key_padding_mask"):
        native_attention.attention(q, q, q, torch.zeros(2, 4, dtype=torch.bool))
    kernels = native_kernels()
    view = (q.data_ptr(), *q.stride()[:3])
    with pytest.raises(ValueError, match="multiple of 8"):
        kernels.attention_forward(view, view, view, view, 0, 0, 0, 2, 4, 5, 5, 12, False, 1.0)


def test_a_nan_reaches_the_output_as_in_pytorchs_kernel():
    """Diverged weights must show in the loss (training stops on a NaN dev loss): a NaN score
    makes its row NaN instead of being dropped by the softmax's maximum."""
    q, k, v = (torch.randn(2, 4, 5, 16) for _ in range(3))
    k[1, 0, 2, 0] = float("nan")
    out = native_attention.attention(q, k, v, causal=True)
    assert out[1, 0, 2:].isnan().all() and not out[1, 0, :2].isnan().any()  # causal: rows 0-1 never see key 2
    assert not out[0].isnan().any() and not out[1, 1:].isnan().any()


@pytest.mark.parametrize("cross,packed", [(False, False), (True, False), (False, True), (True, True)])
def test_the_kernels_on_rows_equal_the_plain_attention(cross, packed, monkeypatch):
    """In CPU training the plain attention runs in the kernels on rows (the projections of the
    rows, read and written through row maps): same output and gradients (of the input, of every
    weight and bias) as the plain model's attention, with padding, a causal mask, and on packed
    rows (:func:`rows_attention` of a memory on its real rows)."""
    from syntaxnmt.cpu.packing import gather_rows, packed_rows

    torch.manual_seed(0)
    x, memory = torch.randn(3, 9, 32), torch.randn(3, 6, 32)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[1, 4:] = pad[2, 2:] = True
    grad = torch.randn(3, 9, 32)
    kv_rows = packed_rows(pad, 8)
    results, calls = [], []
    kernel = native_attention.packed_attention
    monkeypatch.setattr(native_attention, "packed_attention", lambda q, k, v, places, *a: calls.append(k.size(0)) or kernel(q, k, v, places, *a))
    for fast in (True, False):
        torch.manual_seed(1)
        mha = MultiHeadAttention(32, 4).train()
        if fast:  # else the plain model's attention and PyTorch's kernel
            install(mha)
        leaves = [x.clone().requires_grad_(), memory.clone().requires_grad_()]
        if fast and packed:
            placed = (gather_rows(leaves[1], kv_rows), Place(kv_rows, 3, 6)) if cross else (None, None)
            out = rows_attention(mha, leaves[0].reshape(-1, 32), Place(None, 3, 9), pad if cross else None, not cross, *placed).view(3, 9, 32)
        elif cross:
            out, _ = mha(leaves[0], leaves[1], key_padding_mask=pad)
        else:
            out, _ = mha(leaves[0], causal=True)
        assert calls == [(kv_rows.numel() if packed else 18) if cross else 27]  # the keys' rows, in the first run only
        out.backward(grad)
        results.append([out.detach(), leaves[0].grad, *(leaves[1].grad for _ in [0] if cross), *(p.grad for p in mha.parameters())])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cross", [False, True])
def test_packed_rows_give_the_values_of_the_placed_layout_bit_for_bit(cross):
    """The kernels read packed rows through a row map: output and gradients are exactly those of
    placing the rows in (B, T, ...) with zeros at the positions without a row, attending there,
    and gathering the query rows back (what training did before), including rows that are
    padding topped up into the packed set and positions left out."""
    from syntaxnmt.cpu.packing import gather_rows, packed_rows, scatter_rows

    torch.manual_seed(0)
    b, t, s, heads, d = 3, 7, 5, 4, 16
    tgt_pad, src_pad = torch.zeros(b, t, dtype=torch.bool), torch.zeros(b, s, dtype=torch.bool)
    tgt_pad[1, 4:] = tgt_pad[2, 2:] = src_pad[0, 3:] = src_pad[2, 1:] = True
    rows, memory_rows = packed_rows(tgt_pad, 4), packed_rows(src_pad, 4)
    assert rows is not None and memory_rows is not None and rows.numel() < b * t and memory_rows.numel() < b * s
    like, memory_like = torch.empty(b, t, 1), torch.empty(b, s, 1)
    if cross:
        kv, kv_layout, pad, causal = (memory_rows, Place(memory_rows, b, s)), (memory_rows, memory_like), src_pad, False
    else:
        kv, kv_layout, pad, causal = (rows, Place(rows, b, t)), (rows, like), None, True
    sources = [torch.randn(rows.numel(), heads * d), torch.randn(kv[0].numel(), heads * d), torch.randn(kv[0].numel(), heads * d)]
    layouts = [(rows, like), kv_layout, kv_layout]
    grad = torch.randn(rows.numel(), heads * d)
    results = []
    for packed in (True, False):
        leaves = [x.clone().requires_grad_() for x in sources]
        if packed:
            out = native_attention.packed_attention(*leaves, (Place(rows, b, t), kv[1]), heads, pad, causal)
        else:
            placed = [scatter_rows(x, r, lk) for x, (r, lk) in zip(leaves, layouts)]
            q, k, v = (x.view(b, x.size(1), heads, d).transpose(1, 2) for x in placed)
            full = native_attention.attention(q, k, v, pad, causal)
            out = gather_rows(full.transpose(1, 2).reshape(b, t, heads * d), rows)
        out.backward(grad)
        results.append([out.detach(), *(x.grad for x in leaves)])
    for got, want in zip(*results):
        assert torch.equal(got, want)


def test_packed_attention_refuses_what_the_kernels_cannot_read_and_autocast_keeps_pytorch():
    """A bf16 projection (CPU autocast) must never reach the float32 kernels (it crashed the process)."""
    with pytest.raises(ValueError, match="float32 CPU"):
        native_attention.packed_attention(*(torch.randn(10, 32).bfloat16() for _ in range(3)), (Place(None, 2, 5),) * 2, 4)
    mha = install(MultiHeadAttention(32, 4).train())
    x = torch.randn(2, 5, 32)
    assert rows_usable(mha, x, None, True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not rows_usable(mha, x, None, True)
        out, _ = mha(x, causal=True)
    assert out.dtype == torch.bfloat16


needs_kernels = pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")


@needs_kernels
@pytest.mark.parametrize("d_model,heads", [(32, 4), (24, 2), (20, 4)])  # d_head 8 and 12 (vector path), 5 (scalar path)
def test_native_steps_equal_the_explicit_steps_through_beam_reorders(d_model, heads):
    """Self- and cross-attention stepped in the C kernels (an ancestry table and per-sentence
    key/value blocks) give the outputs of the explicit path (copied caches), step after step,
    through reorders within sentences, an expansion and a sentence leaving (with padding)."""
    torch.manual_seed(d_model + heads)
    self_attn, cross_attn = MultiHeadAttention(d_model, heads).eval(), MultiHeadAttention(d_model, heads).eval()
    fast_self, fast_cross = copy.deepcopy(self_attn), copy.deepcopy(cross_attn)
    fast_self.kernel = fast_cross.kernel = CPU_ATTENTION
    memory = torch.randn(3, 6, d_model)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[1, 4:] = pad[2, 2:] = True
    plain = [{}, {}]
    fast = [{"native": True}, {"native": True}]
    rows = torch.arange(3)  # sentence of each row
    reorders = [torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([1, 0, 2, 3, 5, 5]), torch.tensor([0, 1, 1, 2, 3]), torch.tensor([4, 4, 0, 2, 1])]
    with torch.no_grad():
        for step in range(5):
            y = torch.randn(len(rows), 1, d_model)
            outs = []
            for (s_cache, c_cache), (sa, ca) in zip((plain, fast), ((self_attn, cross_attn), (fast_self, fast_cross))):
                h, _ = sa(y, causal=True, cache=s_cache)
                h, _ = ca(h, memory[rows], key_padding_mask=pad[rows], cache=c_cache, static_kv=True)
                outs.append(h)
            torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
            if step < len(reorders):
                index = reorders[step]
                for s_cache, c_cache in (plain, fast):
                    defer_reorder(s_cache, index)
                    reorder_cache(c_cache, index)
                rows = rows[index]
    assert isinstance(fast[0]["kernel"], _SelfState) and isinstance(fast[1]["kernel"], _CrossState) and fast[1]["kernel"].k.size(0) == 3  # never copied per row


@needs_kernels
def test_a_native_state_refuses_what_it_cannot_compute():
    attn = MultiHeadAttention(16, 2).eval()
    attn.kernel = CPU_ATTENTION
    with torch.no_grad(), pytest.raises(ValueError, match="one float32 CPU query per row"):
        attn(torch.randn(2, 3, 16), causal=True, cache={"native": True})
    kernels = native_kernels()
    with pytest.raises(IndexError, match="not one of the N blocks"):  # a row map pointing outside the blocks
        k = torch.zeros(1, 2, 3, 8)
        kernels.cross_attention(k.data_ptr(), 2, 2, 8, 1, 3, k.data_ptr(), k.data_ptr(), torch.tensor([0, 1]).data_ptr(), 0, torch.empty(2, 2, 8).data_ptr(), 1.0)
