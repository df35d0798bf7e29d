"""``syntaxnmt train``: training one model.

One update = ``accum_steps`` token-bucketed batches, loss normalized by their target tokens,
gradient clipping, Adam, inverse-sqrt schedule. Every ``valid_every`` updates: dev loss and
greedy-decoded dev BLEU, ``last.pt`` (and ``best.pt`` on improvement) written atomically with
everything needed to resume exactly: model, optimizer, scheduler, RNG states and the position in
the data order. The loop itself (budget, logging, validation cadence, signals) is
:func:`syntaxnmt.loop.run`, shared with ``train-joint``.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt import loop
from syntaxnmt.alignment.losses import alignment_objective
from syntaxnmt.batches import Split, TokenBatchSampler, bucket_batches, collate, pad_batch, shape_bucket
from syntaxnmt.average import keep_periodic
from syntaxnmt.checkpoint import load_model_checkpoint, save_checkpoint
from syntaxnmt.config import Config, TrainConfig
from syntaxnmt.cpu import keep_freed_memory
from syntaxnmt.cuda_graphs import GraphedStep
from syntaxnmt.distributed import World, barrier, device_for, init_world, no_sync, shutdown, sum_across, unwrap
from syntaxnmt.errors import UserError
from syntaxnmt.loop import Progress
from syntaxnmt.losses import AuxiliaryObjective, sequence_loss
from syntaxnmt.metrics import corpus_bleu
from syntaxnmt.model.inputs import Batch, FeatureSpec
from syntaxnmt.model.linear import onednn_in_training
from syntaxnmt.multitask import multitask_objective
from syntaxnmt.optim import build_optimizer
from syntaxnmt.prepare import check_tag_sets, is_prepared, load_split, load_tokenizers, prepare, tokenizer_assets
from syntaxnmt.textio import read_lines, remove_stale_temporaries, write_lines
from syntaxnmt.translate import assemble_model, resolve_device, translate_ids


@torch.no_grad()
def validate(model, cfg: Config, dev: Split, refs: list[str], tgt_tok, device: torch.device) -> dict[str, float]:
    """Teacher-forced dev loss (per target token) and, if enabled, greedy dev BLEU."""
    model.eval()
    nll_sum, tokens = 0.0, 0
    for idx in bucket_batches(dev["src"].lengths, dev["tgt"].lengths, cfg.train.max_tokens, None):
        batch = collate(dev, idx, model.feature_spec).to(device)
        _, nll = sequence_loss(model(batch), batch.tgt_out, 0.0)
        nll_sum += float(nll)
        tokens += batch.n_tgt_tokens
    result = {"loss": nll_sum / max(tokens, 1)}
    result["ppl"] = math.exp(min(result["loss"], 50))
    if cfg.train.valid_bleu:
        n = len(dev) if cfg.train.valid_max_sentences <= 0 else min(len(dev), cfg.train.valid_max_sentences)
        annotations = [dev.annotation(i) for i in range(n)] if model.feature_spec else None
        hyps = translate_ids(model, [dev["src"][i] for i in range(n)], cfg.decode, device, beam=1, annotations=annotations)
        texts = [tgt_tok.decode(h[0].tokens) for h in hyps]
        result["bleu"] = corpus_bleu(texts, [refs[:n]])
        write_lines(Path(cfg.work_dir) / "dev.hyp", texts)
    model.train()
    return result


def training_objectives(cfg: Config) -> list[AuxiliaryObjective]:
    """The auxiliary objectives of ``cfg`` that are on (``train.alignment``, ``train.multitask``)."""
    return [o for o in (alignment_objective(cfg), multitask_objective(cfg)) if o is not None]


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


def forward_loss(model, batch, t: TrainConfig, objectives=(), step: int | torch.Tensor = 0, static: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training loss of one batch, summed over its target tokens: label-smoothed cross-entropy
    plus the weighted terms of ``objectives`` (:class:`~syntaxnmt.losses.AuxiliaryObjective`: alignment, multi-task)
    at update ``step``; and the detached parts for logging (``loss`` and each unweighted term).
    Nothing here waits for the device, so it can run inside a captured CUDA graph (``static``:
    the batch has a bucketed static shape)."""
    raw = unwrap(model)
    with torch.autocast(batch.src.device.type, dtype=torch.bfloat16, enabled=t.uses_bf16(batch.src.device.type), cache_enabled=not static):
        out = model(batch, **objective_requests(raw, objectives)[2])
        loss, _ = sequence_loss(out, batch.tgt_out, t.label_smoothing, static=static)
        logs = {"loss": loss.detach()}
        for objective in objectives:
            extra, terms = objective.loss(raw, batch, out, step)
            loss = loss + extra
            logs.update(terms)
    return loss, logs


def training_batch(split: Split, idx: np.ndarray, spec, t: TrainConfig, objectives=()) -> Batch:
    """The batch of sentences ``idx`` as training reads it: with the features the model and the
    objectives need, padded to its static shape when ``train.shape_bucket`` is on (``t`` with its
    automatic settings decided: :meth:`~syntaxnmt.config.TrainConfig.for_device`)."""
    batch = collate(split, idx, spec, alignment=any(o.needs_reference for o in objectives))
    return pad_batch(batch, *shape_bucket(batch, t.max_tokens, t.shape_bucket)) if t.shape_bucket else batch


def update(model, opt, sched, split: Split, group: list[np.ndarray], t: TrainConfig, device: torch.device, objectives=(), step: int = 0, world: World = World(), graphed: GraphedStep | None = None) -> dict[str, torch.Tensor | int]:
    """One optimizer update on the batches ``group`` (gradient accumulation); returns the summed
    loss and objective terms (device tensors: reading them waits for the device, so the loop does
    that only when it logs) and ``tokens``, the update's target tokens.

    The loss is normalized by the target tokens of the whole group -- over all ranks in distributed
    training, where DDP averages the gradients -- so accumulating k batches equals one batch k times
    larger, and N ranks equal one process accumulating N times more. With ``graphed`` (CUDA
    graphs) the forward and backward passes are replayed from captured graphs.
    """
    n_tokens = sum(int(split["tgt"].lengths[idx].sum()) + len(idx) for idx in group)
    scale = world.size / sum_across(world, n_tokens)
    raw = unwrap(model)
    spec = objective_requests(raw, objectives)[0]
    opt.zero_grad(set_to_none=graphed is None)  # graphs accumulate into gradients that stay allocated
    stats: dict = {}
    static_cpu = bool(t.shape_bucket) and device.type == "cpu"
    for k, idx in enumerate(group):
        batch = training_batch(split, idx, spec, t, objectives)
        if graphed is not None:
            logs = graphed(batch, scale, step)
        else:
            # CPU: a few static shapes let the linears use oneDNN; the loss selects the target
            # tokens itself (static=False: with bounded shapes too, see losses.sequence_loss).
            with no_sync(model, skip=k < len(group) - 1), onednn_in_training(static_cpu):
                loss, logs = forward_loss(model, batch.to(device), t, objectives, step, static=bool(t.shape_bucket) and not static_cpu)
                (loss * scale).backward()
        for name, value in logs.items():
            stats[name] = stats[name] + value if name in stats else value
    if t.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
    opt.step()
    sched.step()
    return {**stats, "tokens": n_tokens}


def improved(metric: str, value: float, best: float | None) -> bool:
    if best is None:
        return True
    return value > best if metric == "bleu" else value < best


def validate_and_record(model, cfg: Config, dev: Split, refs: list[str], tgt_tok, device: torch.device, prog: Progress, log, writer=None) -> bool:
    """Validate ``model`` on ``dev``, update ``prog.best``/``bad_validations``, log; returns
    whether the result is the best so far."""
    metric = cfg.train.early_stopping_metric if cfg.train.valid_bleu else "loss"
    result = validate(model, cfg, dev, refs, tgt_tok, device)
    is_best = improved(metric, result[metric], prog.best)
    if is_best:
        prog.best, prog.bad_validations = result[metric], 0
    else:
        prog.bad_validations += 1
    shown = " ".join(f"{k} {v:.3f}" if k != "bleu" else f"BLEU {v:.2f}" for k, v in result.items())
    log(f"update {prog.step} | dev {shown}{' | new best' if is_best else ''}")
    if writer:
        for k, v in result.items():
            writer.add_scalar(f"valid/{k}", v, prog.step)
    return is_best


def check_dev_lengths(cfg: Config, dev: Split) -> None:
    """Dev pairs are not length-filtered (BLEU is computed on all of them): one longer than the
    model's position table would fail the dev loss, so it is a user error before training."""
    m = cfg.model
    longest = max(int(dev["src"].lengths.max(initial=0)), int(dev["tgt"].lengths.max(initial=0)))
    if m.position_table and longest >= m.max_positions:
        raise UserError(f"{cfg.data.dev_src}: a dev pair has a sentence of {longest} subwords, more than model.max_positions {m.max_positions} holds with its end symbol: raise model.max_positions")


class Run:
    """The files of one model's run in ``work_dir``: ``last.pt``, ``best.pt``, ``config.yaml``."""

    def __init__(self, cfg: Config, assets: dict | None = None):
        self.cfg = cfg
        self.work = Path(cfg.work_dir)
        self.last, self.best = self.work / "last.pt", self.work / "best.pt"
        self.assets = assets  # the tokenizers, stored in every checkpoint (prepare.tokenizer_assets)

    def save(self, model, opt, sched, prog: Progress, is_best: bool = False, periodic: bool = False) -> None:
        """``periodic``: also keep the weights among the last ``train.keep_checkpoints`` (a validation)."""
        state = {"config": self.cfg.model_dump(mode="json"), "model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "progress": asdict(prog), "rng": loop.rng_state()}
        if self.assets is not None:
            state["assets"] = self.assets
        save_checkpoint(self.last, state)
        if is_best:
            save_checkpoint(self.best, state)
        if periodic and self.cfg.train.keep_checkpoints:
            keep_periodic(self.work, state, prog.step, self.cfg.train.keep_checkpoints)

    def restore(self, model, opt, sched) -> tuple[Progress, dict]:
        """Load ``last.pt`` into the model and optimizer; returns the progress and the RNG state."""
        state = load_model_checkpoint(self.last)
        missing = [k for k in ("optimizer", "scheduler", "progress", "rng") if k not in state]
        if missing:
            raise UserError(f"{self.last}: not a training checkpoint (no {', '.join(map(repr, missing))}): it cannot be resumed")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        return Progress(**state["progress"]), state["rng"]


class SingleModel:
    """The :class:`~syntaxnmt.loop.Task` of ``syntaxnmt train``: one model, its optimizer and run folder."""

    def __init__(self, cfg: Config, world: World, device: torch.device, log: Callable, writer=None):
        self.cfg, self.world, self.device, self.log, self.writer = cfg, world, device, log, writer
        self.toks = load_tokenizers(cfg)
        check_tag_sets(cfg, self.toks.tags)
        self.split, self.dev = load_split(cfg, "train"), load_split(cfg, "dev")
        check_dev_lengths(cfg, self.dev)
        self.refs = read_lines(cfg.prepared_dir / "dev.ref")
        self.raw = assemble_model(cfg, self.toks).to(device)
        self.model = self.raw
        self.objectives = training_objectives(cfg)
        self.opt, self.sched = build_optimizer(self.raw, cfg.train)
        self.run = Run(cfg, tokenizer_assets(self.toks))
        self.progress = Progress()
        self.t = t = cfg.train.for_device(device.type, world.size)  # the automatic settings decided
        set_matmul_precision(t, device)
        if cfg.train.cuda_graphs and not t.cuda_graphs:
            log(f"train.cuda_graphs: off ({'several processes' if world.distributed else 'not a CUDA device'})")
        self.graphed = GraphedStep(self.raw, lambda batch, step: forward_loss(self.raw, batch, t, self.objectives, step, static=True)) if t.cuda_graphs else None

    @property
    def bad_validations(self) -> int:
        return self.progress.bad_validations

    def resume(self) -> None:
        self.progress, rng = self.run.restore(self.raw, self.opt, self.sched)
        loop.set_rng_state(rng)
        p = self.progress
        self.log(f"resumed {self.run.last} at update {p.step} (epoch {p.epoch}, batch {p.batch_pos})")

    def distribute(self) -> None:
        if self.world.distributed:
            self.model = torch.nn.parallel.DistributedDataParallel(self.raw, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def update(self, group: list[np.ndarray], step: int) -> dict:
        args = (self.model, self.opt, self.sched, self.split, group, self.t, self.device, self.objectives, step, self.world)
        try:
            return update(*args, graphed=self.graphed)
        except RuntimeError as e:
            if self.graphed is None:
                raise
            self.log(f"train.cuda_graphs: capturing failed, training goes on without graphs ({str(e).splitlines()[0]})")
            self.graphed = None
            return update(*args)

    def summarize(self, window: dict) -> dict[str, float]:
        """Per target token: the loss and every objective term; and the learning rate."""
        tokens = max(float(window.get("tokens", 0)), 1.0)
        return {**{k: float(v) / tokens for k, v in window.items() if k != "tokens"}, "lr": self.sched.get_last_lr()[0]}

    def validate(self) -> None:
        is_best = validate_and_record(self.raw, self.cfg, self.dev, self.refs, self.toks.tgt, self.device, self.progress, self.log, self.writer)
        self.run.save(self.raw, self.opt, self.sched, self.progress, is_best and self.cfg.train.keep_best, periodic=True)

    def save(self) -> None:
        self.run.save(self.raw, self.opt, self.sched, self.progress)


def set_matmul_precision(t: TrainConfig, device: torch.device) -> None:
    """TF32 tensor-core products for ``precision: tf32`` on CUDA (float32 storage everywhere)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = t.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = t.precision == "tf32"


def start(cfg: Config, resume: bool, log: Callable) -> bool:
    """Check the run folder and decide whether to resume; seed and set threads."""
    run = Run(cfg)
    for tmp in remove_stale_temporaries(run.work):
        log(f"removed {tmp}, left by an interrupted write")
    if run.last.exists() and not resume:
        raise UserError(f"{run.last} exists: pass --resume to continue that run, or choose another work_dir")
    if resume and not run.last.exists():
        log(f"no checkpoint in {run.work}: starting a new run")
        resume = False
    loop.seed_everything(cfg.seed)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    keep_freed_memory()
    return resume


def tensorboard_writer(cfg: Config, enabled: bool = True):
    if not (cfg.train.tensorboard and enabled):
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(Path(cfg.work_dir) / "tensorboard"))


def train(cfg: Config, resume: bool = False, log=tqdm.write) -> Progress:
    """Train ``cfg`` (preparing its corpus first if needed); returns the final progress."""
    t = cfg.train
    resume = start(cfg, resume, log)
    world = init_world(t.device)
    if not world.is_main:
        log = lambda *a, **k: None  # noqa: E731  (rank 0 alone logs)
    device = device_for(world, resolve_device(t.device))
    if t.alignment.symmetry_weight > 0:
        raise UserError("train.alignment.symmetry_weight trains two models jointly: use `syntaxnmt train-joint`")
    if world.is_main and not is_prepared(cfg):
        prepare(cfg, log=log)
    barrier(world)
    writer = tensorboard_writer(cfg, world.is_main)
    task = SingleModel(cfg, world, device, log, writer)
    if resume:
        task.resume()
    if world.is_main:
        task.run.work.mkdir(parents=True, exist_ok=True)
        cfg.save(task.run.work / "config.yaml")
    n_params = sum(p.numel() for p in task.raw.parameters())
    log(f"{cfg.name}: {n_params / 1e6:.2f}M parameters, {len(task.split)} training pairs, device {device}" + (f", {world.size} processes" if world.distributed else ""))
    task.distribute()
    sampler = TokenBatchSampler(task.split["src"].lengths, task.split["tgt"].lengths, t.max_tokens, cfg.seed, num_shards=world.size, shard=world.rank, multiple=task.t.shape_bucket)
    result = loop.run(task, t, sampler, log, world=world, writer=writer)
    prog = task.progress
    log(f"stopped ({result.stop_reason}) at update {prog.step}, epoch {prog.epoch}; best {t.early_stopping_metric} {prog.best}; checkpoints in {cfg.work_dir}")
    if writer:
        writer.close()
    barrier(world)
    shutdown(world)
    loop.raise_if_interrupted(result, str(task.run.last))
    return prog
