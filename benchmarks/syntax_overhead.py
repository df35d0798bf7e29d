"""Training step time of syntax-aware variants relative to the baseline, at the recipe size.

    python benchmarks/syntax_overhead.py [--updates 20] [--configs recipes/multi30k/syntax/*.yaml]

Every variant trains on the SAME batches (first batches of epoch 0 of the shared spaCy-parsed
corpus; prepare it first: ``syntaxnmt prepare recipes/multi30k/syntax/base.yaml``). Updates of
the variants are interleaved round-robin, so a busy machine slows them all alike; the figure is
the median time of an update (batch collation with its relation features included) divided by
the baseline's median. Prints one line per variant.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from syntaxnmt.batches import TokenBatchSampler
from syntaxnmt.config import load_config
from syntaxnmt.cpu import keep_freed_memory
from syntaxnmt.model import build_model
from syntaxnmt.optim import build_optimizer
from syntaxnmt.prepare import feature_vocab_sizes, load_split, load_tokenizers
from syntaxnmt.loop import seed_everything
from syntaxnmt.train import update

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
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the syntaxnmt command does
    device = torch.device("cpu")
    runs = []
    for path in args.configs:
        cfg = load_config(path)
        seed_everything(cfg.seed)
        toks = load_tokenizers(cfg)
        split = load_split(cfg, "train")
        model = build_model(cfg.model, len(toks.src), len(toks.tgt), **feature_vocab_sizes(cfg)).to(device).train()
        opt, sched = build_optimizer(model, cfg.train)
        batches = TokenBatchSampler(split["src"].lengths, split["tgt"].lengths, cfg.train.max_tokens, cfg.seed).epoch_batches(0)
        runs.append({"cfg": cfg, "split": split, "model": model, "opt": opt, "sched": sched, "batches": batches, "times": []})
    for u in range(args.warmup + args.updates):
        for r in runs:
            t0 = time.perf_counter()
            update(r["model"], r["opt"], r["sched"], r["split"], [r["batches"][u]], r["cfg"].train, device)
            if u >= args.warmup:
                r["times"].append(time.perf_counter() - t0)
    base = statistics.median(runs[0]["times"])
    for r in runs:
        med = statistics.median(r["times"])
        n_params = sum(p.numel() for p in r["model"].parameters())
        print(f"{r['cfg'].name}: {med:.3f} s/update (median of {args.updates}), {med / base:.3f}x baseline, {n_params / 1e6:.2f}M params, threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
