"""Training and decoding speed of a recipe model, printed on one line.

    python benchmarks/speed.py [--config recipes/multi30k/baseline.yaml] [--updates 60]
        [--checkpoint runs/multi30k-en-de/baseline/best.pt] [--force-length 20] [--isa native|avx2]

Training: target tokens/s over ``--updates`` updates after ``--warmup`` untimed ones, with the
recipe's batches (prepared corpus required: ``syntaxnmt prepare CONFIG``). Decoding: beam-5
sentences/s over the 1,000 sentences of test_2016_flickr (the trained checkpoint if given, else
the freshly initialised model; ``--force-length N`` makes every hypothesis exactly N subwords, so
briefly trained models are compared fairly). The figures and the machine they were measured on
(``syntaxnmt.cpu.machine.machine_info``, load average before and after) also go to ``--json``
(default benchmarks/out/speed.json). ``--isa avx2`` restarts the script with ATen, oneDNN and MKL
restricted to AVX2 (``benchmarks/_isa.py``: an emulation of an AVX2 machine on this CPU, which the
machine record says).
"""

from __future__ import annotations

import sys

import _isa  # first: --isa avx2 restarts this script with the AVX2 limits, before torch loads

if __name__ == "__main__":
    _isa.reexec_for_isa()

# isort: split
import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from syntaxnmt.config import load_config
from syntaxnmt.cpu import install as install_cpu
from syntaxnmt.cpu.calibration import prepare as prepare_cpu_kernels
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.data.batches import TokenBatchSampler
from syntaxnmt.data.prepare import feature_vocab_sizes, load_tokenizers
from syntaxnmt.decoding.calibration import decoding_step
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.errors import UserError
from syntaxnmt.model import build_model
from syntaxnmt.runtime import keep_freed_memory, resolve_device
from syntaxnmt.textio import atomic_write_text, read_lines
from syntaxnmt.training.distributed import World
from syntaxnmt.training.loop import seed_everything
from syntaxnmt.training.train import SingleModel


def training_task(cfg, device, choose_kernels: bool = True) -> tuple[SingleModel, Iterator]:
    """The training task of ``cfg`` seeded as ``syntaxnmt train`` builds it, its CPU kernels chosen
    as the command chooses them (``train.cpu_kernels``, ``train.cpu_native``; cached per machine)
    unless ``choose_kernels`` is False, and the endless stream of its batches (epoch after epoch:
    ``(epoch, position, indices)``)."""
    seed_everything(cfg.seed)
    task = SingleModel(cfg, World(), device, log=lambda *a, **k: None)
    if choose_kernels:
        task.choose_cpu_kernels()
    t = cfg.train
    sampler = TokenBatchSampler(task.split["src"].lengths, task.split["tgt"].lengths, t.max_tokens, cfg.seed, multiple=task.t.shape_bucket)
    return task, sampler.stream(0, 0, 10**9)


def measure_training(cfg, device, updates: int, warmup: int) -> float:
    """Target tokens/s of ``updates`` updates after ``warmup`` untimed ones (the batches of as many
    epochs as it takes), through the training task itself (CUDA graphs, static shapes, precision
    as configured)."""
    task, stream = training_task(cfg, device)
    t = cfg.train
    tokens, start = 0, None
    for u in range(warmup + updates):
        if u == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        group = [next(stream)[2] for _ in range(t.accum_steps)]
        n = task.update(group, u)["tokens"]
        if u >= warmup:
            tokens += n
    if device.type == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def decoding_setup(cfg, device, checkpoint: str | None, beam: int, force_length: int):
    """(model, tokenizers, decode config): the trained checkpoint or a fresh model; beam size and
    an optional forced output length of exactly ``force_length`` subwords."""
    if checkpoint:
        model, cfg, toks = load_model(checkpoint, device)
    else:
        seed_everything(cfg.seed)
        toks = load_tokenizers(cfg)
        model = build_model(cfg.model, len(toks.src), len(toks.tgt), **feature_vocab_sizes(cfg)).to(device).eval()
        if device.type == "cpu":  # as load_model does: the CPU's execution, then its kernels' calibration
            install_cpu(model)
            prepare_cpu_kernels(model, timing=lambda: decoding_step(model))
    decode = cfg.decode.model_copy(update={"beam_size": beam})
    if force_length:
        decode = decode.model_copy(update={"min_len": force_length, "max_len_a": 0.0, "max_len_b": force_length})
    return model, toks, decode


def measure_decoding(cfg, device, checkpoint: str | None, test_src: Path, beam: int, force_length: int) -> tuple[float, int]:
    model, toks, decode = decoding_setup(cfg, device, checkpoint, beam, force_length)
    lines = read_lines(test_src)
    sources = [np.asarray(ids, dtype=np.int64) for ids in toks.src.encode_batch(lines)]
    start = time.perf_counter()
    with torch.inference_mode():
        translate_ids(model, sources, decode, device)
    return len(lines) / (time.perf_counter() - start), len(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="recipes/multi30k/baseline.yaml")
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--checkpoint", help="trained model for decoding (default: untrained)")
    ap.add_argument("--test-src", help="default: $SYNTAXNMT_DATA/multi30k/test_2016_flickr.en.gz")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--force-length", type=int, default=0, help="force every hypothesis to exactly N subwords")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--skip-decoding", action="store_true")
    _isa.add_isa_argument(ap)
    ap.add_argument("--json", default="benchmarks/out/speed.json", help="results and the machine record")
    args, overrides = ap.parse_known_args()
    if args.updates < 1 or args.warmup < 0 or args.beam < 1 or args.force_length < 0:
        raise UserError("--updates and --beam must be at least 1, --warmup and --force-length at least 0")
    cfg = load_config(args.config, overrides)
    keep_freed_memory()  # as the syntaxnmt command does
    device = resolve_device(args.device)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    machine = machine_info()
    data = os.environ.get("SYNTAXNMT_DATA", "../shared/data")
    test_src = Path(args.test_src or f"{data}/multi30k/test_2016_flickr.en.gz")
    train_tps = float("nan") if args.skip_training else measure_training(cfg, device, args.updates, args.warmup)
    t = cfg.train.for_device(device.type)
    settings = f"precision {t.precision}, shape_bucket {t.shape_bucket}, cuda_graphs {t.cuda_graphs}"
    sent_s, n = (float("nan"), 0) if args.skip_decoding else measure_decoding(cfg, device, args.checkpoint, test_src, args.beam, args.force_length)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    with_load_after(machine)
    print(
        f"{cfg.name}: train {train_tps:.0f} tgt tok/s ({args.updates} updates, max_tokens {cfg.train.max_tokens}, {settings}) | "
        f"decode beam {args.beam}: {sent_s:.1f} sent/s ({n} sentences{f', forced length {args.force_length}' if args.force_length else ''}) | "
        f"peak {'GPU memory' if device.type == 'cuda' else 'RSS'} {peak_mb:.0f} MB | {device} threads {torch.get_num_threads()}"
    )
    print(machine_summary(machine))
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "config": cfg.name,
        "train_tok_s": None if args.skip_training else train_tps, "updates": args.updates, "max_tokens": cfg.train.max_tokens, "settings": settings,
        "decode_sent_s": None if args.skip_decoding else sent_s, "sentences": n, "beam": args.beam, "force_length": args.force_length,
        "peak_mb": peak_mb, "device": str(device), "threads": torch.get_num_threads(), "machine": machine,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(result, indent=1))


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(main)
