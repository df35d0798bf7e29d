"""Training step time of syntax-aware variants relative to the baseline, at the recipe size.

    python benchmarks/syntax_overhead.py [--updates 20] [--configs recipes/multi30k/syntax/*.yaml]
    python benchmarks/syntax_overhead.py --configs recipes/multi30k/syntax/base.yaml recipes/multi30k/syntax/mtl-*.yaml

Auxiliary objectives (``train.multitask``, ``train.alignment``) train as in ``syntaxnmt train``.

Every variant trains on the SAME batches (first batches of epoch 0 of the shared spaCy-parsed
corpus; prepare it first: ``syntaxnmt prepare recipes/multi30k/syntax/base.yaml``). Updates of
the variants are interleaved round-robin, so a busy machine slows them all alike; the figure is
the median time of an update (batch collation with its relation features included) divided by
the baseline's median. Prints one line per variant.

``--decode N``: then each (briefly trained) model translates the first N dev sentences with beam 5,
every hypothesis forced to 20 subwords, in ``--rounds`` interleaved rounds; the median sentences/s
is printed relative to the baseline's (models with source features get the dev parses).

The figures and the machine (``syntaxnmt.cpu.machine.machine_info``, load average before and after)
also go to ``--json`` (default benchmarks/out/syntax_overhead.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from syntaxnmt.config import load_config
from syntaxnmt.cpu import install as install_cpu
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.data.batches import TokenBatchSampler
from syntaxnmt.data.prepare import load_split, load_tokenizers
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.model import build_model
from syntaxnmt.runtime import keep_freed_memory
from syntaxnmt.textio import atomic_write_text
from syntaxnmt.training.loop import seed_everything
from syntaxnmt.training.objectives import training_objectives
from syntaxnmt.training.optim import build_optimizer
from syntaxnmt.training.step import update

DEFAULT = [
    "recipes/multi30k/syntax/base.yaml",
    "recipes/multi30k/syntax/linear.yaml",
    "recipes/multi30k/syntax/tree-distance.yaml",
    "recipes/multi30k/syntax/tree-path.yaml",
    "recipes/multi30k/syntax/pos-heads.yaml",
    "recipes/multi30k/syntax/parent-scaled.yaml",
    "recipes/multi30k/syntax/input-features.yaml",
    "recipes/multi30k/syntax/combined.yaml",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=DEFAULT, help="the first one is the baseline")
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--decode", type=int, default=0, help="also time the translation of this many dev sentences")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="benchmarks/out/syntax_overhead.json", help="figures and the machine record")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the syntaxnmt command does
    machine = machine_info()
    device = torch.device("cpu")
    runs = []
    for path in args.configs:
        cfg = load_config(path)
        seed_everything(cfg.seed)
        toks = load_tokenizers(cfg)
        split = load_split(cfg, "train")
        model = install_cpu(build_model(cfg, **toks.vocab_sizes()).to(device).train())  # as training does (syntaxnmt.cpu)
        opt, sched = build_optimizer(model, cfg.train)
        batches = TokenBatchSampler(split["src"].lengths, split["tgt"].lengths, cfg.train.max_tokens, cfg.seed).epoch_batches(0)
        runs.append({"cfg": cfg, "split": split, "model": model, "opt": opt, "sched": sched, "batches": batches, "objectives": training_objectives(cfg), "times": []})
    for u in range(args.warmup + args.updates):
        for r in runs:
            t0 = time.perf_counter()
            update(r["model"], r["opt"], r["sched"], r["split"], [r["batches"][u]], r["cfg"].train, device, r["objectives"], u)
            if u >= args.warmup:
                r["times"].append(time.perf_counter() - t0)
    base = statistics.median(runs[0]["times"])
    rows = []
    for path, r in zip(args.configs, runs):
        med = statistics.median(r["times"])
        n_params = sum(p.numel() for p in r["model"].parameters())
        rows.append({"config": path, "name": r["cfg"].name, "s_per_update": med, "vs_baseline": med / base, "params": n_params})
        print(f"{r['cfg'].name}: {med:.3f} s/update (median of {args.updates}), {med / base:.3f}x baseline, {n_params / 1e6:.2f}M params, threads {torch.get_num_threads()}")
    if args.decode:
        for row, (sent_s, rel) in zip(rows, time_decoding(runs, args.decode, args.rounds, device)):
            row |= {"decode_sent_s": sent_s, "decode_vs_baseline": rel}
    with_load_after(machine)
    print(machine_summary(machine))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "updates": args.updates,
           "threads": torch.get_num_threads(), "decode_sentences": args.decode, "rounds": args.rounds, "configs": rows, "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))


def time_decoding(runs: list[dict], n: int, rounds: int, device: torch.device) -> list[tuple[float, float]]:
    """Interleaved rounds of translating the first ``n`` dev sentences (beam 5, forced length 20):
    (median sentences/s, relative to the baseline) of each run."""
    for r in runs:
        dev = load_split(r["cfg"], "dev")
        r["sources"] = [dev["src"][i] for i in range(min(n, len(dev)))]
        r["annotations"] = [dev.annotation(i) for i in range(len(r["sources"]))] if r["model"].feature_spec else None
        r["decode"] = r["cfg"].decode.model_copy(update={"beam_size": 5, "min_len": 20, "max_len_a": 0.0, "max_len_b": 20})
        r["speeds"] = []
        r["model"].eval()
    for _ in range(rounds):
        for r in runs:
            t0 = time.perf_counter()
            with torch.inference_mode():
                translate_ids(r["model"], r["sources"], r["decode"], device, annotations=r["annotations"])
            r["speeds"].append(len(r["sources"]) / (time.perf_counter() - t0))
    base = statistics.median(runs[0]["speeds"])
    out = []
    for r in runs:
        med = statistics.median(r["speeds"])
        out.append((med, med / base))
        print(f"{r['cfg'].name}: decode {med:.1f} sent/s (beam 5, length 20, {len(r['sources'])} dev sentences, median of {rounds}), {med / base:.3f}x baseline")
    return out


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(main)
