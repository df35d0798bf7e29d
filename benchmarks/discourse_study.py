"""The synthetic discourse study of docs/documents.md (issue 21): sentence-level, concatenation
(2-to-1, 2-to-2) and HAN models on the synthetic document corpus, scored by contrastive accuracy
per phenomenon x distance under the three context controls, with test BLEU and training cost.

    python benchmarks/discourse_study.py --work runs/discourse --seeds 1 2 3 [--steps 3000] [--jobs 2] [--write docs/documents.md]
    python benchmarks/discourse_study.py --work /tmp/d --quick          # a smoke run (minutes, meaningless figures)

Every system of a seed shares the prepared corpus; HAN is fine-tuned from the sentence model of its
seed (train.init_from, Miculicich et al. 2018's two-stage recipe) for the same number of updates.
``--jobs N`` runs N trainings at a time in worker processes of cores / N threads each (a HAN run
starts once its seed's sentence model is trained) and reports the study's wall clock: on a 2-core
CPU two one-thread runs finish sooner than one two-thread run after the other.

Under the table, with several seeds (issue 50): the smallest BLEU difference the seeds detect with
80 % power and the A/A check, on the sentence model's seeds (:func:`notes`, as under the experiment
tables). Contrastive accuracy has none: the sentence model reads no context, so the twin items fix
its accuracy at 50 in every cell, whatever its seed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from syntaxnmt.config import load_config
from syntaxnmt.data.contrastive import read_contrastive
from syntaxnmt.data.discourse import write_documents
from syntaxnmt.data.prepare import is_prepared, prepare
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.decoding.scoring import CONTEXT_MODES, score_contrastive
from syntaxnmt.experiments.sets import AA_MIN_RUNS, AA_SHUFFLES, aa_line, kept_score, power_line, score_runs, seed_notes, write_section
from syntaxnmt.metrics import bleu_statistics, corpus_bleu
from syntaxnmt.textio import atomic_write_text, read_lines
from syntaxnmt.training.train import train

SYSTEMS = {
    "sentence": {"kind": "none"},
    "concat 2-to-1": {"kind": "concat", "sentences": 1, "side": "source"},
    "concat 2-to-2": {"kind": "concat", "sentences": 1, "side": "both"},
    "HAN (k = 3)": {"kind": "han", "sentences": 3, "side": "source"},
    "HAN (k = 3), both sides": {"kind": "han", "sentences": 3, "side": "both"},
}
# The concatenation models again, fine-tuned from the sentence model like HAN: as many updates in
# all as HAN's two stages (not in the default study; --systems names them).
MATCHED = {"concat 2-to-1, fine-tuned": "concat 2-to-1", "concat 2-to-2, fine-tuned": "concat 2-to-2"}
SYSTEMS |= {name: SYSTEMS[base] for name, base in MATCHED.items()}
SLUGS = {"sentence": "sentence", "concat 2-to-1": "concat", "concat 2-to-2": "concat-2to2", "HAN (k = 3)": "han", "HAN (k = 3), both sides": "han-both", "concat 2-to-1, fine-tuned": "concat-ft", "concat 2-to-2, fine-tuned": "concat-2to2-ft"}
DEFAULT = [s for s in SYSTEMS if s not in MATCHED]


def from_sentence(system: str) -> bool:
    """Whether ``system`` is fine-tuned from its seed's sentence model (train.init_from)."""
    return SYSTEMS[system]["kind"] == "han" or system in MATCHED


def config(work: Path, corpus: dict, system: str, seed: int, steps: int, quick: bool):
    slug = SLUGS[system]
    tree = {
        "name": f"discourse-{slug}",
        "work_dir": str(work / f"{slug}-seed{seed}"),
        "seed": seed,
        "data": {
            "train_src": str(corpus["train"]["src"]),
            "train_tgt": str(corpus["train"]["tgt"]),
            "dev_src": str(corpus["dev"]["src"]),
            "dev_tgt": str(corpus["dev"]["tgt"]),
            "train_docs": str(corpus["train"]["docs"]),
            "dev_docs": str(corpus["dev"]["docs"]),
            "src_lang": "en",
            "tgt_lang": "syn",
            "vocab_size": 400,
            "joint_vocab": True,
            "prepared_dir": str(work / "prepared"),
        },
        "model": {"d_model": 64 if quick else 128, "heads": 4, "ffn_dim": 256, "enc_layers": 2, "dec_layers": 2, "dropout": 0.1, "tie_embeddings": "all", "context": SYSTEMS[system]},
        "train": {"max_tokens": 2048, "lr": 2e-3, "warmup_steps": 100 if quick else 300, "max_steps": steps, "valid_every": max(steps // 4, 1), "valid_max_sentences": 200, "tensorboard": False, "device": "cpu"},
        "decode": {"beam_size": 4, "batch_size": 100},
    }
    if from_sentence(system):
        tree["train"]["init_from"] = str(work / f"sentence-seed{seed}" / "best.pt")
    return load_config(None, tree)


def run_system(cfg, corpus: dict, items, log, draws: int = 1) -> dict:
    done = Path(cfg.work_dir) / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    load = os.getloadavg()[0]
    t0, cpu0 = time.perf_counter(), time.process_time()
    progress = train(cfg, log=log)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    device = torch.device("cpu")
    model, mcfg, toks = load_model(Path(cfg.work_dir) / "best.pt", device)
    src, ref, docs = read_lines(corpus["test"]["src"]), read_lines(corpus["test"]["tgt"]), read_lines(corpus["test"]["docs"])
    t1 = time.perf_counter()
    hyps = [nb[0][0] for nb in translate_lines(model, mcfg, toks, src, mcfg.decode, device, docs=docs)]
    decode_s = time.perf_counter() - t1
    result = {
        "updates": progress.step,
        "threads": torch.get_num_threads(),
        "load_before": load,
        "train_wall_s": wall,
        "train_cpu_s": cpu,
        "ms_per_update": 1000 * wall / max(progress.step, 1),
        "bleu": corpus_bleu(hyps, [ref]),
        "bleu_stats": bleu_statistics(hyps, [ref]).astype(int).tolist(),  # per sentence: the seed notes resample them
        "decode_sent_per_s": len(src) / decode_s,
        "contrastive": {mode: score_contrastive(model, toks, items, device, context=mode, draws=draws if mode == "other-document" else 1).as_json() for mode in CONTEXT_MODES},
    }
    atomic_write_text(done, json.dumps(result, indent=1))
    return result


def mean_sd(values: list[float]) -> str:
    return f"{statistics.mean(values):.1f}" + (f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else "")


def table(results: dict[str, list[dict]], items, bootstrap: int = 1000) -> str:
    cells = sorted({f"{it.phenomenon} / distance {it.distance}" for it in items})
    head = ["system", "context", "all", *cells, "BLEU", "ms/update", "sent/s (docs)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system, runs in results.items():
        for mode in CONTEXT_MODES:
            acc = [100 * r["contrastive"][mode]["accuracy"] for r in runs]
            per = [mean_sd([100 * r["contrastive"][mode]["cells"][c]["accuracy"] for r in runs]) for c in cells]
            extra = [mean_sd([r["bleu"] for r in runs]), f"{statistics.mean(r['ms_per_update'] for r in runs):.0f}", f"{statistics.mean(r['decode_sent_per_s'] for r in runs):.0f}"] if mode == "true" else ["", "", ""]
            rows.append("| " + " | ".join([system if mode == "true" else "", mode, mean_sd(acc), *per, *extra]) + " |")
    return "\n".join(rows + [x for note in notes(results, bootstrap) for x in ("", note)])


def notes(results: dict[str, list[dict]], bootstrap: int) -> list[str]:
    """The lines under the table with several seeds (issue 50): the BLEU power line and A/A check
    on the sentence model's seeds (:func:`syntaxnmt.experiments.sets.seed_notes`) from the
    per-sentence statistics every run keeps (``bleu_stats``). Runs scored before they were kept
    give the power line from their BLEU (it needs no more), and an A/A check only with fewer seeds
    than it takes (the line says so); with more, the line says what it lacks."""
    sentence = results.get("sentence", [])
    others = [len(runs) for system, runs in results.items() if system != "sentence"]
    if not sentence:
        return []
    if all("bleu_stats" in r for r in sentence):
        return seed_notes("sentence", {"test": [np.asarray(r["bleu_stats"], dtype=np.float64) for r in sentence]}, others, bootstrap, AA_SHUFFLES)
    if max(len(sentence), *others) < 2:
        return []
    runs = {"test": score_runs([r["bleu"] for r in sentence])}
    missing = sum("bleu_stats" not in r for r in sentence)
    aa = (
        aa_line("sentence", runs, bootstrap, AA_SHUFFLES)
        if len(sentence) < AA_MIN_RUNS
        else f"A/A check (BLEU, calibration): not computed -- it resamples the test sentences, and {missing} of the sentence model's {len(sentence)} "
        "runs were scored before result.json kept their per-sentence BLEU statistics (bleu_stats)."
    )
    return [power_line("sentence", runs, others, metric=kept_score), aa]


def conditions(results: dict[str, list[dict]]) -> str:
    """The thread counts and load averages the runs trained under (recorded since seeds 2-3 of the 3,000-update study)."""
    runs = [r for rs in results.values() for r in rs]
    threads = sorted({r["threads"] for r in runs if "threads" in r})
    loads = [r["load_before"] for r in runs if "load_before" in r]
    unrecorded = sum("threads" not in r for r in runs)
    parts = [f"{'/'.join(map(str, threads))} thread(s)"] if threads else []
    if loads:
        parts.append(f"load average {min(loads):.1f}-{max(loads):.1f} at their start")
    if unrecorded:
        parts.append(f"{unrecorded} run(s) from before these were recorded")
    return ", ".join(parts) or "not recorded"


def schedule(work: Path, seeds: list[int], chosen: list[str], args) -> float:
    """Train every (seed, system) not done yet in ``args.jobs`` worker processes at a time (each
    with cores // jobs threads); sentence models first, since HAN is fine-tuned from them, then the
    costliest runs first. Returns the wall clock in seconds."""
    costly = ["sentence", "HAN (k = 3), both sides", "concat 2-to-2, fine-tuned", "concat 2-to-2", "HAN (k = 3)", "concat 2-to-1, fine-tuned", "concat 2-to-1"]
    todo = sorted(((seed, system) for seed in seeds for system in chosen), key=lambda t: (costly.index(t[1]), t[0]))
    todo = [t for t in todo if not (work / f"{SLUGS[t[1]]}-seed{t[0]}" / "result.json").is_file()]
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    running: dict[subprocess.Popen, tuple[int, str]] = {}
    t0 = time.perf_counter()
    while todo or running:
        ready = [t for t in todo if not from_sentence(t[1]) or (work / f"sentence-seed{t[0]}" / "result.json").is_file()]
        while ready and len(running) < args.jobs:
            seed, system = task = ready.pop(0)
            todo.remove(task)
            log = open(work / "logs" / f"{SLUGS[system]}-seed{seed}.log", "w")
            cmd = [sys.executable, __file__, "--work", str(work), "--seeds", str(seed), "--systems", system, "--steps", str(args.steps), "--draws", str(args.draws), "--worker"] + (["--quick"] if args.quick else [])
            print(f"== {system}, seed {seed}: started ({threads} thread(s), load average {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
            running[subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)] = task
            log.close()
        time.sleep(1.0)
        for proc in [p for p in running if p.poll() is not None]:
            seed, system = running.pop(proc)
            if proc.returncode:
                for p in running:
                    p.terminate()
                sys.exit(f"discourse_study: {system}, seed {seed} failed (exit {proc.returncode}); see {work / 'logs'}")
            print(f"== {system}, seed {seed}: done at {(time.perf_counter() - t0) / 60:.1f} min", file=sys.stderr, flush=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="runs/discourse")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=3000, help="updates per system (HAN: fine-tuning updates)")
    ap.add_argument("--systems", default=";".join(DEFAULT), help="the systems to run, their labels joined by ';' (default: the first five): " + "; ".join(SYSTEMS))
    ap.add_argument("--quick", action="store_true", help="a tiny corpus and model: a smoke run")
    ap.add_argument("--write", help="write the table as a section of this Markdown file (e.g. docs/documents.md)")
    ap.add_argument("--jobs", type=int, default=1, help="trainings at a time, each in its own process with cores // JOBS threads (default 1: in this process)")
    ap.add_argument("--draws", type=int, default=5, help="other-document control: donors per item (syntaxnmt score --draws)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="two-level bootstrap samples of the A/A check under the table (default 1000)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one run of --jobs: train the systems asked, no table
    args = ap.parse_args()
    if args.jobs < 1 or args.draws < 1 or args.bootstrap < 1:
        ap.error("--jobs, --draws and --bootstrap take a positive number")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    work = Path(args.work)
    sizes = dict(n_train_docs=60, n_dev_docs=4, n_test_docs=24) if args.quick else {}
    corpus = write_documents(work / "corpus", seed=1, **sizes) if not (work / "corpus" / "contrastive.json").is_file() else {
        s: {k: work / "corpus" / f"{s}.{k}" for k in ("src", "tgt", "docs")} | ({"contrastive": work / "corpus" / "contrastive.json"} if s == "test" else {}) for s in ("train", "dev", "test")
    }
    items = read_contrastive(corpus["test"]["contrastive"])
    steps = 40 if args.quick else args.steps
    asked = [s.strip() for s in args.systems.split(";")]  # ';': the labels hold commas
    unknown = [s for s in asked if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown system(s) {unknown}: choose from {'; '.join(SYSTEMS)}")
    chosen = [s for s in SYSTEMS if s in asked]
    if args.worker:  # one (seed, system) of a --jobs study; its sentence model is trained already
        for seed in args.seeds:
            for system in chosen:
                run_system(config(work, corpus, system, seed, steps, args.quick), corpus, items, log=lambda *a, **k: None, draws=args.draws)
        return
    if any(from_sentence(s) for s in chosen) and "sentence" not in chosen:
        chosen.insert(0, "sentence")
    load0 = os.getloadavg()
    trained = sum(not (work / f"{SLUGS[system]}-seed{seed}" / "result.json").is_file() for seed in args.seeds for system in chosen)
    wall = None
    if args.jobs > 1 and trained:
        first = config(work, corpus, chosen[0], args.seeds[0], steps, args.quick)
        if not is_prepared(first):  # the workers share the prepared corpus: build it once, here
            prepare(first, log=lambda *a, **k: None)
        wall = schedule(work, args.seeds, chosen, args)
    results: dict[str, list[dict]] = {s: [] for s in chosen}
    for seed in args.seeds:
        for system in chosen:
            cfg = config(work, corpus, system, seed, steps, args.quick)
            print(f"== {system}, seed {seed}", file=sys.stderr, flush=True)
            results[system].append(run_system(cfg, corpus, items, log=lambda *a, **k: None, draws=args.draws))
    text = table(results, items, args.bootstrap)
    load1 = os.getloadavg()
    caption = (
        f"Contrastive accuracy (%) on {len(items)} items of the synthetic discourse test set by phenomenon and distance "
        f"(chance 50 in every cell by construction), mean ± sd over seeds {', '.join(map(str, args.seeds))}; rows per system: "
        f"the true context and the two controls (`other-document` with {args.draws} donor document(s) per item, `none`). {steps} updates per system (HAN and the systems marked fine-tuned: fine-tuned from the sentence model "
        f"for {steps} more). BLEU: sacreBLEU on the test documents translated with `--docs`, beam 4. "
        f"Command: `python benchmarks/discourse_study.py --work {args.work} --seeds {' '.join(map(str, args.seeds))} --steps {args.steps} --jobs {args.jobs} --draws {args.draws}`; "
        + (f"load average {load0[0]:.1f} before, {load1[0]:.1f} after, {os.cpu_count()} cores. " if trained else f"every run from its `result.json` (trained earlier), {os.cpu_count()} cores. ")
        + (f"The {trained} runs took {wall / 60:.0f} minutes of wall clock in all, {args.jobs} at a time. " if wall is not None else "")
        + f"ms/update and sent/s are wall-clock means over the seeds' runs as they ran ({conditions(results)}): "
        "timings, not a cost comparison (docs/documents.md, Cost)."
        + (
            " Under the table: the smallest BLEU difference the seeds detect with 80 % power and the A/A check, on the sentence model's seeds "
            "(the table itself tests no difference: it gives mean ± sd; the lines say what a test over these seeds could detect); "
            "none for contrastive accuracy: the sentence model reads no context, so the twin items, not its seed, fix its accuracy at 50."
            if len(args.seeds) > 1 and "sentence" in results
            else ""
        )
    )
    print(caption + "\n\n" + text)
    if args.write:
        write_section(Path(args.write), "discourse-study", "## Results on the synthetic discourse corpus\n\n" + caption + "\n\n" + text + "\n")


if __name__ == "__main__":
    main()
