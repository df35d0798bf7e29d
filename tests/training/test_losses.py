"""The label-smoothed cross-entropy against PyTorch's reference, and the PAD-skipping loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from syntaxnmt.cpu.machine import native_kernels, set_native_training
from syntaxnmt.inputs import PAD
from syntaxnmt.model.outputs import ModelOutput
from syntaxnmt.training.losses import label_smoothed_nll, native_smoothed_xent, sequence_loss

needs_kernels = pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")


@pytest.fixture(params=["auto", "torch"])
def cpu_native(request):
    """Both paths of the fused loss: the C kernel (train.cpu_native: auto, where built) and PyTorch's operators."""
    set_native_training(request.param == "auto")
    yield request.param
    set_native_training(True)


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
    """A projection that is not a bias-free Linear sees the non-PAD positions only, padded with
    zero rows to a multiple of 128 (a few shapes for oneDNN); same loss and gradients."""
    torch.manual_seed(2)
    proj = torch.nn.Linear(6, 9)
    states = torch.randn(2, 3, 6)
    target = torch.tensor([[3, 8, PAD], [4, PAD, PAD]])
    rows_seen = []

    def project(x):
        rows_seen.append(x.detach().clone())
        return proj(x)

    ours, ref = states.clone().requires_grad_(), states.clone().requires_grad_()
    loss, nll = sequence_loss(ModelOutput(ours, project, encoder=None), target, 0.1)
    assert [r.size(0) for r in rows_seen] == [128] and torch.equal(rows_seen[0][:3], states[target.ne(PAD)])
    assert rows_seen[0][3:].eq(0).all()  # the three non-PAD positions, then zero rows
    full_loss, full_nll = label_smoothed_nll(proj(ref), target, 0.1)
    assert loss.item() == pytest.approx(full_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(full_nll.item(), rel=1e-6)
    loss.backward()
    full_loss.backward()
    assert torch.allclose(ours.grad, ref.grad, atol=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("chunk", [3, 4])
@pytest.mark.parametrize("kernels", ["aten", "onednn", "openblas"])
def test_chunked_fused_output_loss_matches_the_reference(eps, chunk, kernels, cpu_native, monkeypatch):
    """A bias-free nn.Linear output layer takes the fused, chunked path: same loss and gradients
    (chunk 4: 9 rows make chunks of 4, 4 and 1, the last padded with zero rows to 4), whichever
    kernels compute the products (the weight's gradient summed over the chunks in place with ATen)."""
    from syntaxnmt.cpu import linear as lin

    monkeypatch.setattr(lin, "ONEDNN", kernels == "onednn")
    monkeypatch.setattr(lin, "OPENBLAS", kernels == "openblas" and lin.openblas_available())
    torch.manual_seed(3)
    states = torch.randn(3, 5, 8)
    target = torch.tensor([[4, 9, 2, PAD, PAD], [1, 1, 7, 8, 3], [5, PAD, PAD, PAD, PAD]])
    layer = torch.nn.Linear(8, 11, bias=False)
    h1, h2 = states.clone().requires_grad_(), states.clone().requires_grad_()
    loss, nll = sequence_loss(ModelOutput(h1, layer, encoder=None), target, eps, chunk=chunk)
    (2.0 * loss).backward()
    g_chunked = layer.weight.grad.clone()
    layer.weight.grad = None
    ref = F.cross_entropy((h2 @ layer.weight.t()).view(-1, 11), target.view(-1), ignore_index=PAD, label_smoothing=eps, reduction="sum")
    (2.0 * ref).backward()
    ref_nll = F.cross_entropy((h2 @ layer.weight.t()).view(-1, 11), target.view(-1), ignore_index=PAD, reduction="sum")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-5)
    assert torch.allclose(h1.grad, h2.grad, atol=1e-5) and torch.all(h1.grad[0, 3:] == 0)
    assert torch.allclose(g_chunked, layer.weight.grad, atol=1e-5)
    with torch.no_grad():  # validation: no gradients computed, same value
        assert sequence_loss(ModelOutput(states, layer, encoder=None), target, eps, chunk=4)[0].item() == pytest.approx(ref.item(), rel=1e-5)


def test_sequence_loss_reads_the_packed_real_rows_only_for_the_same_positions():
    """With ``out.real`` (the decoder ran on packed rows) the loss reads those rows, not a selection
    of ``out.states``; a mask of other positions than the target's real ones is not used."""
    torch.manual_seed(4)
    target = torch.tensor([[3, 8, PAD], [4, PAD, PAD]])
    keep = target.ne(PAD)
    layer = torch.nn.Linear(6, 9, bias=False)
    states = torch.randn(2, 3, 6)
    rows = states[keep].clone().requires_grad_()
    reference = sequence_loss(ModelOutput(states, layer, encoder=None), target, 0.1)[0]
    elsewhere = torch.full_like(states, 5.0)  # what a placement would hold; must not be read
    loss = sequence_loss(ModelOutput(elsewhere, layer, encoder=None, real=(keep, rows)), target, 0.1)[0]
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)
    loss.backward()
    assert rows.grad is not None and rows.grad.abs().sum() > 0
    other = keep.clone()
    other[1, 1] = True
    loss = sequence_loss(ModelOutput(elsewhere, layer, encoder=None, real=(other, torch.zeros(4, 6))), target, 0.1)[0]
    assert loss.item() == pytest.approx(sequence_loss(ModelOutput(elsewhere, layer, encoder=None), target, 0.1)[0].item(), rel=1e-6)


@needs_kernels
@pytest.mark.parametrize("v", [7, 8, 11, 16, 8003])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_the_native_loss_and_gradient_equal_pytorchs(v, eps):
    g = torch.Generator().manual_seed(v)
    z = torch.randn(70, v, generator=g) * 4
    target = torch.randint(0, v, (70,), generator=g)
    z[0, target[0]] = -200.0  # a target far below the maximum: its NLL is not cut at exp's floor
    z[1] = 50.0  # a flat row
    ref = z.double().requires_grad_()
    want = F.cross_entropy(ref, target, label_smoothing=eps, reduction="sum")
    want.backward()
    want_nll = F.cross_entropy(ref.detach(), target, reduction="sum")
    grad = z.clone()
    loss, nll = native_smoothed_xent(grad, target, eps)
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    assert nll.item() == pytest.approx(want_nll.item(), rel=1e-5)
    assert torch.allclose(grad.double(), ref.grad, atol=1e-6)
    assert nll.item() > 200.0


@needs_kernels
def test_a_nan_logit_makes_the_native_loss_and_its_row_nan():
    z = torch.randn(3, 20)
    z[1, 5] = float("nan")
    loss, nll = native_smoothed_xent(z, torch.tensor([0, 1, 2]), 0.0)
    assert loss.isnan() and nll.isnan()
    assert z[1].isnan().all() and not z[0].isnan().any() and not z[2].isnan().any()


@needs_kernels
def test_the_native_loss_refuses_a_class_outside_the_vocabulary():
    with pytest.raises(IndexError, match="target class"):
        native_smoothed_xent(torch.zeros(3, 5), torch.tensor([0, 5, 1]), 0.1)
    with pytest.raises(ValueError, match="float32"):
        native_smoothed_xent(torch.zeros(3, 5, dtype=torch.float64), torch.tensor([0, 1, 1]), 0.1)
