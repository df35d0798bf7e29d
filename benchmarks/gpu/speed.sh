#!/usr/bin/env bash
# GPU machine (after `source benchmarks/gpu/setup.sh`): training tokens/s of the Multi30k recipe
# model (recipes/multi30k/baseline.yaml, prepared corpus carried) in each GPU setting, one process
# at a time, then N processes at once (tok/s of each; their sum is the GPU's throughput); then
# beam-5 decoding of test_2016_flickr. Prints one line per measurement.
set -uo pipefail
cfg=recipes/multi30k/baseline.yaml
n=${UPDATES:-300}
speed() { python3 benchmarks/speed.py --config $cfg --warmup 50 --skip-decoding "$@" 2>&1 | tail -1; }
echo "== one process, $n timed updates"
speed --updates $n --train.precision=fp32
speed --updates $n --train.precision=bf16
speed --updates $n --train.precision=bf16 --train.shape_bucket=8 --train.cuda_graphs=true
speed --updates $n --train.precision=fp32 --train.shape_bucket=8 --train.cuda_graphs=true
speed --updates $n --train.precision=bf16 --train.shape_bucket=8 --train.cuda_graphs=true --train.max_tokens=16384
for procs in ${PROCS:-8 16}; do
  for mode in "" "--train.shape_bucket=8 --train.cuda_graphs=true"; do
    echo "== $procs processes at once, bf16 ${mode:-eager}: tok/s of each"
    for i in $(seq $procs); do OMP_NUM_THREADS=1 speed --updates ${MULTI_UPDATES:-200} --train.precision=bf16 $mode --train.threads=1 & done; wait
  done
done
echo "== decoding (untrained model, beam 5, forced length 20)"
python3 benchmarks/speed.py --config $cfg --skip-training --force-length 20 2>&1 | tail -1
