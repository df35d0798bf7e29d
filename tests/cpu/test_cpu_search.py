"""Tests for syntaxnmt.cpu.search: the C kernel's log-softmax top-k against PyTorch's."""

from __future__ import annotations

import pytest
import torch

from syntaxnmt.cpu import search as native

needs_kernel = pytest.mark.skipif(not native.available(), reason="the native kernel is not built or this CPU has no AVX2/FMA")


def _reference(x: torch.Tensor, k: int, forbidden: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lp = torch.log_softmax(x, dim=-1)
    lp[:, list(forbidden)] = float("-inf")
    values, index = lp.topk(k, dim=-1)
    return values, index, torch.logsumexp(x.double(), dim=-1).float()


@needs_kernel
@pytest.mark.parametrize("vocab", [1, 5, 8, 13, 16, 24, 1000, 8003])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_log_softmax_topk_equals_log_softmax_then_topk(vocab, k):
    gen = torch.Generator().manual_seed(vocab * 10 + k)
    x = torch.randn(37, vocab, generator=gen) * 4
    forbidden = tuple(j for j in (0, 2) if j < vocab - k)  # PAD and BOS, where enough columns stay
    k = min(k, vocab - len(forbidden))
    values, index, lse = native.log_softmax_topk(x, k, forbidden)
    ref_values, ref_index, ref_lse = _reference(x, k, forbidden)
    assert values.shape == (37, k) and index.dtype == torch.long
    torch.testing.assert_close(values, ref_values, rtol=0, atol=2e-5)
    assert torch.equal(index, ref_index)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=2e-5)
    assert not set(index.view(-1).tolist()) & set(forbidden)


@needs_kernel
def test_forbidden_columns_count_in_the_normalizer_and_are_never_chosen():
    x = torch.tensor([[10.0, 0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 0.25, 4.0]])
    values, index, lse = native.log_softmax_topk(x, 2, (0, 8))
    assert index.tolist() == [[4, 3]]
    torch.testing.assert_close(values, torch.log_softmax(x, -1)[:, [4, 3]], rtol=0, atol=1e-6)
    torch.testing.assert_close(lse, torch.logsumexp(x, -1), rtol=0, atol=1e-6)


@needs_kernel
def test_rows_split_between_threads_give_the_same_values():
    x = torch.randn(301, 777, generator=torch.Generator().manual_seed(3)) * 3
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = native.log_softmax_topk(x, 4, (1,))
        torch.set_num_threads(3)
        several = native.log_softmax_topk(x, 4, (1,))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, several):
        assert torch.equal(a, b)


@needs_kernel
def test_extreme_logits_stay_finite():
    """Logits a thousand apart: e^(x - max) underflows for all but the largest, which must not
    turn into NaN or -inf in the log-probabilities."""
    x = torch.tensor([[0.0, -1000.0, 1000.0, 999.0, -50.0, 998.5, -3e38] + [-1e4] * 20])
    values, index, lse = native.log_softmax_topk(x, 4)
    ref_values, ref_index, ref_lse = _reference(x, 4, ())
    assert index.tolist() == ref_index.tolist() == [[2, 3, 5, 0]]
    torch.testing.assert_close(values, ref_values)
    torch.testing.assert_close(lse, ref_lse)


def test_bad_arguments_are_refused():
    if native._native is None:
        with pytest.raises(RuntimeError, match="not built"):
            native.log_softmax_topk(torch.zeros(2, 4), 1)
        return
    with pytest.raises(ValueError, match="float32 CPU logits"):
        native.log_softmax_topk(torch.zeros(2, 4, dtype=torch.float64), 1)
    with pytest.raises(ValueError, match="1 <= k <= V"):
        native.log_softmax_topk(torch.zeros(2, 4), 5)


def test_the_torch_choice_and_other_devices_keep_pytorchs_operators():
    class Model:
        step_logits = True

    cpu = torch.device("cpu")
    assert native.use_native("auto", cpu, Model()) is native.available()
    assert not native.use_native("torch", cpu, Model())
    assert not native.use_native("auto", torch.device("cuda"), Model())
    assert not native.use_native("auto", cpu, object())  # a model whose step cannot return logits (an ensemble)
