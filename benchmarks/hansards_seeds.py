"""Hansards AER over training seeds (issue 53, item 3): run benchmarks/hansards_aer.py for several
``--seed`` values, and tabulate the AER of each model over seeds against eflomal.

    python benchmarks/hansards_seeds.py run --work runs/hansards-aer --seeds 1,2,3 --steps 2000 \\
        [--variants plain,guided-full-leaky-gdfa] [--jobs 2] [--threads 1]
    python benchmarks/hansards_seeds.py run --work runs/hansards-aer-8k --seeds 1 --steps 8000 \\
        --variants guided-full-leaky-gdfa
    python benchmarks/hansards_seeds.py table --work runs/hansards-aer --seeds 1,2,3 [--bootstrap 1000]
    python benchmarks/hansards_seeds.py collect --work runs/hansards-aer --seeds 1,2,3 --dest results/hansards-aer-2k

``run`` calls hansards_aer.py once per seed (one working folder: the corpus, prepared data and
eflomal's links are shared; seed S > 1 trains in ``run-*-seed<S>`` folders), each writing
``WORK/seed<S>-<steps>.json``; a finished seed's models are reused, so a stopped ``run`` continues.
``table`` needs no model: it reads the links every scored model keeps (``test-links.json`` in its
run folder: the test part of the gold set, per reading) and eflomal's (``eflomal-gold.json``), and
prints per model and reading the AER of each seed, their mean ± sd, and the difference to eflomal
(grow-diag-final-and) with the 95 % interval of the two-level bootstrap over seeds and test pairs
(:func:`syntaxnmt.metrics.two_level_bootstrap`, eflomal as one run: it cannot be seeded). Under
the table, with several seeds (issue 50): the smallest AER difference the seeds detect with 80 %
power and the A/A check, both on the seeds of the first model's first reading, as under the
alignment experiment tables (:func:`syntaxnmt.experiments.sets.seed_notes`; eflomal, one run, has
no seed sd to take). ``collect`` copies what ``table`` reads (and each seed's result JSON: every
reading's AER, the dev sweep, BLEU where it was scored) into ``--dest`` under the same relative paths, about a MB
to commit, so that ``table --work DEST`` re-derives the table on a machine without the runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hansards_aer  # noqa: E402  (the benchmark beside this file)

from syntaxnmt.data.links import aer_from_statistics, aer_statistics, parse_links  # noqa: E402
from syntaxnmt.errors import UserError  # noqa: E402
from syntaxnmt.experiments.alignment import negative_aer  # noqa: E402
from syntaxnmt.experiments.sets import AA_SHUFFLES, seed_notes  # noqa: E402
from syntaxnmt.metrics import run_scores, two_level_bootstrap  # noqa: E402
from syntaxnmt.textio import atomic_write_text  # noqa: E402

VARIANTS = "plain,guided-full-leaky-gdfa"


def seeds_of(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--seeds {text!r}: give comma-separated integers, e.g. 1,2,3") from None
    if not seeds or min(seeds) < 0:
        raise UserError(f"--seeds {text!r}: give one seed >= 0 or more")
    return seeds


def run(args) -> None:
    """hansards_aer.py for every seed, one after the other."""
    for seed in seeds_of(args.seeds):
        argv = ["--work", args.work, "--steps", str(args.steps), "--variants", args.variants, "--seed", str(seed),
                "--jobs", str(args.jobs), "--threads", str(args.threads), "--output", str(Path(args.work) / f"seed{seed}-{args.steps}.json")]
        print(f"hansards_seeds: seed {seed}: hansards_aer.py {' '.join(argv)}", flush=True)
        results = hansards_aer.main(argv)
        if results.get("unfinished"):
            raise UserError(f"seed {seed} did not finish: re-run the same command to continue")


def reading_kind(label: str) -> str:
    """A reading's row: its label, but for the readings chosen on the dev part, whose head differs
    from seed to seed (``best shifted on dev: layer 1, head 2`` -> ``best shifted on dev (per seed)``)."""
    return label.split(":")[0] + " (per seed)" if label.startswith("best ") else label


def _links(lines: list[str], where: str) -> list:
    return [parse_links(line, where=f"{where}:{k + 1}")[0] for k, line in enumerate(lines)]


def scored_tasks(variants: str) -> list[dict]:
    """The models of ``variants`` that a row of the table reads (not the French->English twins, not hidden ones)."""
    tasks = hansards_aer.tasks_for(argparse.Namespace(variants=variants, normalizers="softmax", seed=1))
    return [task for task in tasks if not (task.get("reverse") or task.get("hidden"))]


def links_file(task: dict, seed: int) -> Path:
    """The kept links of ``task`` trained with ``seed``, relative to the working folder."""
    return hansards_aer.task_folder(Path(), {**task, "seed": seed}) / hansards_aer.LINKS_FILE


def table(work: Path, seeds: list[int], variants: str = VARIANTS, bootstrap: int = 1000) -> str:
    """The Markdown table of the models' AER over ``seeds`` from their kept links (see the module docstring)."""
    gold_dir = hansards_aer.DATA / "alignment" / "enfr-hansards"
    src, tgt = hansards_aer.read_bitext(gold_dir / "enfr.src-tgt")
    gold = hansards_aer.read_alignments(gold_dir / "enfr.gold", one_indexed=True, src_lengths=[len(s) for s in src], tgt_lengths=[len(t) for t in tgt])
    stored = hansards_aer._read_json(work / "eflomal-gold.json")
    if not isinstance(stored, dict):
        raise UserError(f"{work}/eflomal-gold.json not found: run hansards_seeds.py run (or hansards_aer.py) with --work {work} first")
    rows, span = [], None
    models = {}
    for task in scored_tasks(variants):
        per_seed = {}
        for seed in seeds:
            path = work / links_file(task, seed)
            kept = hansards_aer._read_json(path)
            if not isinstance(kept, dict):
                raise UserError(f"{path} not found: seed {seed} of {task['name']} is not scored yet (hansards_seeds.py run)")
            if span is not None and kept["test_lines"] != span:
                raise UserError(f"{path}: test lines {kept['test_lines']}, other runs {span}: score every seed with the same --dev-pairs")
            span = kept["test_lines"]
            per_seed[seed] = {reading_kind(reading): _links(lines, str(path)) for reading, lines in kept["readings"].items()}
        models[task["name"]] = per_seed
    test = slice(span[0] - 1, span[1])
    sure, possible = [s for s, _ in gold[test]], [p for _, p in gold[test]]
    eflomal = [{tuple(link) for link in links} for links in stored["eflomal"]["grow-diag-final-and"]["links"]][test]
    base = [aer_statistics(sure, possible, eflomal)]
    base_aer = float(aer_from_statistics(base[0].sum(0)))
    rows.append(f"| eflomal, grow-diag-final-and | – | {base_aer:.2f} | {base_aer:.2f} | – |")
    seeded: list[tuple[str, list[np.ndarray]]] = []  # (row, its seeds' statistics): the seed notes' input
    for name, per_seed in models.items():
        readings = [r for r in per_seed[seeds[0]] if all(r in per_seed[s] for s in seeds)]
        for reading in readings:
            stats = [aer_statistics(sure, possible, per_seed[s][reading]) for s in seeds]
            seeded.append((f"{name}, {reading}", stats))
            scores = run_scores(stats, aer_from_statistics).tolist()
            low, high = two_level_bootstrap(base, stats, aer_from_statistics, n_samples=bootstrap)
            spread = f"{statistics.mean(scores):.2f} ± {statistics.stdev(scores):.2f}" if len(scores) > 1 else f"{scores[0]:.2f}"
            delta = statistics.mean(scores) - base_aer
            rows.append(f"| {name} | {reading} | {' / '.join(f'{x:.2f}' for x in scores)} | {spread} | {delta:+.2f} [{low:+.2f}, {high:+.2f}] |")
    head = [
        f"AER on gold lines {span[0]}-{span[1]} of enfr.gold, seeds {', '.join(map(str, seeds))} ({work}); Δ vs eflomal: mean over seeds minus eflomal's, "
        f"95 % interval of a two-level bootstrap ({bootstrap} samples: seeds, then test pairs; eflomal one run)."
        + (" Under the table: the power and A/A lines of AER on the first model row's seeds (eflomal, one run, has no seed sd)." if len(seeds) > 1 else ""),
        "",
        "| system | reading | AER per seed | mean ± sd | Δ vs eflomal [95 % CI] |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + rows + notes(seeded, bootstrap))


def notes(seeded: list[tuple[str, list[np.ndarray]]], bootstrap: int) -> list[str]:
    """The lines under the table with several seeds (issue 50): what the seeds can detect and the
    A/A check, on the first row's seeds (``seeded``: per model row, its seeds' AER statistics), as
    under the alignment experiment tables; AER read as −AER, lower is better
    (:func:`syntaxnmt.experiments.alignment.negative_aer`). eflomal is one run: no s_opt, no split."""
    if not seeded:
        return []
    (first, stats), others = seeded[0], [len(s) for _, s in seeded[1:]]
    out = []
    for note in seed_notes(f"'{first}'", {"test": stats}, others, bootstrap, AA_SHUFFLES, metric=negative_aer, measure="AER", unit="row"):
        out += ["", note]
    return out


def kept_files(work: Path, seeds: list[int], variants: str = VARIANTS, steps: int | None = None) -> list[Path]:
    """What ``table`` reads for ``seeds`` (eflomal's links, every scored model's kept links), and
    with ``steps`` each seed's result JSON, as paths relative to ``work``; an error names the first
    one missing."""
    names = [Path("eflomal-gold.json")] + [links_file(task, seed) for task in scored_tasks(variants) for seed in seeds]
    if steps is not None:
        names += [Path(f"seed{seed}-{steps}.json") for seed in seeds]
    for name in names:
        if not (work / name).is_file():
            raise UserError(f"{work / name} not found: score every seed first (hansards_seeds.py run --work {work})")
    return names


def collect(work: Path, dest: Path, seeds: list[int], variants: str = VARIANTS, steps: int | None = 2000) -> list[Path]:
    """Copy the kept links and result JSONs of ``seeds`` from ``work`` to ``dest`` (same relative
    paths; each file written atomically), so that ``table --work dest`` gives the table of ``work``."""
    if dest.resolve() == work.resolve():
        raise UserError(f"--dest {dest} is the working folder itself: give another folder")
    names = kept_files(work, seeds, variants, steps)
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(dest / name, (work / name).read_text(encoding="utf-8"))
    return [dest / name for name in names]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train and score every seed with hansards_aer.py")
    r.add_argument("--work", default="runs/hansards-aer")
    r.add_argument("--seeds", default="1,2,3")
    r.add_argument("--steps", type=int, default=2000)
    r.add_argument("--variants", default=VARIANTS)
    r.add_argument("--jobs", type=int, default=1)
    r.add_argument("--threads", type=int, default=1)
    t = sub.add_parser("table", help="the AER over seeds from the kept links (no model needed)")
    t.add_argument("--work", default="runs/hansards-aer")
    t.add_argument("--seeds", default="1,2,3")
    t.add_argument("--variants", default=VARIANTS)
    t.add_argument("--bootstrap", type=int, default=1000)
    c = sub.add_parser("collect", help="copy the kept links and result JSONs of the seeds to a folder to commit")
    c.add_argument("--work", default="runs/hansards-aer")
    c.add_argument("--seeds", default="1,2,3")
    c.add_argument("--steps", type=int, default=2000, help="the steps of the seeds' result JSONs (seed<S>-<steps>.json)")
    c.add_argument("--variants", default=VARIANTS)
    c.add_argument("--dest", required=True)
    args = ap.parse_args(argv)
    if args.command == "run":
        run(args)
    elif args.command == "collect":
        written = collect(Path(args.work), Path(args.dest), seeds_of(args.seeds), args.variants, args.steps)
        print(f"hansards_seeds: {len(written)} files in {args.dest}; re-derive the table: hansards_seeds.py table --work {args.dest} --seeds {args.seeds} --variants {args.variants}")
    else:
        print(table(Path(args.work), seeds_of(args.seeds), args.variants, args.bootstrap))


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(main)
