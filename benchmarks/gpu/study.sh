#!/usr/bin/env bash
# GPU machine (after `source benchmarks/gpu/setup.sh`): the Multi30k study of docs/results.md in
# two stages, choosing on dev only:
#   1. every system of the set with seed 1;
#   2. the baseline and the TOP systems by seed-1 dev BLEU (benchmarks/gpu/select_on_dev.py) with
#      seeds 1-3 (seed 1 is reused).
# JOBS runs share the GPU at a time. Tables go to $STUDY_DIR/stage1.md and stage2.md, the log to
# $STUDY_DIR/study.log. Start it in the background (setsid) and collect with pack.sh.
set -uo pipefail
SET=${SET:-recipes/multi30k/study-gpu.set.yaml}
DIR=${STUDY_DIR:-/work/study}
mkdir -p "$DIR"
{
  echo "== stage 1: every system, seed 1 ($(date +%T))"
  python3 -m syntaxnmt experiment "$SET" --seeds 1 --jobs "${JOBS:-17}" --output "$DIR/stage1.md"
  top=$(python3 benchmarks/gpu/select_on_dev.py "$SET" --seeds 1 --top "${TOP:-6}")
  echo "== stage 2: the baseline and $top, seeds 1-3 ($(date +%T))"
  python3 -m syntaxnmt experiment "$SET" --seeds 1 2 3 --only "$top" --jobs "${JOBS:-17}" --output "$DIR/stage2.md"
  echo "== done ($(date +%T))"
} >> "$DIR/study.log" 2>&1
