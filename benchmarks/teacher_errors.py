"""Where an aligner's links differ from the gold ones, counted per target word.

    python benchmarks/teacher_errors.py --tgt T --gold G --hyp H [--top 8]

For each target word type: how often the gold links it and the hypothesis leaves it unaligned
(missed), and how often the hypothesis links it to a source word the gold does not (wrong). Used
in docs/alignment.md to show that eflomal's errors on the synthetic corpus are systematic (the
case markers), which a student guided by its links learns along with the rest.
"""

from __future__ import annotations

import argparse
from collections import Counter

from syntaxnmt.data.links import read_alignments
from syntaxnmt.textio import read_lines


def teacher_errors(tgt: list[str], gold: list, hyp: list) -> tuple[Counter, Counter, Counter]:
    """(missed, wrong, occurrences) per target word over line-aligned sentences; ``gold``/``hyp``: link sets (i, j)."""
    missed, wrong, total = Counter(), Counter(), Counter()
    for line, g, h in zip(tgt, gold, hyp):
        for j, word in enumerate(line.split()):
            total[word] += 1
            gold_i, hyp_i = {i for i, jj in g if jj == j}, {i for i, jj in h if jj == j}
            if gold_i and not hyp_i:
                missed[word] += 1
            elif hyp_i - gold_i:
                wrong[word] += 1
    return missed, wrong, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tgt", required=True, help="target sentences (whitespace tokens)")
    ap.add_argument("--gold", required=True, help="gold links (Pharaoh, 0-indexed; only sure links i-j are used)")
    ap.add_argument("--hyp", required=True, help="the aligner's links (Pharaoh, 0-indexed)")
    ap.add_argument("--top", type=int, default=8, help="words listed per column (default 8)")
    args = ap.parse_args()
    tgt = read_lines(args.tgt)
    gold = [s for s, _ in read_alignments(args.gold)]
    hyp = [s for s, _ in read_alignments(args.hyp)]
    if not len(tgt) == len(gold) == len(hyp):
        raise SystemExit(f"teacher_errors: error: {len(tgt)} target lines, {len(gold)} gold lines, {len(hyp)} hypothesis lines")
    missed, wrong, total = teacher_errors(tgt, gold, hyp)
    print(f"{len(tgt)} sentences, {sum(total.values())} target words")
    print("missed (gold links it, the hypothesis leaves it unaligned):", ", ".join(f"{w} {n}/{total[w]}" for w, n in missed.most_common(args.top)))
    print("wrong (linked to a source word the gold does not link):", ", ".join(f"{w} {n}/{total[w]}" for w, n in wrong.most_common(args.top)))


if __name__ == "__main__":
    main()
