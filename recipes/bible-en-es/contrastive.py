"""A gendered-pronoun contrastive test from the Bible's English->Spanish chapters (issue 53, item 1).

Aligns every verse pair of the prepared corpus (train, dev, test and, with ``--heldout``, heldout,
so the mined verses are aligned with the whole Bible's statistics) with eflomal
(grow-diag-final-and) over the words and punctuation of :func:`syntaxnmt.data.pronouns.tokenize`,
once: the links are kept in ``DATA/eflomal.links`` (one line per pair, the splits in that order)
and reused unless ``--realign``. eflomal cannot be seeded, so a new alignment may change a few
items; ``--links FILE`` takes the links from a kept copy instead (the committed
``results/bible-en-es/eflomal-heldout.links.gz`` re-derives the study's set exactly), and
``--links-from DIR`` from another data folder holding the same verse pairs. Then mines the test
and held-out chapters with :func:`syntaxnmt.data.pronouns.mine`: a Spanish gendered pronoun or
clitic linked to English *it*/*they*/*them*, the antecedent (a noun of its gender and number, found
by its determiner) 1-3 verses back, the candidate with the gender swapped. Writes

* ``DATA/contrastive.json``: syntaxnmt's contrastive JSON (context = the chapter's previous
  verses, nearest last; masculine candidate first), for ``syntaxnmt score --contrastive``;
* ``DATA/contrastive.tsv``: one row per item with the pronoun and the antecedent found (for
  reading the items);

and prints the counts per phenomenon and distance. ``--sample N`` also prints N random items
(``--seed``) for checking by reading.

    python recipes/bible-en-es/contrastive.py [DATA] [--links FILE | --links-from DIR] [--sample 30 --seed 53]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

from syntaxnmt.data.contrastive import read_contrastive
from syntaxnmt.data.links import format_links, parse_links
from syntaxnmt.data.pronouns import mine, to_json_items, tokenize
from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write_text, read_lines

SPLITS = ("train", "dev", "test", "heldout")


def read_split(data: Path, split: str) -> tuple[list[str], list[str], list[str]]:
    """The English, Spanish and doc-id lines of one split of prepare.py's output."""
    out = []
    for ext in ("en", "es", "docs"):
        path = data / f"{split}.{ext}"
        if not path.is_file():
            raise UserError(f"{path} not found: run bash recipes/bible-en-es/prepare.sh first")
        out.append(path.read_text(encoding="utf-8").splitlines())
    if not len(out[0]) == len(out[1]) == len(out[2]):
        raise UserError(f"{data}/{split}.{{en,es,docs}} have {len(out[0])}, {len(out[1])}, {len(out[2])} lines")
    return out[0], out[1], out[2]


def reuse_links(data: Path, other: Path, corpus: dict, log=print) -> None:
    """Write ``DATA/eflomal.links`` from the links another data folder holds for the same verse
    pairs (prepare.py with and without ``--heldout`` splits the same pairs differently)."""
    other_corpus = {split: read_split(other, split) for split in SPLITS if (other / f"{split}.en").is_file()}
    other_lines = (other / "eflomal.links").read_text(encoding="utf-8").splitlines()
    pairs = [(e, s) for split in other_corpus for e, s in zip(other_corpus[split][0], other_corpus[split][1])]
    if len(pairs) != len(other_lines):
        raise UserError(f"{other}/eflomal.links has {len(other_lines)} lines for {len(pairs)} verse pairs")
    known = dict(zip(pairs, other_lines))
    lines = []
    for split in corpus:
        for k, pair in enumerate(zip(corpus[split][0], corpus[split][1])):
            if pair not in known:
                raise UserError(f"{data}/{split}.en:{k + 1}: verse pair not in {other}; align with --realign instead")
            lines.append(known[pair])
    atomic_write_text(data / "eflomal.links", "".join(line + "\n" for line in lines))
    log(f"links of {len(lines)} verse pairs copied from {other}/eflomal.links")


def copy_links(data: Path, source: Path, corpus: dict, log=print) -> None:
    """Write ``DATA/eflomal.links`` from ``source`` (plain or gzipped), a kept copy of the links
    of exactly DATA's verse pairs in the same order (each line is checked against its pair's
    lengths when read: :func:`links_of`)."""
    if not source.is_file():
        raise UserError(f"--links {source}: no such file")
    lines = read_lines(source)
    pairs = sum(len(corpus[split][0]) for split in corpus)
    if len(lines) != pairs:
        raise UserError(f"--links {source}: {len(lines)} lines for the {pairs} verse pairs of {data}")
    atomic_write_text(data / "eflomal.links", "".join(line + "\n" for line in lines))
    log(f"links of {pairs} verse pairs copied from {source}")


def links_of(data: Path, corpus: dict, realign: bool, log=print) -> dict[str, list]:
    """Per split, each pair's links over the tokenized words: read from ``DATA/eflomal.links``, or
    computed with eflomal (all splits in one run) and written there."""
    path = data / "eflomal.links"
    en = [" ".join(t.text for t in tokenize(line)) for split in corpus for line in corpus[split][0]]
    es = [" ".join(t.text for t in tokenize(line)) for split in corpus for line in corpus[split][1]]
    if path.is_file() and not realign:
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) != len(en):
            raise UserError(f"{path} has {len(lines)} lines for {len(en)} verse pairs: rerun with --realign")
        links = [parse_links(line, where=f"{path}:{k + 1}", src_len=len(s.split()), tgt_len=len(t.split()))[0]
                 for k, (line, s, t) in enumerate(zip(lines, en, es))]
        log(f"links read from {path}")
    else:
        from syntaxnmt.alignment.external import run_eflomal  # deferred: only when aligning

        log(f"aligning {len(en)} verse pairs with eflomal (grow-diag-final-and)")
        links = run_eflomal(en, es, symmetrize="grow-diag-final-and")
        atomic_write_text(path, "".join(format_links(x) + "\n" for x in links))
        log(f"links written to {path}")
    out, start = {}, 0
    for split in corpus:
        n = len(corpus[split][0])
        out[split] = links[start:start + n]
        start += n
    return out


def sample(mined: list, n: int, seed: int) -> list[int]:
    """Indices of ``n`` random items, in set order: those whose (seed, chapter, verse) hash lowest. A
    seeded draw that keeps its items when others join or leave the set (a changed rule, another
    alignment), so that a reading stays comparable."""
    def key(k: int) -> str:
        item = mined[k][1]
        return hashlib.sha256(f"{seed}:{item.doc}:{item.position}".encode()).hexdigest()

    return sorted(sorted(range(len(mined)), key=key)[:n])


def counts_table(items: list) -> str:
    """Markdown table: items per phenomenon (rows) and distance (columns)."""
    cells = Counter((item.phenomenon, item.distance) for item in items)
    phenomena = sorted({p for p, _ in cells})
    distances = sorted({d for _, d in cells})
    rows = ["| phenomenon | " + " | ".join(f"d = {d}" for d in distances) + " | all |",
            "|---|" + "---|" * (len(distances) + 1)]
    for p in phenomena:
        rows.append(f"| {p} | " + " | ".join(str(cells[(p, d)]) for d in distances) + f" | {sum(cells[(p, d)] for d in distances)} |")
    by_d = [sum(cells[(p, d)] for p in phenomena) for d in distances]
    rows.append("| all | " + " | ".join(map(str, by_d)) + f" | {sum(by_d)} |")
    genders = Counter(item.gender for item in items)
    return "\n".join(rows) + f"\n\n{genders['m']} masculine, {genders['f']} feminine references; {len({i.doc for i in items})} chapters"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default="runs/bible-en-es/data", help="prepare.py's output folder (default runs/bible-en-es/data)")
    ap.add_argument("--splits", default="test,heldout", help="comma-separated splits to mine into one set (default test,heldout: the chapters no model trains on; a split without files is skipped)")
    ap.add_argument("--links", metavar="FILE", help="the links of DATA's verse pairs from a kept copy (plain or .gz; e.g. results/bible-en-es/eflomal-heldout.links.gz) instead of aligning")
    ap.add_argument("--links-from", metavar="DIR", help="copy the links of the same verse pairs from another data folder's eflomal.links instead of aligning")
    ap.add_argument("--output", help="the set (default DATA/contrastive.json; the reading table beside it, .tsv)")
    ap.add_argument("--max-distance", type=int, default=3, help="the farthest antecedent, in verses back (default 3)")
    ap.add_argument("--realign", action="store_true", help="run eflomal again even if DATA/eflomal.links exists")
    ap.add_argument("--sample", type=int, default=0, help="print N random items for reading (the same items while they stay in the set)")
    ap.add_argument("--seed", type=int, default=53, help="seed of --sample (default 53)")
    args = ap.parse_args(argv)
    try:
        data = Path(args.data)
        splits = args.splits.split(",")
        for split in splits:
            if split not in SPLITS:
                raise UserError(f"--splits: unknown split {split!r} (known: {', '.join(SPLITS)})")
        corpus = {split: read_split(data, split) for split in SPLITS if split in ("train", "dev", "test") or (data / f"{split}.en").is_file()}
        if args.links and (args.links_from or args.realign):
            raise UserError(f"--links FILE takes the links as kept; not with {'--links-from' if args.links_from else '--realign'}")
        if args.links:
            copy_links(data, Path(args.links), corpus)
        elif args.links_from and (args.realign or not (data / "eflomal.links").is_file()):
            reuse_links(data, Path(args.links_from), corpus)
        links = links_of(data, corpus, args.realign)
        # one set from every mined split, in split order; `line` is the line in its split's files
        mined = []  # (split, item)
        objs = []
        for split in splits:
            if split not in corpus:
                print(f"{split}: no {data}/{split}.en, skipped")
                continue
            en, es, docs = corpus[split]
            items = mine(en, es, docs, links[split], max_distance=args.max_distance)
            mined += [(split, item) for item in items]
            objs += to_json_items(items, en, es)
        json_path = Path(args.output) if args.output else data / "contrastive.json"
        body = ",\n".join(json.dumps(o, ensure_ascii=False) for o in objs)
        atomic_write_text(json_path, '{"format": "syntaxnmt-contrastive", "version": 1, "items": [\n' + body + "\n]}\n")
        read_contrastive(json_path)  # the reader `syntaxnmt score` uses accepts it
        tsv = ["split\tdoc\tline\tdistance\tphenomenon\ten_word\tes_word\tgender\tantecedent\tantecedent_verse"]
        tsv += [f"{sp}\t{i.doc}\t{i.line}\t{i.distance}\t{i.phenomenon}\t{i.en_word}\t{i.es_word}\t{i.gender}\t{i.antecedent}\t{i.antecedent_sentence + 1}" for sp, i in mined]
        atomic_write_text(json_path.with_suffix(".tsv"), "\n".join(tsv) + "\n")
        print(f"{len(mined)} items written to {json_path} (and {json_path.with_suffix('.tsv').name})")
        print(counts_table([item for _, item in mined]))
        if args.sample:
            chosen = sample(mined, args.sample, args.seed)
            for n, k in enumerate(chosen, 1):
                split, item = mined[k]
                en, es, _ = corpus[split]
                ante = item.line - item.position + item.antecedent_sentence
                print(f"\n#{n} item {k + 1} {item.doc}:{item.position + 1} {item.phenomenon} d={item.distance} "
                      f"antecedent {item.antecedent} in verse {item.antecedent_sentence + 1}")
                print(f"  ante EN: {en[ante]}\n  ante ES: {es[ante]}")
                for back in range(item.distance - 1, 0, -1):
                    print(f"  -{back} EN: {en[item.line - back]}\n  -{back} ES: {es[item.line - back]}")
                print(f"  EN: {item.src}\n  ES: {item.reference}\n  X : {item.contrastive}")
    except UserError as e:
        print(f"syntaxnmt: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
