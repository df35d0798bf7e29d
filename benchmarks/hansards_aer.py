"""Attention as alignment on the English-French Hansards gold set, against eflomal, in one run.

    python benchmarks/hansards_aer.py [--minutes 15 | --steps N] [--work runs/hansards-aer] [--threads 1]
        [--normalizers softmax,sparsemax,entmax15,hard] [--hard-decode] [--bleu]

Data (``${SYNTAXNMT_DATA:-../shared/data}``): Multi30k ``train.{en,fr}.gz`` (29,000 pairs) and the
447 HLT-NAACL 2003 Hansards test pairs (``alignment/enfr-hansards``: ``enfr.src-tgt`` tokenized,
``enfr.gold`` 1-indexed sure/possible links). Transductive setting, as usual for word aligners:

1. Multi30k is lowercased and Moses-tokenized (sacremoses, no escaping) to match the gold set's
   tokenization; the 447 Hansards pairs (lowercased) are appended. These 29,447 tokenized pairs
   are the training corpus of both aligners (the config has no further lowercasing or Moses step,
   so the words the model sees are exactly eflomal's and the gold set's).
2. eflomal (both directions; gdfa, and the forward direction alone) aligns the whole corpus; AER
   on the 447 pairs.
3. An English->French Transformer (3+3 layers, d_model 128, joint BPE 8k) trains on the corpus
   for at most ``--minutes`` of training time
   (prepared corpus and validation: Multi30k val, dev loss only), then word alignments are read
   off its cross-attention while force-decoding the 447 French sentences (argmax per French
   word, subwords projected back to the gold tokens): all layers and heads averaged, and every
   layer's heads averaged. The penultimate layer is the a-priori choice (Garg et al. 2019), the
   other rows are for information, not a selection on the test set.
4. ``--normalizers``: one such model per cross-attention normalizer (issue 12): softmax,
   sparsemax, entmax15, or ``hard`` (argmax attention trained with straight-through gradients),
   with ``--steps`` as the budget so every variant gets the same updates; ``--hard-decode`` also
   decodes the softmax model with argmax attention (its alignments are the softmax model's: the
   argmax of a one-hot row is the argmax of the soft one). ``--bleu`` translates Multi30k
   test_2016_flickr English->French (lowercased and Moses-tokenized like the training corpus,
   beam 5) and scores it with sacreBLEU (13a, on that tokenized lowercased text).

Prints the AER/precision/recall of each and the machine (``syntaxnmt.runtime.machine_info``, load
average before and after); ``--output`` also writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from syntaxnmt.data.links import aer, read_alignments, read_bitext
from syntaxnmt.config import load_config
from syntaxnmt.errors import UserError
from syntaxnmt.runtime import machine_info, machine_summary, with_load_after
from syntaxnmt.textio import read_lines, write_lines

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


NORMALIZERS = {"softmax": ("softmax", "none"), "sparsemax": ("sparsemax", "none"), "entmax15": ("entmax15", "none"), "hard": ("softmax", "train")}


def model_rows(work: Path, name: str, args, test_en: list[str], test_fr: list[str], gold, log) -> dict:
    """Train (or resume) the English->French model with cross-attention normalizer ``name``; its
    training figures, AER rows and (``args.bleu``) test BLEU, keyed for the results table."""
    from syntaxnmt.alignment.extract import attention_alignments, encode_words
    from syntaxnmt.training.train import train
    from syntaxnmt.decoding.translate import load_model

    label = "" if name == "softmax" else f", {name}"
    run = work / ("run" if name == "softmax" else f"run-{name}")
    run.mkdir(parents=True, exist_ok=True)
    normalizer, hard = NORMALIZERS[name]
    budget = {"steps": args.steps, "minutes": 0} if args.steps else {"steps": 100000, "minutes": args.minutes}
    config_path = run / "config.yaml"
    config_path.write_text(CONFIG.format(work=work.as_posix(), threads=args.threads, normalizer=normalizer, hard=hard, **budget).replace(f"work_dir: {work.as_posix()}/run\n", f"work_dir: {run.as_posix()}\n"), encoding="utf-8")
    cfg = load_config(config_path)
    progress = train(cfg, resume=True, log=log)
    rows: dict = {f"training{label}": {"updates": progress.step, "epochs": progress.epoch, "train_minutes": progress.train_seconds / 60, "minutes_budget": args.minutes, "steps_budget": args.steps, "threads": args.threads}}
    device = torch.device("cpu")
    model, cfg, toks = load_model(Path(cfg.work_dir) / "last.pt", device)
    src, tgt = encode_words(toks.src, test_en), encode_words(toks.tgt, test_fr)
    penultimate = cfg.model.dec_layers - 2
    readings = [("all layers+heads averaged", None)] + [(f"layer {i} heads averaged" + (" (penultimate)" if i == penultimate else ""), i) for i in range(cfg.model.dec_layers)]
    for reading, layer in readings:
        key = f"attention{label} {reading}"
        rows[key] = score(gold, attention_alignments(model, src, tgt, device, layer=layer))
        log(f"{key}: {rows[key]}")
    if args.bleu:
        rows[f"test_2016_flickr BLEU{label}"] = test_bleu(model, cfg, toks, work, device)
        if name == "softmax" and args.hard_decode:
            for layer in model.decoder:
                layer.cross_attn.hard = "decode"
            rows["test_2016_flickr BLEU, softmax training, hard decoding"] = test_bleu(model, cfg, toks, work, device)
    return rows


def test_bleu(model, cfg, toks, work: Path, device) -> dict:
    """BLEU/chrF of beam-5 translations of the tokenized, lowercased Multi30k test_2016_flickr."""
    from syntaxnmt.metrics import score as mt_score
    from syntaxnmt.decoding.translate import translate_lines

    src, ref = read_lines(work / "corpus" / "test.en"), read_lines(work / "corpus" / "test.fr")
    t0 = time.perf_counter()
    hyps = [nbest[0][0] for nbest in translate_lines(model, cfg, toks, src, cfg.decode.model_copy(update={"beam_size": 5}), device)]
    s = mt_score(hyps, [ref], force=True)
    return {"bleu": s.bleu, "chrf": s.chrf, "seconds": time.perf_counter() - t0}


def score(gold, hyp) -> dict:
    r = aer([s for s, _ in gold], [p for _, p in gold], hyp)
    return {"aer": 100 * r.aer, "precision": 100 * r.precision, "recall": 100 * r.recall}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=15.0, help="training time budget (default 15)")
    ap.add_argument("--work", default="runs/hansards-aer", help="working folder (corpus, prepared data, run)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads for training (default 1)")
    ap.add_argument("--steps", type=int, default=0, help="train exactly this many updates instead of --minutes (the same budget for every variant)")
    ap.add_argument("--normalizers", default="softmax", help="comma-separated cross-attention normalizers, one model each: softmax, sparsemax, entmax15, hard (default softmax)")
    ap.add_argument("--hard-decode", action="store_true", help="also decode the softmax model with argmax (hard) attention")
    ap.add_argument("--bleu", action="store_true", help="also translate Multi30k test_2016_flickr en->fr and report BLEU/chrF")
    ap.add_argument("--output", help="also write the results as JSON here")
    args = ap.parse_args(argv)
    unknown = set(args.normalizers.split(",")) - set(NORMALIZERS)
    if unknown:
        raise UserError(f"--normalizers: unknown {', '.join(sorted(unknown))}; choose from {', '.join(NORMALIZERS)}")
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    gold_dir = DATA / "alignment" / "enfr-hansards"
    if not (gold_dir / "enfr.gold").is_file() or not (DATA / "multi30k" / "train.fr.gz").is_file():
        sys.exit(f"hansards_aer: the shared data is missing under {DATA} (set SYNTAXNMT_DATA)")
    t_start = time.perf_counter()
    machine = machine_info() | {"training_threads": args.threads}
    work = Path(args.work)
    gold_src, gold_tgt = read_bitext(gold_dir / "enfr.src-tgt")
    gold = read_alignments(gold_dir / "enfr.gold", one_indexed=True, src_lengths=[len(s) for s in gold_src], tgt_lengths=[len(t) for t in gold_tgt])
    train_en, train_fr = build_corpus(work, gold_src, gold_tgt, log)
    n_gold = len(gold_src)
    test_en, test_fr = train_en[-n_gold:], train_fr[-n_gold:]
    results: dict = {"pairs": len(train_en), "test_pairs": n_gold}

    # eflomal on exactly the training corpus of the model.
    from syntaxnmt.alignment.external import run_eflomal

    for sym in ("grow-diag-final-and", "forward"):
        t0 = time.perf_counter()
        links = run_eflomal(train_en, train_fr, symmetrize=sym)[-n_gold:]
        results[f"eflomal {sym}"] = {**score(gold, links), "seconds": time.perf_counter() - t0}
        log(f"eflomal ({sym}): {results[f'eflomal {sym}']}")

    for normalizer in args.normalizers.split(","):
        results.update(model_rows(work, normalizer, args, test_en, test_fr, gold, log))
    results["total_minutes"] = (time.perf_counter() - t_start) / 60
    results["machine"] = with_load_after(machine)

    print(f"\nEnglish-French Hansards, {n_gold} test pairs; both aligners saw {len(train_en)} tokenized pairs (Multi30k + test)")
    for key, value in results.items():
        if key.startswith("training"):
            print(f"NMT {key[len('training'):].lstrip(', ') or 'softmax'}: Transformer 3+3, d_model 128, {value['updates']} updates ({value['epochs']} epochs) in {value['train_minutes']:.1f} min of training")
    print(f"{'aligner':<72} {'AER':>6} {'prec.':>6} {'recall':>6}")
    for key, value in results.items():
        if isinstance(value, dict) and "aer" in value:
            print(f"{key:<72} {value['aer']:6.2f} {value['precision']:6.2f} {value['recall']:6.2f}")
    for key, value in results.items():
        if key.startswith("test_2016_flickr BLEU"):
            print(f"{key:<72} BLEU {value['bleu']:6.2f} chrF {value['chrf']:6.2f}")
    print(machine_summary(machine) + f" (training threads: {args.threads})")
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(main)
