#!/usr/bin/env bash
# GPU machine: pack what the study produced that a results table needs -- every run's done.json,
# test hypotheses, config and the end of its log, the stage tables and the study log -- into
# $1 (a .tar.gz), leaving the checkpoints behind.
set -uo pipefail
out=${1:?usage: pack.sh OUT.tar.gz}
cd /work/main
files=$(find runs -maxdepth 4 \( -name done.json -o -name '*.hyp' -o -name config.yaml -o -name dev.hyp \) 2>/dev/null)
for log in $(find runs -maxdepth 4 -name train.log 2>/dev/null); do tail -c 20000 "$log" > "$log.tail"; files="$files $log.tail"; done
tar czf "$out" $files -C / $(cd / && ls -d work/study 2>/dev/null) 2>/dev/null
ls -la "$out"
