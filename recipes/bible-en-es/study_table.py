"""The table of study.sh (issue 53): BLEU, chrF and the gendered-pronoun contrastive accuracy per
system, mean over the seeds in WORK, with the seed-level intervals of the experiment tables.

Reads ``WORK/seed-*/{sentence,sentence-more,concat,han}/test.hyp`` (the test chapters translated
with ``--docs``) and ``contrastive-{true,other-document,none}.json`` (``syntaxnmt score -o``), and
the references ``DATA/test.es``. Per system:

* BLEU: mean ± sd over seeds; the difference to the control (``sentence-more``: the sentence model
  trained for the same extra updates) with the 95 % interval of the two-level bootstrap (seeds,
  then test sentences) and Welch's p over the per-seed scores
  (:func:`syntaxnmt.experiments.sets.seed_cells`, as the experiment tables);
* chrF: mean ± sd; Welch's p against the control;
* contrastive accuracy (%): with the items' context, and under the two controls (``other-document``,
  ``none``) that must bring a model that reads its context down to the floor: the accuracy of the
  sentence models (scored without context). The difference to the control's accuracy with Welch's
  p over seeds (``score`` writes totals, not per-item outcomes, so the item level is not resampled
  here; one seed's binomial sd on N items is sqrt(a(1-a)/N), about 2.6 points at 330 items).

Under the table, with several seeds: the smallest BLEU difference the seeds detect with 80 % power
and the A/A check on the control's seeds (:func:`syntaxnmt.experiments.sets.seed_notes`), and the
smallest difference of contrastive accuracy they detect, from the control's floor over seeds
(:func:`syntaxnmt.experiments.sets.power_line`: it needs per-seed accuracies only; the A/A check
resamples items, which ``score``'s totals do not give).

    python recipes/bible-en-es/study_table.py WORK [--data runs/bible-en-es/data-heldout] [--bootstrap 1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import AA_SHUFFLES, kept_score, mean_sd_cell, power_line, score_runs, seed_cells, seed_level_cell, seed_notes
from syntaxnmt.metrics import ReferenceScorer, chrf_from_statistics, run_scores, welch_p

SYSTEMS = ("sentence", "sentence-more", "concat", "han")
LABELS = {
    "sentence": "sentence (N updates)",
    "sentence-more": "**sentence-more** (control, + M)",
    "concat": "concat 2-to-1 (previous verse, + M)",
    "han": "HAN (k = 3, source side, + M)",
}
CONTROL = "sentence-more"
CONTEXTS = ("true", "other-document", "none")


def mean_sd(values: list[float], digits: int = 1) -> str:
    """``mean ± sd`` over seeds (:func:`syntaxnmt.experiments.sets.mean_sd_cell`); ``–`` with none."""
    return mean_sd_cell(values, digits) if values else "–"


def read_accuracy(path: Path) -> float | None:
    if not path.is_file():
        return None
    try:
        return 100.0 * float(json.loads(path.read_text(encoding="utf-8"))["accuracy"])
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{path}: not a `syntaxnmt score -o` file ({e})") from None


def collect(work: Path, refs: list[str]) -> tuple[list[int], dict]:
    """Seeds with every system's test.hyp, and per system: BLEU/chrF statistics and accuracies per seed."""
    seeds = sorted(int(p.name.split("-", 1)[1]) for p in work.glob("seed-*") if p.name.split("-", 1)[1].isdigit())
    complete = [s for s in seeds if all((work / f"seed-{s}" / m / "test.hyp").is_file() for m in SYSTEMS)]
    if not complete:
        raise UserError(f"{work}: no seed-*/ folder with the test.hyp of every system ({', '.join(SYSTEMS)}): run study.sh first")
    scorer = ReferenceScorer([refs])
    data = {}
    for m in SYSTEMS:
        bleu, chrf, acc = [], [], {c: [] for c in CONTEXTS}
        for s in complete:
            folder = work / f"seed-{s}" / m
            hyps = (folder / "test.hyp").read_text(encoding="utf-8").splitlines()
            if len(hyps) != len(refs):
                raise UserError(f"{folder / 'test.hyp'}: {len(hyps)} lines for {len(refs)} references")
            bleu.append(scorer.bleu_statistics(hyps))
            chrf.append(scorer.chrf_statistics(hyps))
            for c in CONTEXTS:
                a = read_accuracy(folder / f"contrastive-{c}.json")
                if a is not None:
                    acc[c].append(a)
        data[m] = {"bleu": bleu, "chrf": chrf, "acc": acc}
    return complete, data


def table(work: Path, data_dir: Path, bootstrap: int = 1000) -> str:
    refs = (data_dir / "test.es").read_text(encoding="utf-8").splitlines()
    seeds, data = collect(work, refs)
    control = data[CONTROL]
    control_chrf = [chrf_from_statistics(x) for x in control["chrf"]]
    floor = control["acc"]["none"]
    lines = [
        f"Seeds {', '.join(map(str, seeds))} ({len(seeds)}); BLEU and chrF: sacreBLEU on the {len(refs)} test verses translated with `--docs`, "
        "beam 4, mean ± sd over seeds. Δ BLEU [95 % CI]; p: the difference to the control with the two-level bootstrap interval and Welch's p "
        "over seeds. Contrastive accuracy (%): the gendered-pronoun set, with the items' context (true) and the controls (other-document, none); "
        "the sentence models are scored without context: the floor. Δ acc: true context minus the control's accuracy, Welch's p over seeds.",
        "",
        "| system | BLEU | Δ BLEU vs control [95 % CI]; p | chrF | chrF p | acc (true) | acc (other-document) | acc (none) | Δ acc vs control; p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in SYSTEMS:
        d = data[m]
        cells = seed_cells(control["bleu"], d["bleu"], bootstrap, 0, is_baseline=m == CONTROL, randomization=False)
        chrf = [chrf_from_statistics(x) for x in d["chrf"]]
        chrf_p = welch_p(control_chrf, chrf) if m != CONTROL else None
        bleu = mean_sd([float(x) for x in run_scores(d["bleu"])], 2)
        acc = d["acc"]
        context_model = m in ("concat", "han")
        true_acc = acc["true"] if context_model else acc["none"]
        delta = "–"
        if m != CONTROL and true_acc and floor:
            p = welch_p(floor, true_acc)
            delta = f"{statistics.mean(true_acc) - statistics.mean(floor):+.1f}; p " + ("–" if p is None else f"{p:.4f}")
        lines.append(
            f"| {LABELS[m]} | {bleu} | {seed_level_cell(cells)} | {mean_sd(chrf, 2)} | {'–' if chrf_p is None else f'{chrf_p:.4f}'} | "
            f"{mean_sd(acc['true']) if context_model else '(floor) ' + mean_sd(acc['none'])} | "
            f"{mean_sd(acc['other-document']) if context_model else '–'} | {mean_sd(acc['none'])} | {delta} |"
        )
    # What the seeds can detect in BLEU against the control, and the A/A check on its seeds (as under the experiment tables).
    for note in seed_notes(LABELS[CONTROL].replace("*", ""), {"test": control["bleu"]}, [len(seeds)] * (len(SYSTEMS) - 1), bootstrap, AA_SHUFFLES):
        lines += ["", note]
    # And what they can detect in contrastive accuracy against the control's floor (per-seed accuracies: one figure per run).
    others = [len(data[m]["acc"]["true" if m in ("concat", "han") else "none"]) for m in SYSTEMS if m != CONTROL]
    if floor and max(len(floor), *others) > 1:
        runs = {"contrastive set": score_runs(floor)}
        lines += ["", power_line(f"{CONTROL}'s floor (no context)", runs, others, metric=kept_score, measure="accuracy %", digits=1)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", help="study.sh's work folder (holding seed-*/)")
    ap.add_argument("--data", default="runs/bible-en-es/data-heldout", help="the data folder (test.es)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="two-level bootstrap samples (default 1000)")
    args = ap.parse_args(argv)
    try:
        print(table(Path(args.work), Path(args.data), args.bootstrap))
    except (UserError, OSError) as e:
        print(f"syntaxnmt: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
