"""The CPU dropout: same semantics as torch.nn.Dropout."""

from __future__ import annotations

import pytest
import torch

from syntaxnmt.model.dropout import Dropout, dropout


def test_identity_in_eval_and_at_zero():
    x = torch.randn(50, 7)
    layer = Dropout(0.3).eval()
    assert layer(x) is x
    assert dropout(x, 0.0, True) is x


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keeps_one_minus_p_and_rescales(p):
    torch.manual_seed(0)
    x = torch.ones(400, 500, requires_grad=True)
    y = Dropout(p).train()(x)
    kept = y != 0
    assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.01)
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d y / d x is the scaled mask


def test_p_one_drops_everything_and_bad_p_is_rejected():
    assert torch.count_nonzero(dropout(torch.randn(10, 10), 1.0, True)) == 0
    with pytest.raises(ValueError):
        Dropout(1.5)


def test_uniform_numbers_are_uniform_seeded_by_torch_and_independent_of_threads():
    from syntaxnmt.model import dropout as mod

    x = torch.empty(3, mod.BLOCK + 1000)  # several blocks, the last one partial
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        torch.manual_seed(7)
        a = mod.uniform_like(x)
        torch.set_num_threads(1)
        torch.manual_seed(7)
        b = mod.uniform_like(x)
    finally:
        torch.set_num_threads(threads)
    assert a.shape == x.shape and a.dtype == torch.float32
    assert torch.equal(a, b)  # the seed decides, not the thread count
    assert 0.0 <= a.min().item() and a.max().item() < 1.0
    assert a.mean().item() == pytest.approx(0.5, abs=0.005)
    assert (a < 0.1).float().mean().item() == pytest.approx(0.1, abs=0.005)
    flat = a.reshape(-1)
    assert not torch.equal(flat[: mod.BLOCK], flat[mod.BLOCK : 2 * mod.BLOCK])  # blocks get their own streams
    torch.manual_seed(8)
    assert not torch.equal(mod.uniform_like(x), a)


def test_masks_follow_torch_manual_seed():
    x = torch.ones(64, 300)
    torch.manual_seed(3)
    a = dropout(x, 0.1, True)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.1, True), a)
