"""Attention as alignment on the English-French Hansards gold set, against eflomal, in one run.

    python benchmarks/hansards_aer.py [--minutes 15 | --steps N] [--work runs/hansards-aer] [--threads 1]
        [--variants plain,guided,guided-full,guided-full-leaky,self] [--jobs 2] [--dev-pairs 100]
        [--normalizers softmax,sparsemax,entmax15,hard] [--hard-decode] [--bleu] [--output R.json]
        [--self-reading best|shifted|unshifted]

Data (``${SYNTAXNMT_DATA:-../shared/data}``): Multi30k ``train.{en,fr}.gz`` (29,000 pairs) and the
447 HLT-NAACL 2003 Hansards test pairs (``alignment/enfr-hansards``: ``enfr.src-tgt`` tokenized,
``enfr.gold`` 1-indexed sure/possible links). Transductive setting, as usual for word aligners:

1. Multi30k is lowercased and Moses-tokenized (sacremoses, no escaping) to match the gold set's
   tokenization; the 447 Hansards pairs (lowercased) are appended. These 29,447 tokenized pairs
   are the training corpus of both aligners (the config has no further lowercasing or Moses step,
   so the words the model sees are exactly eflomal's and the gold set's).
2. The gold pairs are split: the first ``--dev-pairs`` (default 100: lines 1-100 of ``enfr.gold``)
   are the dev part, on which readings of the attention are chosen, the others (lines 101-447) the
   test part every AER is reported on. ``--dev-pairs 0`` scores all 447 pairs (as the figures
   before the split did) and marks readings chosen on them as oracle.
3. eflomal (both directions; gdfa, and the forward direction alone) aligns the whole corpus.
4. English->French Transformers (3+3 layers, d_model 128, joint BPE 8k) train on the corpus for
   ``--steps`` updates (or ``--minutes`` of training time for a single model; validation: Multi30k
   val, dev loss only), one per ``--variants`` entry:

   * ``plain``: no alignment terms (one per ``--normalizers`` entry, see 6);
   * ``guided``: guided alignment (Garg et al. 2019: λ = 1 on head 0 of the penultimate layer) with
     eflomal's gdfa links of the training corpus (``syntaxnmt align-external``);
   * ``guided-full``: the same computed on the full-context pass (``train.alignment.full_context``);
   * ``guided-full-leaky``: plus the leak slot (``train.alignment.leaky``, Mask-Align);
   * ``self``: ``guided-full`` with the plain softmax model's own alignments instead of eflomal's
     (self-training, Zenkel et al. 2020; Shift-AET): a French->English twin of the plain model
     trains with the same budget, each direction's teacher reading on the dev part reads the
     training corpus (``--self-reading``: ``best``, the better of the best unshifted and the best
     shifted reading, by default; or the best ``shifted`` / ``unshifted`` one), the two are
     symmetrized with grow-diag-final-and (:func:`syntaxnmt.alignment.sweep.self_training_alignments`;
     existing labels, ``self.train.align`` in the working folder, are reused).

   Every model trains with ``--threads`` torch threads (default 1); ``--jobs N`` trains and scores
   N of them at once in separate processes (``self`` starts when the plain model and its twin are done).
5. For every model, word alignments are read off its cross-attention while force-decoding the
   French side (argmax per French word, subwords projected back to the gold tokens): the
   configured reading (plain: all layers and heads averaged; guided: the supervised head), every
   layer's heads averaged (the penultimate layer is Garg et al.'s a-priori choice), and the best
   unshifted and the best shifted (Shift-Att) reading of ``align-sweep`` on the dev part.
   ``--bleu`` translates Multi30k test_2016_flickr English->French (lowercased and
   Moses-tokenized like the training corpus, beam 5) and scores it with sacreBLEU (13a, on that
   tokenized lowercased text).
6. ``--normalizers``: one plain model per cross-attention normalizer (issue 12): softmax,
   sparsemax, entmax15, or ``hard`` (argmax attention trained with straight-through gradients);
   ``--hard-decode`` also decodes the softmax model with argmax attention (its alignments are the
   softmax model's). The other variants use softmax.

Prints a Markdown table (AER/precision/recall on the test part and BLEU of every model, eflomal
in the same run) and the machine (``syntaxnmt.runtime.machine_info``, load average before and
after); ``--output`` also writes everything as JSON (with each model's full dev sweep).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import torch
import yaml

from syntaxnmt.alignment.external import align_external, run_eflomal
from syntaxnmt.alignment.extract import AttentionReading, configured_reading, encode_pairs, readings_alignments
from syntaxnmt.alignment.sweep import TEACHER_READINGS, align_sweep, self_training_alignments
from syntaxnmt.config import load_config
from syntaxnmt.data.links import aer, read_alignments, read_bitext
from syntaxnmt.data.prepare import prepare
from syntaxnmt.decoding.translate import load_model, translate_lines
from syntaxnmt.errors import UserError
from syntaxnmt.metrics import score as mt_score
from syntaxnmt.runtime import machine_info, machine_summary, with_load_after
from syntaxnmt.textio import read_lines, write_lines
from syntaxnmt.training.train import train

DATA = Path(os.environ.get("SYNTAXNMT_DATA", "../shared/data"))

CONFIG = """\
name: hansards-aer-en-fr
work_dir: {work}/run
seed: 1
data:
  train_src: {work}/corpus/train.en
  train_tgt: {work}/corpus/train.fr
  dev_src: {work}/corpus/dev.en
  dev_tgt: {work}/corpus/dev.fr
  src_lang: en
  tgt_lang: fr
  prepared_dir: {work}/data
  vocab_size: 8000
  joint_vocab: true
  max_len: 128
model:
  attention_normalizer: {normalizer}
  hard_attention: {hard}
  d_model: 128
  heads: 4
  ffn_dim: 512
  enc_layers: 3
  dec_layers: 3
  dropout: 0.1
  tie_embeddings: all
train:
  max_tokens: 4096
  lr: 1.5e-3
  warmup_steps: 300
  max_steps: {steps}
  max_minutes: {minutes}
  log_every: 50
  valid_every: 100000
  valid_bleu: false
  tensorboard: false
  threads: {threads}
"""

NORMALIZERS = {"softmax": ("softmax", "none"), "sparsemax": ("sparsemax", "none"), "entmax15": ("entmax15", "none"), "hard": ("softmax", "train")}
GUIDED = {"guided_weight": 1.0, "layer": -2, "head": 0}
VARIANTS = {
    "plain": {},
    "guided": {"train": {"alignment": GUIDED}, "labels": "eflomal"},
    "guided-full": {"train": {"alignment": {**GUIDED, "full_context": True}}, "labels": "eflomal"},
    "guided-full-leaky": {"train": {"alignment": {**GUIDED, "full_context": True, "leaky": True}}, "labels": "eflomal"},
    "self": {"train": {"alignment": {**GUIDED, "full_context": True}}, "labels": "self"},
}


def tokenize(lines: list[str], lang: str) -> list[str]:
    from sacremoses import MosesTokenizer

    mt = MosesTokenizer(lang=lang)
    return [mt.tokenize(line.strip().lower(), escape=False, return_str=True) for line in lines]


def build_corpus(work: Path, gold_src: list[list[str]], gold_tgt: list[list[str]], log) -> tuple[list[str], list[str]]:
    """Write the tokenized training corpus (Multi30k + the gold pairs) and the dev set; return the training sides."""
    out = work / "corpus"
    if not (out / "train.fr").is_file():
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        m30k = DATA / "multi30k"
        en, fr = tokenize(read_lines(m30k / "train.en.gz"), "en"), tokenize(read_lines(m30k / "train.fr.gz"), "fr")
        write_lines(out / "dev.en", tokenize(read_lines(m30k / "val.en.gz"), "en"))
        write_lines(out / "dev.fr", tokenize(read_lines(m30k / "val.fr.gz"), "fr"))
        write_lines(out / "test.en", tokenize(read_lines(m30k / "test_2016_flickr.en.gz"), "en"))
        write_lines(out / "test.fr", tokenize(read_lines(m30k / "test_2016_flickr.fr.gz"), "fr"))
        write_lines(out / "train.en", en + [" ".join(s).lower() for s in gold_src])
        write_lines(out / "train.fr", fr + [" ".join(t).lower() for t in gold_tgt])
        log(f"tokenized Multi30k ({len(en)} pairs) + {len(gold_src)} Hansards pairs in {time.perf_counter() - t0:.0f} s")
    return read_lines(out / "train.en"), read_lines(out / "train.fr")


def run_name(variant: str, normalizer: str = "softmax") -> str:
    """The model's name in the results: the variant, with a non-softmax normalizer (plain only)."""
    return variant if normalizer == "softmax" else f"{variant}, {normalizer}"


def write_config(work: Path, args, variant: str = "plain", normalizer: str = "softmax", reverse: bool = False) -> Path:
    """The config of one model (``run``, ``run-<normalizer>`` for the plain ones as before, ``run-<variant>``, ``run-reverse``)."""
    folder = "run" if (variant, normalizer, reverse) == ("plain", "softmax", False) else "run-reverse" if reverse else f"run-{normalizer}" if variant == "plain" else f"run-{variant}"
    run = work / folder
    run.mkdir(parents=True, exist_ok=True)
    n, hard = NORMALIZERS[normalizer]
    budget = {"steps": args.steps, "minutes": 0} if args.steps else {"steps": 100000, "minutes": args.minutes}
    tree = yaml.safe_load(CONFIG.format(work=work.as_posix(), threads=args.threads, normalizer=n, hard=hard, **budget))
    tree["work_dir"] = run.as_posix()
    spec = VARIANTS[variant]
    if "train" in spec:
        tree["train"]["alignment"] = dict(spec["train"]["alignment"])
    labels = spec.get("labels")
    if labels:
        tree["data"]["train_align"] = f"{work.as_posix()}/{labels}.train.align"
        tree["data"]["prepared_dir"] = f"{work.as_posix()}/data-{labels}"
    if reverse:
        d = tree["data"]
        d["train_src"], d["train_tgt"], d["dev_src"], d["dev_tgt"] = d["train_tgt"], d["train_src"], d["dev_tgt"], d["dev_src"]
        d["src_lang"], d["tgt_lang"] = "fr", "en"
        d["prepared_dir"] = f"{work.as_posix()}/data-reverse"
    path = run / "config.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    return path


class GoldSplit:
    """The Hansards gold pairs split into the dev part (the first ``dev_pairs``) and the test part."""

    def __init__(self, work: Path, dev_pairs: int):
        gold_dir = DATA / "alignment" / "enfr-hansards"
        self.src, self.tgt = read_bitext(gold_dir / "enfr.src-tgt")
        self.gold = read_alignments(gold_dir / "enfr.gold", one_indexed=True, src_lengths=[len(s) for s in self.src], tgt_lengths=[len(t) for t in self.tgt])
        n = len(self.src)
        if not 0 <= dev_pairs < n:
            raise UserError(f"--dev-pairs {dev_pairs}: give 0 (no dev part) up to {n - 1}")
        self.n_dev = dev_pairs
        self.dev_slice, self.test_slice = (slice(0, dev_pairs), slice(dev_pairs, n)) if dev_pairs else (slice(0, n), slice(0, n))
        self.en = [" ".join(s).lower() for s in self.src]
        self.fr = [" ".join(t).lower() for t in self.tgt]
        gold_lines = read_lines(gold_dir / "enfr.gold")
        self.dev_gold = work / "corpus" / f"hansards-dev{dev_pairs}.gold"
        write_lines(self.dev_gold, gold_lines[self.dev_slice])
        self.oracle = "" if dev_pairs else " (oracle: chosen on the test pairs)"

    def dev(self) -> tuple[list[str], list[str], Path, bool]:
        return self.en[self.dev_slice], self.fr[self.dev_slice], self.dev_gold, True

    def test(self):
        return self.en[self.test_slice], self.fr[self.test_slice], self.gold[self.test_slice]


def score(gold, hyp) -> dict:
    r = aer([s for s, _ in gold], [p for _, p in gold], hyp)
    return {"aer": 100 * r.aer, "precision": 100 * r.precision, "recall": 100 * r.recall}


def evaluate(checkpoint: Path, split: GoldSplit, work: Path, bleu: bool, log) -> dict:
    """AER of a model's readings on the test part (the configured one, every layer's heads averaged,
    the best unshifted and shifted by the dev sweep), the dev sweep itself, and BLEU."""
    device = torch.device("cpu")
    dev_en, dev_fr, dev_gold, one_indexed = split.dev()
    sweep = align_sweep(checkpoint, dev_en, dev_fr, dev_gold, device, one_indexed_gold=one_indexed)
    model, cfg, toks = load_model(checkpoint, device)
    configured = configured_reading(cfg)
    n_layers = cfg.model.dec_layers
    readings: dict[str, AttentionReading] = {"configured: " + configured.label: configured}
    for layer in range(n_layers):
        readings[f"layer {layer} heads averaged" + (" (penultimate)" if layer == n_layers - 2 else "")] = AttentionReading(layer, None)
    for name, shift in (("best unshifted", False), ("best shifted", True)):
        reading, result = sweep.best(shift)
        readings[f"{name} on dev{split.oracle}: {reading.label}"] = reading
        log(f"{checkpoint}: {name} reading on dev: {reading.label} ({result})")
    test_en, test_fr, gold = split.test()
    source, target, _ = encode_pairs(model, cfg, toks, test_en, test_fr)
    links = readings_alignments(model, source, target, device, list(readings.values()))
    out: dict = {"readings": {key: score(gold, hyp) for key, hyp in zip(readings, links)}, "dev_sweep": sweep.to_json()}
    if bleu:
        out["test_2016_flickr"] = test_bleu(model, cfg, toks, work, device)
    return out


def test_bleu(model, cfg, toks, work: Path, device) -> dict:
    """BLEU/chrF of beam-5 translations of the tokenized, lowercased Multi30k test_2016_flickr."""
    src, ref = read_lines(work / "corpus" / "test.en"), read_lines(work / "corpus" / "test.fr")
    t0 = time.perf_counter()
    with torch.inference_mode():
        hyps = [nbest[0][0] for nbest in translate_lines(model, cfg, toks, src, cfg.decode.model_copy(update={"beam_size": 5}), device)]
    s = mt_score(hyps, [ref], force=True)
    return {"bleu": s.bleu, "chrf": s.chrf, "seconds": time.perf_counter() - t0}


def _log(msg: str) -> None:
    print(msg, flush=True)


def run_model(task: dict) -> dict:
    """Train one model (resuming) and score it; runs in a worker process with ``--jobs`` > 1."""
    args = argparse.Namespace(**task["args"])
    torch.set_num_threads(args.threads)
    work, split = Path(args.work), GoldSplit(Path(args.work), args.dev_pairs)
    variant, normalizer, reverse = task["variant"], task["normalizer"], task.get("reverse", False)
    cfg = load_config(write_config(work, args, variant, normalizer, reverse))
    out: dict = {}
    if variant == "self" and not Path(cfg.data.train_align).is_file():
        plain, twin = work / "run" / "last.pt", work / "run-reverse" / "last.pt"
        out["labels"] = self_training_alignments(cfg, plain, twin, split.dev(), cfg.data.train_align, torch.device("cpu"), reading=args.self_reading, log=_log)
    progress = train(cfg, resume=True, log=_log)
    out["training"] = {"updates": progress.step, "epochs": progress.epoch, "train_minutes": progress.train_seconds / 60, "minutes_budget": args.minutes, "steps_budget": args.steps, "threads": args.threads}
    if cfg.data.train_align:  # the guidance's own AER on the test part (the gold pairs are in the training corpus)
        labels = [sure for sure, _ in read_alignments(cfg.data.train_align)[-len(split.src) :]]
        out["labels_test"] = score(split.test()[2], labels[split.test_slice])
    if reverse:
        return out
    checkpoint = Path(cfg.work_dir) / "last.pt"
    out.update(evaluate(checkpoint, split, work, args.bleu, _log))
    if args.bleu and variant == "plain" and normalizer == "softmax" and args.hard_decode:
        model, cfg, toks = load_model(checkpoint, torch.device("cpu"))
        for layer in model.decoder:
            layer.cross_attn.hard = "decode"
        out["test_2016_flickr, hard decoding"] = test_bleu(model, cfg, toks, work, torch.device("cpu"))
    return out


def tasks_for(args) -> list[dict]:
    """One task per model; the French->English twin of the plain model when ``self`` is asked for, ``self`` last."""
    variants = args.variants.split(",")
    tasks = []
    for variant in variants:
        if variant == "plain":
            tasks += [{"name": run_name("plain", n), "variant": "plain", "normalizer": n} for n in args.normalizers.split(",")]
        elif variant != "self":
            tasks.append({"name": variant, "variant": variant, "normalizer": "softmax"})
    if "self" in variants:
        if "softmax" not in args.normalizers.split(",") or "plain" not in variants:
            tasks.append({"name": "plain", "variant": "plain", "normalizer": "softmax", "hidden": True})
        tasks.append({"name": "plain, French->English twin", "variant": "plain", "normalizer": "softmax", "reverse": True})
        tasks.append({"name": "self", "variant": "self", "normalizer": "softmax", "after": ["plain", "plain, French->English twin"]})
    return tasks


def run_tasks(tasks: list[dict], args, log) -> dict:
    """Run the tasks, ``args.jobs`` at a time (in this process with one job); a task waits for those it names in ``after``."""
    payload = {k: v for k, v in vars(args).items()}
    results: dict = {}
    if args.jobs == 1:
        for task in tasks:
            log(f"== {task['name']}")
            results[task["name"]] = run_model({**task, "args": payload})
        return results
    pending, running = list(tasks), {}
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        while pending or running:
            for task in [t for t in pending if all(a in results for a in t.get("after", []))][: args.jobs - len(running)]:
                pending.remove(task)
                log(f"== {task['name']} (started)")
                running[pool.submit(run_model, {**task, "args": payload})] = task
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                task = running.pop(future)
                results[task["name"]] = future.result()
                log(f"== {task['name']} (done)")
    return results


def _guidance_readings(model: dict) -> str:
    """Where self-training labels were read (each direction's reading and its dev AER); '–' otherwise or for reused labels."""
    if "labels" not in model:
        return "–"
    return " + ".join(f"{name}: {c['reading']} (dev AER {100 * c['dev_aer']:.1f})" for name, c in model["labels"].items())


def markdown(results: dict, split: GoldSplit, tasks: list[dict]) -> list[str]:
    """The table for docs/alignment.md: every aligner's AER/precision/recall on the test part, each model's BLEU."""
    lines = ["| system | alignment read from | AER | precision | recall | test_2016_flickr BLEU |", "|---|---|---|---|---|---|"]
    for sym in ("grow-diag-final-and", "forward"):
        r = results["eflomal"][sym]
        lines.append(f"| eflomal, {sym} ({r['seconds']:.0f} s) | IBM1+HMM+fertility | {r['aer']:.2f} | {r['precision']:.2f} | {r['recall']:.2f} | – |")
    for task in tasks:
        if task.get("reverse") or task.get("hidden"):
            continue
        model = results["models"][task["name"]]
        bleu = f"{model['test_2016_flickr']['bleu']:.2f}" if "test_2016_flickr" in model else "–"
        if "labels_test" in model:
            r = model["labels_test"]
            lines.append(f"| {task['name']}: its guidance ({'eflomal gdfa, align-external' if task['variant'] != 'self' else 'plain model + twin, gdfa'}) | {_guidance_readings(model)} | {r['aer']:.2f} | {r['precision']:.2f} | {r['recall']:.2f} | – |")
        for key, r in model["readings"].items():
            lines.append(f"| {task['name']} ({model['training']['updates']} updates) | {key} | {r['aer']:.2f} | {r['precision']:.2f} | {r['recall']:.2f} | {bleu} |")
    return lines


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=15.0, help="training time budget of a single model (default 15)")
    ap.add_argument("--work", default="runs/hansards-aer", help="working folder (corpus, prepared data, runs)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per model (default 1)")
    ap.add_argument("--steps", type=int, default=0, help="train every model exactly this many updates instead of --minutes (the same budget for every variant)")
    ap.add_argument("--variants", default="plain", help=f"comma-separated models: {', '.join(VARIANTS)} (default plain)")
    ap.add_argument("--jobs", type=int, default=1, help="models trained and scored at once, in separate processes (default 1)")
    ap.add_argument("--dev-pairs", type=int, default=100, help="the first N gold pairs choose the readings, the others are scored (default 100; 0: score all, readings chosen on them marked oracle)")
    ap.add_argument("--normalizers", default="softmax", help="comma-separated cross-attention normalizers of the plain model, one model each: softmax, sparsemax, entmax15, hard (default softmax)")
    ap.add_argument("--hard-decode", action="store_true", help="also decode the softmax model with argmax (hard) attention")
    ap.add_argument("--bleu", action="store_true", help="also translate Multi30k test_2016_flickr en->fr and report BLEU/chrF")
    ap.add_argument("--output", help="also write the results as JSON here")
    ap.add_argument("--self-reading", choices=list(TEACHER_READINGS), default="best", help="the self variant's teacher reading per direction, chosen on the dev part: the better of the best unshifted and shifted one (best, default), or the best shifted / unshifted one")
    args = ap.parse_args(argv)
    unknown = set(args.normalizers.split(",")) - set(NORMALIZERS)
    if unknown:
        raise UserError(f"--normalizers: unknown {', '.join(sorted(unknown))}; choose from {', '.join(NORMALIZERS)}")
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        raise UserError(f"--variants: unknown {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    if args.jobs < 1 or args.threads < 1:
        raise UserError("--jobs and --threads take a positive number")
    tasks = tasks_for(args)
    if len(tasks) > 1 and not args.steps:
        raise UserError(f"{len(tasks)} models to train: give --steps so that every one gets the same updates")
    gold_dir = DATA / "alignment" / "enfr-hansards"
    if not (gold_dir / "enfr.gold").is_file() or not (DATA / "multi30k" / "train.fr.gz").is_file():
        sys.exit(f"hansards_aer: the shared data is missing under {DATA} (set SYNTAXNMT_DATA)")
    t_start = time.perf_counter()
    machine = machine_info() | {"training_threads": args.threads, "jobs": args.jobs}
    work = Path(args.work)
    gold_src, gold_tgt = read_bitext(gold_dir / "enfr.src-tgt")
    train_en, train_fr = build_corpus(work, gold_src, gold_tgt, _log)
    split = GoldSplit(work, args.dev_pairs)
    n_gold = len(split.src)
    test = f"lines {split.dev_slice.stop + 1}-{n_gold}" if args.dev_pairs else f"all {n_gold}"
    results: dict = {"pairs": len(train_en), "dev_pairs": args.dev_pairs, "dev_lines": f"1-{args.dev_pairs}" if args.dev_pairs else "", "test_pairs": len(split.test()[0]), "test_lines": test, "eflomal": {}}

    # eflomal on exactly the training corpus of the models.
    test_gold = split.test()[2]
    for sym in ("grow-diag-final-and", "forward"):
        t0 = time.perf_counter()
        links = run_eflomal(train_en, train_fr, symmetrize=sym)[-n_gold:]
        results["eflomal"][sym] = {**score(test_gold, links[split.test_slice]), "all_447": score(split.gold, links), "seconds": time.perf_counter() - t0}
        _log(f"eflomal ({sym}): {results['eflomal'][sym]}")

    # What every worker would otherwise build at once: the prepared corpora, eflomal's training labels.
    for task in tasks:
        cfg = load_config(write_config(work, args, task["variant"], task["normalizer"], task.get("reverse", False)))
        if VARIANTS[task["variant"]].get("labels") == "eflomal" and not Path(cfg.data.train_align).is_file():
            align_external(cfg, log=_log)
        if task["variant"] != "self":
            prepare(cfg, log=_log)

    results["models"] = run_tasks(tasks, args, _log)
    results["total_minutes"] = (time.perf_counter() - t_start) / 60
    results["machine"] = with_load_after(machine)

    print(f"\nEnglish-French Hansards: AER on {results['test_pairs']} gold pairs ({test} of enfr.gold)" + (f", readings chosen on lines {results['dev_lines']}" if args.dev_pairs else "") + f"; both aligners saw {len(train_en)} tokenized pairs (Multi30k + all 447 gold pairs)")
    for name, model in results["models"].items():
        t = model["training"]
        print(f"NMT {name}: Transformer 3+3, d_model 128, {t['updates']} updates ({t['epochs']} epochs) in {t['train_minutes']:.1f} min of training, {t['threads']} thread(s)")
    print()
    print("\n".join(markdown(results, split, tasks)))
    for name, model in results["models"].items():
        for key in ("test_2016_flickr", "test_2016_flickr, hard decoding"):
            if key in model:
                print(f"{name} {key}: BLEU {model[key]['bleu']:.2f} chrF {model[key]['chrf']:.2f}")
    print(machine_summary(machine) + f" (threads per model: {args.threads}, jobs: {args.jobs}; {results['total_minutes']:.1f} min in all)")
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(main)
