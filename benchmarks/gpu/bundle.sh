#!/usr/bin/env bash
# CPU machine: collect what a GPU machine lacks (see README.md): wheels for CPython 3.12 in .whl/
# and the raw corpora in .gpu/data. Prepared corpora (runs/...) are carried as they are.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl .gpu
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl pydantic==2.14.3 pydantic-core==2.50.4 annotated-types typing-inspection typing-extensions sacremoses conllu
data="${SYNTAXNMT_DATA:-../shared/data}"
rm -rf .gpu/data && mkdir -p .gpu/data && cp -r "$data/multi30k" .gpu/data/
du -sh .whl .gpu "$@" 2>/dev/null || true
