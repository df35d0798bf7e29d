"""The cost of document context (issue 21, "Context cost"): ms per training update of the
sentence model, HAN (k = 3, side source) and HAN (k = 3, both sides), and sentences/s decoding
the test documents, on the discourse study's configuration (benchmarks/discourse_study.py) with
freshly initialised models and forced output lengths (so every model writes as much).

    python benchmarks/context_cost.py --work /tmp/context-cost [--updates 30 --warmup 5 --threads 1]

Prints a table and writes JSON (default benchmarks/out/context_cost.json) with the machine it ran
on (syntaxnmt.runtime.machine_info, load average before and after). Ratios are what to compare on
a shared machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discourse_study import config  # noqa: E402  (the study's configuration)

from syntaxnmt.data.batches import TokenBatchSampler  # noqa: E402
from syntaxnmt.data.discourse import write_documents  # noqa: E402
from syntaxnmt.data.documents import doc_index, previous_sentences  # noqa: E402
from syntaxnmt.data.prepare import is_prepared, prepare  # noqa: E402
from syntaxnmt.decoding.translate import translate_ids  # noqa: E402
from syntaxnmt.runtime import machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.textio import atomic_write_text, read_lines  # noqa: E402
from syntaxnmt.training.distributed import World  # noqa: E402
from syntaxnmt.training.loop import seed_everything  # noqa: E402
from syntaxnmt.training.train import SingleModel  # noqa: E402

SYSTEMS = ["sentence", "HAN (k = 3)", "HAN (k = 3), both sides"]


def measure(cfg, corpus: dict, updates: int, warmup: int, length: int) -> tuple[float, float]:
    """(ms per update, sentences/s decoding the test documents) of ``cfg``'s model."""
    seed_everything(cfg.seed)
    device = torch.device("cpu")
    task = SingleModel(cfg, World(), device, log=lambda *a, **k: None)
    task.choose_cpu_kernels()
    t, han = cfg.train, cfg.model.context.kind == "han"
    sampler = TokenBatchSampler(task.split["src"].lengths, task.split["tgt"].lengths, t.max_tokens, cfg.seed, multiple=task.t.shape_bucket, docs=task.split.docs if han else None, context=task.raw.document_context.reach if han else 0)
    stream = sampler.stream(0, 0, 10**9)
    for u in range(warmup + updates):
        if u == warmup:
            start = time.perf_counter()
        task.update([next(stream)[2] for _ in range(t.accum_steps)], u)
    ms = (time.perf_counter() - start) * 1000 / updates
    model = task.raw.eval()
    lines = read_lines(corpus["test"]["src"])
    sources = [np.asarray(task.toks.src.encode(x), dtype=np.int64) for x in lines]
    previous = previous_sentences(doc_index(read_lines(corpus["test"]["docs"])), cfg.model.context.sentences) if han else None
    decode = cfg.decode.model_copy(update={"min_len": length, "max_len_a": 0.0, "max_len_b": length})
    start = time.perf_counter()
    with torch.inference_mode():
        translate_ids(model, sources, decode, device, previous=previous)
    return ms, len(lines) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/context-cost")
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--length", type=int, default=12, help="forced output length (subwords) when decoding")
    ap.add_argument("--json", default="benchmarks/out/context_cost.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    corpus = write_documents(work / "corpus", n_train_docs=1000, n_dev_docs=30, n_test_docs=100, seed=1)
    machine = machine_info()
    rows = {}
    for system in SYSTEMS:
        cfg = config(work, corpus, system, 1, args.updates + args.warmup, False)
        cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"init_from": None, "threads": args.threads})})
        if not is_prepared(cfg):
            prepare(cfg)
        rows[system] = measure(cfg, corpus, args.updates, args.warmup, args.length)
    with_load_after(machine)
    base_ms, base_sent = rows["sentence"]
    print(f"{'system':<26} {'ms/update':>10} {'x sentence':>10} {'decode sent/s':>14} {'x sentence':>10}")
    for system, (ms, sent) in rows.items():
        print(f"{system:<26} {ms:>10.1f} {ms / base_ms:>10.2f} {sent:>14.1f} {sent / base_sent:>10.2f}")
    print(machine_summary(machine))
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "updates": args.updates, "warmup": args.warmup, "threads": args.threads, "forced_length": args.length,
        "systems": {s: {"ms_per_update": ms, "ms_ratio": ms / base_ms, "decode_sent_s": sent, "decode_ratio": sent / base_sent} for s, (ms, sent) in rows.items()},
        "machine": machine,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
