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
