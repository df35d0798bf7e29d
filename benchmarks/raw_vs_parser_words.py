"""BLEU of one checkpoint trained on a parsed corpus, translating raw lines versus the parser's words.

    python benchmarks/raw_vs_parser_words.py runs/multi30k-en-de/syntax/baseline-study-cpu-seed1/best.pt

Before ``translate.parser_words``, a model without source features (a baseline, a multi-task
model) trained on the spaCy parser's words translated the raw test lines, whose subwords differ
("sleeping." against "sleeping ."). This prints test BLEU both ways (beam as in the checkpoint's
``decode``), so the size of that handicap can be re-derived. Run from the folder the model was
trained in when its checkpoint holds no tokenizers.
"""

from __future__ import annotations

import argparse
import gzip
import os

import sacrebleu
import torch

from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines


def read(path: str) -> list[str]:
    with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")) as f:
        return f.read().splitlines()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--sets", nargs="+", default=["test_2016_flickr", "test_2017_flickr"])
    ap.add_argument("--data", default=os.path.join(os.environ.get("SYNTAXNMT_DATA", "../shared/data"), "multi30k"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    model, cfg, toks = load_model(args.checkpoint, device)
    raw_cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"annotate": "none"})})
    print("| test set | raw lines | parser's words |\n|---|---|---|")
    for name in args.sets:
        src, ref = read(f"{args.data}/{name}.en.gz"), read(f"{args.data}/{name}.de.gz")
        bleu = {}
        for how, c in (("raw", raw_cfg), ("parser", cfg)):
            out = [nb[0][0] for nb in translate_lines(model, c, toks, src, cfg.decode, device)]
            bleu[how] = sacrebleu.corpus_bleu(out, [ref]).score
        print(f"| {name} | {bleu['raw']:.2f} | {bleu['parser']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
