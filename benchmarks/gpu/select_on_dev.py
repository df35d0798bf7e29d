"""Rank the systems of an experiment set by their dev BLEU and print the best ones (never the test sets).

    python benchmarks/gpu/select_on_dev.py SET.yaml [--seeds 1] [--top 7]

Reads each finished run's ``done.json`` (``best``: the best greedy dev BLEU of the run, whose
checkpoint decodes the test sets), averages over the given seeds, prints the ranking on stderr and
the ``--top`` systems, the baseline left out, comma-separated on stdout (for ``--only``). Control
arms (``data.structure_control``) are not ranked: each chosen system is followed by its control arms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import control_pairs, load_set, set_runs


def ranking(set_path: str, seeds: list[int]) -> tuple[list[tuple[str, float]], dict[str, str]]:
    """The systems (control arms left out) by mean dev BLEU over ``seeds``, and control arm -> variant."""
    spec = load_set(set_path)
    runs = set_runs(set_path, spec, list(spec.configs), seeds)
    controls = control_pairs(runs)
    scores: dict[str, list[float]] = {}
    for run in runs:
        done = Path(run.cfg.work_dir) / "done.json"
        if done.is_file() and run.cfg.data.structure_control == "none":
            scores.setdefault(run.label, []).append(json.loads(done.read_text())["best"])
    return sorted(((label, statistics.mean(v)) for label, v in scores.items() if len(v) == len(seeds)), key=lambda x: -x[1]), controls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("set")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--top", type=int, default=7)
    args = ap.parse_args()
    try:
        ranked, controls = ranking(args.set, args.seeds)
        baseline = load_set(args.set).baseline
    except UserError as e:
        raise SystemExit(f"select_on_dev: error: {e}")
    for label, bleu in ranked:
        print(f"{bleu:6.2f}  {label}", file=sys.stderr)
    chosen = [label for label, _ in ranked if label != baseline][: args.top]
    print(",".join(x for label in chosen for x in [label, *(arm for arm, variant in controls.items() if variant == label)]))


if __name__ == "__main__":
    main()
