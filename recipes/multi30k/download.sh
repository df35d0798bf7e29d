#!/usr/bin/env bash
# Download Multi30k (WMT16 multimodal task 1, raw cased text) from the public multi30k/dataset
# repository into DEST (default: ../shared/data/multi30k), for machines with internet access.
# The recipes find it through ${SYNTAXNMT_DATA:-../shared/data}/multi30k.
set -euo pipefail
DEST="${1:-${SYNTAXNMT_DATA:-../shared/data}/multi30k}"
BASE="https://github.com/multi30k/dataset/raw/master/data/task1/raw"
mkdir -p "$DEST"
for split in train val test_2016_flickr test_2017_flickr test_2017_mscoco; do
  for lang in en de fr cs; do
    [ "$lang" = cs ] && [[ "$split" == test_2017* ]] && continue
    f="$split.$lang.gz"
    [ -s "$DEST/$f" ] && continue
    echo "downloading $f"
    curl -fsSL "$BASE/$f" -o "$DEST/$f.part" && mv "$DEST/$f.part" "$DEST/$f"
  done
done
echo "Multi30k is in $DEST"
