"""Plain beam search against lexically constrained beam search (one constraint per sentence) on
one checkpoint: sentences/s, their ratio, term accuracy and sacreBLEU (issue 52's "at most 2x the
time of plain beam 5").

    python benchmarks/constrained_decoding.py --checkpoint runs/multi30k-en-de/baseline/best.pt \
        --constraints runs/multi30k-en-de/terminology/set/constraints.txt \
        [--src F --ref F] [--beam 5] [--limit N] [--repeats 3] [--threads 1] [--json F]

The sentences are those of the test set (default Multi30k test_2016_flickr, the set
``recipes/multi30k/terminology/run.sh`` builds the constraints for) that have a term; each gets
its first term as its one constraint. Both searches translate the same sentences through
:meth:`syntaxnmt.Translator.translate` (text in, text out: the constraint's segmentation
included), in turns, ``--repeats`` times in alternating order after an untimed warm-up; the table
gives the median sentences/s of each and the median of the paired ratios (plain / constrained:
how many times slower the constrained search is), term accuracy (WMT21 exact match, of the one
required term) and corpus BLEU of each on those sentences. Run it on a quiet machine; the load
average before and after is printed and goes to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from syntaxnmt.api import Translator
from syntaxnmt.decoding.constraints import read_constraint_lines
from syntaxnmt.decoding.terminology import term_accuracy
from syntaxnmt.metrics import corpus_bleu
from syntaxnmt.textio import atomic_write_text, read_lines

DATA = Path(os.environ.get("SYNTAXNMT_DATA", "../shared/data")) / "multi30k"


def measure(translator: Translator, lines: list[str], terms: list[list[str]], refs: list[str], beam: int, repeats: int) -> dict:
    """Sentences/s of both searches (medians), the paired ratios, term accuracy and BLEU."""
    runs = {"plain": lambda: translator.translate(lines, beam=beam), "constrained": lambda: translator.translate(lines, beam=beam, constraints=terms)}
    for run in runs.values():  # warm-up, untimed
        run()
    speed: dict[str, list[float]] = {name: [] for name in runs}
    outputs: dict[str, list[str]] = {}
    for r in range(repeats):
        for name in list(runs) if r % 2 == 0 else list(runs)[::-1]:
            start = time.perf_counter()
            outputs[name] = [t.text for t in runs[name]()]
            speed[name].append(len(lines) / (time.perf_counter() - start))
    ratios = [p / c for p, c in zip(speed["plain"], speed["constrained"])]
    result = {"sentences": len(lines), "beam": beam, "repeats": repeats, "slowdown": statistics.median(ratios), "slowdowns": ratios}
    for name in runs:
        found, required = term_accuracy(outputs[name], terms)
        result[name] = {"sent_per_s": statistics.median(speed[name]), "runs": speed[name], "term_accuracy": 100 * found / max(required, 1), "terms": [found, required], "bleu": corpus_bleu(outputs[name], [refs])}
    return result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--constraints", required=True, help="the test set's terms (syntaxnmt terminology-set's constraints.txt)")
    ap.add_argument("--src", default=str(DATA / "test_2016_flickr.en.gz"))
    ap.add_argument("--ref", default=str(DATA / "test_2016_flickr.de.gz"))
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--limit", type=int, help="only the first N sentences with a term")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default="benchmarks/out/constrained_decoding.json")
    args = ap.parse_args(argv)
    src, ref = read_lines(args.src), read_lines(args.ref)
    terms = read_constraint_lines(args.constraints, len(src))
    keep = [i for i, t in enumerate(terms) if t][: args.limit]
    lines, refs, one = [src[i] for i in keep], [ref[i] for i in keep], [terms[i][:1] for i in keep]
    translator = Translator.from_checkpoint(args.checkpoint, device=args.device, threads=args.threads)
    load_before = os.getloadavg()
    result = measure(translator, lines, one, refs, args.beam, args.repeats)
    result.update(checkpoint=args.checkpoint, threads=args.threads, torch=torch.__version__, load_before=load_before, load_after=os.getloadavg())
    print(f"{len(lines)} sentences with one constraint each, beam {args.beam}, {args.threads} thread(s), median of {args.repeats} runs; load {load_before[0]:.2f} -> {result['load_after'][0]:.2f}")
    print(f"{'search':<12} {'sent/s':>8} {'term acc.':>10} {'BLEU':>6}")
    for name in ("plain", "constrained"):
        r = result[name]
        print(f"{name:<12} {r['sent_per_s']:8.2f} {r['term_accuracy']:9.2f}% {r['bleu']:6.2f}")
    print(f"constrained search: {result['slowdown']:.2f}x the time of plain beam {args.beam}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
