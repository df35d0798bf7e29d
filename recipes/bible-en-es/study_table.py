"""The table of study.sh (issue 53): BLEU, chrF and the gendered-pronoun contrastive accuracy per
system, mean over seeds, with the seed-level intervals of the experiment tables.

Reads ``WORK/seed-*/{sentence,sentence-more,concat,han}/test.hyp`` (the test chapters translated
with ``--docs``; ``han-both``, HAN on both sides, where study.sh has reached it: a row of its own
over its seeds) and ``contrastive-{true,other-document,none}.json`` (``syntaxnmt score -o``, with
its per-item outcomes), and the references ``DATA/test.es``. Per system:

* BLEU: mean ± sd over seeds; the difference to the control (``sentence-more``: the sentence model
  trained for the same extra updates) with the 95 % interval of the two-level bootstrap (seeds,
  then test sentences) and Welch's p over the per-seed scores
  (:func:`syntaxnmt.experiments.sets.seed_cells`, as the experiment tables);
* chrF: mean ± sd; Welch's p against the control;
* contrastive accuracy (%): with the items' context, and under the two controls (``other-document``,
  ``none``) that must bring a model that reads its context down to the floor: the accuracy of the
  sentence models (scored without context). The difference to the control's floor with the
  two-level bootstrap interval (seeds, then items) and Welch's p over seeds.

Under the table, with several seeds: for BLEU and for the accuracy, the smallest difference the
seeds detect with 80 % power and the A/A check on the control's seeds
(:func:`syntaxnmt.experiments.sets.seed_notes`). Then what each context model reads: its accuracy
with the true context minus under each control, paired by item within each seed, with the
two-level interval and a one-sample t-test over seeds. Then the accuracy by antecedent distance
(1-3 verses back), English pronoun and gender of the right answer (from ``DATA/contrastive.tsv``),
per system with the context it reads: a 2-to-1 model sees only the previous verse, and a model
that always prefers the masculine scores the masculine share; so next, the balanced accuracy (the
mean of the two genders' accuracies: such a model scores 50) per system and context, with its
difference to the control's floor (two-level bootstrap over seeds and items, Welch's p); and each
system's training (updates, best dev BLEU, training time) as its ``last.pt`` records it, exact
across resumes.

``--collect DIR`` also writes every run's hypotheses, sentence statistics and contrastive outcomes
(and the items' metadata, ``DIR/items.tsv``) to ``DIR/<system>-seed<S>.json.gz`` (the scores files of ``syntaxnmt experiment``:
:mod:`syntaxnmt.experiments.scores`), committed under ``results/bible-en-es/study/``; ``--rescore
DIR`` writes the table from them alone, with no model, data or reference.

    python recipes/bible-en-es/study_table.py WORK [--data runs/bible-en-es/data-heldout] [--collect DIR] [--bootstrap 1000]
    python recipes/bible-en-es/study_table.py --rescore results/bible-en-es/study
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from syntaxnmt.checkpoint import load_checkpoint
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.scores import check_contrastive, contrastive_statistics, encode, read_run_scores, results_file, test_statistics
from syntaxnmt.experiments.sets import AA_SHUFFLES, mean_sd_cell, seed_cells, seed_level_cell, seed_notes
from syntaxnmt.metrics import accuracy_from_statistics, chrf_from_statistics, run_scores, two_level_interval, welch_p
from syntaxnmt.textio import atomic_write, atomic_write_text, read_lines

SYSTEMS = ("sentence", "sentence-more", "concat", "han")
"""The study's four systems: a seed counts when it has all of them."""
OPTIONAL = ("han-both",)
"""Systems study.sh trains after the four, for the seeds they reach: a row when present."""
LABELS = {
    "sentence": "sentence (N updates)",
    "sentence-more": "**sentence-more** (control, + M)",
    "concat": "concat 2-to-1 (previous verse, + M)",
    "han": "HAN (k = 3, source side, + M)",
    "han-both": "HAN (k = 3, both sides, + M)",
}
CONTROL = "sentence-more"
CONTEXTS = ("true", "other-document", "none")
CONTEXT_MODELS = ("concat", "han", "han-both")
TEST = "test"


def reading_context(system: str) -> str:
    """The context a system is scored with in the table's main columns: its own for a context
    model, none for a sentence model (the floor)."""
    return "true" if system in CONTEXT_MODELS else "none"


def mean_sd(values: list[float], digits: int = 1) -> str:
    """``mean ± sd`` over seeds (:func:`syntaxnmt.experiments.sets.mean_sd_cell`); ``–`` with none."""
    return mean_sd_cell(values, digits) if values else "–"


def read_contrastive(path: Path, context: str) -> dict | None:
    """A ``syntaxnmt score -o`` file (None when not written yet), checked as the scores files'
    (:func:`syntaxnmt.experiments.scores.check_contrastive`); one error line when it is not one or
    was written before ``score`` kept per-item outcomes."""
    if not path.is_file():
        return None
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UserError(f"{path}: not a `syntaxnmt score -o` file ({e})") from None
    if isinstance(result, dict) and "outcomes" not in result:
        raise UserError(f"{path}: a `syntaxnmt score -o` file without per-item outcomes: delete it and run study.sh again to score anew")
    return check_contrastive(path, context, result)


ITEM_COLUMNS = ("split", "doc", "line", "distance", "phenomenon", "gender")
ITEMS_FILE = "items.tsv"


def read_items(path: Path) -> list[dict[str, str]]:
    """The contrastive items' metadata, in the order of ``contrastive.json``: contrastive.py's
    ``contrastive.tsv`` or the ``items.tsv`` that ``--collect`` keeps (no text: split, doc, line,
    distance, phenomenon, gender)."""
    lines = read_lines(path)
    head = lines[0].split("\t") if lines else []
    if any(c not in head for c in ITEM_COLUMNS):
        raise UserError(f"{path}: a contrastive item table needs the columns {', '.join(ITEM_COLUMNS)}")
    rows = [row.split("\t") for row in lines[1:]]
    for n, row in enumerate(rows, 2):
        if len(row) != len(head):
            raise UserError(f"{path}, line {n}: {len(row)} columns for the header's {len(head)}")
    return [{c: row[head.index(c)] for c in ITEM_COLUMNS} for row in rows]


def write_items(path: Path, items: list[dict[str, str]]) -> None:
    rows = ["\t".join(ITEM_COLUMNS)] + ["\t".join(item[c] for c in ITEM_COLUMNS) for item in items]
    atomic_write_text(path, "\n".join(rows) + "\n")


def runs_from_work(work: Path, refs: list[str]) -> dict[tuple[str, int], dict]:
    """(system, seed) -> run (``tests``, ``contrastive``) for every seed of WORK whose systems all
    have their test.hyp; statistics computed against ``refs``."""
    seeds = sorted(int(p.name.split("-", 1)[1]) for p in work.glob("seed-*") if p.name.split("-", 1)[1].isdigit())
    complete = [s for s in seeds if all((work / f"seed-{s}" / m / "test.hyp").is_file() for m in SYSTEMS)]
    if not complete:
        raise UserError(f"{work}: no seed-*/ folder with the test.hyp of every system ({', '.join(SYSTEMS)}): run study.sh first")
    runs = {}
    for s in complete:
        for m in SYSTEMS + tuple(o for o in OPTIONAL if (work / f"seed-{s}" / o / "test.hyp").is_file()):
            folder = work / f"seed-{s}" / m
            hyps = read_lines(folder / "test.hyp")
            if len(hyps) != len(refs):
                raise UserError(f"{folder / 'test.hyp'}: {len(hyps)} lines for {len(refs)} references")
            contrastive = {c: r for c in CONTEXTS if (r := read_contrastive(folder / f"contrastive-{c}.json", c)) is not None}
            runs[m, s] = {**training_record(folder), "tests": {TEST: {"hyps": hyps, **test_statistics(hyps, refs)}}, "contrastive": contrastive}
    return runs


def training_record(folder: Path) -> dict:
    """A run's training as its last checkpoint records it (exact across resumes): updates, training
    seconds, target tokens, best dev BLEU (greedy, validated every 500 updates and at the end); empty
    when the run kept no last.pt."""
    if not (folder / "last.pt").is_file():
        return {}
    progress = load_checkpoint(folder / "last.pt", lazy=True).get("progress", {})
    return {"steps": progress.get("step"), "train_seconds": progress.get("train_seconds"), "train_tokens": progress.get("train_tokens"), "best": progress.get("best")}


def collect(runs: dict[tuple[str, int], dict], results: Path, items: list[dict[str, str]] | None = None) -> list[Path]:
    """Write every run as a scores file under ``results`` (byte-stable: the same run, the same
    bytes), and the items' metadata (``items.tsv``) that the accuracy by group reads."""
    written = []
    if items is not None:
        write_items(results / ITEMS_FILE, items)
        written.append(results / ITEMS_FILE)
    for (m, s), run in sorted(runs.items()):
        target = results_file(results, m, s)
        data = encode(m, s, run, run["tests"], contrastive=run["contrastive"])
        atomic_write(target, lambda f, data=data: f.write(data))
        written.append(target)
    return written


def runs_from_results(results: Path) -> dict[tuple[str, int], dict]:
    """The runs ``--collect`` wrote under ``results`` (the items' metadata: ``items.tsv`` beside them)."""
    runs = {}
    for path in sorted(results.glob("*-seed*.json.gz")):
        match = re.fullmatch(r"(.+)-seed(\d+)\.json\.gz", path.name)
        if match and match[1] in SYSTEMS + OPTIONAL:
            record = read_run_scores(path)
            if TEST not in record["tests"]:
                raise UserError(f"{path}: no '{TEST}' outputs")
            runs[match[1], int(match[2])] = record
    seeds = sorted({s for _, s in runs})
    complete = [s for s in seeds if all((m, s) in runs for m in SYSTEMS)]
    if not complete:
        raise UserError(f"{results}: no seed with the scores of every system ({', '.join(SYSTEMS)}): collect them first (study_table.py WORK --collect {results})")
    return {key: run for key, run in runs.items() if key[1] in complete}


def present(runs: dict[tuple[str, int], dict]) -> tuple[str, ...]:
    """The table's systems: the four, then the optional ones that have runs."""
    return SYSTEMS + tuple(o for o in OPTIONAL if any(m == o for m, _ in runs))


def own_runs(runs: dict[tuple[str, int], dict], system: str, seeds: list[int]) -> list[dict]:
    """``system``'s runs, in seed order (an optional system may have fewer seeds)."""
    return [runs[system, s] for s in seeds if (system, s) in runs]


def accuracy_runs(runs: dict, system: str, seeds: list[int], context: str) -> list[np.ndarray]:
    """Per-item statistics of ``system``'s contrastive result under ``context``, one array per seed that has it."""
    return [contrastive_statistics(r["contrastive"][context]) for r in own_runs(runs, system, seeds) if context in r["contrastive"]]


def item_groups(items: list[dict[str, str]]) -> dict[str, list[int]]:
    """The groups of items the accuracy is broken down by: the antecedent's distance, the English
    pronoun and the gender of the right answer (most Spanish plurals are masculine: a model that
    always says *ellos* scores the masculine share)."""
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        gender = {"m": "masculine", "f": "feminine"}.get(item["gender"], item["gender"])
        for key in (f"distance {item['distance']}", f"*{item['phenomenon'].split(':', 1)[0]}*", gender):
            groups.setdefault(key, []).append(i)
    order = lambda k: (0 if k.startswith("distance") else 1 if k.startswith("*") else 2, k)  # noqa: E731
    return {k: groups[k] for k in sorted(groups, key=order)}


def group_accuracy(result: dict, members: list[int]) -> float:
    """Accuracy (%) of one contrastive result on the items ``members``."""
    return 100.0 * sum(result["outcomes"][i] for i in members) / (result["draws"] * len(members))


def balanced_statistics(result: dict, genders: list[list[int]]) -> np.ndarray:
    """Per-item statistics ``(items, 4)`` of one contrastive result for :func:`balanced_from_statistics`:
    trials passed and trials, in the columns of the item's gender (``genders``: the feminine and the
    masculine items), zeros in the other's -- so resampled items sum as sentence statistics do."""
    stats = contrastive_statistics(result)
    return np.concatenate([stats * np.isin(np.arange(len(stats)), members)[:, None] for members in genders], axis=1)


def two_accuracies(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two accuracies (%) of summed statistics that hold two (passed, trials) pairs side by side."""
    stats = np.asarray(stats, dtype=np.float64)
    return accuracy_from_statistics(stats[..., 0:2]), accuracy_from_statistics(stats[..., 2:4])


def balanced_from_statistics(stats: np.ndarray) -> np.ndarray:
    """Balanced accuracy (%) from summed :func:`balanced_statistics`: the mean of the two genders'
    accuracies, so a model that always prefers one gender scores 50 whatever the items' mix."""
    feminine, masculine = two_accuracies(stats)
    return (feminine + masculine) / 2


def balanced_table(runs: dict[tuple[str, int], dict], seeds: list[int], items: list[dict[str, str]] | None, bootstrap: int) -> list[str]:
    """Balanced accuracy per system and context, and its difference to the control's floor with the
    two-level bootstrap interval (seeds, then items) and Welch's p: the test of whether a context
    model picks the right gender more often, free of the items' masculine majority. None without the
    items' genders."""
    groups = item_groups(items) if items is not None else {}
    if not {"feminine", "masculine"} <= set(groups) or not any(r.get("contrastive") for r in runs.values()):
        return []
    genders = [groups["feminine"], groups["masculine"]]
    stats = {(m, c): [balanced_statistics(r["contrastive"][c], genders) for r in own_runs(runs, m, seeds) if c in r["contrastive"]]
             for m in present(runs) for c in CONTEXTS}
    floor = stats[CONTROL, "none"]
    lines = ["", "Balanced accuracy (%): the mean of the feminine and the masculine items' accuracies (a model that always prefers one gender "
             "scores 50), mean ± sd over seeds; Δ: the balanced accuracy a system reads with (its context; none for a sentence model) minus "
             "the control's floor, two-level bootstrap (seeds, then items) and Welch's p over seeds.", "",
             "| system | balanced (true) | balanced (other-document) | balanced (none) | Δ balanced vs floor [95 % CI]; p |", "|---|---|---|---|---|"]
    cell = lambda runs_: mean_sd([float(x) for x in run_scores(runs_, balanced_from_statistics)]) if runs_ else "–"  # noqa: E731
    for m in present(runs):
        own = stats[m, reading_context(m)]
        delta = "–"
        if m != CONTROL and own and floor:
            delta = seed_level_cell(seed_cells(floor, own, bootstrap, 0, metric=balanced_from_statistics, digits=1, randomization=False))
        context_model = m in CONTEXT_MODELS
        lines.append(f"| {LABELS[m]} | {cell(stats[m, 'true']) if context_model else '(floor) ' + cell(stats[m, 'none'])} | "
                     f"{cell(stats[m, 'other-document']) if context_model else '–'} | {cell(stats[m, 'none'])} | {delta} |")
    return lines


def paired_statistics(reading: dict, control: dict) -> np.ndarray:
    """Per-item statistics ``(items, 4)`` of one model's two readings of the same items (its context
    and a control), side by side, for :func:`paired_from_statistics`: resampled by item together."""
    return np.concatenate([contrastive_statistics(reading), contrastive_statistics(control)], axis=1)


def paired_from_statistics(stats: np.ndarray) -> np.ndarray:
    """Accuracy with the context minus accuracy under the control (points) from summed :func:`paired_statistics`."""
    reading, control = two_accuracies(stats)
    return reading - control


def context_effect_table(runs: dict[tuple[str, int], dict], seeds: list[int], bootstrap: int) -> list[str]:
    """What each context model reads, within the model: its accuracy with the true context minus
    under each control, paired by item within each seed; the 95 % interval of the two-level
    bootstrap (seeds, then items) and the one-sample t-test over the seeds' differences
    (``scipy.stats.ttest_1samp``). A model that reads its context's content beats other-document;
    one that only reads that there is context beats none alone."""
    from scipy import stats as scipy_stats

    rows = []
    for m in (m for m in present(runs) if m in CONTEXT_MODELS):
        cells = []
        for control in ("other-document", "none"):
            paired = [paired_statistics(r["contrastive"]["true"], r["contrastive"][control]) for r in own_runs(runs, m, seeds)
                      if "true" in r["contrastive"] and control in r["contrastive"]]
            if not paired:
                cells.append("–")
                continue
            diffs = run_scores(paired, paired_from_statistics)
            low, high = two_level_interval(paired, paired_from_statistics, n_samples=bootstrap)
            p = f"; p {scipy_stats.ttest_1samp(diffs, 0.0).pvalue:.4f}" if len(diffs) > 1 and np.ptp(diffs) > 0 else ""
            cells.append(f"{float(np.mean(diffs)):+.1f} [{low:+.1f}, {high:+.1f}]{p} (seeds: {', '.join(f'{d:+.1f}' for d in diffs)})")
        rows.append(f"| {LABELS[m]} | {cells[0]} | {cells[1]} |")
    if not rows:
        return []
    return ["", "What the context models read (within each model, paired by item): accuracy with the true context minus under a control, "
            "points; mean over seeds with the 95 % interval of the two-level bootstrap (seeds, then items) and the one-sample t-test over "
            "the seeds' differences.", "", "| system | true − other-document [95 % CI]; p | true − none [95 % CI]; p |", "|---|---|---|", *rows]


def table_from_runs(runs: dict[tuple[str, int], dict], bootstrap: int = 1000, items: list[dict[str, str]] | None = None) -> str:
    seeds = sorted({s for _, s in runs})
    systems = present(runs)
    bleu = {m: [r["tests"][TEST]["bleu"] for r in own_runs(runs, m, seeds)] for m in systems}
    chrf = {m: [chrf_from_statistics(r["tests"][TEST]["chrf"].sum(0)) for r in own_runs(runs, m, seeds)] for m in systems}
    acc = {m: {c: accuracy_runs(runs, m, seeds, c) for c in CONTEXTS} for m in systems}
    floor = acc[CONTROL]["none"]
    n_refs = len(runs[CONTROL, seeds[0]]["tests"][TEST]["hyps"])
    lines = [
        f"Seeds {', '.join(map(str, seeds))} ({len(seeds)}); BLEU and chrF: sacreBLEU on the {n_refs:,} test verses translated with `--docs`, "
        "beam 4, mean ± sd over seeds. Δ BLEU [95 % CI]; p: the difference to the control with the two-level bootstrap interval (seeds, then "
        "sentences) and Welch's p over seeds. Contrastive accuracy (%): the gendered-pronoun set, with the items' context (true) and the "
        "controls (other-document, none); the sentence models are scored without context: the floor. Δ acc [95 % CI]; p: the accuracy a "
        "system reads with (its context; none for a sentence model) minus the control's floor, two-level bootstrap (seeds, then items) "
        "and Welch's p over seeds.",
        "",
        "| system | BLEU | Δ BLEU vs control [95 % CI]; p | chrF | chrF p | acc (true) | acc (other-document) | acc (none) | Δ acc vs floor [95 % CI]; p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    pct = lambda runs_: [float(x) for x in run_scores(runs_, accuracy_from_statistics)]  # noqa: E731
    for m in systems:
        cells = seed_cells(bleu[CONTROL], bleu[m], bootstrap, 0, is_baseline=m == CONTROL, randomization=False)
        chrf_p = welch_p(chrf[CONTROL], chrf[m]) if m != CONTROL else None
        own = acc[m][reading_context(m)]
        delta = "–"
        if m != CONTROL and own and floor:
            delta = seed_level_cell(seed_cells(floor, own, bootstrap, 0, metric=accuracy_from_statistics, digits=1, randomization=False))
        context_model = m in CONTEXT_MODELS
        seeds_note = "" if len(bleu[m]) == len(seeds) else f" ({len(bleu[m])} seed{'s' if len(bleu[m]) > 1 else ''})"
        lines.append(
            f"| {LABELS[m]}{seeds_note} | {mean_sd([float(x) for x in run_scores(bleu[m])], 2)} | {seed_level_cell(cells)} | {mean_sd(chrf[m], 2)} | "
            f"{'–' if chrf_p is None else f'{chrf_p:.4f}'} | {mean_sd(pct(acc[m]['true'])) if context_model else '(floor) ' + mean_sd(pct(acc[m]['none']))} | "
            f"{mean_sd(pct(acc[m]['other-document'])) if context_model else '–'} | {mean_sd(pct(acc[m]['none']))} | {delta} |"
        )
    # What the seeds can detect against the control, and the A/A check on its seeds (as under the experiment tables).
    for note in seed_notes(LABELS[CONTROL].replace("*", ""), {"test": bleu[CONTROL]}, [len(bleu[m]) for m in systems if m != CONTROL], bootstrap, AA_SHUFFLES):
        lines += ["", note]
    if floor:
        others = [len(acc[m][reading_context(m)]) for m in systems if m != CONTROL]
        for note in seed_notes(f"{CONTROL}'s floor (no context)", {"contrastive set": floor}, others, bootstrap, AA_SHUFFLES, metric=accuracy_from_statistics, measure="accuracy %", digits=1):
            lines += ["", note]
    lines += context_effect_table(runs, seeds, bootstrap) + groups_table(runs, seeds, items) + balanced_table(runs, seeds, items, bootstrap) + training_table(runs, seeds)
    return "\n".join(lines)


def training_table(runs: dict[tuple[str, int], dict], seeds: list[int]) -> list[str]:
    """Updates, best dev BLEU and training time per system, mean ± sd over the seeds that recorded them."""
    if not any(r.get("steps") for r in runs.values()):
        return []
    lines = ["", "Training (from each run's last checkpoint): updates (a fine-tuning's own), best dev BLEU (greedy) and training time, mean ± sd over seeds.", "",
             "| system | updates | dev BLEU | training (min) | target tok/s |", "|---|---|---|---|---|"]
    for m in present(runs):
        own = [r for r in own_runs(runs, m, seeds) if r.get("steps")]
        steps = sorted({int(r["steps"]) for r in own})
        rate = [r["train_tokens"] / r["train_seconds"] for r in own if r.get("train_tokens") and r.get("train_seconds")]
        lines.append(
            f"| {LABELS[m]} | {', '.join(f'{x:,}' for x in steps)} | {mean_sd([float(r['best']) for r in own if r.get('best') is not None], 2)} | "
            f"{mean_sd([r['train_seconds'] / 60 for r in own if r.get('train_seconds')])} | {mean_sd(rate, 0)} |"
        )
    return lines


def groups_table(runs: dict[tuple[str, int], dict], seeds: list[int], items: list[dict[str, str]] | None) -> list[str]:
    """Accuracy by antecedent distance, English pronoun and gender of the answer, mean ± sd over
    seeds: a sentence model without context, a context model with its context and under each
    control (what the context adds shows where the controls fall back); none without the items'
    metadata."""
    rows = [(m, c) for m in present(runs) for c in (CONTEXTS if m in CONTEXT_MODELS else ("none",))]
    scored = {(m, c): [r["contrastive"][c] for r in own_runs(runs, m, seeds) if c in r["contrastive"]] for m, c in rows}
    if not any(scored.values()) or items is None:
        return []
    for (m, c), results in scored.items():
        for r in results:
            if len(r["outcomes"]) != len(items):
                raise UserError(f"{LABELS[m]}, context {c}: {len(r['outcomes'])} contrastive outcomes for {len(items)} items in the item table: scored on another set")
    groups = item_groups(items)
    lines = [
        "",
        "Contrastive accuracy (%) by the antecedent's distance (verses back), the English pronoun and the gender of the right answer "
        "(items), mean ± sd over seeds: the sentence models without context, the context models with their context and under both controls.",
        "",
        "| system | context | " + " | ".join(f"{k} ({len(v)})" for k, v in groups.items()) + " |",
        "|---|---|" + "---|" * len(groups),
    ]
    for (m, c), results in scored.items():
        if not results:
            continue  # a control not scored (yet)
        lines.append(f"| {LABELS[m]} | {c} | " + " | ".join(mean_sd([group_accuracy(r, v) for r in results]) for v in groups.values()) + " |")
    return lines


def work_items(data_dir: Path) -> list[dict[str, str]] | None:
    """The items' metadata beside the contrastive set (contrastive.py's ``contrastive.tsv``), if there."""
    path = data_dir / "contrastive.tsv"
    return read_items(path) if path.is_file() else None


def table(work: Path, data_dir: Path, bootstrap: int = 1000) -> str:
    """The table from study.sh's work folder and the references in ``data_dir``."""
    return table_from_runs(runs_from_work(work, read_lines(data_dir / "test.es")), bootstrap, work_items(data_dir))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", nargs="?", help="study.sh's work folder (holding seed-*/)")
    ap.add_argument("--data", default="runs/bible-en-es/data-heldout", help="the data folder (test.es)")
    ap.add_argument("--collect", metavar="DIR", help="also write every run's scores file under DIR (e.g. results/bible-en-es/study)")
    ap.add_argument("--rescore", metavar="DIR", help="the table from the scores files under DIR alone (no WORK, no data)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="two-level bootstrap samples (default 1000)")
    args = ap.parse_args(argv)
    try:
        if (args.work is None) == (args.rescore is None):
            raise UserError("give either WORK (study.sh's work folder) or --rescore DIR")
        if args.rescore:
            runs = runs_from_results(Path(args.rescore))
            kept = Path(args.rescore) / ITEMS_FILE
            items = read_items(kept) if kept.is_file() else None
        else:
            runs = runs_from_work(Path(args.work), read_lines(Path(args.data) / "test.es"))
            items = work_items(Path(args.data))
            if args.collect:
                for path in collect(runs, Path(args.collect), items):
                    print(f"wrote {path}", file=sys.stderr)
        print(table_from_runs(runs, args.bootstrap, items))
    except (UserError, OSError) as e:
        print(f"syntaxnmt: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
