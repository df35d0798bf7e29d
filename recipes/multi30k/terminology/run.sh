#!/usr/bin/env bash
# The Multi30k terminology test (issue 52, docs/decoding.md "Terminology test set"): a term
# dictionary from the training corpus's eflomal alignments, the test_2016_flickr sentences whose
# source holds a term and whose reference holds its translation, and term accuracy and BLEU of
# plain beam search, constrained beam search and unknown-word replacement. Run from the
# repository root with a trained en-de checkpoint (e.g. runs/multi30k-en-de/baseline/best.pt):
#
#   recipes/multi30k/terminology/run.sh CHECKPOINT [OUT_DIR] [BEAM]
#
# Reproducible: eflomal's alignments of the 29,000 training pairs (lowercased, Moses-tokenized)
# are computed once into OUT_DIR/lexicon.tsv (a few minutes of CPU, run under nice; an existing
# table is kept), everything after is deterministic. OUT_DIR (default
# runs/multi30k-en-de/terminology) is git-ignored under runs/.
set -euo pipefail
data=${SYNTAXNMT_DATA:-../shared/data}/multi30k
ckpt=${1:?give a trained en-de checkpoint}
out=${2:-runs/multi30k-en-de/terminology}
beam=${3:-5}
src=$data/test_2016_flickr.en.gz
ref=$data/test_2016_flickr.de.gz
mkdir -p "$out"

# 1. P(e|f) of the training corpus's words (lowercased, Moses-tokenized), from eflomal's links
if [ ! -s "$out/lexicon.tsv" ]; then
    nice -n 10 syntaxnmt lexicon recipes/multi30k/baseline.yaml -o "$out/lexicon.tsv" --top 5 \
        --data.lowercase=true --data.moses_tokenize=true
fi

# 2. the dictionary (content words: P(e|f) >= 0.5, >= 5 links, not among the 100 most linked
#    source words, alphabetic, >= 3 letters) and the test set's terms (set/constraints.txt)
syntaxnmt terminology-set --lexicon "$out/lexicon.tsv" --src "$src" --ref "$ref" -o "$out/set" \
    --threshold 0.5 --min-count 5 --skip-frequent 100

# 3. the three systems on the whole test set
syntaxnmt translate --checkpoint "$ckpt" -i "$src" --beam "$beam" -o "$out/plain.de"
syntaxnmt translate --checkpoint "$ckpt" -i "$src" --beam "$beam" --constraints "$out/set/constraints.txt" -o "$out/constrained.de"
syntaxnmt translate --checkpoint "$ckpt" -i "$src" --beam "$beam" -o "$out/unk-replace.de" \
    --decode.unk_replace=dictionary --decode.unk_dictionary="$out/lexicon.tsv"

# 4. term accuracy (WMT21 exact match) and sacreBLEU
syntaxnmt evaluate-terms --ref "$ref" --constraints "$out/set/constraints.txt" \
    --hyp plain="$out/plain.de" constrained="$out/constrained.de" unk-replace="$out/unk-replace.de" | tee "$out/results.txt"
