"""The label-smoothed cross-entropy against PyTorch's reference, and the PAD-skipping loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from syntaxnmt.losses import label_smoothed_nll, sequence_loss
from syntaxnmt.model.transformer import ModelOutput
from syntaxnmt.subwords import PAD


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_gradient_matches_pytorch_cross_entropy(eps):
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 11, dtype=torch.float64) * 3
    target = torch.tensor([[5, 1, PAD, PAD], [4, 4, 10, 3], [PAD, PAD, PAD, PAD]])
    ours = logits.clone().requires_grad_()
    ref = logits.clone().requires_grad_()
    loss, _ = label_smoothed_nll(ours, target, eps)
    (2.5 * loss).backward()
    expected = F.cross_entropy(ref.view(-1, 11), target.view(-1), ignore_index=PAD, label_smoothing=eps, reduction="sum")
    (2.5 * expected).backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-10)
    assert torch.allclose(ours.grad, ref.grad, atol=1e-12)
    assert torch.all(ours.grad[2] == 0) and torch.all(ours.grad[0, 2:] == 0)


def test_sequence_loss_projects_only_real_tokens():
    torch.manual_seed(2)
    proj = torch.nn.Linear(6, 9, bias=False)
    states = torch.randn(2, 3, 6)
    target = torch.tensor([[3, 8, PAD], [4, PAD, PAD]])
    rows_seen = []

    def project(x):
        rows_seen.append(x.shape[:-1].numel())
        return proj(x)

    out = ModelOutput(states, project, encoder=None)
    loss, nll = sequence_loss(out, target, 0.1)
    assert rows_seen == [3]  # the three non-PAD positions
    full_loss, full_nll = label_smoothed_nll(out.logits, target, 0.1)
    assert loss.item() == pytest.approx(full_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(full_nll.item(), rel=1e-6)
