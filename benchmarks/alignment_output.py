"""The cost of word alignments with every translation (``translate --alignments``) relative to beam search.

    python benchmarks/alignment_output.py [--checkpoint C --input F] [--beam 5] [--nbest 1 5] [--repeats 5] [--threads 1]

Without ``--checkpoint`` it trains the tiny model of the test suite's size class on the built-in
synthetic corpus first (``--steps`` updates, a 2+2-layer Transformer with d_model 64, in a
temporary folder) and translates its test split (500 sentences). What is timed, in turns and
``--repeats`` times (the median and the fastest run are printed: on a shared machine the fastest
is the least disturbed), for every n-best size of ``--nbest`` (default 1 and the beam):
``translate_lines`` with beam search (``--beam``, n-best N), from raw lines to detokenized
n-best lists; and ``alignments_for_translations`` on every hypothesis of those lists (what
``translate --nbest N --alignments`` writes), from raw lines to word links (encoding both sides,
force-decoding the N pairs of every line in batches of ``decode.batch_size``, each source
encoded once per batch and the decoder run up to the layer read only, and reading the configured
head). It prints both times and the alignment cost as a percentage of the search time, per n-best
size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from syntaxnmt.alignment.extract import alignments_for_translations
from syntaxnmt.config import load_config
from syntaxnmt.data.prepare import prepare
from syntaxnmt.data.synthetic import write_corpus
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.textio import read_lines
from syntaxnmt.training.train import train


def tiny_checkpoint(folder: Path, steps: int) -> tuple[Path, Path]:
    """Train a small model on the synthetic corpus; its best checkpoint and the test source."""
    corpus = write_corpus(folder / "corpus", n_train=5000, n_dev=200, n_test=500, seed=1)
    tree = {
        "name": "alignment-output",
        "work_dir": str(folder / "run"),
        "data": {"train_src": str(corpus["train"]["src"]), "train_tgt": str(corpus["train"]["tgt"]), "dev_src": str(corpus["dev"]["src"]), "dev_tgt": str(corpus["dev"]["tgt"]), "src_lang": "en", "tgt_lang": "syn", "vocab_size": 400, "joint_vocab": True},
        "model": {"d_model": 64, "heads": 4, "ffn_dim": 128, "enc_layers": 2, "dec_layers": 2, "tie_embeddings": "all"},
        "train": {"max_tokens": 2048, "lr": 2e-3, "warmup_steps": 100, "max_steps": steps, "valid_every": steps, "valid_max_sentences": 50, "log_every": 50, "tensorboard": False, "device": "cpu"},
        "decode": {"batch_size": 64},
    }
    cfg = load_config(None, tree)
    quiet = lambda *_a, **_k: None  # noqa: E731
    prepare(cfg, log=quiet)
    train(cfg, log=quiet)
    return Path(cfg.work_dir) / "best.pt", corpus["test"]["src"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="a trained model (default: train a tiny one first)")
    ap.add_argument("--input", help="source lines to translate (required with --checkpoint)")
    ap.add_argument("--steps", type=int, default=300, help="updates of the tiny model (default 300)")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--nbest", type=int, nargs="+", help="n-best sizes whose every hypothesis is aligned (default: 1 and the beam)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        if args.checkpoint:
            if not args.input:
                sys.exit("give --input with --checkpoint")
            ckpt, src = Path(args.checkpoint), Path(args.input)
        else:
            ckpt, src = tiny_checkpoint(Path(tmp), args.steps)
        model, cfg, toks = load_model(ckpt, device)
        lines = read_lines(src)
        decode = cfg.decode.model_copy(update={"beam_size": args.beam})
        print(f"{len(lines)} sentences, {torch.get_num_threads()} thread(s), model {cfg.model.enc_layers}+{cfg.model.dec_layers} layers d_model {cfg.model.d_model}")
        for nbest in args.nbest or sorted({1, args.beam}):
            if not 1 <= nbest <= args.beam:
                sys.exit(f"--nbest {nbest}: give 1 to the beam size {args.beam}")
            search_s, align_s = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                results = translate_lines(model, cfg, toks, lines, decode, device, nbest=nbest)
                search_s.append(time.perf_counter() - start)
                start = time.perf_counter()
                links = alignments_for_translations(model, cfg, toks, lines, [[t for t, _ in nb] for nb in results], device, batch_size=decode.batch_size)
                align_s.append(time.perf_counter() - start)
            n_hyps, n_links = sum(map(len, links)), sum(len(x) for nb in links for x in nb)
            search, align = statistics.median(search_s), statistics.median(align_s)
            print(f"n-best {nbest}: {n_hyps} hypotheses aligned, {n_links} links")
            print(f"  beam-{args.beam} translation:  {search:.3f} s (median of {args.repeats}; {min(search_s):.3f}-{max(search_s):.3f})")
            print(f"  alignments of the output: {align:.3f} s (median of {args.repeats}; {min(align_s):.3f}-{max(align_s):.3f})")
            print(f"  alignment cost: {100 * align / search:.1f} % of the beam-{args.beam} translation time (medians; fastest runs: {100 * min(align_s) / min(search_s):.1f} %)")


if __name__ == "__main__":
    main()
