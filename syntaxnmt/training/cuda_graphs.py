"""CUDA graphs for the training step: forward, loss and backward replayed per static batch shape.

On a GPU a small Transformer's training step is dominated by launching about a thousand kernels
from Python, not by arithmetic (the recipe model: ~28 updates/s on an H100 in fp32, see
docs/benchmarks.md). With ``train.cuda_graphs`` the forward pass, the loss and the backward pass
of a batch are captured once per shape bucket (``train.shape_bucket``: few distinct shapes) and
then replayed with one launch:

* the batch is copied into the graph's static input tensors (its shape decides the graph);
* the parameters' ``.grad`` tensors are allocated before the first capture and only ever zeroed,
  never freed, so every graph accumulates into the same memory;
* the normalization factor of the loss (1 / target tokens) and the update number (for the decay
  of auxiliary losses) are static 0-dim tensors filled before each replay;
* dropout draws fresh random numbers at every replay (PyTorch registers the generator's state
  with the graph);
* gradient clipping and the (fused) optimizer step run eagerly after the replay: a few kernels.

Graphs share one memory pool: they are replayed one at a time, and their outputs (the logged
loss terms) are read before the next replay.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

import torch
from torch import Tensor

from syntaxnmt.inputs import Batch


def _tensors(batch: Batch) -> list[Tensor | None]:
    """Every tensor a batch carries, in a fixed order (the graph's inputs)."""
    f = batch.features
    feats = [getattr(f, x.name) for x in fields(f) if x.name != "relations"] + [f.relations[k] for k in sorted(f.relations)]
    return [batch.src, batch.tgt_in, batch.tgt_out, batch.alignment, *feats]


def signature(batch: Batch) -> tuple:
    """The shapes (and presence) of a batch's tensors: one graph per signature."""
    return tuple(None if t is None else tuple(t.shape) for t in _tensors(batch)) + (tuple(sorted(batch.features.relations)),)


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: Batch  # static input tensors on the device
    scale: Tensor  # 1 / target tokens of the update
    step: Tensor  # the update number (float), for decay schedules
    logs: dict[str, Tensor]  # static outputs: the detached loss terms


class GraphedStep:
    """Forward and backward of ``loss_fn(batch, step) -> (loss, logs)`` scaled by ``scale``, replayed
    from a CUDA graph captured at the first batch of each shape."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable[[Batch, Tensor], tuple[Tensor, dict[str, Tensor]]], warmup: int = 2):
        self.model, self.loss_fn, self.warmup = model, loss_fn, warmup
        self.graphs: dict[tuple, _Graph] = {}
        self.pool = torch.cuda.graph_pool_handle()
        self.params = [p for p in model.parameters() if p.requires_grad]

    def __call__(self, batch: Batch, scale: float, step: int) -> dict[str, Tensor]:
        """Run forward and backward for ``batch`` (on the CPU or the device); the gradients are
        added to ``.grad``. Returns the logged terms (valid until the next call)."""
        key = signature(batch)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._capture(batch)
        for dst, src in zip(_tensors(entry.inputs), _tensors(batch)):
            if dst is not None:
                dst.copy_(src, non_blocking=True)
        entry.scale.fill_(scale)
        entry.step.fill_(step)
        entry.graph.replay()
        return entry.logs

    def _run(self, inputs: Batch, scale: Tensor, step: Tensor) -> dict[str, Tensor]:
        loss, logs = self.loss_fn(inputs, step)
        (loss * scale).backward()
        return logs

    def _capture(self, batch: Batch) -> _Graph:
        device = self.params[0].device
        inputs = batch.to(device)
        scale = torch.ones((), device=device)
        step = torch.zeros((), device=device)
        for p in self.params:  # gradients live outside the graphs' memory, shared by all graphs
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        saved = [p.grad.clone() for p in self.params]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (library handles, autotuning) outside the capture
            for _ in range(self.warmup):
                self._run(inputs, scale, step)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logs = self._run(inputs, scale, step)
        for p, g in zip(self.params, saved):  # the warm-up's gradients are discarded
            p.grad.copy_(g)
        return _Graph(graph, inputs, scale, step, logs)

