#!/usr/bin/env bash
# Sentence vs concatenation 2-to-1 vs HAN on the Bible, English -> Spanish, chapters as documents
# (issue 21, item 5), with a control for the extra training the context models get:
#   1. the sentence model, N updates (recipes/bible-en-es/sentence.yaml);
#   2. three fine-tunings of M updates each from its best.pt, same schedule (warm-up 300):
#      sentence-more (the sentence model trained on: the control), concat (2-to-1, the previous
#      verse), han (HAN on the source side, k = 3: the paper's two-stage recipe), and han-2x
#      (HAN for 2M updates: about the control's number of target tokens);
#   3. each translates the test chapters with --docs (beam 4); sacreBLEU BLEU and chrF with paired
#      bootstrap resampling against sentence-more (the first system).
# Needs the data (bash recipes/bible-en-es/prepare.sh). Steps already done (a `done` file in their
# folder) are skipped, so the study resumes where it stopped. Timings and load averages go to
# WORK/timings.tsv; the scores to WORK/bleu.txt.
#   bash recipes/bible-en-es/study.sh [N] [M]        (defaults 4000 1500, the recipe's budgets)
set -euo pipefail
N="${1:-4000}"
M="${2:-1500}"
R=runs/bible-en-es
WORK="${WORK:-$R/study-$N-$M}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$WORK"
[ -d "$R/prepared-bpe8k" ] || syntaxnmt prepare "$HERE/sentence.yaml"

# train NAME CONFIG STEPS [ARGS...]: one training, skipped when done; wall clock and load recorded.
train() {
  local name="$1" config="$2" steps="$3"; shift 3
  local dir="$WORK/$name"
  if [ -f "$dir/done" ]; then echo "$name: done, skipped"; return; fi
  local l0 t0; l0="$(cut -d' ' -f1 /proc/loadavg)"; t0="$(date +%s)"
  syntaxnmt train "$HERE/$config" --work_dir="$dir" --train.max_steps="$steps" --train.valid_every=500 "$@"
  printf '%s\t%s updates\t%s s\tload %s -> %s\n' "$name" "$steps" "$(( $(date +%s) - t0 ))" \
    "$l0" "$(cut -d' ' -f1 /proc/loadavg)" >> "$WORK/timings.tsv"
  touch "$dir/done"
}

train sentence sentence.yaml "$N"
FT=(--train.init_from="$WORK/sentence/best.pt" --train.warmup_steps=300)
train sentence-more sentence.yaml "$M" "${FT[@]}"
train concat concat.yaml "$M" "${FT[@]}"
train han han.yaml "$M" "${FT[@]}"
# HAN's token budget per batch holds the lead-in rows (previous verses of a span starting inside
# its chapter): its M updates carry about half the control's target tokens; 2M about the same.
train han-2x han.yaml "$(( 2 * M ))" "${FT[@]}"

systems=(sentence-more sentence concat han han-2x)
for m in "${systems[@]}"; do
  hyp="$WORK/$m/test.hyp"
  [ -s "$hyp" ] && continue
  t0="$(date +%s)"
  syntaxnmt translate --checkpoint "$WORK/$m/best.pt" -i "$R/data/test.en" --docs "$R/data/test.docs" \
    --beam 4 -o "$hyp"
  printf '%s\ttranslate test (1,460 verses)\t%s s\tload %s\n' "$m" "$(( $(date +%s) - t0 ))" \
    "$(cut -d' ' -f1 /proc/loadavg)" >> "$WORK/timings.tsv"
done
hyps=()
for m in "${systems[@]}"; do hyps+=("$WORK/$m/test.hyp"); done
sacrebleu "$R/data/test.es" -i "${hyps[@]}" -m bleu chrf --paired-bs --paired-bs-n 1000 -f text \
  | tee "$WORK/bleu.txt"
cat "$WORK/timings.tsv"
