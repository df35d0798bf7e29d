"""Attention as alignment on the English-French Hansards gold set, against eflomal, in one run.

    python benchmarks/hansards_aer.py [--minutes 15 | --steps N] [--work runs/hansards-aer] [--threads 1]
        [--variants plain,guided,guided-full,guided-full-leaky,guided-full-leaky-gdfa,self] [--jobs 2] [--dev-pairs 100]
        [--normalizers softmax,sparsemax,entmax15,hard] [--hard-decode] [--bleu] [--output R.json]
        [--self-reading best|shifted|unshifted] [--until HH:MM] [--max-wall-minutes M]

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
   * ``guided-full-leaky-gdfa``: the ``guided-full-leaky`` model (the same run, ``run-guided-full-leaky``)
     and a French->English ``guided-full-leaky`` twin (``run-guided-full-leaky-reverse``) trained
     with the same budget on eflomal's gdfa links transposed (``eflomal-reverse.train.align``:
     each ``i-j`` of ``eflomal.train.align`` as ``j-i``, French word first), the two directions'
     links of the gold pairs symmetrized with grow-diag-final-and (Garg et al. 2019, Sec. 5); no
     further model of its own (scored when both are done);
   * ``self``: ``guided-full`` with the plain softmax model's own alignments instead of eflomal's
     (self-training, Zenkel et al. 2020; Shift-AET): a French->English twin of the plain model
     trains with the same budget, each direction's teacher reading on the dev part reads the
     training corpus (``--self-reading``: ``best``, the better of the best unshifted and the best
     shifted reading, by default; or the best ``shifted`` / ``unshifted`` one), the two are
     symmetrized with grow-diag-final-and (:func:`syntaxnmt.alignment.sweep.self_training_alignments`;
     existing labels, ``self.train.align`` in the working folder, are reused).

   Every model trains with ``--threads`` torch threads (default 1); ``--jobs N`` trains and scores
   N of them at once in separate processes (``self`` starts when the plain model and its twin are done,
   ``guided-full-leaky-gdfa`` when ``guided-full-leaky`` and its twin are).
5. For every model, word alignments are read off its cross-attention while force-decoding the
   French side (argmax per French word, subwords projected back to the gold tokens): the
   configured reading (plain: all layers and heads averaged; guided: the supervised head), every
   layer's heads averaged (the penultimate layer is Garg et al.'s a-priori choice), and the best
   unshifted and the best shifted (Shift-Att) reading of ``align-sweep`` on the dev part.
   ``guided-full-leaky-gdfa`` reads each direction's configured reading (the supervised head, its
   leak as the null word; and with the leak renormalized away), the French->English one's links
   transposed to English-French, and symmetrizes the two; the twin alone is scored too.
   ``--bleu`` translates Multi30k test_2016_flickr English->French (lowercased and
   Moses-tokenized like the training corpus, beam 5) and scores it with sacreBLEU (13a, on that
   tokenized lowercased text).
6. ``--normalizers``: one plain model per cross-attention normalizer (issue 12): softmax,
   sparsemax, entmax15, or ``hard`` (argmax attention trained with straight-through gradients);
   ``--hard-decode`` also decodes the softmax model with argmax attention (its alignments are the
   softmax model's). The other variants use softmax.

Prints a Markdown table (AER/precision/recall on the test part and BLEU of every model, eflomal
in the same run) and the machine (``syntaxnmt.cpu.machine.machine_info``, load average before and
after); ``--output`` also writes everything as JSON (with each model's full dev sweep).

Running in pieces (the whole comparison takes hours): ``--until HH:MM`` (local time; tomorrow if
already past) and/or ``--max-wall-minutes M`` set a deadline, and SIGINT/SIGTERM to the script
(Ctrl-C, ``kill PID``) stop it the same way: every model in training stops at its next update
boundary and saves ``last.pt`` (the training loop's exact resume), a model that did not finish
training and scoring gets no result, one line per unfinished model says where it stopped, and the
finished ones are kept. The deadline and the stop reach the ``--jobs`` worker processes (each
watches the deadline and the main process's stop event and stops its own training loop by
SIGTERM). Re-running the same command continues: every finished model's result is
``<run folder>/result.json`` (written atomically, with the options it depends on: its config but
the thread count, ``--dev-pairs``, ``--bleu``...), reused when they match and recomputed
otherwise; the corpus, the prepared data, eflomal's links (and their transpose) and the
self-training labels are built once per working folder. A deadline exits 0 (``--output`` is
written once every model is finished); a signal exits 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import torch
import yaml

from syntaxnmt.alignment.external import align_external, run_eflomal
from syntaxnmt.alignment.extract import AttentionReading, configured_reading, encode_pairs, readings_alignments
from syntaxnmt.alignment.sweep import TEACHER_READINGS, align_sweep, self_training_alignments
from syntaxnmt.alignment.symmetrize import symmetrize
from syntaxnmt.checkpoint import load_checkpoint
from syntaxnmt.config import config_from_dict, load_config
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.data.links import Links, aer, format_links, parse_links, read_alignments, read_bitext, transposed
from syntaxnmt.data.prepare import prepare
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.errors import Interrupted, UserError
from syntaxnmt.metrics import score as mt_score
from syntaxnmt.textio import atomic_write_text, read_lines, write_lines
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
    # No model of its own: the named variant's model and its French->English twin, symmetrized.
    "guided-full-leaky-gdfa": {"joint": "guided-full-leaky"},
}
JOINT_SYMMETRIZATION = "grow-diag-final-and"


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


def run_folder(work: Path, variant: str = "plain", normalizer: str = "softmax", reverse: bool = False, seed: int = 1) -> Path:
    """The run folder of one model (``run``, ``run-<normalizer>`` for the plain ones as before,
    ``run-<variant>``; the French->English twins ``run-reverse`` for the plain model as before,
    ``run-<variant>-reverse`` for the others), with ``-seed<S>`` appended for a training seed other
    than 1 (seed 1's folders keep their names: the one-seed runs are its runs). A joint variant's
    folder holds its result only."""
    if variant == "plain":
        folder = "run-reverse" if reverse else "run" if normalizer == "softmax" else f"run-{normalizer}"
    else:
        folder = f"run-{variant}" + ("-reverse" if reverse else "")
    return work / (folder + (f"-seed{seed}" if seed != 1 else ""))


def seed_of(args) -> int:
    """The training seed of the options (``--seed``; 1 for options made before it existed)."""
    return getattr(args, "seed", 1)


def task_folder(work: Path, task: dict) -> Path:
    """The run folder of a task's model (:func:`run_folder`)."""
    return run_folder(work, task["variant"], task["normalizer"], task.get("reverse", False), task.get("seed", 1))


def config_tree(work: Path, args, variant: str = "plain", normalizer: str = "softmax", reverse: bool = False) -> dict:
    """The config of one model, as a tree. A French->English twin (``reverse``) swaps the sides;
    its guidance is the English->French labels transposed (:func:`reverse_labels`)."""
    if "joint" in VARIANTS[variant]:
        raise ValueError(f"{variant} trains no model of its own: see joint_parts")
    n, hard = NORMALIZERS[normalizer]
    budget = {"steps": args.steps, "minutes": 0} if args.steps else {"steps": 100000, "minutes": args.minutes}
    tree = yaml.safe_load(CONFIG.format(work=work.as_posix(), threads=args.threads, normalizer=n, hard=hard, **budget))
    tree["work_dir"] = run_folder(work, variant, normalizer, reverse, seed_of(args)).as_posix()
    tree["seed"] = seed_of(args)
    spec = VARIANTS[variant]
    if "train" in spec:
        tree["train"]["alignment"] = dict(spec["train"]["alignment"])
    labels = spec.get("labels")
    if labels == "self" and seed_of(args) != 1:  # read off this seed's plain model and twin
        labels = f"self-seed{seed_of(args)}"
    if labels:
        tree["data"]["train_align"] = f"{work.as_posix()}/{labels}.train.align"
        tree["data"]["prepared_dir"] = f"{work.as_posix()}/data-{labels}"
    if reverse:
        d = tree["data"]
        d["train_src"], d["train_tgt"], d["dev_src"], d["dev_tgt"] = d["train_tgt"], d["train_src"], d["dev_tgt"], d["dev_src"]
        d["src_lang"], d["tgt_lang"] = "fr", "en"
        d["prepared_dir"] = f"{work.as_posix()}/data-reverse"  # the plain twin's, as before
        if labels:
            d["train_align"] = f"{work.as_posix()}/{labels}-reverse.train.align"
            d["prepared_dir"] = f"{work.as_posix()}/data-{labels}-reverse"
    return tree


def write_config(work: Path, args, variant: str = "plain", normalizer: str = "softmax", reverse: bool = False) -> Path:
    """Write the config of one model into its run folder (:func:`run_folder`); return its path."""
    run = run_folder(work, variant, normalizer, reverse, seed_of(args))
    run.mkdir(parents=True, exist_ok=True)
    path = run / "config.yaml"
    path.write_text(yaml.safe_dump(config_tree(work, args, variant, normalizer, reverse), sort_keys=False), encoding="utf-8")
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


LINKS_FILE = "test-links.json"


def save_links(folder: Path, split: GoldSplit, readings: dict[str, list[Links]]) -> Path:
    """Keep a model's links of the test part, per reading (0-indexed Pharaoh lines, English-French),
    in ``folder/test-links.json``: what its AER is computed from, so that it can be re-scored (and
    resampled over seeds) without the model: ``{"test_lines": [first, last] of enfr.gold (1-based),
    "readings": {reading: [line, ...]}}``."""
    path = folder / LINKS_FILE
    lines = [split.test_slice.start + 1, split.test_slice.stop]
    atomic_write_text(path, json.dumps({"test_lines": lines, "readings": {key: [format_links(x) for x in hyp] for key, hyp in readings.items()}}))
    return path


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
    if configured.null:  # a leaky model: the same head with the leak renormalized away (every word linked)
        renormalized = dataclasses.replace(configured, null=False)
        readings["configured, leak renormalized: " + renormalized.label] = renormalized
    for layer in range(n_layers):
        readings[f"layer {layer} heads averaged" + (" (penultimate)" if layer == n_layers - 2 else "")] = AttentionReading(layer, None)
    for name, shift in (("best unshifted", False), ("best shifted", True)):
        reading, result = sweep.best(shift)
        readings[f"{name} on dev{split.oracle}: {reading.label}"] = reading
        log(f"{checkpoint}: {name} reading on dev: {reading.label} ({result})")
    test_en, test_fr, gold = split.test()
    source, target, _ = encode_pairs(model, cfg, toks, test_en, test_fr)
    links = readings_alignments(model, source, target, device, list(readings.values()))
    save_links(checkpoint.parent, split, dict(zip(readings, links)))
    out: dict = {"readings": {key: score(gold, hyp) for key, hyp in zip(readings, links)}, "dev_sweep": sweep.to_json()}
    if bleu:
        out["test_2016_flickr"] = test_bleu(model, cfg, toks, work, device)
    return out


def joint_links(forward: Path, reverse: Path, src_lines: list[str], tgt_lines: list[str], device, log=None) -> dict[str, dict[str, list[Links]]]:
    """Word links of the pairs (``src_lines`` English, ``tgt_lines`` French) from a source->target
    model and its target->source twin, each force-decoding its own target side: per direction
    (``forward``, ``reverse``: the twin's links transposed to ``(English word, French word)``) and
    ``joint`` (the two symmetrized with :data:`JOINT_SYMMETRIZATION`, the forward direction as
    gdfa's forward), each for the configured reading of the models (the supervised head, with a
    leaky model's leak as the null word: :func:`configured_reading`) and, for a leaky model, the
    same with the leak renormalized away; the reading's label is the key. The configured reading
    gives what :func:`syntaxnmt.alignment.extract.model_alignments` with ``reverse_checkpoint``
    gives (``null=False``: the renormalized one); one force-decoding pass per model reads both."""
    directions: dict[str, dict[str, list[Links]]] = {}
    for name, checkpoint, (a, b) in (("forward", forward, (src_lines, tgt_lines)), ("reverse", reverse, (tgt_lines, src_lines))):
        model, cfg, toks = load_model(checkpoint, device)
        configured = configured_reading(cfg)
        readings = {"configured: " + configured.label: configured}
        if configured.null:
            renormalized = dataclasses.replace(configured, null=False)
            readings["configured, leak renormalized: " + renormalized.label] = renormalized
        source, target, _ = encode_pairs(model, cfg, toks, a, b)
        links = readings_alignments(model, source, target, device, list(readings.values()))
        directions[name] = {key: [transposed(x) for x in hyp] if name == "reverse" else hyp for key, hyp in zip(readings, links)}
        if log:
            log(f"{checkpoint}: {' and '.join(k.split(':')[0] for k in readings)} reading of {len(a)} pairs" + (" (links transposed to English-French)" if name == "reverse" else ""))
    if directions["forward"].keys() != directions["reverse"].keys():
        raise UserError(f"{forward} and {reverse} are read differently ({', '.join(directions['forward'])} / {', '.join(directions['reverse'])}): train the twin with the same train.alignment")
    directions["joint"] = {key: [symmetrize(f, r, JOINT_SYMMETRIZATION) for f, r in zip(fwd, directions["reverse"][key])] for key, fwd in directions["forward"].items()}
    return directions


def evaluate_joint(task: dict, args, work: Path, split: GoldSplit, log) -> dict:
    """A joint variant's result: its two models' links of the test part symmetrized (``readings``)
    and the French->English twin's own (``reverse_readings``), scored like every model's; the
    English->French model's training and BLEU (from its result) and the twin's training."""
    forward_task, reverse_task = joint_parts(task["variant"], seed_of(args))
    parts = {name: reusable_result(work, args, t) for name, t in (("forward", forward_task), ("reverse", reverse_task))}
    missing = [t["name"] for t, r in zip((forward_task, reverse_task), parts.values()) if r is None]
    if missing:
        raise UserError(f"{task['name']}: {' and '.join(missing)} must be finished first (with the same options)")
    test_en, test_fr, gold = split.test()
    checkpoints = [task_folder(work, t) / "last.pt" for t in (forward_task, reverse_task)]
    links = joint_links(*checkpoints, test_en, test_fr, torch.device("cpu"), log)
    save_links(run_folder(work, task["variant"], seed=seed_of(args)), split, links["joint"])
    out: dict = {
        "forward": forward_task["name"],
        "symmetrization": JOINT_SYMMETRIZATION,
        "training": {"forward": parts["forward"]["training"], "reverse": parts["reverse"]["training"]},
        "readings": {key: score(gold, hyp) for key, hyp in links["joint"].items()},
        "reverse_readings": {key: score(gold, hyp) for key, hyp in links["reverse"].items()},
    }
    if "test_2016_flickr" in parts["forward"]:  # the English->French model's translations
        out["test_2016_flickr"] = parts["forward"]["test_2016_flickr"]
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


def eflomal_gold_links(work: Path, train_en: list[str], train_fr: list[str], n_gold: int) -> dict[str, tuple[list, float]]:
    """eflomal's links of the gold pairs (the last ``n_gold`` of the corpus) and its seconds, per
    symmetrization; computed once per working folder (``eflomal-gold.json``)."""
    path = work / "eflomal-gold.json"
    key = {"pairs": len(train_en), "gold_pairs": n_gold}
    stored = _read_json(path)
    if isinstance(stored, dict) and stored.get("key") == key:
        return {sym: ([{tuple(link) for link in links} for links in r["links"]], r["seconds"]) for sym, r in stored["eflomal"].items()}
    out = {}
    for sym in ("grow-diag-final-and", "forward"):
        t0 = time.perf_counter()
        out[sym] = (run_eflomal(train_en, train_fr, symmetrize=sym)[-n_gold:], time.perf_counter() - t0)
    atomic_write_text(path, json.dumps({"key": key, "eflomal": {sym: {"links": [sorted(links) for links in lk], "seconds": sec} for sym, (lk, sec) in out.items()}}))
    return out


# ---------------------------------------------------------------------------------------------
# Running in pieces: a deadline or a signal stops training at an update boundary; results are kept
# ---------------------------------------------------------------------------------------------

_now = time.time  # the deadline's clock
POLL_SECONDS = 0.2  # how often a model's watcher looks at the deadline and the stop event
_STOP_EVENT = None  # in a worker process: the main process's stop event (set by _worker_init)
_PARENT: int | None = None  # in a worker process: the main process's id


def parse_until(text: str, now: dt.datetime | None = None) -> float:
    """``--until HH:MM``: that local time today, or tomorrow if it is already past, as epoch seconds."""
    try:
        at = dt.datetime.strptime(text, "%H:%M").time()
    except ValueError:
        raise UserError(f"--until {text}: expected a local time HH:MM, e.g. 04:40") from None
    now = now or dt.datetime.now()
    when = dt.datetime.combine(now.date(), at)
    if when <= now:
        when += dt.timedelta(days=1)
    return when.timestamp()


def deadline_of(args, start: float) -> float | None:
    """The earlier of ``--until`` and ``start`` + ``--max-wall-minutes`` (epoch seconds), or None."""
    limits = []
    if args.until:
        limits.append(parse_until(args.until, dt.datetime.fromtimestamp(start)))
    if args.max_wall_minutes is not None:
        if args.max_wall_minutes <= 0:
            raise UserError(f"--max-wall-minutes {args.max_wall_minutes:g}: give a positive number of minutes")
        limits.append(start + 60 * args.max_wall_minutes)
    return min(limits) if limits else None


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


class Stopper:
    """While one model trains and is scored: SIGINT/SIGTERM outside the training loop end it at once
    (:class:`Interrupted`; every file is written atomically), inside it the loop's own handler
    stops at the next update boundary and saves ``last.pt``; a watcher thread turns the deadline,
    the main process's stop event (``--jobs``) or the main process's death into a SIGTERM to this
    process, once."""

    def __init__(self, deadline: float | None, event=None, parent: int | None = None):
        self.deadline, self.event, self.parent = deadline, event, parent
        self.fired: str | None = None  # why the watcher sent SIGTERM: deadline, stop, parent gone
        self._done = threading.Event()
        self._old: dict = {}
        self._thread: threading.Thread | None = None

    def reason(self) -> str | None:
        if self.deadline is not None and _now() >= self.deadline:
            return "deadline"
        if self.event is not None and self.event.is_set():
            return "stop"
        if self.parent is not None and os.getppid() != self.parent:
            return "parent gone"
        return None

    def _watch(self) -> None:
        while not self._done.wait(POLL_SECONDS):
            reason = self.reason()
            if reason:
                self.fired = reason
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def __enter__(self) -> Stopper:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, _raise_interrupted)
        if self.deadline is not None or self.event is not None or self.parent is not None:
            self._thread = threading.Thread(target=self._watch, name="hansards-deadline", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _worker_init(event, parent: int) -> None:
    """A ``--jobs`` worker: its own process group, so that Ctrl-C in the terminal reaches the main
    process alone, which passes the stop on through ``event`` (one signal, one update boundary)."""
    global _STOP_EVENT, _PARENT
    os.setpgrp()
    _STOP_EVENT, _PARENT = event, parent


def saved_step(run: Path) -> int:
    """The update of ``run``'s ``last.pt`` (0 without one)."""
    last = run / "last.pt"
    return int(load_checkpoint(last)["progress"]["step"]) if last.is_file() else 0


def result_key(work: Path, args, task: dict) -> dict:
    """What a model's result depends on: its config (but the thread count) and the scoring options;
    a joint variant's: its two models' keys."""
    variant, normalizer, reverse = task["variant"], task["normalizer"], task.get("reverse", False)
    if "joint" in VARIANTS[variant]:
        forward, twin = joint_parts(variant, seed_of(args))
        return {"forward": result_key(work, args, forward), "reverse": result_key(work, args, twin), "symmetrization": JOINT_SYMMETRIZATION}
    tree = config_tree(work, args, variant, normalizer, reverse)
    del tree["train"]["threads"]
    key: dict = {"config": tree}
    if not reverse:
        key |= {"dev_pairs": args.dev_pairs, "bleu": args.bleu, "kept": LINKS_FILE}  # results from before the links were kept: scored again
        if (variant, normalizer) == ("plain", "softmax"):
            key["hard_decode"] = bool(args.bleu and args.hard_decode)
    if variant == "self":
        key["self_reading"] = args.self_reading
    return json.loads(json.dumps(key))


def result_path(work: Path, task: dict) -> Path:
    return task_folder(work, task) / "result.json"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def reusable_result(work: Path, args, task: dict) -> dict | None:
    """The model's result from an earlier run of the same options, or None."""
    stored = _read_json(result_path(work, task))
    if isinstance(stored, dict) and stored.get("key") == result_key(work, args, task):
        return stored["result"]
    return None


def save_result(work: Path, args, task: dict, result: dict) -> None:
    atomic_write_text(result_path(work, task), json.dumps({"key": result_key(work, args, task), "result": result}, indent=1))


def budget_text(args) -> str:
    return f"{args.steps}" if args.steps else f"the {args.minutes:g}-minute budget"


WORKER_DIED = "its --jobs worker process died"


class WorkerDied(UserError):
    """A ``--jobs`` worker process ended without a result (a one-line error, exit status 1)."""

    exit_code = 1


def unfinished_line(name: str, record: dict, args) -> str:
    """``plain: stopped at update 812 of 2000; re-run the same command to continue``."""
    where = f"stopped at update {record['step']} of {budget_text(args)}"
    if record.get("trained"):
        where += " (trained, not yet scored)"
    if record["reason"] == WORKER_DIED:
        where = WORKER_DIED + (f" (its last.pt: update {record['step']})" if record["step"] else " (before its first last.pt)")
    elif not record["step"]:
        where = "not started" + (f" (waits for {', '.join(record['waits'])})" if record.get("waits") else "")
    return f"{name}: {where}; re-run the same command to continue"


def self_labels(cfg, args, work: Path, split: GoldSplit) -> dict:
    """The self variant's training labels: reused when they were made with the same options (their
    record is ``self.train.align.json``), else read off the plain model and its twin."""
    labels, record_path = Path(cfg.data.train_align), Path(cfg.data.train_align + ".json")
    key = {"self_reading": args.self_reading, "steps": args.steps, "minutes": 0 if args.steps else args.minutes, "dev_pairs": args.dev_pairs}
    record = _read_json(record_path)
    if labels.is_file() and isinstance(record, dict) and record.get("key") == key:
        return record["labels"]
    if saved_step(Path(cfg.work_dir)):
        raise UserError(f"{cfg.work_dir}/last.pt was trained on other self-training labels than these options give ({labels}): remove {cfg.work_dir} and {labels} or choose another --work")
    plain, twin = run_folder(work, seed=seed_of(args)) / "last.pt", run_folder(work, reverse=True, seed=seed_of(args)) / "last.pt"
    chosen = self_training_alignments(cfg, plain, twin, split.dev(), cfg.data.train_align, torch.device("cpu"), reading=args.self_reading, log=_log)
    atomic_write_text(record_path, json.dumps({"key": key, "labels": chosen}, indent=1))
    return chosen


def transposed_line(line: str, where: str = "") -> str:
    """One Pharaoh line with the sides of every link swapped (``i-j`` -> ``j-i``, ``ipj`` -> ``jpi``), sorted."""
    sure, possible = parse_links(line, where=where)
    return " ".join(f"{a}{kind}{b}" for a, b, kind in sorted([(j, i, "-") for i, j in sure] + [(j, i, "p") for i, j in possible - sure]))


def reverse_labels(work: Path, args, variant: str, reverse_cfg, log) -> Path:
    """The French->English twin's guidance (``data.train_align`` of ``reverse_cfg``): the
    English->French model's labels (eflomal's gdfa links of the training corpus, aligned first if
    missing) transposed line for line, so that each link names the twin's source word (French)
    first; its training files are the English->French ones swapped, so the lines match. Written
    when missing or not the transpose of the current labels (an error when the twin's
    ``last.pt`` was trained on those other labels)."""
    forward = config_from_dict(config_tree(work, args, variant), f"the config of {variant}")
    source, target = Path(forward.data.train_align), Path(reverse_cfg.data.train_align)
    if not source.is_file():
        align_external(forward, log=log)
    lines = [transposed_line(line, f"{source}:{k}") for k, line in enumerate(read_lines(source), start=1)]
    if target.is_file():
        if read_lines(target) == lines:
            return target
        if saved_step(Path(reverse_cfg.work_dir)):
            raise UserError(f"{reverse_cfg.work_dir}/last.pt was trained on other labels than the transpose of {source} ({target}): remove {reverse_cfg.work_dir} and {target} or choose another --work")
    write_lines(target, lines)
    log(f"{source} transposed for the French->English twin (French word first): {target}")
    return target


def train_and_score(task: dict, args, work: Path, split: GoldSplit) -> dict:
    """Train one model (resuming) and score it; a joint variant: score its two finished models."""
    variant, normalizer, reverse = task["variant"], task["normalizer"], task.get("reverse", False)
    if "joint" in VARIANTS[variant]:
        run_folder(work, variant, seed=seed_of(args)).mkdir(parents=True, exist_ok=True)
        return evaluate_joint(task, args, work, split, _log)
    cfg = load_config(write_config(work, args, variant, normalizer, reverse))
    out: dict = {}
    if variant == "self":
        out["labels"] = self_labels(cfg, args, work, split)
    progress = train(cfg, resume=True, log=_log)
    out["training"] = {"updates": progress.step, "epochs": progress.epoch, "train_minutes": progress.train_seconds / 60, "minutes_budget": args.minutes, "steps_budget": args.steps, "threads": args.threads}
    if cfg.data.train_align and not reverse:  # the guidance's own AER on the test part (the gold pairs are in the training corpus); a twin's is its transpose
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


def run_model(task: dict) -> dict:
    """Train one model (resuming) and score it, or reuse its result; runs in a worker process with
    ``--jobs`` > 1. Returns ``{"result": ...}`` (written to the run folder's ``result.json``), or
    ``{"unfinished": {"step", "reason", ...}}`` when the deadline or a signal stopped it."""
    args = argparse.Namespace(**task["args"])
    work = Path(args.work)
    cached = reusable_result(work, args, task)
    if cached is not None:
        _log(f"{task['name']}: result reused from {result_path(work, task)}")
        return {"result": cached}
    run = task_folder(work, task)
    stopper = Stopper(task.get("deadline"), _STOP_EVENT, _PARENT)
    if stopper.reason():
        return {"unfinished": {"step": saved_step(run), "reason": stopper.reason()}}
    torch.set_num_threads(args.threads)
    try:
        with stopper:
            out = train_and_score(task, args, work, GoldSplit(work, args.dev_pairs))
            save_result(work, args, task, out)
    except Interrupted as e:
        cached = reusable_result(work, args, task)  # stopped just after its result was written
        if cached is not None:
            return {"result": cached}
        step = saved_step(run)
        target = args.steps or None
        reason = stopper.fired if stopper.fired in ("deadline", "parent gone") else signal.Signals(e.signum).name
        return {"unfinished": {"step": step, "reason": reason, "trained": bool(target) and step >= target}}
    return {"result": out}


def joint_parts(variant: str, seed: int = 1) -> tuple[dict, dict]:
    """The tasks of a joint variant's two models: its English->French model (the variant's own
    task, shared) and that model's French->English twin (of training seed ``seed``)."""
    base = VARIANTS[variant]["joint"]
    return {"name": base, "variant": base, "normalizer": "softmax", "seed": seed}, {"name": f"{base}, French->English twin", "variant": base, "normalizer": "softmax", "reverse": True, "seed": seed}


def tasks_for(args) -> list[dict]:
    """One task per model; the French->English twin of the plain model when ``self`` is asked for,
    ``self`` after them; for a joint variant (``guided-full-leaky-gdfa``) the twin of its model
    (the model itself hidden when not asked for), the joint scoring after both, last."""
    variants = args.variants.split(",")
    tasks = []
    for variant in variants:
        if variant == "plain":
            tasks += [{"name": run_name("plain", n), "variant": "plain", "normalizer": n} for n in args.normalizers.split(",")]
        elif variant != "self" and "joint" not in VARIANTS[variant]:
            tasks.append({"name": variant, "variant": variant, "normalizer": "softmax"})
    if "self" in variants:
        if "softmax" not in args.normalizers.split(",") or "plain" not in variants:
            tasks.append({"name": "plain", "variant": "plain", "normalizer": "softmax", "hidden": True})
        tasks.append({"name": "plain, French->English twin", "variant": "plain", "normalizer": "softmax", "reverse": True})
        tasks.append({"name": "self", "variant": "self", "normalizer": "softmax", "after": ["plain", "plain, French->English twin"]})
    for variant in (v for v in variants if "joint" in VARIANTS[v]):
        forward, twin = joint_parts(variant)
        if forward["variant"] not in variants:
            tasks.append({**forward, "hidden": True})
        tasks.append(twin)
        tasks.append({"name": variant, "variant": variant, "normalizer": "softmax", "after": [forward["name"], twin["name"]]})
    return [{**task, "seed": seed_of(args)} for task in tasks]


class MainStop:
    """SIGINT/SIGTERM to the main process while ``--jobs`` workers train: set the workers' stop
    event (each stops at its next update boundary) and start no further model."""

    def __init__(self, event):
        self.event, self.signum, self._old = event, None, {}

    def _handler(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()

    def __enter__(self) -> MainStop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def run_tasks(tasks: list[dict], args, log, deadline: float | None = None) -> tuple[dict, dict, int | None]:
    """Run the tasks, ``args.jobs`` at a time (in this process with one job); a task waits for those
    it names in ``after``. Returns the finished models' results, the unfinished ones' records (see
    :func:`run_model`) and the signal that stopped the run (None: none)."""
    payload = {k: v for k, v in vars(args).items()}
    results: dict = {}
    unfinished: dict = {}
    signum: int | None = None
    broken = False  # a --jobs worker process died
    stopped = lambda: broken or signum is not None or (deadline is not None and _now() >= deadline)  # noqa: E731

    def record(task: dict, out: dict) -> None:
        nonlocal signum
        if "result" in out:
            results[task["name"]] = out["result"]
            return
        unfinished[task["name"]] = out["unfinished"]
        if out["unfinished"]["reason"] in ("SIGINT", "SIGTERM") and signum is None:
            signum = int(signal.Signals[out["unfinished"]["reason"]])

    for task in tasks:  # finished in an earlier run with the same options
        cached = reusable_result(Path(args.work), args, task)
        if cached is not None:
            log(f"== {task['name']}: result reused from {result_path(Path(args.work), task)}")
            results[task["name"]] = cached
    order, tasks = [t["name"] for t in tasks], [t for t in tasks if t["name"] not in results]
    if args.jobs == 1:
        for task in tasks:
            if stopped() or not all(a in results for a in task.get("after", [])):
                break
            log(f"== {task['name']}")
            record(task, run_model({**task, "args": payload, "deadline": deadline}))
    else:
        pending, running = list(tasks), {}
        context = multiprocessing.get_context("spawn")
        event = context.Event()
        with MainStop(event) as main_stop, ProcessPoolExecutor(max_workers=args.jobs, mp_context=context, initializer=_worker_init, initargs=(event, os.getpid())) as pool:
            try:
                while running or (pending and not stopped()):
                    ready = [t for t in pending if all(a in results for a in t.get("after", []))]
                    if not running and not ready:
                        break
                    for task in ready[: args.jobs - len(running)]:
                        pending.remove(task)
                        log(f"== {task['name']} (started)")
                        running[pool.submit(run_model, {**task, "args": payload, "deadline": deadline})] = task
                    done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                    if main_stop.signum is not None and signum is None:
                        signum = main_stop.signum
                        log(f"{signal.Signals(signum).name}: every model stops at its next update and saves last.pt")
                    for future in done:
                        task = running.pop(future)
                        try:
                            out = future.result()
                        except BrokenProcessPool:  # a worker killed outright (e.g. out of memory): no model of the pool can go on
                            broken = True
                            out = {"unfinished": {"step": saved_step(task_folder(Path(args.work), task)), "reason": WORKER_DIED}}
                        record(task, out)
                        log(f"== {task['name']} ({'done' if task['name'] in results else 'stopped'})")
            finally:
                event.set()  # an error in one model stops the others at an update boundary too
        signum = signum if signum is not None else main_stop.signum
    for task in tasks:
        if task["name"] not in results and task["name"] not in unfinished:
            waits = [a for a in task.get("after", []) if a not in results]
            unfinished[task["name"]] = {"step": saved_step(task_folder(Path(args.work), task)), "reason": "not started", "waits": waits}
    return {name: results[name] for name in order if name in results}, unfinished, signum


def _guidance_readings(model: dict) -> str:
    """Where self-training labels were read (each direction's reading and its dev AER); '–' otherwise or for reused labels."""
    if "labels" not in model:
        return "–"
    return " + ".join(f"{name}: {c['reading']} (dev AER {100 * c['dev_aer']:.1f})" for name, c in model["labels"].items())


JOINT_TITLES = {"guided-full-leaky": "guided + full context + leaky"}


def joint_rows(model: dict, bleu: str) -> list[str]:
    """A joint variant's rows: the two directions symmetrized (BLEU: its English->French model's),
    then the French->English twin alone (its links transposed)."""
    base, t = model["forward"], model["training"]
    title = JOINT_TITLES.get(base, base)
    updates = f"{t['forward']['updates']} + {t['reverse']['updates']} updates"
    sym = model["symmetrization"]
    short = {"grow-diag-final-and": "gdfa"}.get(sym, sym)
    lines = []
    for key, r in model["readings"].items():
        kind, label = key.split(": ", 1)  # "configured" or "configured, leak renormalized"
        lines.append(f"| {title}, both directions ({short}; {updates}) | each direction's {kind.replace('configured', 'configured reading')} ({label}), {sym} | {r['aer']:.2f} | {r['precision']:.2f} | {r['recall']:.2f} | {bleu} |")
    for key, r in model["reverse_readings"].items():
        kind, label = key.split(": ", 1)
        lines.append(f"| {title}, French->English twin alone ({t['reverse']['updates']} updates) | {kind.replace('configured', 'configured reading')} ({label}), links transposed | {r['aer']:.2f} | {r['precision']:.2f} | {r['recall']:.2f} | – |")
    return lines


def markdown(results: dict, split: GoldSplit, tasks: list[dict]) -> list[str]:
    """The table for docs/alignment.md: every aligner's AER/precision/recall on the test part, each model's BLEU."""
    lines = ["| system | alignment read from | AER | precision | recall | test_2016_flickr BLEU |", "|---|---|---|---|---|---|"]
    for sym in ("grow-diag-final-and", "forward"):
        r = results["eflomal"][sym]
        lines.append(f"| eflomal, {sym} ({r['seconds']:.0f} s) | IBM1+HMM+fertility | {r['aer']:.2f} | {r['precision']:.2f} | {r['recall']:.2f} | – |")
    for task in tasks:
        if task.get("reverse") or task.get("hidden") or task["name"] not in results["models"]:
            continue
        model = results["models"][task["name"]]
        bleu = f"{model['test_2016_flickr']['bleu']:.2f}" if "test_2016_flickr" in model else "–"
        if "joint" in VARIANTS[task["variant"]]:
            lines += joint_rows(model, bleu)
            continue
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
    ap.add_argument("--variants", default="plain", help=f"comma-separated models: {', '.join(VARIANTS)} (default plain; guided-full-leaky-gdfa: guided-full-leaky and a French->English twin guided by eflomal's links transposed, symmetrized with grow-diag-final-and)")
    ap.add_argument("--jobs", type=int, default=1, help="models trained and scored at once, in separate processes (default 1)")
    ap.add_argument("--dev-pairs", type=int, default=100, help="the first N gold pairs choose the readings, the others are scored (default 100; 0: score all, readings chosen on them marked oracle)")
    ap.add_argument("--normalizers", default="softmax", help="comma-separated cross-attention normalizers of the plain model, one model each: softmax, sparsemax, entmax15, hard (default softmax)")
    ap.add_argument("--hard-decode", action="store_true", help="also decode the softmax model with argmax (hard) attention")
    ap.add_argument("--bleu", action="store_true", help="also translate Multi30k test_2016_flickr en->fr and report BLEU/chrF")
    ap.add_argument("--output", help="also write the results as JSON here")
    ap.add_argument("--self-reading", choices=list(TEACHER_READINGS), default="best", help="the self variant's teacher reading per direction, chosen on the dev part: the better of the best unshifted and shifted one (best, default), or the best shifted / unshifted one")
    ap.add_argument("--until", metavar="HH:MM", help="stop every training at its next update at this local time (tomorrow if already past), keep what is finished; re-run the same command to continue")
    ap.add_argument("--max-wall-minutes", type=float, metavar="M", help="the same, M minutes after the start")
    ap.add_argument("--seed", type=int, default=1, help="training seed of every model (default 1); another seed trains in run folders named -seed<S> beside seed 1's, sharing the corpus, prepared data and eflomal's links")
    args = ap.parse_args(argv)
    if args.seed < 0:
        raise UserError(f"--seed {args.seed}: give a seed >= 0")
    wall_start = _now()
    deadline = deadline_of(args, wall_start)
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
    if args.steps < 0:
        raise UserError(f"--steps {args.steps}: give a positive number of updates")
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

    # eflomal on exactly the training corpus of the models (its links of the gold pairs kept in the working folder).
    test_gold = split.test()[2]
    for sym, (links, seconds) in eflomal_gold_links(work, train_en, train_fr, n_gold).items():
        results["eflomal"][sym] = {**score(test_gold, links[split.test_slice]), "all_447": score(split.gold, links), "seconds": seconds}
        _log(f"eflomal ({sym}): {results['eflomal'][sym]}")

    # What every worker would otherwise build at once: the prepared corpora, eflomal's training labels.
    for task in tasks:
        if "joint" in VARIANTS[task["variant"]] or reusable_result(work, args, task) is not None:
            continue
        cfg = load_config(write_config(work, args, task["variant"], task["normalizer"], task.get("reverse", False)))
        step = saved_step(Path(cfg.work_dir))
        if args.steps and step > args.steps:
            raise UserError(f"{cfg.work_dir}/last.pt: {step} updates made, more than --steps {args.steps}: give --steps {step} or more, or another --work")
        if step:
            _log(f"{task['name']}: continues from update {step} of {budget_text(args)} ({cfg.work_dir}/last.pt)")
        if VARIANTS[task["variant"]].get("labels") == "eflomal" and task.get("reverse"):
            reverse_labels(work, args, task["variant"], cfg, _log)
        elif VARIANTS[task["variant"]].get("labels") == "eflomal" and not Path(cfg.data.train_align).is_file():
            align_external(cfg, log=_log)
        if task["variant"] != "self":
            prepare(cfg, log=_log)

    results["models"], unfinished, signum = run_tasks(tasks, args, _log, deadline)
    results["total_minutes"] = (time.perf_counter() - t_start) / 60
    results["machine"] = with_load_after(machine)
    if unfinished:
        results["unfinished"] = unfinished

    print(f"\nEnglish-French Hansards: AER on {results['test_pairs']} gold pairs ({test} of enfr.gold)" + (f", readings chosen on lines {results['dev_lines']}" if args.dev_pairs else "") + f"; both aligners saw {len(train_en)} tokenized pairs (Multi30k + all {n_gold} gold pairs)")
    for name, model in results["models"].items():
        t = model["training"]
        if "forward" in t:  # a joint variant
            print(f"NMT {name}: {model['forward']} and its French->English twin, their links symmetrized with {model['symmetrization']}")
            continue
        print(f"NMT {name}: Transformer 3+3, d_model 128, {t['updates']} updates ({t['epochs']} epochs) in {t['train_minutes']:.1f} min of training, {t['threads']} thread(s)")
    print()
    print("\n".join(markdown(results, split, tasks)))
    for name, model in results["models"].items():
        if "forward" in model["training"]:  # a joint variant: its English->French model's BLEU, printed under that model
            continue
        for key in ("test_2016_flickr", "test_2016_flickr, hard decoding"):
            if key in model:
                print(f"{name} {key}: BLEU {model[key]['bleu']:.2f} chrF {model[key]['chrf']:.2f}")
    print(machine_summary(machine) + f" (threads per model: {args.threads}, jobs: {args.jobs}; {results['total_minutes']:.1f} min in all)")
    if unfinished:
        died = [name for name, record in unfinished.items() if record["reason"] == WORKER_DIED]
        why = "a worker process died" if died else "deadline" if signum is None else signal.Signals(signum).name
        print(f"\nunfinished ({why}): the table above holds the finished models only" + (f"; {args.output} is written once every model is finished" if args.output else ""))
        for task in tasks:
            if task["name"] in unfinished:
                print(unfinished_line(task["name"], unfinished[task["name"]], args))
        sys.stdout.flush()
        if died:
            sys.stderr.write("\n")  # a killed worker's progress bar (on this stderr) never ended its line
            sys.stderr.flush()
            raise WorkerDied(f"{', '.join(died)}: {WORKER_DIED} (killed by the system, out of memory?), which ends the others' workers too: {len(unfinished)} model(s) unfinished, each at its last saved last.pt; re-run the same command to continue")
        if signum is not None:
            raise Interrupted(signum, f"interrupted by {signal.Signals(signum).name}: {len(unfinished)} model(s) unfinished, their last.pt saved; re-run the same command to continue")
        return results
    if args.output:
        atomic_write_text(args.output, json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(main)
