"""The oneDNN-backed Linear equals nn.Linear, forward and backward."""

from __future__ import annotations

import pytest
import torch

from syntaxnmt.cpu import linear as lin


@pytest.fixture(autouse=True)
def onednn_chosen(monkeypatch):
    """oneDNN wherever the mode allows it, whatever kernels an earlier test chose (cpu.calibration)."""
    monkeypatch.setattr(lin, "ONEDNN", True)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("train_mode", [False, True])
@pytest.mark.parametrize("d_in,d_out", [(24, 40), (40, 24)])  # both ways of computing the weight gradient
def test_matches_nn_linear(bias, train_mode, d_in, d_out, monkeypatch):
    monkeypatch.setattr(lin, "TRAIN", train_mode and lin.ENABLED)
    torch.manual_seed(0)
    ours = lin.Linear(d_in, d_out, bias=bias)
    ref = torch.nn.Linear(d_in, d_out, bias=bias)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 7, d_in)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa), ref(xb)
    assert ya.shape == (3, 7, d_out)
    assert torch.allclose(ya, yb, atol=1e-5)
    weights = torch.randn(d_out)
    (ya * weights).sum().backward()
    (yb * weights).sum().backward()
    assert torch.allclose(xa.grad, xb.grad, atol=1e-5)
    assert torch.allclose(ours.weight.grad, ref.weight.grad, atol=1e-4)
    if bias:
        assert torch.allclose(ours.bias.grad, ref.bias.grad, atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(ours(x), ref(x), atol=1e-5)


def test_training_uses_onednn_only_when_asked(monkeypatch):
    if not lin.ENABLED:
        pytest.skip("oneDNN linear op not available")
    x = torch.randn(4, 8, requires_grad=True)
    layer = lin.Linear(8, 3)
    assert not getattr(layer(x).grad_fn, "kernels", None) == "onednn"  # default: inference only
    monkeypatch.setattr(lin, "TRAIN", True)
    assert getattr(layer(x).grad_fn, "kernels", None) == "onednn"


@pytest.mark.parametrize("mode", ["auto", "infer", "train"])
def test_training_on_static_shapes_uses_onednn_in_auto_mode(mode, monkeypatch):
    """``onednn_in_training`` (entered by CPU training on bucketed shapes) turns oneDNN on in
    training for the default mode ``auto`` only, and restores the setting on exit."""
    if not lin.ENABLED:
        pytest.skip("oneDNN linear op not available")
    monkeypatch.setattr(lin, "MODE", mode)
    monkeypatch.setattr(lin, "TRAIN", mode == "train")
    x = torch.randn(4, 8, requires_grad=True)
    layer = lin.Linear(8, 3)
    for enabled in (True, False):
        with lin.onednn_in_training(enabled):
            inside = getattr(layer(x).grad_fn, "kernels", None) == "onednn"
        assert inside == (mode == "train" or (mode == "auto" and enabled))
        assert lin.TRAIN == (mode == "train")


def test_tied_weight_and_autocast_fall_back():
    emb = torch.nn.Embedding(10, 6)
    out = lin.Linear(6, 10, bias=False)
    out.weight = emb.weight  # tied, as in the Transformer
    x = torch.randn(2, 6)
    out(x).sum().backward()
    assert emb.weight.grad is not None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert out(x).dtype == torch.bfloat16  # autocast path: plain F.linear


def test_a_bad_environment_value_is_a_one_line_error_of_the_command_not_of_the_import(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "SYNTAXNMT_ONEDNN_LINEAR": "fast"}
    imported = subprocess.run([sys.executable, "-c", "import syntaxnmt.cpu.linear"], env=env, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    run = subprocess.run([sys.executable, "-m", "syntaxnmt", "aer", "--gold", str(tmp_path / "g"), "--hyp", str(tmp_path / "h")], env=env, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == "syntaxnmt: error: SYNTAXNMT_ONEDNN_LINEAR must be auto, infer, train or 0, not 'fast'"
    assert "Traceback" not in run.stderr


def test_row_counts_are_rounded_to_a_few_shapes_only_where_onednn_computes(monkeypatch):
    """oneDNN keeps state per shape, so its products see row counts rounded up to 128; ATen's
    and OpenBLAS's take any shape, so only 8 (fewer padding rows computed)."""
    monkeypatch.setattr(lin, "OPENBLAS", False)
    assert lin.row_granule(128) == 128
    monkeypatch.setattr(lin, "ONEDNN", False)
    assert lin.row_granule(128) == 8 and lin.row_granule(4) == 4
    monkeypatch.setattr(lin, "OPENBLAS", True)
    assert lin.row_granule(128) == 8
