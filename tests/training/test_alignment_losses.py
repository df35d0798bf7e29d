"""Tests for attention losses (syntaxnmt.training.alignment): formulas on tiny tensors, gradients, masks."""

from __future__ import annotations

import math

import pytest
import torch

from syntaxnmt.data.links import alignment_targets, normalize_alignment
from syntaxnmt.decoding.search import coverage_score as coverage_penalty
from syntaxnmt.errors import UserError
from syntaxnmt.model.heads import Fertility
from syntaxnmt.training.alignment import coverage_loss, decay, guided_alignment_loss, trace_bonus


def _softmax_attention(b: int, t: int, s: int, seed: int = 0, src_pad: torch.Tensor | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, s, generator=g, dtype=torch.float64)
    if src_pad is not None:
        logits = logits.masked_fill(src_pad[:, None, :], float("-inf"))
    return logits.softmax(-1)


# ---- guided alignment -------------------------------------------------------------------


def test_alignment_targets_and_normalization():
    a = alignment_targets([{(0, 0), (1, 0), (2, 1)}, {(0, 2)}], tgt_len=3, src_len=3)
    assert a.shape == (2, 3, 3)
    assert a[0].tolist() == [[1, 1, 0], [0, 0, 1], [0, 0, 0]]
    n = normalize_alignment(a)
    assert n[0].tolist() == [[0.5, 0.5, 0], [0, 0, 1], [0, 0, 0]]  # shared mass; unaligned row = 0
    assert n[1, 2].tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="outside"):
        alignment_targets([{(3, 0)}], tgt_len=3, src_len=3)


def test_guided_loss_equals_formula():
    attn = _softmax_attention(2, 3, 4)
    ref = torch.zeros(2, 3, 4)
    ref[0, 0, 1] = 1  # target 0 -> source 1
    ref[0, 1, 2] = ref[0, 1, 3] = 1  # target 1 -> sources 2, 3 (half each)
    # target 2 of sentence 0 is unaligned
    ref[1, 0, 0] = 1
    ref[1, 2, 3] = 1  # target 2 of sentence 1 is padding: ignored
    tgt_pad = torch.tensor([[False, False, False], [False, False, True]])
    src_pad = torch.tensor([[False] * 4, [False, False, False, True]])
    h0 = -(math.log(attn[0, 0, 1]) + 0.5 * math.log(attn[0, 1, 2]) + 0.5 * math.log(attn[0, 1, 3])) / 3
    h1 = -math.log(attn[1, 0, 0]) / 2
    got = guided_alignment_loss(attn, ref, src_pad, tgt_pad, reduction="none")
    assert got.tolist() == pytest.approx([h0, h1])
    assert float(guided_alignment_loss(attn, ref, src_pad, tgt_pad)) == pytest.approx((h0 + h1) / 2)
    assert float(guided_alignment_loss(attn, ref, src_pad, tgt_pad, reduction="sum")) == pytest.approx(h0 + h1)
    with pytest.raises(ValueError):
        guided_alignment_loss(attn, ref[:, :2], reduction="none")


def test_guided_loss_gradient_vanishes_at_reference():
    # A: rows are distributions with full support; α = softmax(log A) = A exactly.
    g = torch.Generator().manual_seed(1)
    ref = torch.rand(2, 3, 4, generator=g, dtype=torch.float64) + 0.1
    ref = ref / ref.sum(-1, keepdim=True)
    logits = ref.log().clone().requires_grad_(True)
    loss = guided_alignment_loss(logits.softmax(-1), ref, reduction="sum")
    (grad,) = torch.autograd.grad(loss, logits)
    assert grad.abs().max() < 1e-12
    # ... and it does not vanish elsewhere: the gradient is (α - A) / T_y per row.
    other = torch.randn(2, 3, 4, generator=g, dtype=torch.float64).requires_grad_(True)
    loss = guided_alignment_loss(other.softmax(-1), ref, reduction="sum")
    (grad,) = torch.autograd.grad(loss, other)
    assert torch.allclose(grad, (other.softmax(-1) - ref) / 3)


@pytest.mark.parametrize(
    "schedule, step, expected",
    [
        ("constant", 10**6, 1.0),
        ("linear:100", 0, 1.0),
        ("linear:100", 25, 0.75),
        ("linear:100", 100, 0.0),
        ("linear:100", 500, 0.0),
        ("exp:0.5", 3, 0.125),
        ("exp:1", 1000, 1.0),
        ("step:10", 9, 1.0),
        ("step:10", 10, 0.0),
    ],
)
def test_decay(schedule, step, expected):
    assert decay(step, schedule) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["linear", "linear:0", "exp:1.5", "exp:0", "cosine:10", "constant:3", "step:x"])
def test_decay_bad_schedule(bad):
    with pytest.raises(UserError, match="schedule"):
        decay(1, bad)


# ---- coverage and fertility ---------------------------------------------------------------


def test_coverage_equals_formula_with_masks():
    src_pad = torch.tensor([[False, False, False], [False, False, True]])
    tgt_pad = torch.tensor([[False, False], [False, True]])
    attn = _softmax_attention(2, 2, 3, src_pad=src_pad)
    expected = []
    for b in range(2):
        total = 0.0
        for j in range(3):
            if src_pad[b, j]:
                continue
            received = sum(float(attn[b, i, j]) for i in range(2) if not tgt_pad[b, i])
            total += (1.0 - received) ** 2
        expected.append(total)
    assert coverage_loss(attn, src_pad, tgt_pad, reduction="none").tolist() == pytest.approx(expected)
    fert = torch.tensor([[2.0, 0.5, 1.0], [1.0, 3.0, 9.0]], dtype=torch.float64)
    got = coverage_loss(attn, src_pad, tgt_pad, fertility=fert, reduction="none")
    want0 = sum((float(fert[0, j]) - float(attn[0, :, j].sum())) ** 2 for j in range(3))
    want1 = sum((float(fert[1, j]) - float(attn[1, 0, j])) ** 2 for j in range(2))
    assert got.tolist() == pytest.approx([want0, want1])


def test_coverage_with_unit_fertility_is_plain_coverage():
    src_pad = torch.tensor([[False, False, False, False], [False, False, True, True]])
    attn = _softmax_attention(2, 3, 4, src_pad=src_pad, seed=3)
    ones = torch.ones(2, 4, dtype=torch.float64)
    assert torch.allclose(coverage_loss(attn, src_pad, fertility=ones, reduction="none"), coverage_loss(attn, src_pad, reduction="none"))


def test_fertility_module():
    torch.manual_seed(0)
    fert = Fertility(d_model=8, max_fertility=3)
    h = torch.randn(2, 5, 8)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    f = fert(h, pad)
    assert f.shape == (2, 5)
    assert (f[~pad] > 0).all() and (f[~pad] < 3).all() and (f[pad] == 0).all()
    w, b = fert.proj.weight[0], fert.proj.bias[0]
    assert torch.allclose(f[0], 3 * torch.sigmoid(h[0] @ w + b))
    assert torch.allclose(fert(torch.zeros(1, 2, 8)), torch.ones(1, 2))  # starts near fertility 1
    # differentiable end to end
    loss = coverage_loss(_softmax_attention(2, 4, 5, src_pad=pad).float(), pad, fertility=f)
    loss.backward()
    assert fert.proj.weight.grad is not None and fert.proj.weight.grad.abs().sum() > 0


def test_coverage_penalty():
    cov = torch.tensor([[0.5, 2.0, 1.0, 0.0], [0.25, 0.1, 0.0, 0.0]])
    pad = torch.tensor([[False, False, False, False], [False, False, True, True]])
    got = coverage_penalty(cov, beta=0.2, src_pad_mask=pad, eps=1e-6)
    want0 = 0.2 * (math.log(0.5) + 0 + 0 + math.log(1e-6))  # min(·, 1); zero clamped to eps
    want1 = 0.2 * (math.log(0.25) + math.log(0.1))
    assert got.tolist() == pytest.approx([want0, want1])
    assert (got <= 0).all()
    attn = _softmax_attention(1, 3, 2)
    assert float(coverage_penalty(attn.sum(-2), 1.0)[0]) == pytest.approx(sum(math.log(min(float(attn[0, :, j].sum()), 1.0)) for j in range(2)))


# ---- bilingual symmetry -----------------------------------------------------------------


def test_trace_bonus_equals_loops():
    bsz, t, s = 2, 3, 4
    src_pad = torch.tensor([[False] * 4, [False, False, False, True]])
    tgt_pad = torch.tensor([[False] * 3, [False, False, True]])
    st_ = _softmax_attention(bsz, t, s, seed=5, src_pad=src_pad)  # (B, T, S)
    ts_ = _softmax_attention(bsz, s, t, seed=6, src_pad=tgt_pad)  # (B, S, T)
    expected = []
    for b in range(bsz):
        total = 0.0
        for i in range(t):
            for j in range(s):
                if not tgt_pad[b, i] and not src_pad[b, j]:
                    total += float(st_[b, i, j]) * float(ts_[b, j, i])
        expected.append(total)
    got = trace_bonus(st_, ts_, src_pad, tgt_pad, reduction="none")
    assert got.tolist() == pytest.approx(expected)
    assert float(trace_bonus(st_[:1], ts_[:1], reduction="sum")) == pytest.approx(float(torch.trace(st_[0] @ ts_[0])))
    with pytest.raises(ValueError, match=r"\(B, S, T\)"):
        trace_bonus(st_, st_)


def test_trace_bonus_maximal_for_agreeing_one_to_one():
    eye = torch.eye(3)[None]
    assert float(trace_bonus(eye, eye, reduction="sum")) == 3.0
    perm = torch.eye(3)[[1, 2, 0]][None]
    assert float(trace_bonus(eye, perm, reduction="sum")) == 0.0
