"""``syntaxnmt train``: training one model.

One update = ``accum_steps`` token-bucketed batches, loss normalized by their target tokens,
gradient clipping, Adam, inverse-sqrt schedule. Every ``valid_every`` updates: dev loss and
greedy-decoded dev BLEU, ``last.pt`` (and ``best.pt`` on improvement) written atomically with
everything needed to resume exactly: model, optimizer, scheduler, RNG states and the position in
the data order. The loop itself (budget, logging, validation cadence, signals) is
:func:`syntaxnmt.training.loop.run`, shared with ``train-joint``.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.checkpoint import load_model_checkpoint, load_weights, nonfinite_weight, save_checkpoint
from syntaxnmt.config import Config, TrainConfig
from syntaxnmt.cpu import install as install_cpu
from syntaxnmt.cpu.calibration import prepare as prepare_cpu_kernels
from syntaxnmt.cpu.machine import set_native_training
from syntaxnmt.cpu.threads import configure_threads, describe_threads
from syntaxnmt.data.batches import Split, TokenBatchSampler, bucket_batches, collate, document_batches
from syntaxnmt.data.documents import DocumentContext, document_context
from syntaxnmt.data.prepare import check_tag_sets, is_prepared, load_split, load_tokenizers, prepare, read_meta, tokenizer_assets, tokenizers_from_assets
from syntaxnmt.decoding.averaging import keep_periodic
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.errors import UserError
from syntaxnmt.metrics import corpus_bleu
from syntaxnmt.model import build_model
from syntaxnmt.runtime import keep_freed_memory, resolve_device
from syntaxnmt.textio import LOCK_FILE, folder_lock, read_lines, remove_stale_temporaries, write_lines
from syntaxnmt.training import loop
from syntaxnmt.training.cuda_graphs import GraphedStep
from syntaxnmt.training.distributed import World, barrier, device_for, init_world, shutdown
from syntaxnmt.training.events import EventLog
from syntaxnmt.training.loop import Progress
from syntaxnmt.training.losses import sequence_loss
from syntaxnmt.training.objectives import training_objectives
from syntaxnmt.training.optim import build_optimizer
from syntaxnmt.training.step import forward_loss, timing_step, update


def training_batches(split: Split, cfg: Config, context: DocumentContext | None, rng: np.random.Generator | None) -> list[np.ndarray]:
    """The batches (sentence indices) of ``split`` by ``train.max_tokens``: length-bucketed, or for
    a HAN model contiguous runs of documents (:func:`~syntaxnmt.data.batches.document_batches`)."""
    if context is not None and context.reads_states:
        return document_batches(split.docs, split["src"].lengths, split["tgt"].lengths, cfg.train.max_tokens, context.reach, rng)
    return bucket_batches(split["src"].lengths, split["tgt"].lengths, cfg.train.max_tokens, rng)


@torch.no_grad()
def validate(model, cfg: Config, dev: Split, refs: list[str], tgt_tok, device: torch.device) -> dict[str, float]:
    """Teacher-forced dev loss (per target token) and, if enabled, greedy dev BLEU."""
    model.eval()
    context = getattr(model, "document_context", None)
    nll_sum, tokens = 0.0, 0
    for idx in training_batches(dev, cfg, context, None):
        batch = collate(dev, idx, model.feature_spec, context=context).to(device)
        _, nll = sequence_loss(model(batch), batch.tgt_out, 0.0)
        nll_sum += float(nll)
        tokens += batch.n_tgt_tokens
    result = {"loss": nll_sum / max(tokens, 1)}
    result["ppl"] = math.exp(min(result["loss"], 50))
    if cfg.train.valid_bleu:
        n = len(dev) if cfg.train.valid_max_sentences <= 0 else min(len(dev), cfg.train.valid_max_sentences)
        annotations = [dev.annotation(i) for i in range(n)] if model.feature_spec else None
        previous = dev.previous(context.sentences)[:n] if context else None  # the first n sentences: their previous ones come before them
        hyps = translate_ids(model, [dev["src"][i] for i in range(n)], cfg.decode, device, beam=1, annotations=annotations, previous=previous)
        texts = [tgt_tok.decode(h[0].tokens) for h in hyps]
        result["bleu"] = corpus_bleu(texts, [refs[:n]])
        write_lines(Path(cfg.work_dir) / "dev.hyp", texts)
    model.train()
    return result


def improved(metric: str, value: float, best: float | None) -> bool:
    if best is None:
        return True
    return value > best if metric == "bleu" else value < best


def validate_and_record(model, cfg: Config, dev: Split, refs: list[str], tgt_tok, device: torch.device, prog: Progress, log, writer=None) -> bool:
    """Validate ``model`` on ``dev``, update ``prog.best``/``bad_validations``, log; returns
    whether the result is the best so far."""
    metric = cfg.train.early_stopping_metric if cfg.train.valid_bleu else "loss"
    result = validate(model, cfg, dev, refs, tgt_tok, device)
    if not math.isfinite(result["loss"]):  # never a "new best" from a diverged model
        raise UserError(f"training diverged: the dev loss is {result['loss']} at update {prog.step}; no checkpoint was written from it (lower train.lr, or see train.max_nonfinite)")
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


RESUMABLE_MODEL_KEYS = frozenset({"dropout", "attention_dropout"})
"""``model`` keys a resumed run may change: regularizers of training, not the function the model computes."""


def _flatten(tree: Mapping, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        out.update(_flatten(value, name + ".") if isinstance(value, Mapping) else {name: value})
    return out


def changed_model_keys(stored: Mapping, cfg: Config) -> list[tuple[str, object, object]]:
    """The ``model`` keys (dotted, below ``model``) whose value in ``cfg`` differs from the one in
    ``stored`` (the config dict of a checkpoint), as (key, stored value, new value). A head count
    changes no weight shape, so only this comparison finds it; keys the stored config lacks (an
    older version's) and :data:`RESUMABLE_MODEL_KEYS` are left out."""
    old = _flatten(stored.get("model") or {}) if isinstance(stored, Mapping) else {}
    new = _flatten(cfg.model.model_dump(mode="json"))
    return [(k, old[k], v) for k, v in new.items() if k in old and old[k] != v and k not in RESUMABLE_MODEL_KEYS]


def _pieces(tok) -> list[str]:
    return [tok.id_to_piece(i) for i in range(len(tok))]


def changed_tokenizers(cfg: Config, stored: Mapping | None, current: Mapping | None) -> list[str]:
    """What differs between the tokenizers a checkpoint stores (``stored``, its ``assets``) and
    ``current`` (:func:`~syntaxnmt.data.prepare.tokenizer_assets` of the prepared corpus): "the
    source vocabulary (N of M piece ids differ)", "the target vocabulary", "the tag vocabulary".
    The pieces are compared, not the model files' bytes. Empty when either is unknown (an older checkpoint)."""
    if not stored or not current or all(stored.get(k) == current.get(k) for k in ("spm_src", "spm_tgt", "tags")):
        return []
    try:
        old = tokenizers_from_assets(cfg, stored)
    except (UserError, RuntimeError, ValueError, OSError) as e:  # another kind of vocabulary (words, not SentencePiece), or damaged
        return [f"the stored tokenizers, which this run cannot read ({str(e).splitlines()[0] if str(e) else type(e).__name__})"]
    new = tokenizers_from_assets(cfg, current)
    found = []
    for side, a, b in (("source", old.src, new.src), ("target", old.tgt, new.tgt)):
        pa, pb = _pieces(a), _pieces(b)
        if pa != pb:
            differ = sum(x != y for x, y in zip(pa, pb)) + abs(len(pa) - len(pb))
            found.append(f"the {side} vocabulary ({differ} of {max(len(pa), len(pb))} piece ids differ)")
    if (stored.get("tags") or None) != (current.get("tags") or None):
        found.append("the tag vocabulary")
    return found


def changed_inputs(stored: Mapping | None, current: Mapping | None) -> list[str]:
    """The ``data.*`` input files whose SHA-256 differs between a checkpoint's record and the prepared corpus's."""
    if not stored or not current:
        return []
    return [f"data.{k}" for k in sorted(set(stored) | set(current)) if stored.get(k) != current.get(k)]


OPTIMIZER_KEYS = (("adam_betas", "betas"), ("adam_eps", "eps"), ("weight_decay", "weight_decay"))
"""``train`` keys an optimizer's saved state holds (``param_groups``), with their names there: loading it
would override the config's values (``train.lr``, the schedule's peak, is the scheduler's: :func:`apply_optimizer_options`)."""


def apply_optimizer_options(opt, sched, t: TrainConfig) -> list[str]:
    """After a resumed optimizer and schedule are loaded: apply the config's ``train.lr`` (the
    peak of the schedule, Vaswani et al. 2017 Eq. 3, from this update on), ``adam_betas``,
    ``adam_eps`` and ``weight_decay`` where they differ from the saved ones, which loading had
    put back. Returns "train.KEY OLD -> NEW" for each one applied."""
    changed = []
    for key, name in OPTIMIZER_KEYS:
        new = tuple(getattr(t, key)) if key == "adam_betas" else getattr(t, key)
        old = opt.param_groups[0][name]
        if (tuple(old) if key == "adam_betas" else old) != new:
            changed.append(f"train.{key} {old} -> {new}")
            for group in opt.param_groups:
                group[name] = new
    if any(base != t.lr for base in sched.base_lrs):
        changed.append(f"train.lr {sched.base_lrs[0]:g} -> {t.lr:g}")
        sched.base_lrs = [t.lr] * len(opt.param_groups)
        for group, factor in zip(opt.param_groups, sched.lr_lambdas):
            group["initial_lr"], group["lr"] = t.lr, t.lr * factor(sched.last_epoch)
        sched._last_lr = [group["lr"] for group in opt.param_groups]
    return changed


RUN_FILES = dict.fromkeys(("last.pt", "best.pt", "config.yaml", "dev.hyp", "data", "tensorboard", "checkpoints", "averaged.pt", LOCK_FILE))
"""What a training run writes in its ``work_dir`` (:data:`syntaxnmt.textio.Owned`): the checkpoints,
its config, the dev translations, the prepared corpus (``data/`` by default), TensorBoard's
events, the periodic checkpoints, ``average-checkpoints``' default output and the lock."""


class Run:
    """The files of one model's run in ``work_dir``: ``last.pt``, ``best.pt``, ``config.yaml``."""

    def __init__(self, cfg: Config, assets: dict | None = None):
        self.cfg = cfg
        self.work = Path(cfg.work_dir)
        self.last, self.best = self.work / "last.pt", self.work / "best.pt"
        self.assets = assets  # the tokenizers, stored in every checkpoint (prepare.tokenizer_assets)
        meta = read_meta(cfg.prepared_dir) if assets is not None else None
        self.inputs = meta.get("inputs") if meta else None  # the corpus files' SHA-256, stored too: a resume names what changed
        # the CPU kernel choice of the run (cpu.calibration.prepare's record), stored in every checkpoint
        # and read back by restore: a resumed run computes with the same kernels (exact resume)
        self.cpu_kernels: dict | None = None

    def save(self, model, opt, sched, prog: Progress, is_best: bool = False, periodic: bool = False) -> None:
        """``periodic``: also keep the weights among the last ``train.keep_checkpoints`` (a validation).
        Weights with NaN or inf are never written (a :class:`UserError`): a diverged run keeps its
        last finite checkpoints."""
        bad = nonfinite_weight(model.state_dict())
        if bad is not None:
            raise UserError(f"training diverged: the weights are not finite after update {prog.step} ({bad} holds NaN or inf); {self.last} was not written (lower train.lr, or see train.max_nonfinite)")
        state = {"config": self.cfg.model_dump(mode="json"), "model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "progress": asdict(prog), "rng": loop.rng_state()}
        if self.assets is not None:
            state["assets"] = self.assets
        if self.inputs is not None:
            state["data_inputs"] = self.inputs
        if self.cpu_kernels is not None:
            state["cpu_kernels"] = self.cpu_kernels
        save_checkpoint(self.last, state)
        if is_best:
            save_checkpoint(self.best, state)
        if periodic and self.cfg.train.keep_checkpoints:
            keep_periodic(self.work, state, prog.step, self.cfg.train.keep_checkpoints)

    def restore(self, model, opt, sched, log: Callable = lambda _: None) -> tuple[Progress, dict]:
        """Load ``last.pt`` into the model and optimizer; returns the progress and the RNG state
        (and keeps the run's CPU kernel choice in :attr:`cpu_kernels`). A config whose model differs from the run's (a changed size or head count) is refused,
        naming the keys, before any weight is loaded; so is a prepared corpus whose vocabulary is
        not the run's (its weights belong to other piece ids), naming the vocabulary and the
        changed input files. The config's optimizer settings are applied (:func:`apply_optimizer_options`, logged)."""
        state = load_model_checkpoint(self.last)
        missing = [k for k in ("optimizer", "scheduler", "progress", "rng") if k not in state]
        if missing:
            raise UserError(f"{self.last}: not a training checkpoint (no {', '.join(map(repr, missing))}): it cannot be resumed")
        changed = changed_model_keys(state["config"], self.cfg)
        if changed:
            shown = "; ".join(f"model.{key} {old} in the run, {new} in the config" for key, old, new in changed[:3])
            raise UserError(f"{self.last}: --resume continues a run with the model it was trained with, but the config changes it ({shown}): restore those values (the run's config is {self.work / 'config.yaml'}) or choose another work_dir")
        vocab = changed_tokenizers(self.cfg, state.get("assets"), self.assets)
        if vocab:
            files = changed_inputs(state.get("data_inputs"), self.inputs)
            why = f" ({', '.join(files)} changed since the run began)" if files else ""
            raise UserError(f"{self.last}: --resume continues a run with the vocabulary it was trained with, but the prepared corpus has another: {' and '.join(vocab)}{why}; restore the run's corpus, or train anew in another work_dir")
        load_weights(model, state["model"], self.last, "the model of this config (--resume continues a run with the model it was trained with)")
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        for change in apply_optimizer_options(opt, sched, self.cfg.train):
            log(f"{change}: applied on resume from update {state['progress'].get('step', 0)}")
        self.cpu_kernels = state.get("cpu_kernels")
        return Progress(**state["progress"]), state["rng"]


class SingleModel:
    """The :class:`~syntaxnmt.training.loop.Task` of ``syntaxnmt train``: one model, its optimizer and run folder."""

    def __init__(self, cfg: Config, world: World, device: torch.device, log: Callable, writer=None):
        self.cfg, self.world, self.device, self.log, self.writer = cfg, world, device, log, writer
        self.toks = load_tokenizers(cfg)
        check_tag_sets(cfg, self.toks.tags)
        self.split, self.dev = load_split(cfg, "train"), load_split(cfg, "dev")
        check_dev_lengths(cfg, self.dev)
        self.refs = read_lines(cfg.prepared_dir / "dev.ref")
        self.raw = install_cpu(build_model(cfg, **self.toks.vocab_sizes()).to(device))  # on CPU, the CPU's execution (syntaxnmt.cpu)
        self.raw.document_context = document_context(cfg, self.toks.src, self.toks.tgt)
        self.model = self.raw
        self.objectives = training_objectives(cfg)
        self.opt, self.sched = build_optimizer(self.raw, cfg.train)
        self.run = Run(cfg, tokenizer_assets(self.toks))
        self.progress = Progress()
        self.t = t = cfg.train.for_device(device.type, world.size)  # the automatic settings decided
        set_matmul_precision(t, device)
        off = None if t.cuda_graphs else "several processes" if world.distributed else "not a CUDA device"
        if t.cuda_graphs and cfg.model.context.reads_states:
            # The context rows of a HAN batch (batch.context_rows) are no graph input: HAN trains without graphs.
            self.t = t = t.model_copy(update={"cuda_graphs": False})
            off = "a HAN model reads its context through the rows of each batch"
        if cfg.train.cuda_graphs and off:
            log(f"train.cuda_graphs: off ({off})")
        self.graphed = GraphedStep(self.raw, lambda batch, step: forward_loss(self.raw, batch, t, self.objectives, step, static=True)) if t.cuda_graphs else None

    def choose_cpu_kernels(self) -> None:
        """On CPU, the native kernels (``train.cpu_native``), the linear layers' kernels and row packing (``train.cpu_kernels``,
        ``train.row_packing``, :mod:`syntaxnmt.cpu.calibration`): in mode ``auto`` timed on whole
        training steps of this model (:func:`~syntaxnmt.training.step.timing_step`); a resumed run
        reuses the choice its checkpoint records, and the checkpoints record it."""
        if self.device.type == "cpu":
            set_native_training(self.t.cpu_native == "auto")  # before the timing: the steps as they will run
            timing = lambda: timing_step(self.raw, self.split, self.t, self.device, self.objectives)  # noqa: E731
            self.run.cpu_kernels = prepare_cpu_kernels(self.raw, self.t.cpu_kernels, row_packing=self.t.row_packing, timing=timing, log=self.log, recorded=self.run.cpu_kernels)["record"]

    @property
    def bad_validations(self) -> int:
        return self.progress.bad_validations

    def resume(self) -> None:
        self.progress, rng = self.run.restore(self.raw, self.opt, self.sched, self.log)
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
    for tmp in remove_stale_temporaries(run.work, recursive=True):  # checkpoints/ too: a kill during a periodic write
        log(f"removed {tmp}, left by an interrupted write")
    if run.last.exists() and not resume:
        raise UserError(f"{run.last} exists: pass --resume to continue that run, or choose another work_dir")
    if resume and not run.last.exists():
        log(f"no checkpoint in {run.work}: starting a new run")
        resume = False
    loop.seed_everything(cfg.seed)
    if cfg.train.threads:
        configure_threads(cfg.train.threads)
    keep_freed_memory()
    return resume


def tensorboard_writer(cfg: Config, enabled: bool = True, log: Callable = tqdm.write) -> EventLog | None:
    """The run's TensorBoard log (``work_dir/tensorboard``), or None when it is off; a full disk
    stops it with one message naming its file (:class:`~syntaxnmt.training.events.EventLog`)."""
    if not (cfg.train.tensorboard and enabled):
        return None
    return EventLog(Path(cfg.work_dir) / "tensorboard", log)


def init_weights(model: torch.nn.Module, path: str, log, cfg: Config | None = None, assets: Mapping | None = None) -> None:
    """Start ``model`` from the weights of the checkpoint at ``path`` (``train.init_from``): every
    parameter the checkpoint holds must fit; the others (e.g. the HAN block of a context model
    fine-tuned from a sentence-level one, Miculicich et al. 2018 Sec. 3) keep their initialization.
    With ``assets`` (this run's tokenizers) the checkpoint's must have the same pieces: embedding
    rows of the same count may belong to other pieces."""
    checkpoint = load_model_checkpoint(path)
    vocab = changed_tokenizers(cfg, checkpoint.get("assets"), assets) if cfg is not None else []
    if vocab:
        raise UserError(f"train.init_from {path}: its tokenizers are not this run's: {' and '.join(vocab)}; its embedding rows would belong to other pieces (prepare this corpus with the checkpoint's vocabulary, or train from scratch)")
    state = checkpoint["model"]
    own = model.state_dict()
    unknown = [k for k in state if k not in own]
    wrong = [k for k in state if k in own and own[k].shape != state[k].shape]
    if unknown or wrong:
        what = f"{len(unknown)} parameters this model lacks (e.g. {unknown[0]})" if unknown else f"{wrong[0]} has shape {tuple(state[wrong[0]].shape)}, not {tuple(own[wrong[0]].shape)}"
        raise UserError(f"train.init_from {path}: not weights of this architecture ({what})")
    model.load_state_dict(state, strict=False)
    missing = [k for k in own if k not in state]
    log(f"initialized from {path}" + (f" ({len(missing)} parameters new, e.g. {missing[0]})" if missing else ""))


def work_dir_lock(cfg: Config, log: Callable) -> contextlib.AbstractContextManager:
    """The exclusive lock of ``work_dir`` (:func:`~syntaxnmt.textio.folder_lock`): one training
    run writes a run folder at a time -- a second ``train`` on it is a :class:`UserError` naming
    the holder. Taken by the first rank only (torchrun's other ranks train the same run)."""
    if int(os.environ.get("RANK", "0")) != 0:
        return contextlib.nullcontext()
    return folder_lock(cfg.work_dir, "work_dir", log)


def train(cfg: Config, resume: bool = False, log=tqdm.write) -> Progress:
    """Train ``cfg`` (preparing its corpus first if needed) holding the lock of its ``work_dir``;
    returns the final progress."""
    with work_dir_lock(cfg, log):
        return _train(cfg, resume, log)


def _train(cfg: Config, resume: bool, log) -> Progress:
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
    writer = tensorboard_writer(cfg, world.is_main, log)
    task = SingleModel(cfg, world, device, log, writer)
    if resume:
        task.resume()
    elif t.init_from:
        init_weights(task.raw, t.init_from, log, cfg, task.run.assets)
    if world.is_main:
        task.run.work.mkdir(parents=True, exist_ok=True)
        cfg.save(task.run.work / "config.yaml")
    n_params = sum(p.numel() for p in task.raw.parameters())
    log(f"{cfg.name}: {n_params / 1e6:.2f}M parameters, {len(task.split)} training pairs, device {device}" + (f", {describe_threads()}" if device.type == "cpu" else "") + (f", {world.size} processes" if world.distributed else ""))
    task.choose_cpu_kernels()
    task.distribute()
    han = cfg.model.context.reads_states  # HAN: batches of contiguous runs of documents
    sampler = TokenBatchSampler(task.split["src"].lengths, task.split["tgt"].lengths, t.max_tokens, cfg.seed, num_shards=world.size, shard=world.rank, multiple=task.t.shape_bucket, docs=task.split.docs if han else None, context=task.raw.document_context.reach if han else 0)
    result = loop.run(task, t, sampler, log, world=world, writer=writer)
    prog = task.progress
    log(f"stopped ({result.stop_reason}) at update {prog.step}, epoch {prog.epoch}; best {t.early_stopping_metric} {prog.best}; checkpoints in {cfg.work_dir}")
    if writer:
        writer.close()
    barrier(world)
    shutdown(world)
    loop.raise_if_interrupted(result, str(task.run.last))
    return prog
