"""Stage 2b, CPU execution: the C kernels, row packing, product routing, calibration and threads
that make a model fast on the CPU, plugged into the seams the model declares (:func:`install`).
Imports model and the leaves; the model never imports it.

The model (:mod:`syntaxnmt.model`) is written once, as its papers write it, in PyTorch's modules;
a GPU run, a notebook or a model built by hand computes with them. The code that runs a model on
the CPU (training, decoding) calls :func:`install` once on the built model, which plugs the CPU's
implementations into the seams the model declares:

- each attention's :class:`~syntaxnmt.model.attention.AttentionKernel`:
  :class:`~syntaxnmt.cpu.attention.CpuAttention` (the C kernels of whole sequences, and of the
  incremental decoding step);
- the Transformer's :class:`~syntaxnmt.model.transformer.StackRunner`:
  :class:`~syntaxnmt.cpu.stack.PackedStacks` (training's layers on the real rows only);
- the module classes, replaced in place by subclasses with the same parameters and state-dict
  keys: ``nn.Linear`` by :class:`~syntaxnmt.cpu.linear.Linear` (oneDNN or OpenBLAS products, the
  calibration's choice: :mod:`syntaxnmt.cpu.calibration`), ``nn.Dropout`` by
  :class:`~syntaxnmt.cpu.dropout.Dropout` (its masks in the C kernel), and the feed-forward and
  residual blocks by :class:`~syntaxnmt.cpu.stack.FusedFeedForward` and
  :class:`~syntaxnmt.cpu.stack.FusedResidual`.

Beside them: the machine (:mod:`syntaxnmt.cpu.machine`) and its threads (:mod:`syntaxnmt.cpu.threads`), row packing
(:mod:`syntaxnmt.cpu.packing`) and the training loss's kernel (:mod:`syntaxnmt.cpu.loss`).
"""

from __future__ import annotations

from torch import nn

from syntaxnmt.cpu.attention import CPU_ATTENTION
from syntaxnmt.cpu.dropout import Dropout
from syntaxnmt.cpu.linear import Linear
from syntaxnmt.cpu.machine import native_kernels
from syntaxnmt.cpu.stack import FusedFeedForward, FusedResidual, PackedStacks
from syntaxnmt.model.attention import MultiHeadAttention
from syntaxnmt.model.transformer import FeedForward, Residual, Transformer

_REPLACED = {nn.Linear: Linear, nn.Dropout: Dropout, FeedForward: FusedFeedForward, Residual: FusedResidual}


def install(model: nn.Module) -> nn.Module:
    """Give ``model`` (its parameters on the CPU) the CPU's execution (see the module docstring)
    and return it; a model on another device is left as it is. Installing twice changes nothing."""
    first = next(model.parameters(), None)
    if first is not None and first.device.type != "cpu":
        return model
    for m in model.modules():
        if type(m) in _REPLACED:
            m.__class__ = _REPLACED[type(m)]
        if isinstance(m, MultiHeadAttention):
            m.kernel = CPU_ATTENTION
    for m in model.modules():
        if isinstance(m, Transformer):
            if not isinstance(m.stacks, PackedStacks):
                m.stacks = PackedStacks()
            m.native_attention = native_kernels() is not None  # init_state(..., native=True) steps the attentions in the C kernels
    return model
