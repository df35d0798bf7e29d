"""``syntaxnmt train-joint``: bilingual symmetry (Cohn et al. 2016, Sec. 3.4).

A source→target and a target→source model (both ``model`` of the config) are trained together on
the same prepared corpus -- the reverse model reads the target pieces and predicts the source
pieces, so the vocabulary must be joint -- with the objective, per update::

    L = L_{s→t} / N_t + L_{t→s} / N_s - γ · Σ_pairs B / N_t,    B = Σ_i Σ_j α^{s→t}_ij α^{t→s}_ji

(:func:`~syntaxnmt.alignment_losses.trace_bonus`, γ = ``train.alignment.symmetry_weight``; EOS and
padding left out), where L_d is the label-smoothed loss of direction d plus its own
guided-alignment/coverage terms (:mod:`syntaxnmt.alignment_training`; the reverse model's
reference alignment is the transposed one) and N_t, N_s count target/source tokens. α is the
``train.alignment.layer``/``head`` cross-attention of each model. One update steps both models
(each with its own Adam and schedule) on the same batches.

Checkpoints: ``<work_dir>/forward`` and ``<work_dir>/reverse`` hold ordinary runs (``last.pt``,
``best.pt``, ``config.yaml``): ``syntaxnmt translate``/``align`` load them like any other, and
``align --reverse-checkpoint`` symmetrizes the two directions.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from syntaxnmt.alignment_losses import normalize_alignment, trace_bonus
from syntaxnmt.alignment_training import alignment_attention, alignment_objective, attach_fertility, word_masks
from syntaxnmt.batches import Split, TokenBatchSampler, collate
from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.config import Config, config_from_dict
from syntaxnmt.errors import UserError
from syntaxnmt.losses import sequence_loss
from syntaxnmt.model import build_model
from syntaxnmt.optim import build_optimizer
from syntaxnmt.prepare import feature_vocab_sizes, is_prepared, load_split, load_tokenizers, prepare
from syntaxnmt.subwords import PAD
from syntaxnmt.textio import read_lines
from syntaxnmt.train import Progress, _StopFlag, _validate_and_save, rng_state, seed_everything, set_rng_state
from syntaxnmt.translate import resolve_device

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


def reversed_split(split: Split) -> Split:
    """A view of ``split`` with ``src`` and ``tgt`` swapped (the reverse model's data)."""
    view = Split.__new__(Split)
    view.name, view.fields = split.name, {"src": split["tgt"], "tgt": split["src"]}
    return view


def joint_update(models, optimizers, split: Split, group, cfg: Config, device: torch.device, objectives=(None, None), step: int = 0) -> dict[str, float]:
    """One update of both models on the batches ``group``; returns the summed losses and token counts."""
    t = cfg.train
    gamma = t.alignment.symmetry_weight
    rev_split = reversed_split(split)
    n_tgt = sum(int(split["tgt"].lengths[idx].sum()) + len(idx) for idx in group)
    n_src = sum(int(split["src"].lengths[idx].sum()) + len(idx) for idx in group)
    for opt, _ in optimizers:
        opt.zero_grad(set_to_none=True)
    stats = {"forward": 0.0, "reverse": 0.0, "bonus": 0.0, "tgt_tokens": n_tgt, "src_tokens": n_src}
    needs_reference = any(o is not None and o.needs_reference for o in objectives)
    for idx in group:
        fwd = collate(split, idx, alignment=needs_reference).to(device)
        rev = collate(rev_split, idx).to(device)
        if needs_reference:  # the reverse model's reference: the forward one transposed
            rev.alignment = normalize_alignment(fwd.alignment.gt(0).float().transpose(1, 2), rev.src_pad_mask, rev.tgt_out.eq(PAD))
        total, outs = 0.0, []
        for name, model, batch, objective, n in zip(DIRECTIONS, models, (fwd, rev), objectives, (n_tgt, n_src)):
            out = model(batch, need_weights=True)
            loss, _ = sequence_loss(out, batch.tgt_out, t.label_smoothing)
            if objective is not None:
                loss = loss + objective.loss(model, batch, out, step)
            stats[name] += loss.item()
            total = total + loss / n
            outs.append(out)
        src_mask, tgt_mask = word_masks(fwd.src, fwd.tgt_out)
        bonus = trace_bonus(alignment_attention(outs[0], t.alignment), alignment_attention(outs[1], t.alignment), src_mask, tgt_mask, reduction="sum")
        stats["bonus"] += bonus.item()
        (total - gamma * bonus / n_tgt).backward()
    for model, (opt, sched) in zip(models, optimizers):
        if t.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
        opt.step()
        sched.step()
    return stats


def train_joint(cfg: Config, resume: bool = False, log=tqdm.write) -> Progress:
    """Train both directions of ``cfg`` jointly (preparing its corpus first if needed); returns the progress."""
    t = cfg.train
    if not cfg.data.joint_vocab:
        raise UserError("train-joint needs a joint vocabulary (data.joint_vocab: true): the reverse model reads the target pieces")
    configs = direction_configs(cfg)
    works = [Path(c.work_dir) for c in configs]
    if (works[0] / "last.pt").exists() and not resume:
        raise UserError(f"{works[0] / 'last.pt'} exists: pass --resume to continue that run, or choose another work_dir")
    resume = resume and (works[0] / "last.pt").exists() and (works[1] / "last.pt").exists()
    seed_everything(cfg.seed)
    if t.threads:
        torch.set_num_threads(t.threads)
    device = resolve_device(t.device)
    if not is_prepared(cfg):
        prepare(cfg, log=log)
    split, dev = load_split(cfg, "train"), load_split(cfg, "dev")
    devs = (dev, reversed_split(dev))
    refs = (read_lines(cfg.prepared_dir / "dev.ref"), read_lines(cfg.prepared_dir / "dev.raw_src"))
    toks = [load_tokenizers(c) for c in configs]
    models = [attach_fertility(build_model(c.model, len(k.src), len(k.tgt), **feature_vocab_sizes(cfg)), c).to(device) for c, k in zip(configs, toks)]
    if models[0].feature_spec:
        raise UserError("train-joint: the reverse model has no source annotation; use a model without source features (model.syntax)")
    optimizers = [build_optimizer(m, t) for m in models]
    progs = [Progress(), Progress()]
    if resume:
        for k, work in enumerate(works):
            state = load_checkpoint(work / "last.pt")
            models[k].load_state_dict(state["model"])
            optimizers[k][0].load_state_dict(state["optimizer"])
            optimizers[k][1].load_state_dict(state["scheduler"])
            progs[k] = Progress(**state["progress"])
        set_rng_state(state["rng"])
        log(f"resumed {works[0]} and {works[1]} at update {progs[0].step}")
    for c, work in zip(configs, works):
        work.mkdir(parents=True, exist_ok=True)
        c.save(work / "config.yaml")
    log(f"{cfg.name}: joint training of two models ({sum(p.numel() for m in models for p in m.parameters()) / 1e6:.2f}M parameters), {len(split)} pairs, device {device}")
    objectives = [alignment_objective(c) for c in configs]

    def checkpoint(k: int):
        def save(is_best: bool) -> None:
            state = {"config": configs[k].model_dump(mode="json"), "model": models[k].state_dict(), "optimizer": optimizers[k][0].state_dict(), "scheduler": optimizers[k][1].state_dict(), "progress": asdict(progs[k]), "rng": rng_state()}
            save_checkpoint(works[k] / "last.pt", state)
            if is_best:
                save_checkpoint(works[k] / "best.pt", state)

        return save

    def validate_both() -> None:
        for k, name in enumerate(DIRECTIONS):
            _validate_and_save(models[k], configs[k], devs[k], refs[k], toks[k], device, progs[k], checkpoint(k), None, lambda msg, name=name: log(f"[{name}] {msg}"))

    sampler = TokenBatchSampler(split["src"].lengths, split["tgt"].lengths, t.max_tokens, cfg.seed)

    stream = sampler.stream(progs[0].epoch, progs[0].batch_pos, t.max_epochs)
    prog = progs[0]
    session_start = time.perf_counter() - prog.train_seconds
    window = {"forward": 0.0, "reverse": 0.0, "bonus": 0.0, "tgt_tokens": 0, "src_tokens": 0}
    bar = tqdm(total=t.max_steps, initial=prog.step, desc="train-joint", unit="upd", dynamic_ncols=True, mininterval=1.0)
    stop_reason = "max_steps"
    for m in models:
        m.train()
    with _StopFlag() as stop:
        while prog.step < t.max_steps:
            group = [b for _, b in zip(range(t.accum_steps), stream)]
            if len(group) < t.accum_steps:
                stop_reason = "max_epochs"
                break
            stats = joint_update(models, optimizers, split, [idx for _, _, idx in group], cfg, device, objectives, prog.step)
            for k in window:
                window[k] += stats[k]
            last_epoch, last_pos, _ = group[-1]
            for p in progs:
                p.step, p.epoch, p.batch_pos = p.step + 1, last_epoch, last_pos + 1
                p.train_seconds = time.perf_counter() - session_start
            bar.update(1)
            if prog.step % t.log_every == 0 or prog.step == 1:
                bar.set_postfix(fwd=f"{window['forward'] / window['tgt_tokens']:.3f}", rev=f"{window['reverse'] / window['src_tokens']:.3f}", bonus=f"{window['bonus'] / window['tgt_tokens']:.3f}", ep=prog.epoch)
                window = dict.fromkeys(window, 0.0)
            out_of_time = t.max_minutes > 0 and prog.train_seconds >= 60 * t.max_minutes
            if stop.requested or out_of_time:
                stop_reason = "interrupted" if stop.requested else "max_minutes"
                break
            if prog.step % t.valid_every == 0:
                validate_both()
                if t.patience and min(p.bad_validations for p in progs) >= t.patience:
                    stop_reason = "early stopping"
                    break
    bar.close()
    if stop_reason in ("max_steps", "max_epochs") and prog.step % t.valid_every != 0:
        validate_both()
    elif stop_reason in ("interrupted", "max_minutes"):
        for k in range(2):
            checkpoint(k)(False)
    log(f"stopped ({stop_reason}) at update {prog.step}, epoch {prog.epoch}; checkpoints in {works[0]} and {works[1]}")
    return prog
