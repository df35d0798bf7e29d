"""``syntaxnmt train-joint``: bilingual symmetry (Cohn et al. 2016, Sec. 3.4).

A source→target and a target→source model (both ``model`` of the config) are trained together on
the same prepared corpus -- the reverse model reads the target pieces and predicts the source
pieces, so the vocabulary must be joint -- with the objective, per update::

    L = L_{s→t} / N_t + L_{t→s} / N_s - γ · Σ_pairs B / N_t,    B = Σ_i Σ_j α^{s→t}_ij α^{t→s}_ji

(:func:`~syntaxnmt.training.alignment.trace_bonus`, γ = ``train.alignment.symmetry_weight``; EOS and
padding left out), where L_d is the label-smoothed loss of direction d plus its own
guided-alignment/coverage terms (:mod:`syntaxnmt.training.alignment`; the reverse model's
reference alignment is the transposed one) and N_t, N_s count target/source tokens. α is the
``train.alignment.layer``/``head`` cross-attention of each model. One update steps both models
(each with its own Adam and schedule) on the same batches.

Checkpoints: ``<work_dir>/forward`` and ``<work_dir>/reverse`` hold ordinary runs (``last.pt``,
``best.pt``, ``config.yaml``): ``syntaxnmt translate``/``align`` load them like any other, and
``align --reverse-checkpoint`` symmetrizes the two directions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.config import Config, config_from_dict
from syntaxnmt.cpu import install as install_cpu
from syntaxnmt.cpu.calibration import prepare as prepare_cpu_kernels
from syntaxnmt.data.batches import Split, TokenBatchSampler, collate
from syntaxnmt.data.links import normalize_alignment
from syntaxnmt.data.prepare import is_prepared, load_split, load_tokenizers, prepare, tokenizer_assets
from syntaxnmt.decoding.calibration import decoding_step
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import PAD
from syntaxnmt.model import build_model
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import read_lines
from syntaxnmt.training import loop
from syntaxnmt.training.alignment import alignment_attention, trace_bonus, word_masks
from syntaxnmt.training.loop import Progress
from syntaxnmt.training.objectives import training_objectives
from syntaxnmt.training.optim import build_optimizer
from syntaxnmt.training.step import accumulate, apply_gradients, forward_loss, skip_nonfinite
from syntaxnmt.training.train import Run, set_matmul_precision, start, tensorboard_writer, validate_and_record, work_dir_lock

DIRECTIONS = ("forward", "reverse")
_SWAP = (("train_src", "train_tgt"), ("dev_src", "dev_tgt"), ("src_lang", "tgt_lang"))


def direction_configs(cfg: Config) -> tuple[Config, Config]:
    """The configs stored with the two models: ``<work_dir>/forward`` (``cfg`` itself) and
    ``<work_dir>/reverse`` (data sides swapped, no source annotation); both use ``cfg``'s prepared corpus."""
    trees = []
    for name in DIRECTIONS:
        tree = cfg.model_dump(mode="json")
        tree["work_dir"] = str(Path(cfg.work_dir) / name)
        tree["data"]["prepared_dir"] = str(cfg.prepared_dir)
        if name == "reverse":
            data = tree["data"]
            for a, b in _SWAP:
                data[a], data[b] = data[b], data[a]
            data["annotate"] = "none"
        trees.append(tree)
    return config_from_dict(trees[0], "train-joint (forward)"), config_from_dict(trees[1], "train-joint (reverse)")


def joint_update(models, optimizers, split: Split, group, cfg: Config, device: torch.device, objectives=((), ()), step: int = 0) -> dict:
    """One update of both models on the batches ``group`` with the shared step
    (:mod:`syntaxnmt.training.step`): each direction's forward loss, the symmetry bonus between
    their cross-attentions (Cohn et al. 2016, Sec. 3.4), one backward pass, then each model's
    clipped optimizer step (skipped for both, with ``train.max_nonfinite`` > 0, when a loss or
    gradient is not finite). Returns the summed losses (device tensors) and token counts."""
    t = cfg.train.for_device(device.type)
    gamma = t.alignment.symmetry_weight
    rev_split = split.swapped()
    n_tgt = sum(int(split["tgt"].lengths[idx].sum()) + len(idx) for idx in group)
    n_src = sum(int(split["src"].lengths[idx].sum()) + len(idx) for idx in group)
    for opt, _ in optimizers:
        opt.zero_grad(set_to_none=True)
    stats: dict = {}
    needs_reference = any(o.needs_reference for direction in objectives for o in direction)
    for idx in group:
        fwd = collate(split, idx, alignment=needs_reference).to(device)
        rev = collate(rev_split, idx).to(device)
        if needs_reference:  # the reverse model's reference: the forward one transposed
            rev.alignment = normalize_alignment(fwd.alignment.gt(0).float().transpose(1, 2), rev.src_pad_mask, rev.tgt_out.eq(PAD))
        total, outs = 0.0, []
        for name, model, batch, objective, n in zip(DIRECTIONS, models, (fwd, rev), objectives, (n_tgt, n_src)):
            loss, _, out = forward_loss(model, batch, t, objective, step, need_weights=True, with_output=True)
            accumulate(stats, {name: loss.detach()})
            total = total + loss / n
            outs.append(out)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=t.uses_bf16(device.type)):
            src_mask, tgt_mask = word_masks(fwd.src, fwd.tgt_out)
            bonus = trace_bonus(alignment_attention(outs[0], t.alignment), alignment_attention(outs[1], t.alignment), src_mask, tgt_mask, reduction="sum")
        accumulate(stats, {"bonus": bonus.detach()})
        (total - gamma * bonus / n_tgt).backward()
    if t.max_nonfinite and skip_nonfinite(models, stats):  # both directions skip together
        return {"skipped": 1, "tokens": n_tgt, "src_tokens": n_src}
    for model, (opt, sched) in zip(models, optimizers):
        apply_gradients(model, opt, sched, t)
    return {**stats, "tokens": n_tgt, "src_tokens": n_src}


class JointModels:
    """The :class:`~syntaxnmt.training.loop.Task` of ``train-joint``: both directions, each with its own
    optimizer, schedule, progress record and run folder; they step together on the same batches."""

    def __init__(self, cfg: Config, device: torch.device, log: Callable, writer=None):
        self.cfg, self.device, self.log, self.writer = cfg, device, log, writer
        self.configs = direction_configs(cfg)
        self.split = load_split(cfg, "train")
        dev = load_split(cfg, "dev")
        self.devs = (dev, dev.swapped())
        self.refs = (read_lines(cfg.prepared_dir / "dev.ref"), read_lines(cfg.prepared_dir / "dev.raw_src"))
        self.toks = [load_tokenizers(c) for c in self.configs]
        self.runs = [Run(c, tokenizer_assets(k)) for c, k in zip(self.configs, self.toks)]
        self.models = [install_cpu(build_model(c, **k.vocab_sizes()).to(device)) for c, k in zip(self.configs, self.toks)]
        if self.models[0].feature_spec:
            raise UserError("train-joint: the reverse model has no source annotation; use a model without source features (model.syntax)")
        self.optimizers = [build_optimizer(m, cfg.train) for m in self.models]
        self.objectives = [training_objectives(c) for c in self.configs]
        for o in self.objectives[1]:
            if o.feature_spec:
                raise UserError(f"train-joint: {type(o).__name__} reads source parses, which the reverse model has none of: use `syntaxnmt train`")
        self.progresses = [Progress(), Progress()]

    @property
    def progress(self) -> Progress:
        return self.progresses[0]

    @property
    def bad_validations(self) -> int:
        """Early stopping waits until both directions stall."""
        return min(p.bad_validations for p in self.progresses)

    def resume(self) -> None:
        for k, (run, model, (opt, sched)) in enumerate(zip(self.runs, self.models, self.optimizers)):
            self.progresses[k], rng = run.restore(model, opt, sched, self.log)
        loop.set_rng_state(rng)
        self.log(f"resumed {self.runs[0].work} and {self.runs[1].work} at update {self.progress.step}")

    def update(self, group: list[np.ndarray], step: int) -> dict[str, float]:
        stats = joint_update(self.models, self.optimizers, self.split, group, self.cfg, self.device, self.objectives, step)
        self._sync()
        return stats

    def _sync(self) -> None:
        """The reverse model's progress follows the forward one (except its own validation record)."""
        lead, other = self.progresses
        other.step, other.epoch, other.batch_pos, other.train_seconds, other.train_tokens = lead.step, lead.epoch, lead.batch_pos, lead.train_seconds, lead.train_tokens

    def summarize(self, window: dict[str, float]) -> dict[str, float]:
        tgt, src = max(window.get("tokens", 0.0), 1.0), max(window.get("src_tokens", 0.0), 1.0)
        return {"fwd": window.get("forward", 0.0) / tgt, "rev": window.get("reverse", 0.0) / src, "bonus": window.get("bonus", 0.0) / tgt}

    def validate(self) -> None:
        self._sync()
        for k, name in enumerate(DIRECTIONS):
            prog, (opt, sched) = self.progresses[k], self.optimizers[k]
            is_best = validate_and_record(self.models[k], self.configs[k], self.devs[k], self.refs[k], self.toks[k].tgt, self.device, prog, lambda msg, name=name: self.log(f"[{name}] {msg}"), None)
            self.runs[k].save(self.models[k], opt, sched, prog, is_best and self.cfg.train.keep_best)

    def save(self) -> None:
        self._sync()
        for run, model, (opt, sched), prog in zip(self.runs, self.models, self.optimizers, self.progresses):
            run.save(model, opt, sched, prog)


def train_joint(cfg: Config, resume: bool = False, log=tqdm.write) -> Progress:
    """Train both directions of ``cfg`` jointly (preparing its corpus first if needed) holding the
    lock of its ``work_dir``; returns the progress."""
    with work_dir_lock(cfg, log):
        return _train_joint(cfg, resume, log)


def _train_joint(cfg: Config, resume: bool, log) -> Progress:
    t = cfg.train
    if t.multitask.enabled:  # (found before any work; JointModels checks every objective's needs too)
        raise UserError("train.multitask trains one model: use `syntaxnmt train` (train-joint's reverse model reads no parsed source)")
    if not cfg.data.joint_vocab:
        raise UserError("train-joint needs a joint vocabulary (data.joint_vocab: true): the reverse model reads the target pieces")
    forward, reverse = direction_configs(cfg)
    resume = start(forward, resume, log) and Run(reverse).last.exists()
    device = resolve_device(t.device)
    set_matmul_precision(t.for_device(device.type), device)
    if not is_prepared(cfg):
        prepare(cfg, log=log)
    writer = tensorboard_writer(cfg)
    task = JointModels(cfg, device, log, writer)
    if resume:
        task.resume()
    for c, run in zip(task.configs, task.runs):
        run.work.mkdir(parents=True, exist_ok=True)
        c.save(run.work / "config.yaml")
    n_params = sum(p.numel() for m in task.models for p in m.parameters())
    log(f"{cfg.name}: joint training of two models ({n_params / 1e6:.2f}M parameters), {len(task.split)} pairs, device {device}")
    if device.type == "cpu":  # per-batch shapes: oneDNN only without autograd (cpu.linear), timed on decoding; a resumed run reuses its choice
        record = prepare_cpu_kernels(task.models[0], t.cpu_kernels, timing=lambda: decoding_step(task.models[0]), log=log, recorded=task.runs[0].cpu_kernels)["record"]
        for run in task.runs:
            run.cpu_kernels = record
    sampler = TokenBatchSampler(task.split["src"].lengths, task.split["tgt"].lengths, t.max_tokens, cfg.seed)
    result = loop.run(task, t, sampler, log, writer=writer, desc="train-joint")
    log(f"stopped ({result.stop_reason}) at update {task.progress.step}, epoch {task.progress.epoch}; checkpoints in {task.runs[0].work} and {task.runs[1].work}")
    if writer:
        writer.close()
    loop.raise_if_interrupted(result, " and ".join(str(run.last) for run in task.runs))
    return task.progress
