#!/usr/bin/env bash
# Sentence vs concatenation 2-to-1 vs HAN on the Bible, English -> Spanish, chapters as documents
# (issue 21, item 5; seeds and the contrastive test: issue 53), with a control for the extra
# training the context models get. For every seed:
#   1. the sentence model, N updates (recipes/bible-en-es/sentence.yaml);
#   2. three fine-tunings of M updates each from its best.pt, same schedule (warm-up 300):
#      sentence-more (the sentence model trained on: the control), concat (2-to-1, the previous
#      verse), han (HAN on the source side, k = 3: the paper's two-stage recipe);
#   3. each translates the test chapters with --docs (beam 4) and scores the gendered-pronoun
#      contrastive set (contrastive.py: test + held-out chapters, 1-3 verses to the antecedent):
#      the sentence models without context (the floor), the context models with their context
#      and the two controls (`other-document` with --draws R donors, `none`);
#   4. once every seed has these four: han-both (HAN on both sides, k = 3: the target side reads
#      the previous verses' Spanish, where the antecedent's gender is written), M updates from the
#      same best.pt, translated and scored as the other context models.
# The data is prepared with `--heldout 5` (runs/bible-en-es/data-heldout): a fifth of the chapters
# is held out of training so that the contrastive set comes from chapters no model saw; the
# BLEU test chapters are the same as without it. The table (BLEU, chrF and the contrastive
# accuracy per system, mean over seeds with the seed-level intervals of the experiment tables)
# is written by study_table.py to WORK/table.md.
# Steps already done (a `done` file or an output) are skipped, so the study resumes where it
# stopped. Timings and load averages go to WORK/timings.tsv (the wall clock of each command: a
# resumed training's line counts the part after resuming; the table gives each run's training
# time from its last.pt). The body runs as one function, read whole before it starts, so the
# script can be edited while a study runs.
#   bash recipes/bible-en-es/study.sh [--seed S]... [--work DIR] [--draws R] [N] [M]
#   (defaults: seeds 1 2 3, WORK runs/bible-en-es/study-N-M-heldout, R 5, N 4000, M 1500)
# One seed at a time (e.g. one per machine): bash recipes/bible-en-es/study.sh --seed 2 --work W 2000 600;
# then the table over all seeds in W: python recipes/bible-en-es/study_table.py W
set -euo pipefail

main() {
  SEEDS=()
  WORK=""
  DRAWS=5
  POS=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --seed) SEEDS+=("$2"); shift 2 ;;
      --work) WORK="$2"; shift 2 ;;
      --draws) DRAWS="$2"; shift 2 ;;
      -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
      -*) echo "study.sh: error: unknown option $1 (known: --seed S, --work DIR, --draws R)" >&2; exit 2 ;;
      *) POS+=("$1"); shift ;;
    esac
  done
  [ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
  N="${POS[0]:-4000}"
  M="${POS[1]:-1500}"
  R=runs/bible-en-es
  WORK="${WORK:-$R/study-$N-$M-heldout}"
  DATA="$R/data-heldout"
  PREP="$R/prepared-heldout-bpe8k"
  HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  mkdir -p "$WORK"

  [ -f "$DATA/heldout.en" ] || bash "$HERE/prepare.sh" "$DATA" --heldout 5
  if [ ! -f "$DATA/contrastive.json" ]; then
    # the committed links of these verse pairs (the set of docs/documents.md, exactly), else those of the
    # plain split's eflomal run when there is one (the same verse pairs), else eflomal (unseeded) aligns
    LINKS=()
    KEPT="$HERE/../../results/bible-en-es/eflomal-heldout.links.gz"
    if [ -f "$KEPT" ]; then LINKS=(--links "$KEPT"); elif [ -f "$R/data/eflomal.links" ]; then LINKS=(--links-from "$R/data"); fi
    nice python "$HERE/contrastive.py" "$DATA" "${LINKS[@]}"
  fi
  DATA_OVR=(--data.train_src="$DATA/train.en" --data.train_tgt="$DATA/train.es" --data.train_docs="$DATA/train.docs"
    --data.prepared_dir="$PREP")
  [ -d "$PREP" ] || syntaxnmt prepare "$HERE/sentence.yaml" "${DATA_OVR[@]}"

  # train DIR CONFIG STEPS SEED [ARGS...]: one training, skipped when done, continued from its last.pt
  # when stopped (--resume; a fine-tuning then resumes, not restarts from init_from); wall clock and load
  # recorded.
  train() {
    local dir="$1" config="$2" steps="$3" seed="$4"; shift 4
    if [ -f "$dir/done" ]; then echo "$dir: done, skipped"; return; fi
    local l0 t0; l0="$(cut -d' ' -f1 /proc/loadavg)"; t0="$(date +%s)"
    syntaxnmt train "$HERE/$config" --resume --work_dir="$dir" --seed="$seed" --train.max_steps="$steps" --train.valid_every=500 \
      "${DATA_OVR[@]}" "$@"
    printf '%s\t%s updates\t%s s\tload %s -> %s\n' "$dir" "$steps" "$(( $(date +%s) - t0 ))" \
      "$l0" "$(cut -d' ' -f1 /proc/loadavg)" >> "$WORK/timings.tsv"
    touch "$dir/done"
  }

  # score DIR CONTEXT [ARGS...]: the contrastive accuracy of DIR/best.pt, skipped when written.
  score() {
    local dir="$1" context="$2"; shift 2
    local out="$dir/contrastive-$context.json"
    [ -s "$out" ] && return
    syntaxnmt score --checkpoint "$dir/best.pt" --contrastive "$DATA/contrastive.json" --context "$context" "$@" -o "$out"
  }

  # evaluate DIR: translate the test chapters (skipped when done) and score the contrastive set:
  # a sentence model without context (the floor), a context model with its context and both controls.
  evaluate() {
    local dir="$1" hyp="$1/test.hyp" t0
    if [ ! -s "$hyp" ]; then
      t0="$(date +%s)"
      syntaxnmt translate --checkpoint "$dir/best.pt" -i "$DATA/test.en" --docs "$DATA/test.docs" --beam 4 -o "$hyp"
      printf '%s\ttranslate test (1,460 verses)\t%s s\tload %s\n' "$dir" "$(( $(date +%s) - t0 ))" \
        "$(cut -d' ' -f1 /proc/loadavg)" >> "$WORK/timings.tsv"
    fi
    case "${dir##*/}" in
      sentence|sentence-more) score "$dir" none ;;
      *) score "$dir" true; score "$dir" other-document --draws "$DRAWS"; score "$dir" none ;;
    esac
  }

  for seed in "${SEEDS[@]}"; do
    S="$WORK/seed-$seed"
    train "$S/sentence" sentence.yaml "$N" "$seed"
    FT=(--train.init_from="$S/sentence/best.pt" --train.warmup_steps=300)
    train "$S/sentence-more" sentence.yaml "$M" "$seed" "${FT[@]}"
    train "$S/concat" concat.yaml "$M" "$seed" "${FT[@]}"
    train "$S/han" han.yaml "$M" "$seed" "${FT[@]}"
    for m in sentence sentence-more concat han; do evaluate "$S/$m"; done
  done
  # then HAN on both sides for every seed (the core four come first: they are the table's question)
  for seed in "${SEEDS[@]}"; do
    S="$WORK/seed-$seed"
    train "$S/han-both" han.yaml "$M" "$seed" --train.init_from="$S/sentence/best.pt" --train.warmup_steps=300 --model.context.side=both
    evaluate "$S/han-both"
  done
  python "$HERE/study_table.py" "$WORK" --data "$DATA" | tee "$WORK/table.md"
  cat "$WORK/timings.tsv"
}

main "$@"; exit
