"""The cost of document context (issue 21, "Context cost"): ms per training update of the
sentence model, HAN (k = 3, side source) and HAN (k = 3, both sides), and sentences/s decoding
the test documents, on the discourse study's configuration (benchmarks/discourse_study.py) with
freshly initialised models and forced output lengths (so every model writes as much).

    python benchmarks/context_cost.py --work /tmp/context-cost [--updates 30 --warmup 5 --threads 1 --repeats 3]

Prints a table and writes JSON (default benchmarks/out/context_cost.json) with the machine it ran
on (syntaxnmt.cpu.machine.machine_info, load average before and after). Ratios are what to compare on
a shared machine: the systems are measured interleaved (update by update, decoding run by
decoding run), so that a change of load falls on all of them.
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

from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.data.batches import TokenBatchSampler  # noqa: E402
from syntaxnmt.data.discourse import write_documents  # noqa: E402
from syntaxnmt.data.documents import doc_index, previous_sentences  # noqa: E402
from syntaxnmt.data.prepare import is_prepared, prepare  # noqa: E402
from syntaxnmt.decoding.translate import translate_ids  # noqa: E402
from syntaxnmt.textio import atomic_write_text, read_lines  # noqa: E402
from syntaxnmt.training.distributed import World  # noqa: E402
from syntaxnmt.training.loop import seed_everything  # noqa: E402
from syntaxnmt.training.train import SingleModel  # noqa: E402

SYSTEMS = ["sentence", "HAN (k = 3)", "HAN (k = 3), both sides"]


def build(cfg, corpus: dict) -> dict:
    """A freshly initialised training task of ``cfg``, its batch stream and its decoding inputs."""
    seed_everything(cfg.seed)
    task = SingleModel(cfg, World(), torch.device("cpu"), log=lambda *a, **k: None)
    task.choose_cpu_kernels()
    t, han = cfg.train, cfg.model.context.kind == "han"
    sampler = TokenBatchSampler(task.split["src"].lengths, task.split["tgt"].lengths, t.max_tokens, cfg.seed, multiple=task.t.shape_bucket, docs=task.split.docs if han else None, context=task.raw.document_context.reach if han else 0)
    lines = read_lines(corpus["test"]["src"])
    sources = [np.asarray(task.toks.src.encode(x), dtype=np.int64) for x in lines]
    previous = previous_sentences(doc_index(read_lines(corpus["test"]["docs"])), cfg.model.context.sentences) if han else None
    return {"cfg": cfg, "task": task, "stream": sampler.stream(0, 0, 10**9), "sources": sources, "previous": previous}


def update_ms(s: dict, step: int) -> float:
    """One training update of system ``s``, in ms."""
    batches = [next(s["stream"])[2] for _ in range(s["cfg"].train.accum_steps)]
    start = time.perf_counter()
    s["task"].update(batches, step)
    return (time.perf_counter() - start) * 1000


def decode_seconds(s: dict, length: int) -> float:
    """Seconds to translate the test documents with system ``s`` (outputs forced to ``length`` subwords)."""
    model = s["task"].raw.eval()
    decode = s["cfg"].decode.model_copy(update={"min_len": length, "max_len_a": 0.0, "max_len_b": length})
    start = time.perf_counter()
    with torch.inference_mode():
        translate_ids(model, s["sources"], decode, torch.device("cpu"), previous=s["previous"])
    model.train()
    return time.perf_counter() - start


def measure(systems: dict, updates: int, warmup: int, length: int, repeats: int) -> dict:
    """(ms per update, sentences/s decoding the test documents) of every system, interleaved --
    update u of every system before update u + 1 of any, and each decoding repeat of every system
    in turn -- so that a change of the shared machine's load falls on all of them alike."""
    times = {name: [] for name in systems}
    for u in range(warmup + updates):
        for name, s in systems.items():
            ms = update_ms(s, u)
            if u >= warmup:
                times[name].append(ms)
    seconds = {name: 0.0 for name in systems}
    for _ in range(repeats):
        for name, s in systems.items():
            seconds[name] += decode_seconds(s, length)
    return {name: (float(np.mean(times[name])), repeats * len(s["sources"]) / seconds[name]) for name, s in systems.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/context-cost")
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--length", type=int, default=12, help="forced output length (subwords) when decoding")
    ap.add_argument("--repeats", type=int, default=3, help="decoding runs of the test documents per system")
    ap.add_argument("--json", default="benchmarks/out/context_cost.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    corpus = write_documents(work / "corpus", n_train_docs=1000, n_dev_docs=30, n_test_docs=100, seed=1)
    machine = machine_info()
    systems = {}
    for system in SYSTEMS:
        cfg = config(work, corpus, system, 1, args.updates + args.warmup, False)
        cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"init_from": None, "threads": args.threads})})
        if not is_prepared(cfg):
            prepare(cfg)
        systems[system] = build(cfg, corpus)
    rows = measure(systems, args.updates, args.warmup, args.length, args.repeats)
    with_load_after(machine)
    base_ms, base_sent = rows["sentence"]
    print(f"{'system':<26} {'ms/update':>10} {'x sentence':>10} {'decode sent/s':>14} {'x sentence':>10}")
    for system, (ms, sent) in rows.items():
        print(f"{system:<26} {ms:>10.1f} {ms / base_ms:>10.2f} {sent:>14.1f} {sent / base_sent:>10.2f}")
    print(machine_summary(machine))
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "updates": args.updates, "warmup": args.warmup, "threads": args.threads, "forced_length": args.length, "decode_repeats": args.repeats, "interleaved": True,
        "systems": {s: {"ms_per_update": ms, "ms_ratio": ms / base_ms, "decode_sent_s": sent, "decode_ratio": sent / base_sent} for s, (ms, sent) in rows.items()},
        "machine": machine,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
