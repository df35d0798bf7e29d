"""Our beam search against CTranslate2 (float32 and int8) on one checkpoint: sentences/s and sacreBLEU.

    python benchmarks/ct2_decode.py --checkpoint runs/multi30k-en-de/baseline/best.pt \
        [--threads 2] [--workers 0] [--beam 5] [--repeats 5] [--root DIR] [--test-src F --test-ref F] [--limit N] [--isa native|avx2] [--processes]

The source lines are turned into subword ids once (the pipeline both engines share: the parser's
words for a model trained on a parsed corpus, SentencePiece); what is timed is the search from
ids to ids of the whole test set (default test_2016_flickr, 1,000 sentences), with the same
threads, batch size and search settings (``decode`` of the checkpoint's config, ``--beam``), after an untimed warm-up
(``--warmup`` sentences per engine). Threads: ours searches ``--workers`` batches at once
(``decode.workers``; 0, the default: one per thread when there are enough batches), the
``--threads`` shared between them as torch intra-op threads
(:func:`syntaxnmt.cpu.pools.decode_workers`); CTranslate2 gets the same split, as many
``inter_threads`` (translators searching batches side by side) with as many ``intra_threads``
each. ``--workers 1``: one batch at a time on all the threads for both. The engines run in turns,
``--repeats`` times in a rotating order, so that a busy machine slows all of them alike; the
table gives the median sentences/s (and the range), ours divided by each engine within each
repeat (the median of these paired ratios, less moved by a load that changes between repeats),
corpus BLEU of the detokenized output, and how many sentences are word-for-word ours
(``--processes`` adds ours with ``decode.processes``, the batches at once in forked processes,
also given against CTranslate2 float32, paired). ``--root`` is the folder that relative paths in the
checkpoint's stored config start from (e.g. the repository the run was trained in). The figures
and the machine (``syntaxnmt.cpu.machine.machine_info``, load average before and after) also go to
``--json`` (default benchmarks/out/ct2_decode.json). ``--isa avx2`` restarts the script with ATen,
oneDNN, MKL and CTranslate2 restricted to AVX2 (``benchmarks/_isa.py``: an emulation of an AVX2
machine on this CPU, which the machine record says).
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
import statistics
import tempfile
import time
from pathlib import Path

import torch

from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.cpu.pools import decode_workers
from syntaxnmt.decoding.ct2_engine import CT2Engine
from syntaxnmt.decoding.ct2_export import export_ct2
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.sources import encode_source_lines
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.metrics import score
from syntaxnmt.runtime import keep_freed_memory
from syntaxnmt.textio import atomic_write_text, read_lines


def engines(model, checkpoint: Path, tmp: Path, threads: int, inter_threads: int = 1, processes: bool = False):
    """name -> search function from ids to hypotheses: ours on ``model`` (loaded from
    ``checkpoint``; with ``processes`` also ours with ``decode.processes``,
    the batches at once in forked processes), CTranslate2 with ``inter_threads`` translators sharing ``threads`` threads."""
    device = torch.device("cpu")

    def ours(**update):  # our search with these decode keys changed
        return lambda sources, decode, anns: translate_ids(model, sources, decode.model_copy(update=update), device, annotations=anns)

    out = {"syntaxnmt (PyTorch)": ours()}
    if processes:
        out["syntaxnmt, processes"] = ours(processes=True)
    for quant in ("float32", "int8"):
        engine = CT2Engine(export_ct2(checkpoint, tmp / quant, quant), threads=threads, inter_threads=inter_threads)
        out[f"CTranslate2 {quant}"] = lambda sources, decode, anns, engine=engine: engine.translate_ids(sources, decode)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--root", help="folder that relative paths of the stored config start from (default: the current one)")
    data = os.environ.get("SYNTAXNMT_DATA", "../shared/data")
    ap.add_argument("--test-src", default=f"{data}/multi30k/test_2016_flickr.en.gz")
    ap.add_argument("--test-ref", default=f"{data}/multi30k/test_2016_flickr.de.gz")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0, help="batches searched at once (decode.workers; 0: one per thread), the same for CTranslate2 (inter_threads)")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=100, help="sentences each engine translates untimed first")
    ap.add_argument("--limit", type=int, default=0, help="only the first N sentences (quick checks)")
    ap.add_argument("--processes", action="store_true", help="also time our search with decode.processes (the batches at once in forked processes instead of threads)")
    _isa.add_isa_argument(ap)
    ap.add_argument("--json", default="benchmarks/out/ct2_decode.json", help="figures and the machine record")
    args = ap.parse_args()
    json_path = Path(args.json).resolve()
    checkpoint, src, ref = (Path(p).resolve() for p in (args.checkpoint, args.test_src, args.test_ref))
    if args.root:
        os.chdir(args.root)
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    machine = machine_info()
    lines, refs = read_lines(src)[: args.limit or None], read_lines(ref)[: args.limit or None]
    with tempfile.TemporaryDirectory() as tmp:
        model, cfg, toks = load_model(checkpoint, torch.device("cpu"))
        batches = -(-len(lines) // cfg.decode.batch_size)
        workers, per_worker = decode_workers(args.workers, batches, torch.device("cpu"))
        runs = engines(model, checkpoint, Path(tmp), per_worker * workers, workers, args.processes)
        decode = cfg.decode.model_copy(update={"beam_size": args.beam, "workers": workers})
        sources, anns = encode_source_lines(cfg, toks, lines, model.feature_spec, source_name=str(src))
        names = list(runs)
        with torch.inference_mode():  # untimed: first-call costs (kernel selection, allocations) of every engine
            for name in names:
                runs[name](sources[: args.warmup], decode, anns[: args.warmup] if anns else None)
        speeds: dict[str, list[float]] = {n: [] for n in names}
        outputs: dict[str, list[str]] = {}
        for r in range(args.repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                start = time.perf_counter()
                with torch.inference_mode():
                    hyps = runs[name](sources, decode, anns)
                speeds[name].append(len(sources) / (time.perf_counter() - start))
                outputs.setdefault(name, [toks.tgt.decode(nb[0].tokens) for nb in hyps])
    with_load_after(machine)
    ours = outputs[names[0]]
    base = statistics.median(speeds[names[0]])
    print(f"| engine | sentences/s (median of {args.repeats}; range) | vs ours | ours / engine, paired (median of the repeats) | BLEU | same output as ours |")
    print("|---|---|---|---|---|---|")
    rows = {}
    for name in names:
        s = speeds[name]
        bleu = score(outputs[name], [refs])
        same = sum(a == b for a, b in zip(outputs[name], ours))
        # ours / this engine within each repeat (the engines ran one after the other): less moved by a load that changes between repeats
        paired = statistics.median(a / b for a, b in zip(speeds[names[0]], s))
        rows[name] = {"sent_s": s, "median_sent_s": statistics.median(s), "vs_ours": statistics.median(s) / base, "ours_vs_engine_paired": paired, "bleu": bleu.bleu, "same_as_ours": same}
        print(f"| {name} | {statistics.median(s):.1f} ({min(s):.1f}-{max(s):.1f}) | {statistics.median(s) / base:.2f}x | {paired:.2f}x | {bleu.bleu:.2f} | {same}/{len(ours)} |")
    print()
    for name in names[1:]:
        if name.startswith("syntaxnmt,"):  # each variant of ours against CTranslate2 float32, paired as above
            rows[name]["vs_ct2_float32_paired"] = vs = statistics.median(a / b for a, b in zip(speeds[name], speeds["CTranslate2 float32"]))
            print(f"{name} / CTranslate2 float32, paired: {vs:.2f}x")
    ct2_version = __import__("ctranslate2").__version__
    print(f"{len(sources)} sentences of {src.name}, beam {args.beam}, length penalty {decode.length_penalty}, batch {decode.batch_size}, {args.threads} threads "
          f"({workers} batch{'es' if workers > 1 else ''} at once, {per_worker} thread{'s' if per_worker > 1 else ''} each; CTranslate2 inter_threads {workers}, intra_threads {per_worker}); "
          f"{checkpoint}; ctranslate2 {ct2_version}; {bleu.bleu_signature}")
    print(machine_summary(machine))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "checkpoint": str(checkpoint),
           "sentences": len(sources), "beam": args.beam, "batch": decode.batch_size, "threads": args.threads, "workers": workers, "threads_per_worker": per_worker, "repeats": args.repeats,
           "ctranslate2": ct2_version, "bleu_signature": bleu.bleu_signature, "engines": rows, "machine": machine}
    json_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(json_path, json.dumps(doc, indent=1))


if __name__ == "__main__":
    sys.exit(main())
