"""``syntaxnmt train``: the training loop.

One update = ``accum_steps`` token-bucketed batches, loss normalized by their target tokens,
gradient clipping, Adam, inverse-sqrt schedule. Every ``valid_every`` updates: dev loss and
greedy-decoded dev BLEU, ``last.pt`` (and ``best.pt`` on improvement) written atomically with
everything needed to resume exactly: model, optimizer, scheduler, RNG states and the position in
the data order. Ctrl-C or SIGTERM stops at the next update boundary and saves ``last.pt``.
"""

from __future__ import annotations

import math
import random
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.alignment_training import alignment_objective, attach_fertility
from syntaxnmt.batches import Split, TokenBatchSampler, bucket_batches, collate
from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.config import Config, TrainConfig
from syntaxnmt.cpu import keep_freed_memory
from syntaxnmt.distributed import World, barrier, broadcast_flag, device_for, init_world, no_sync, shutdown, sum_across, unwrap
from syntaxnmt.errors import UserError
from syntaxnmt.losses import sequence_loss
from syntaxnmt.metrics import corpus_bleu
from syntaxnmt.model import build_model
from syntaxnmt.optim import build_optimizer
from syntaxnmt.prepare import feature_vocab_sizes, is_prepared, load_split, load_tokenizers, prepare
from syntaxnmt.textio import read_lines, write_lines
from syntaxnmt.translate import resolve_device, translate_ids


@dataclass
class Progress:
    """Where training stands; saved in checkpoints."""

    step: int = 0
    epoch: int = 0
    batch_pos: int = 0  # next batch of ``epoch`` to train on
    best: float | None = None
    bad_validations: int = 0
    train_seconds: float = 0.0
    train_tokens: int = 0  # target tokens trained on (for tokens/s)
    stop_reason: str = ""  # why the last session stopped: max_steps, max_epochs, early stopping, max_minutes, interrupted


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class _StopFlag:
    """Turns the first SIGINT/SIGTERM into a request to stop at the next update boundary."""

    def __init__(self):
        self.requested = False
        self._old = {}

    def __enter__(self):
        def handler(signum, frame):
            if self.requested:  # second signal: stop now
                raise KeyboardInterrupt
            self.requested = True

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


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
        annotations = [dev.annotation(i) for i in range(n)] if model.feature_spec.names else None
        hyps = translate_ids(model, [dev["src"][i] for i in range(n)], cfg.decode, device, beam=1, annotations=annotations)
        texts = [tgt_tok.decode(h[0].tokens) for h in hyps]
        result["bleu"] = corpus_bleu(texts, [refs[:n]])
        write_lines(Path(cfg.work_dir) / "dev.hyp", texts)
    model.train()
    return result


def update(model, opt, sched, split: Split, group: list[np.ndarray], t: TrainConfig, device: torch.device, objective=None, step: int = 0, world: World = World()) -> tuple[float, int]:
    """One optimizer update on the batches ``group`` (gradient accumulation); returns (summed loss, target tokens).

    The loss is normalized by the target tokens of the whole group -- over all ranks in distributed
    training, where DDP averages the gradients -- so accumulating k batches equals one batch k times
    larger, and N ranks equal one process accumulating N times more. An
    :class:`~syntaxnmt.alignment_training.AlignmentObjective` adds its attention terms (at update
    ``step``) to every batch's loss.
    """
    n_tokens = sum(int(split["tgt"].lengths[idx].sum()) + len(idx) for idx in group)
    scale = world.size / sum_across(world, n_tokens)
    raw = unwrap(model)
    opt.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for k, idx in enumerate(group):
        batch = collate(split, idx, raw.feature_spec, alignment=objective is not None and objective.needs_reference).to(device)
        with no_sync(model, skip=k < len(group) - 1):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=t.precision == "bf16"):
                out = model(batch, need_weights=objective is not None)
                loss, _ = sequence_loss(out, batch.tgt_out, t.label_smoothing)
                if objective is not None:
                    loss = loss + objective.loss(raw, batch, out, step)
            (loss * scale).backward()
        loss_sum += loss.item()
    if t.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
    opt.step()
    sched.step()
    return loss_sum, n_tokens


def _improved(metric: str, value: float, best: float | None) -> bool:
    if best is None:
        return True
    return value > best if metric == "bleu" else value < best


def train(cfg: Config, resume: bool = False, log=tqdm.write) -> Progress:
    """Train ``cfg`` (preparing its corpus first if needed); returns the final progress."""
    t = cfg.train
    work = Path(cfg.work_dir)
    last_path, best_path = work / "last.pt", work / "best.pt"
    if last_path.exists() and not resume:
        raise UserError(f"{last_path} exists: pass --resume to continue that run, or choose another work_dir")
    if resume and not last_path.exists():
        log(f"no checkpoint in {work}: starting a new run")
        resume = False
    world = init_world(t.device)
    if not world.is_main:
        log = lambda *a, **k: None  # noqa: E731  (rank 0 alone logs)
    seed_everything(cfg.seed)
    if t.threads:
        torch.set_num_threads(t.threads)
    keep_freed_memory()
    device = device_for(world, resolve_device(t.device))
    if world.is_main and not is_prepared(cfg):
        prepare(cfg, log=log)
    barrier(world)
    toks = load_tokenizers(cfg)
    train_split, dev = load_split(cfg, "train"), load_split(cfg, "dev")
    refs = read_lines(cfg.prepared_dir / "dev.ref")

    if t.alignment.symmetry_weight > 0:
        raise UserError("train.alignment.symmetry_weight trains two models jointly: use `syntaxnmt train-joint`")
    model = attach_fertility(build_model(cfg.model, len(toks.src), len(toks.tgt), **feature_vocab_sizes(cfg)), cfg).to(device)
    raw_model = model
    objective = alignment_objective(cfg)
    opt, sched = build_optimizer(model, t)
    prog = Progress()
    if resume:
        state = load_checkpoint(last_path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        prog = Progress(**state["progress"])
        set_rng_state(state["rng"])
        log(f"resumed {last_path} at update {prog.step} (epoch {prog.epoch}, batch {prog.batch_pos})")
    if world.is_main:
        work.mkdir(parents=True, exist_ok=True)
        cfg.save(work / "config.yaml")
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{cfg.name}: {n_params / 1e6:.2f}M parameters, {len(train_split)} training pairs, device {device}" + (f", {world.size} processes" if world.distributed else ""))
    if world.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    writer = None
    if t.tensorboard and world.is_main:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(work / "tensorboard"))
    sampler = TokenBatchSampler(train_split["src"].lengths, train_split["tgt"].lengths, t.max_tokens, cfg.seed, num_shards=world.size, shard=world.rank)

    def checkpoint(is_best: bool) -> None:
        state = {
            "config": cfg.model_dump(mode="json"),
            "model": raw_model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "progress": asdict(prog),
            "rng": rng_state(),
        }
        save_checkpoint(last_path, state)
        if is_best:
            save_checkpoint(best_path, state)

    stream = sampler.stream(prog.epoch, prog.batch_pos, t.max_epochs)
    bar = tqdm(total=t.max_steps, initial=prog.step, desc="train", unit="upd", dynamic_ncols=True, mininterval=1.0, disable=not world.is_main)
    window_tokens, window_loss, window_start = 0, 0.0, time.perf_counter()
    session_start = time.perf_counter() - prog.train_seconds
    stop_reason = "max_steps"
    model.train()
    with _StopFlag() as stop:
        while prog.step < t.max_steps:
            group = [b for _, b in zip(range(t.accum_steps), stream)]
            if len(group) < t.accum_steps:
                stop_reason = "max_epochs"
                break
            loss_sum, n_tokens = update(model, opt, sched, train_split, [idx for _, _, idx in group], t, device, objective, prog.step, world)
            last_epoch, last_pos, _ = group[-1]
            prog.step, prog.epoch, prog.batch_pos = prog.step + 1, last_epoch, last_pos + 1
            prog.train_seconds = time.perf_counter() - session_start

            window_tokens += n_tokens
            prog.train_tokens += n_tokens
            window_loss += loss_sum
            bar.update(1)
            if prog.step % t.log_every == 0 or prog.step == 1:
                elapsed = time.perf_counter() - window_start
                lr = sched.get_last_lr()[0]
                terms = objective.pop_window(window_tokens) if objective is not None else {}
                bar.set_postfix(loss=f"{window_loss / window_tokens:.3f}", **{k: f"{v:.3f}" for k, v in terms.items()}, tok_s=f"{window_tokens / elapsed:.0f}", lr=f"{lr:.2e}", ep=prog.epoch)
                if writer:
                    for k, v in terms.items():
                        writer.add_scalar(f"train/{k}", v, prog.step)
                    writer.add_scalar("train/loss", window_loss / window_tokens, prog.step)
                    writer.add_scalar("train/tokens_per_s", window_tokens / elapsed, prog.step)
                    writer.add_scalar("train/lr", lr, prog.step)
                window_tokens, window_loss, window_start = 0, 0.0, time.perf_counter()

            out_of_time = t.max_minutes > 0 and prog.train_seconds >= 60 * t.max_minutes
            if broadcast_flag(world, stop.requested or out_of_time):  # every rank stops at the same update
                stop_reason = "interrupted" if stop.requested else "max_minutes"
                break
            if prog.step % t.valid_every == 0:
                if world.is_main:
                    _validate_and_save(raw_model, cfg, dev, refs, toks, device, prog, checkpoint, writer, log)
                if broadcast_flag(world, bool(t.patience) and prog.bad_validations >= t.patience):
                    stop_reason = "early stopping"
                    break
    bar.close()
    prog.stop_reason = stop_reason
    if world.is_main:
        if stop_reason in ("max_steps", "max_epochs") and prog.step % t.valid_every != 0:
            _validate_and_save(raw_model, cfg, dev, refs, toks, device, prog, checkpoint, writer, log)
        elif stop_reason in ("interrupted", "max_minutes"):
            checkpoint(is_best=False)
    log(f"stopped ({stop_reason}) at update {prog.step}, epoch {prog.epoch}; best {t.early_stopping_metric} {prog.best}; checkpoints in {work}")
    if writer:
        writer.close()
    barrier(world)
    shutdown(world)
    return prog


def _validate_and_save(model, cfg, dev, refs, toks, device, prog: Progress, checkpoint, writer, log) -> None:
    metric = cfg.train.early_stopping_metric if cfg.train.valid_bleu else "loss"
    result = validate(model, cfg, dev, refs, toks.tgt, device)
    value = result[metric]
    improved = _improved(metric, value, prog.best)
    if improved:
        prog.best, prog.bad_validations = value, 0
    else:
        prog.bad_validations += 1
    checkpoint(is_best=improved and cfg.train.keep_best)
    shown = " ".join(f"{k} {v:.3f}" if k != "bleu" else f"BLEU {v:.2f}" for k, v in result.items())
    log(f"update {prog.step} | dev {shown}{' | new best' if improved else ''}")
    if writer:
        for k, v in result.items():
            writer.add_scalar(f"valid/{k}", v, prog.step)
