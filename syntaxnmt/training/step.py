"""One update step, shared by ``syntaxnmt train`` and ``train-joint``: the batch as training reads
it, the forward loss (translation + auxiliary objectives, under the bf16 policy), backward,
gradient clipping and the optimizer and schedule step. The logged values stay device tensors: the
loop reads them only when it logs, so an update never waits for the device."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from syntaxnmt.config import TrainConfig
from syntaxnmt.cpu.calibration import model_signature
from syntaxnmt.cpu.linear import onednn_in_training
from syntaxnmt.cpu.machine import native_training_kernels
from syntaxnmt.data.batches import Split, bucket_batches, collate, document_batches, pad_batch, shape_bucket
from syntaxnmt.data.documents import DocumentContext
from syntaxnmt.inputs import Batch, FeatureSpec
from syntaxnmt.training.cuda_graphs import GraphedStep
from syntaxnmt.training.distributed import World, no_sync, sum_across, unwrap
from syntaxnmt.training.losses import AuxiliaryObjective, sequence_loss


def objective_requests(model, objectives: Sequence[AuxiliaryObjective]) -> tuple[FeatureSpec, bool, dict]:
    """What the batches and forward passes of training carry for ``objectives``: the source
    features (the model's and theirs), whether the reference alignment, and the model's keyword
    arguments (cross-attention weights; self-attention weights of some encoder layers only)."""
    spec = model.feature_spec
    for o in objectives:
        spec = spec.union(o.feature_spec)
    kwargs: dict = {"need_weights": any(o.needs_cross_attention for o in objectives)}
    layers = frozenset().union(*(o.encoder_weights for o in objectives))
    if layers:
        kwargs["encoder_weights"] = layers
    return spec, any(o.needs_reference for o in objectives), kwargs


def forward_loss(model, batch, t: TrainConfig, objectives=(), step: int | torch.Tensor = 0, static: bool = False, need_weights: bool = False, with_output: bool = False):
    """The training loss of one batch, summed over its target tokens: label-smoothed cross-entropy
    plus the weighted terms of ``objectives`` (:class:`~syntaxnmt.training.losses.AuxiliaryObjective`: alignment, multi-task)
    at update ``step``; and the detached parts for logging (``loss`` and each unweighted term).
    Nothing here waits for the device, so it can run inside a captured CUDA graph (``static``:
    the batch has a bucketed static shape). ``need_weights`` asks for the cross-attention even when
    no objective reads it; ``with_output`` also returns the model output, as a third value."""
    raw = unwrap(model)
    with torch.autocast(batch.src.device.type, dtype=torch.bfloat16, enabled=t.uses_bf16(batch.src.device.type), cache_enabled=not static):
        kwargs = objective_requests(raw, objectives)[2]
        kwargs["need_weights"] = kwargs["need_weights"] or need_weights
        out = model(batch, **kwargs)
        loss, _ = sequence_loss(out, batch.tgt_out, t.label_smoothing, static=static)
        logs = {"loss": loss.detach()}
        for objective in objectives:
            extra, terms = objective.loss(raw, batch, out, step)
            loss = loss + extra
            logs.update(terms)
    return (loss, logs, out) if with_output else (loss, logs)


def training_batch(split: Split, idx: np.ndarray, spec, t: TrainConfig, objectives=(), context: DocumentContext | None = None) -> Batch:
    """The batch of sentences ``idx`` as training reads it: with the features the model and the
    objectives need, the document context of a context model, padded to its static shape when
    ``train.shape_bucket`` is on (``t`` with its automatic settings decided:
    :meth:`~syntaxnmt.config.TrainConfig.for_device`)."""
    batch = collate(split, idx, spec, alignment=any(o.needs_reference for o in objectives), context=context)
    if not t.shape_bucket:
        return batch
    return pad_batch(batch, *shape_bucket(batch, t.max_tokens, t.shape_bucket))


def forward_backward(model, batch: Batch, t: TrainConfig, objectives=(), step: int = 0, scale: float = 1.0) -> dict[str, torch.Tensor]:
    """The loss of ``batch`` (on the model's device) and its gradients, scaled by ``scale``, added
    to the parameters' ``.grad``; returns the logged parts. On CPU, a few static shapes
    (``train.shape_bucket``) let the linears use oneDNN with autograd; the loss selects the target
    tokens itself (static=False: with bounded shapes too, see losses.sequence_loss)."""
    static_cpu = bool(t.shape_bucket) and batch.src.device.type == "cpu"
    with onednn_in_training(static_cpu):
        loss, logs = forward_loss(model, batch, t, objectives, step, static=bool(t.shape_bucket) and not static_cpu)
        (loss * scale).backward()
    return logs


def timing_step(model, split: Split, t: TrainConfig, device: torch.device, objectives=()) -> tuple[str, Callable[[], dict]]:
    """What the whole-step calibration of the CPU kernels (:func:`syntaxnmt.cpu.calibration.prepare`)
    times in training: the signature of the step's shape, and a function running one step --
    forward and backward of one batch of the run's typical shape (the batch of the median length
    among the unshuffled length-bucketed batches of ``split`` by ``train.max_tokens``, padded as
    training pads it), without an optimizer step; it returns the logged loss. (The calibration restores the gradients and the
    random generators after it.)"""
    raw = unwrap(model)
    context = getattr(raw, "document_context", None)
    src_lens, tgt_lens = split["src"].lengths, split["tgt"].lengths
    if context is not None and context.reads_states:
        batches = document_batches(split.docs, src_lens, tgt_lens, t.max_tokens, context.reach, None, t.shape_bucket)
    else:
        batches = bucket_batches(src_lens, tgt_lens, t.max_tokens, None, t.shape_bucket)
    typical = sorted(batches, key=lambda idx: int(np.maximum(src_lens[idx], tgt_lens[idx]).max()))[len(batches) // 2]
    batch = training_batch(split, typical, objective_requests(raw, objectives)[0], t, objectives, context).to(device)
    n_tokens = int(tgt_lens[typical].sum()) + len(typical)
    # The native kernels (train.cpu_native) change what the rest of a step costs: their own times.
    native = " | native kernels" if native_training_kernels() is not None else ""
    signature = f"train {model_signature(raw)} | max_tokens {t.max_tokens} bucket {t.shape_bucket} | batch {tuple(batch.src.shape)} {tuple(batch.tgt_in.shape)}{native}"

    def run() -> dict[str, torch.Tensor]:
        raw.train()
        for p in raw.parameters():
            p.grad = None
        return forward_backward(raw, batch, t, objectives, 0, 1.0 / n_tokens)

    return signature, run


def update(model, opt, sched, split: Split, group: list[np.ndarray], t: TrainConfig, device: torch.device, objectives=(), step: int = 0, world: World = World(), graphed: GraphedStep | None = None) -> dict[str, torch.Tensor | int]:
    """One optimizer update on the batches ``group`` (gradient accumulation); returns the summed
    loss and objective terms (device tensors: reading them waits for the device, so the loop does
    that only when it logs) and ``tokens``, the update's target tokens.

    The loss is normalized by the target tokens of the whole group -- over all ranks in distributed
    training, where DDP averages the gradients -- so accumulating k batches equals one batch k times
    larger, and N ranks equal one process accumulating N times more. With ``graphed`` (CUDA
    graphs) the forward and backward passes are replayed from captured graphs. With
    ``train.max_nonfinite`` > 0 an update whose loss or gradients are not finite is skipped and
    returns ``{"skipped": 1, "tokens": ...}`` only.
    """
    n_tokens = sum(int(split["tgt"].lengths[idx].sum()) + len(idx) for idx in group)
    scale = world.size / sum_across(world, n_tokens)
    raw = unwrap(model)
    spec = objective_requests(raw, objectives)[0]
    opt.zero_grad(set_to_none=graphed is None)  # graphs accumulate into gradients that stay allocated
    stats: dict = {}
    for k, idx in enumerate(group):
        batch = training_batch(split, idx, spec, t, objectives, getattr(raw, "document_context", None))
        if graphed is not None:
            logs = graphed(batch, scale, step)
        else:
            with no_sync(model, skip=k < len(group) - 1):
                logs = forward_backward(model, batch.to(device), t, objectives, step, scale)
        accumulate(stats, logs)
    if t.max_nonfinite and skip_nonfinite([raw], stats, world):
        return {"skipped": 1, "tokens": n_tokens}
    apply_gradients(model, opt, sched, t)
    return {**stats, "tokens": n_tokens}


def all_finite(models, logs: dict) -> bool:
    """Whether an update's logged loss terms and every gradient of ``models`` are finite. It reads
    the device (one sync), so only training that skips such updates asks (``train.max_nonfinite`` > 0)."""
    parts = [v.detach() for v in logs.values() if isinstance(v, torch.Tensor)]
    grads = [p.grad for m in models for p in m.parameters() if p.grad is not None]
    if grads:
        parts.append(torch.nn.utils.get_total_norm(grads))
    return bool(torch.stack([torch.isfinite(v).all() for v in parts]).all()) if parts else True


def skip_nonfinite(models, logs: dict, world: World = World()) -> bool:
    """Whether to skip an update because its loss or gradients are not finite on some rank: the
    caller then steps no optimizer or schedule, so the weights stay as they were (the next update
    zeroes the gradients). The loop counts skipped updates: ``train.max_nonfinite`` in a row are allowed."""
    return sum_across(world, float(not all_finite(models, logs))) > 0


def accumulate(stats: dict, logs: dict) -> None:
    """Add the logged values of one batch to the update's ``stats`` (device tensors, no sync)."""
    for name, value in logs.items():
        stats[name] = stats[name] + value if name in stats else value


def apply_gradients(model, opt, sched, t: TrainConfig) -> None:
    """Clip the gradient norm (``train.clip_norm``), step the optimizer and the schedule."""
    if t.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
    opt.step()
    sched.step()
