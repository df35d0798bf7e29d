"""Interleaved A/B of CPU training variants in one process: batch shapes and linear kernels.

    python benchmarks/cpu_training_ab.py --config benchmarks/out/side_by_side/syntaxnmt.yaml \
        [--variants dynamic-mkl,dynamic-onednn,bucket4,bucket8] [--rounds 4] [--updates 5] [--warmup 3]

Each variant is one training task (same config and seed) with its own batch stream; the rounds
alternate between the variants, ``--updates`` timed updates each, so that a loaded or shared
machine slows all of them alike. Reported: target tokens/s (real tokens, padding excluded) per
variant (median over the rounds) and relative to the first, by the wall clock and per CPU second
of the process (with ``--threads 1`` the latter holds up on a loaded machine). Variants:

- ``dynamic-mkl``: every batch its own shape, linears on MKL in training (the old default);
- ``dynamic-onednn``: every batch its own shape, linears on oneDNN (memory grows: memory_curve.py);
- ``bucketN``: static shapes (``train.shape_bucket=N``) with oneDNN linears (N=4: the CPU default);
- ``bucketN-mkl``: static shapes, linears on MKL;
- a ``-nopack`` suffix: the position-wise products also on the padding rows
  (``model.stacks.pack_granule = 0``; the default computes them on the real rows only,
  :mod:`syntaxnmt.cpu.packing`);
- a ``-foreach`` suffix: Adam's multi-tensor (``foreach``) update instead of the fused one that
  ``training/optim.py`` builds on CPU too (issue 26).

The figures and the machine (``syntaxnmt.cpu.machine.machine_info``, load average before and after)
also go to ``--json`` (default benchmarks/out/cpu_training_ab.json).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from syntaxnmt.config import load_config
from syntaxnmt.cpu import linear as fast_linear
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.data.batches import TokenBatchSampler
from syntaxnmt.runtime import keep_freed_memory
from syntaxnmt.textio import atomic_write_text
from syntaxnmt.training.distributed import World
from syntaxnmt.training.loop import seed_everything
from syntaxnmt.training.train import SingleModel


class Variant:
    """One training task with its batch stream and its linear-kernel choice."""

    def __init__(self, name: str, config: str, overrides: list[str]):
        m = re.fullmatch(r"(dynamic|bucket(\d+))(-mkl|-onednn)?(-nopack)?(-foreach)?", name)
        if m is None:
            raise SystemExit(f"unknown variant {name!r}")
        bucket = int(m.group(2) or 0)
        self.name, self.mode = name, {"-mkl": "infer", "-onednn": "train", None: "auto"}[m.group(3)]
        cfg = load_config(config, [*overrides, f"--train.shape_bucket={bucket}"])
        seed_everything(cfg.seed)
        self.task = SingleModel(cfg, World(), torch.device("cpu"), log=lambda *a, **k: None)
        if m.group(4):
            self.task.raw.stacks.pack_granule = 0
        if m.group(5):
            for group in self.task.opt.param_groups:
                group["fused"], group["foreach"] = None, True
        t = self.task.t
        sampler = TokenBatchSampler(self.task.split["src"].lengths, self.task.split["tgt"].lengths, t.max_tokens, cfg.seed, multiple=t.shape_bucket)
        self.stream, self.step, self.accum = sampler.stream(0, 0, 10**9), 0, t.accum_steps

    def run(self, updates: int) -> tuple[int, float, float]:
        """``updates`` updates: (target tokens, wall-clock seconds, CPU seconds of this process)."""
        fast_linear.configure(self.mode)
        tokens, start, cpu = 0, time.perf_counter(), time.process_time()
        for _ in range(updates):
            tokens += self.task.update([next(self.stream)[2] for _ in range(self.accum)], self.step)["tokens"]
            self.step += 1
        return tokens, time.perf_counter() - start, time.process_time() - cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--variants", default="dynamic-mkl,dynamic-onednn,bucket4,bucket8")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--updates", type=int, default=5, help="timed updates per variant and round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed updates per variant first")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default; 1 holds up better on a loaded machine)")
    ap.add_argument("--json", default="benchmarks/out/cpu_training_ab.json", help="figures and the machine record")
    args, overrides = ap.parse_known_args()
    keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = machine_info()
    variants = [Variant(v.strip(), args.config, overrides) for v in args.variants.split(",")]
    for v in variants:
        v.run(args.warmup)
    rates: dict[str, list[float]] = {v.name: [] for v in variants}
    per_cpu: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(args.rounds):
        for v in variants:
            tokens, secs, cpu = v.run(args.updates)
            rates[v.name].append(tokens / secs)
            per_cpu[v.name].append(tokens / cpu)
        print(f"round {r + 1}: " + ", ".join(f"{n} {x[-1]:.0f} ({per_cpu[n][-1]:.0f}/CPU s)" for n, x in rates.items()), file=sys.stderr, flush=True)
    base, base_cpu = statistics.median(rates[variants[0].name]), statistics.median(per_cpu[variants[0].name])
    print(f"training target tok/s (wall clock) and target tokens per CPU second of the process, medians of {args.rounds} rounds "
          f"of {args.updates} updates, {torch.get_num_threads()} threads:")
    for name, xs in rates.items():
        med, med_cpu = statistics.median(xs), statistics.median(per_cpu[name])
        print(f"  {name:<16} {med:8.0f} tok/s x{med / base:.2f}   {med_cpu:8.0f} tok/CPU s x{med_cpu / base_cpu:.2f}   (rounds: {', '.join(f'{x:.0f}' for x in xs)})")
    with_load_after(machine)
    print(machine_summary(machine))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "config": args.config,
           "rounds": args.rounds, "updates": args.updates, "warmup": args.warmup, "threads": torch.get_num_threads(),
           "variants": {n: {"tok_s": rates[n], "tok_per_cpu_s": per_cpu[n], "median_tok_s": statistics.median(rates[n]), "median_tok_per_cpu_s": statistics.median(per_cpu[n])} for n in rates},
           "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
