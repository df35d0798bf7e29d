#!/usr/bin/env bash
# GPU machine, one device command: runs of the converged Multi30k study (issue 50) -- by default seed 4
# of all five systems at once (a whole seed, so that the machine is balanced over the systems) -- then
# the finished runs' results (done.json, hypotheses, scores, logs; no checkpoints) into $OUT.
# Carry: .whl .gpu runs/multi30k-en-de/data-spacy-bpe8k runs/multi30k-en-de/data-spacy-bpe8k-random-tree
# (made on the CPU machine by benchmarks/gpu/bundle.sh and `python benchmarks/gpu/converged.py bundle`).
#   bash benchmarks/gpu/converged.sh                     # SEEDS="4" JOBS=5 DEADLINE=500 (seconds)
# Back on the CPU machine: python benchmarks/gpu/converged.py unpack <files_at>, then --collect.
set -uo pipefail
: "${OUT:?OUT: the folder whose files come back}"
source benchmarks/gpu/setup.sh || exit 1
set_file=$(python3 benchmarks/gpu/converged.py set) || exit 2
echo "== $(date +%T) runs of seed(s) ${SEEDS:-4}, ${JOBS:-5} at once, for at most ${DEADLINE:-500} s"
timeout --signal=TERM "${DEADLINE:-500}" python3 -m syntaxnmt experiment "$set_file" --seeds ${SEEDS:-4} --jobs "${JOBS:-5}" > "$OUT/experiment.log" 2>&1
echo "== $(date +%T) experiment exit status $?"
tail -c 3000 "$OUT/experiment.log" | tr '\r' '\n' | tail -15
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv 2>/dev/null
python3 benchmarks/gpu/converged.py pack "$OUT"
