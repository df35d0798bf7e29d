"""Attention as alignment on the English-French Hansards gold set, against eflomal, in one run.

    python benchmarks/hansards_aer.py [--minutes 15] [--work runs/hansards-aer] [--threads 1]

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

Prints the AER/precision/recall of each; ``--output`` also writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from syntaxnmt.alignment.formats import aer, read_alignments, read_bitext
from syntaxnmt.config import load_config
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
  max_steps: 100000
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
        write_lines(out / "train.en", en + [" ".join(s).lower() for s in gold_src])
        write_lines(out / "train.fr", fr + [" ".join(t).lower() for t in gold_tgt])
        log(f"tokenized Multi30k ({len(en)} pairs) + {len(gold_src)} Hansards pairs in {time.perf_counter() - t0:.0f} s")
    return read_lines(out / "train.en"), read_lines(out / "train.fr")


def score(gold, hyp) -> dict:
    r = aer([s for s, _ in gold], [p for _, p in gold], hyp)
    return {"aer": 100 * r.aer, "precision": 100 * r.precision, "recall": 100 * r.recall}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=15.0, help="training time budget (default 15)")
    ap.add_argument("--work", default="runs/hansards-aer", help="working folder (corpus, prepared data, run)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads for training (default 1)")
    ap.add_argument("--output", help="also write the results as JSON here")
    args = ap.parse_args(argv)
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    gold_dir = DATA / "alignment" / "enfr-hansards"
    if not (gold_dir / "enfr.gold").is_file() or not (DATA / "multi30k" / "train.fr.gz").is_file():
        sys.exit(f"hansards_aer: the shared data is missing under {DATA} (set SYNTAXNMT_DATA)")
    t_start = time.perf_counter()
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

    # The attention of an English->French Transformer trained on the same corpus.
    from syntaxnmt.train import train
    from syntaxnmt.translate import load_model
    from syntaxnmt.alignment.extract import attention_alignments, encode_words

    work.mkdir(parents=True, exist_ok=True)
    config_path = work / "config.yaml"
    config_path.write_text(CONFIG.format(work=work.as_posix(), minutes=args.minutes, threads=args.threads), encoding="utf-8")
    cfg = load_config(config_path)
    progress = train(cfg, resume=True, log=log)
    results["training"] = {"updates": progress.step, "epochs": progress.epoch, "train_minutes": progress.train_seconds / 60, "minutes_budget": args.minutes, "threads": args.threads}
    device = torch.device("cpu")
    model, cfg, toks = load_model(Path(cfg.work_dir) / "last.pt", device)
    src, tgt = encode_words(toks.src, test_en), encode_words(toks.tgt, test_fr)
    readings = [("all layers+heads averaged", None, None)] + [(f"layer {i} heads averaged" + (" (penultimate)" if i == cfg.model.dec_layers - 2 else ""), i, None) for i in range(cfg.model.dec_layers)]
    for name, layer, head in readings:
        links = attention_alignments(model, src, tgt, device, layer=layer, head=head)
        results[f"attention {name}"] = score(gold, links)
        log(f"attention ({name}): {results[f'attention {name}']}")
    results["total_minutes"] = (time.perf_counter() - t_start) / 60

    print(f"\nEnglish-French Hansards, {n_gold} test pairs; both aligners saw {len(train_en)} tokenized pairs (Multi30k + test)")
    print(f"NMT: Transformer 3+3, d_model 128, {progress.step} updates ({progress.epoch} epochs) in {progress.train_seconds / 60:.1f} min of training")
    print(f"{'aligner':<52} {'AER':>6} {'prec.':>6} {'recall':>6}")
    for key, value in results.items():
        if isinstance(value, dict) and "aer" in value:
            print(f"{key:<52} {value['aer']:6.2f} {value['precision']:6.2f} {value['recall']:6.2f}")
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    from syntaxnmt.cli import run_command

    run_command(main)
