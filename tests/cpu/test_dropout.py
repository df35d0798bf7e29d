"""The CPU dropout: same semantics as torch.nn.Dropout."""

from __future__ import annotations

import pytest
import torch

from syntaxnmt.cpu.dropout import Dropout, dropout
from syntaxnmt.cpu.machine import native_kernels, set_native_training


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
    from syntaxnmt.cpu import dropout as mod

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


needs_kernels = pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")


@needs_kernels
@pytest.mark.parametrize("n", [1, 31, 32, 33, 63, 64, 65, 1000, 70_001])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_the_native_kernel_drops_scales_and_passes_the_gradient_through_its_mask(n, p):
    torch.manual_seed(n)
    x = (torch.rand(n) + 0.5).requires_grad_()  # no zeros: a zero output means dropped
    y = dropout(x, p, True)
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] / (1 - p), rtol=1e-6)
    if n >= 1000:
        sd = (p * (1 - p) / n) ** 0.5
        assert abs(kept.float().mean().item() - (1 - p)) < 5 * sd
    g = torch.randn(n)
    (grad,) = torch.autograd.grad(y, x, g)
    assert torch.equal(grad, torch.where(kept, g * (1.0 / (1 - p)), torch.zeros(())))


@needs_kernels
def test_the_native_masks_are_independent_of_position_threads_and_calls():
    """Every position (lane and word of the generator) keeps at the same rate, neighbours are
    uncorrelated, the thread count changes nothing and the generator moves on between calls."""
    torch.manual_seed(0)
    draws = torch.stack([dropout(torch.ones(96), 0.5, True) != 0 for _ in range(4000)]).float()
    rate, sd = draws.mean(0), (0.25 / 4000) ** 0.5
    assert (rate - 0.5).abs().max().item() < 5 * sd
    centered = draws - 0.5
    corr = (centered[:, :-1] * centered[:, 1:]).mean(0) / 0.25
    assert corr.abs().max().item() < 5 / 4000**0.5
    x = torch.ones(300_000)
    threads = torch.get_num_threads()
    masks = []
    try:
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            torch.manual_seed(5)
            masks.append(dropout(x, 0.1, True))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(masks[0], m) for m in masks[1:])
    assert not torch.equal(dropout(x, 0.1, True), dropout(x, 0.1, True))


@needs_kernels
def test_cpu_native_torch_keeps_the_numpy_masks():
    x = torch.ones(64, 300)
    try:
        set_native_training(False)
        torch.manual_seed(3)
        numpy_mask = dropout(x, 0.1, True)
    finally:
        set_native_training(True)
    torch.manual_seed(3)
    native_mask = dropout(x, 0.1, True)
    torch.manual_seed(3)
    from syntaxnmt.cpu.dropout import uniform_like

    assert torch.equal(numpy_mask != 0, uniform_like(x) >= 0.1)
    assert not torch.equal(numpy_mask, native_mask)  # the two generators differ


@needs_kernels
def test_the_kernel_refuses_bad_arguments():
    kernels = native_kernels()
    x = torch.ones(64)
    with pytest.raises(ValueError, match="threshold"):
        kernels.dropout_forward(x.data_ptr(), x.data_ptr(), 0, 64, 0, 1.0, 1, 0, 2)
    with pytest.raises(ValueError, match="g1"):
        kernels.dropout_forward(x.data_ptr(), x.data_ptr(), 0, 64, 10, 1.0, 1, 0, 3)


@needs_kernels
def test_a_nan_stays_a_nan_dropped_or_kept():
    """x * mask keeps NaN where a unit is dropped (0 * NaN); the kernel must too: a diverged run has
    to show in its loss."""
    x = torch.randn(1000)
    x[::7] = float("nan")
    y = dropout(x, 0.5, True)
    assert torch.equal(y.isnan(), x.isnan())


def _grads(f, *xs, g):
    for x in xs:
        x.grad = None
    f().backward(g)
    return [x.grad.clone() for x in xs]


@needs_kernels
@pytest.mark.parametrize("shape", [(37, 1024), (3, 5, 64)])
def test_bias_relu_dropout_is_the_three_operators_in_one_pass(shape):
    """Same values and masks as dropout(relu(x + b)) under the same seed, the same gradient of x,
    and the bias's gradient (summed in the kernel, float64) to float32 rounding."""
    from syntaxnmt.cpu.dropout import bias_relu_dropout, fuses_bias

    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    b = torch.randn(shape[-1], requires_grad=True)
    g = torch.randn(*shape)
    assert fuses_bias(x, 0.1, True, shape[-1])
    torch.manual_seed(5)
    fused = bias_relu_dropout(x, b, 0.1, True)
    assert fused.grad_fn.name().endswith("_NativeDropoutBackward")  # the kernel, not the fallback
    torch.manual_seed(5)
    plain = dropout(torch.relu(x + b), 0.1, True)
    assert torch.equal(fused, plain)
    positive = x + b > 0
    assert torch.equal(fused[~positive], torch.zeros_like(fused[~positive]))  # the ReLU's zeros
    assert (fused[positive] == 0).float().mean().item() == pytest.approx(0.1, abs=0.05)  # and p of the rest
    torch.manual_seed(5)
    gx, gb = _grads(lambda: bias_relu_dropout(x, b, 0.1, True), x, b, g=g)
    torch.manual_seed(5)
    px, pb = _grads(lambda: dropout(torch.relu(x + b), 0.1, True), x, b, g=g)
    assert torch.equal(gx, px)
    assert torch.allclose(gb, pb, rtol=1e-5, atol=1e-4) and gb.abs().max() > 1


@needs_kernels
def test_bias_relu_dropout_falls_back_where_the_kernel_cannot_fuse():
    from syntaxnmt.cpu.dropout import bias_relu_dropout, fuses_bias

    x, b = torch.randn(4, 12), torch.randn(12)  # 12 columns: not a multiple of 8
    assert not fuses_bias(x, 0.1, True, 12) and not fuses_bias(torch.randn(4, 16), 0.1, False, 16)
    torch.manual_seed(1)
    y = bias_relu_dropout(x, b, 0.1, True)
    torch.manual_seed(1)
    assert torch.equal(y, dropout(torch.relu(x + b), 0.1, True))
    assert torch.equal(bias_relu_dropout(x, b, 0.1, False), torch.relu(x + b))  # eval: the ReLU only


@needs_kernels
@pytest.mark.parametrize("n", [4096, 1000])  # whole groups of 64, and a tail
def test_dropout_add_is_the_residual_plus_dropout_in_one_pass(n):
    from syntaxnmt.cpu.dropout import dropout_add

    torch.manual_seed(0)
    r, y, g = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True), torch.randn(n)
    torch.manual_seed(9)
    fused = dropout_add(r, y, 0.2, True)
    assert fused.grad_fn.name().endswith("_NativeDropoutBackward")
    torch.manual_seed(9)
    assert torch.equal(fused, r + dropout(y, 0.2, True))
    torch.manual_seed(9)
    gr, gy = _grads(lambda: dropout_add(r, y, 0.2, True), r, y, g=g)
    torch.manual_seed(9)
    pr, py = _grads(lambda: r + dropout(y, 0.2, True), r, y, g=g)
    assert torch.equal(gr, pr) and torch.equal(gy, py)
    assert torch.equal(dropout_add(r, y, 0.2, False), r + y)


@needs_kernels
def test_relu_tail_and_nan_in_the_fused_kernel():
    """Without a bias the ReLU form takes any length (the scalar tail); a NaN stays a NaN."""
    from syntaxnmt.cpu.dropout import _NativeDropout

    x = torch.randn(77)
    x[5] = float("nan")
    torch.manual_seed(2)
    y = _NativeDropout.apply(x, 0.3, None, True, None)
    torch.manual_seed(2)
    plain = dropout(torch.relu(x), 0.3, True)
    assert torch.equal(y.isnan(), plain.isnan()) and torch.equal(y[~y.isnan()], plain[~plain.isnan()])


@needs_kernels
def test_the_kernel_refuses_a_bias_whose_columns_do_not_fit():
    kernels = native_kernels()
    x, b = torch.ones(64), torch.ones(12)
    with pytest.raises(ValueError, match="multiple of 8"):
        kernels.dropout_forward(x.data_ptr(), x.data_ptr(), torch.empty(8, dtype=torch.uint8).data_ptr(), 64, 10, 1.0, 1, 0, 1, b.data_ptr(), 12, True, 0)
    with pytest.raises(ValueError, match="multiple of 8"):
        kernels.dropout_backward(x.data_ptr(), x.data_ptr(), torch.zeros(8, dtype=torch.uint8).data_ptr(), 64, 1.0, 0, 1, torch.zeros(12, dtype=torch.float64).data_ptr(), 12)


@needs_kernels
@pytest.mark.parametrize("rows,gxo", [(70, True), (3, True), (70, False)])
def test_dropout_add_norm_is_the_residual_and_the_next_layer_norm_in_one_pass(rows, gxo):
    """The residual connection the same bit for bit (the mask of dropout_add under the same seed);
    the norm, and every gradient -- x's (the residual path's plus the norm's), y's, and the norm's
    weight and bias -- to float32 rounding; without a gradient of the residual output (the last
    block of a stack) too."""
    from torch import nn

    from syntaxnmt.cpu.dropout import dropout_add, dropout_add_norm

    torch.manual_seed(0)
    norm = nn.LayerNorm(128)
    nn.init.normal_(norm.weight), nn.init.normal_(norm.bias)
    x, y = torch.randn(rows, 128, requires_grad=True), torch.randn(rows, 128, requires_grad=True)
    g_out, g_norm = torch.randn(rows, 128), torch.randn(rows, 128)
    params = (x, y, norm.weight, norm.bias)

    def grads(f):
        torch.manual_seed(4)
        out, h = f()
        torch.autograd.backward([out, h] if gxo else [h], [g_out, g_norm] if gxo else [g_norm])
        found = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
        return out.detach(), h.detach(), found

    torch.manual_seed(4)
    out, h = dropout_add_norm(x, y, 0.3, True, norm)
    assert out.grad_fn.name().endswith("_NativeAddNormBackward")  # the kernel, not the fallback
    fused = grads(lambda: dropout_add_norm(x, y, 0.3, True, norm))
    plain = grads(lambda: (lambda o: (o, norm(o)))(dropout_add(x, y, 0.3, True)))
    assert torch.equal(fused[0], plain[0]) and (fused[0] == x).float().mean().item() == pytest.approx(0.3, abs=0.1)
    assert torch.allclose(fused[1], plain[1], atol=1e-5)
    for a, b in zip(fused[2], plain[2]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-4) and a.abs().max() > 0.1


@needs_kernels
def test_dropout_add_norm_falls_back_where_the_kernel_cannot_fuse():
    """Rows of 96 floats (not a multiple of 64), a norm without bias, eval: the two operators."""
    from torch import nn

    from syntaxnmt.cpu.dropout import dropout_add, dropout_add_norm

    x, y = torch.randn(5, 96), torch.randn(5, 96)
    for norm, training in ((nn.LayerNorm(96), True), (nn.LayerNorm(96, bias=False), True), (nn.LayerNorm(96), False)):
        torch.manual_seed(1)
        out, h = dropout_add_norm(x, y, 0.1, training, norm)
        torch.manual_seed(1)
        plain = dropout_add(x, y, 0.1, training)
        assert torch.equal(out, plain) and torch.equal(h, norm(plain))
