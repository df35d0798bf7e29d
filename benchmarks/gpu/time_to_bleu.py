"""Time to a test BLEU: train the Multi30k recipe model and translate test_2016_flickr (beam 5)
every ``--every`` updates until sacreBLEU reaches ``--target``; prints one line per check.

    python benchmarks/gpu/time_to_bleu.py [--config recipes/multi30k/baseline.yaml] [--target 38]
        [--every 150] [--max-updates 3000] [--section.key=value ...]

The clock is the training time only (CUDA-synchronized; checks are not counted); the wall time
with the checks is printed too. A benchmark, so it reads the test set at every check: nothing is
chosen on it. Results go to ``--json`` (default benchmarks/out/time_to_bleu.json), with the machine
(``syntaxnmt.cpu.machine.machine_info``: the CPU, torch, threads, load average before and after; the
GPU under ``device``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from syntaxnmt.config import load_config
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.data.batches import TokenBatchSampler
from syntaxnmt.data.prepare import is_prepared, prepare
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.errors import UserError
from syntaxnmt.metrics import corpus_bleu
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import atomic_write_text, read_lines
from syntaxnmt.training.distributed import World
from syntaxnmt.training.loop import seed_everything
from syntaxnmt.training.train import SingleModel


def test_bleu(task: SingleModel, sources: list[np.ndarray], refs: list[str]) -> float:
    task.raw.eval()
    with torch.inference_mode():
        hyps = translate_ids(task.raw, sources, task.cfg.decode, task.device, beam=5)
    task.raw.train()
    return corpus_bleu([task.toks.tgt.decode(h[0].tokens) for h in hyps], [refs])


def run(cfg, device, target: float, every: int, max_updates: int, src: str, ref: str) -> list[dict]:
    seed_everything(cfg.seed)
    if not is_prepared(cfg):
        prepare(cfg)
    task = SingleModel(cfg, World(), device, log=print)
    t = task.t
    sampler = TokenBatchSampler(task.split["src"].lengths, task.split["tgt"].lengths, t.max_tokens, cfg.seed, multiple=t.shape_bucket)
    stream = sampler.stream(0, 0, 10**9)
    sources = [np.asarray(ids, dtype=np.int64) for ids in task.toks.src.encode_batch(read_lines(src))]
    refs = read_lines(ref)
    checks, train_s, tokens, wall0 = [], 0.0, 0, time.perf_counter()
    for u in range(1, max_updates + 1):
        start = time.perf_counter()
        tokens += task.update([next(stream)[2]], u - 1)["tokens"]
        if u % every and u != max_updates:
            train_s += time.perf_counter() - start
            continue
        torch.cuda.synchronize(device) if device.type == "cuda" else None
        train_s += time.perf_counter() - start
        bleu = test_bleu(task, sources, refs)
        checks.append({"updates": u, "train_seconds": round(train_s, 1), "wall_seconds": round(time.perf_counter() - wall0, 1), "target_tokens": tokens, "bleu": round(bleu, 2)})
        print(json.dumps(checks[-1]), flush=True)
        if bleu >= target:
            break
    return checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="recipes/multi30k/baseline.yaml")
    ap.add_argument("--target", type=float, default=38.0)
    ap.add_argument("--every", type=int, default=150)
    ap.add_argument("--max-updates", type=int, default=3000)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", default="benchmarks/out/time_to_bleu.json")
    args, overrides = ap.parse_known_args()
    data = os.environ.get("SYNTAXNMT_DATA", "../shared/data")
    machine = machine_info()
    try:
        cfg = load_config(args.config, overrides)
        device = resolve_device(args.device)
        checks = run(cfg, device, args.target, args.every, args.max_updates, f"{data}/multi30k/test_2016_flickr.en.gz", f"{data}/multi30k/test_2016_flickr.de.gz")
    except UserError as e:
        raise SystemExit(f"time_to_bleu: error: {e}")
    reached = next((c for c in checks if c["bleu"] >= args.target), None)
    t = cfg.train.for_device(device.type)
    summary = {
        "command": "python benchmarks/gpu/time_to_bleu.py " + " ".join(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k != "json") + " " + " ".join(overrides),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "settings": {"precision": t.precision, "cuda_graphs": t.cuda_graphs, "shape_bucket": t.shape_bucket, "max_tokens": t.max_tokens, "lr": t.lr, "warmup_steps": t.warmup_steps},
        "target": args.target,
        "reached": reached,
        "checks": checks,
        "machine": with_load_after(machine),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(summary, indent=1))
    print(f"time to BLEU {args.target}: " + (f"{reached['train_seconds']} s of training ({reached['updates']} updates, {reached['wall_seconds']} s with the checks)" if reached else "not reached"))
    print(f"device: {summary['device']}; " + machine_summary(machine))


if __name__ == "__main__":
    main()
