"""Extract the Bible as a verse-aligned English-Spanish document corpus (issue 21, item 5).

Reads the SWORD modules that Debian packages (``sword-text-web``: World English Bible, module
``engWEB2015eb``; ``sword-text-sparv``: Reina-Valera 1909, module ``spaRV1909eb``) with the PyPI
package ``pysword`` (it reads the module files directly), keeps the verses present and non-empty in
both (aligned by reference: book, chapter, verse), strips the OSIS markup (Strong's ``<w>`` tags,
footnotes, cross references, section headings, speaker labels) to plain text, one verse per line,
and makes every chapter a document (doc id ``Book.Chapter``, e.g. ``Gen.1``).

Split by whole chapters, deterministic: the chapters of the books both modules have, in canonical
order (Genesis 1 = 0, ..., Revelation 22 = last); test = every chapter whose index is 10 mod 20
(59 chapters spread evenly over the Bible), dev = every chapter whose index is 0 mod 40 (30
chapters), train = the rest. The indices are taken before the filter below, so the split of a
chapter does not depend on it.

Verse numbering: the Reina-Valera module puts a few verse and chapter boundaries where Spanish
Bibles have them (Numbers 12:16 is its 13:1, 1 Samuel 23:29 its 24:1, Job 40:1-5 its 39:31-35, ...),
so in a few chapters the pairs are shifted by a verse. A chapter that has a verse pair whose word
counts differ by more than 2.5 times (either way) is dropped whole (a heuristic that catches such
shifts where a boundary moves a long verse; chapters whose verses are of even length can slip
through). Verses that one module leaves empty (the WEB moves Romans 16:25-27 to 14:24-26) are
dropped. Writes ``{train,dev,test}.{en,es,docs}`` under OUT (default
``runs/bible-en-es/data``; never committed) and prints verses, chapters and tokens per split.

    python recipes/bible-en-es/prepare.py [OUT] [--sword /usr/share/sword] [--heldout 5]

``--heldout 5`` also holds out every chapter whose index is 3 mod 5 (238 chapters) from train, as
the split ``heldout``: with the test chapters, the source of the contrastive test (contrastive.py)
that the models of ``study.sh`` never train on.

``prepare.sh`` installs the packages first (needs root and apt; never needed by CI).
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

MODULES = {"en": "engWEB2015eb", "es": "spaRV1909eb"}

# Elements dropped with their content: notes (footnotes, cross references; the <reference>,
# <catchWord> and <rdg> inside them go too), speaker labels (Song of Songs), and titles that are
# not canonical text (section headings; canonical Psalm titles are kept: both modules have them).
_NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.S)
_SPEAKER = re.compile(r"<speaker\b[^>]*>.*?</speaker>", re.S)
_TITLE = re.compile(r"<title\b([^>]*)>(.*?)</title>", re.S)
# Material appended after the last verse of a book (the WEB glossary after Revelation 22:21).
_DIV = re.compile(r"<div\b[^>]*>")


def _end_of_text(raw: str) -> int:
    """Where the verse text ends: at the end-of-book milestone or a glossary/introduction division."""
    for m in _DIV.finditer(raw):
        tag = m.group(0)
        if ('type="book"' in tag and "eID=" in tag) or 'type="glossary"' in tag or 'type="introduction"' in tag:
            return m.start()
    return len(raw)


# Block-level tags (lines, line groups, paragraphs, list items, quotations): a word boundary.
_BLOCK = re.compile(r"</?(?:l|lg|lb|p|div|item|list|q|title|chapter|milestone)\b[^>]*>")
_TAG = re.compile(r"<[^>]*>")
_GAP = "\x00"
_SPACE_BEFORE = r"[\w.,;:!?’”'\")\]]"
_SPACE_AFTER = r"[\w“‘¿¡(\[\"']"
_DROP_CAP = re.compile(r"\b([^\W\d_])([^\W\d_a-zß-ÿ]+)\b")


def clean_osis(raw: str, chapter_start: bool = False) -> str:
    """OSIS verse markup -> one line of plain text.

    Removed markup leaves a word boundary where it separated two words (``God<note>..</note>created``
    -> ``God created``) and none before punctuation (``earth<note>..</note>.`` -> ``earth.``). With
    ``chapter_start``, the first all-capitals word (the drop capital of a chapter's first verse in the
    Reina-Valera: ``EN el principio``) is written in ordinary case (``En el principio``).
    """
    text = _NOTE.sub(_GAP, raw[: _end_of_text(raw)])
    text = _SPEAKER.sub(_GAP, text)
    text = _TITLE.sub(lambda m: f"{_GAP}{m.group(2)}{_GAP}" if 'canonical="true"' in m.group(1) else _GAP, text)
    text = _BLOCK.sub(_GAP, text)
    text = _TAG.sub("", text)
    text = html.unescape(text)
    text = re.sub(rf"(?<={_SPACE_BEFORE}){_GAP}+(?={_SPACE_AFTER})", " ", text)
    text = " ".join(text.replace(_GAP, "").split())
    if chapter_start:
        text = _DROP_CAP.sub(lambda m: m.group(1) + m.group(2).lower(), text, count=1)
    return text


def read_verses(sword_dir: str) -> dict[str, dict[tuple[str, int, int], str]]:
    """{lang: {(book, chapter, verse): plain text}} for both modules, every verse their versification has."""
    from pysword.modules import SwordModules  # deferred: optional recipe dependency, not a syntaxnmt requirement

    modules = SwordModules(sword_dir)
    found = modules.parse_modules()
    out: dict[str, dict[tuple[str, int, int], str]] = {}
    for lang, key in MODULES.items():
        if key not in found:
            sys.exit(f"prepare.py: error: SWORD module {key} not found under {sword_dir} (run prepare.sh, or pass --sword)")
        bible = modules.get_bible_from_module(key)
        verses = out[lang] = {}
        for books in bible.get_structure().get_books().values():
            for book in books:
                for chapter in range(1, len(book.chapter_lengths) + 1):
                    raws = bible.get_iter(books=[book.osis_name], chapters=[chapter], clean=False)
                    for verse, raw in enumerate(raws, 1):
                        verses[(book.osis_name, chapter, verse)] = clean_osis(raw, chapter_start=verse == 1)
    return out


def chapters_in_order(verses: dict[str, dict[tuple[str, int, int], str]]) -> list[tuple[str, int, list[tuple[str, str]]]]:
    """[(book, chapter, [(en, es), ...])] in the Spanish module's canonical order, verses present and non-empty in both."""
    en, es = verses["en"], verses["es"]
    chapters: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for ref, es_text in es.items():  # dicts keep the canonical reading order
        en_text = en.get(ref, "")
        if en_text and es_text:
            chapters.setdefault(ref[:2], []).append((en_text, es_text))
    return [(book, chapter, pairs) for (book, chapter), pairs in chapters.items()]


def aligned(pairs: list[tuple[str, str]], max_ratio: float = 2.5) -> bool:
    """False when a verse pair's whitespace word counts differ by more than ``max_ratio`` times (a shifted verse boundary)."""
    for en_text, es_text in pairs:
        n_en, n_es = len(en_text.split()), len(es_text.split())
        if max(n_en, n_es) > max_ratio * min(n_en, n_es):
            return False
    return True


def split_of(index: int, heldout: int = 0) -> str:
    """The split of the index-th chapter (canonical order): test every 20th, dev every 40th, train
    the rest; with ``heldout`` N > 0, the chapters whose index is 3 mod N (never a test or dev
    chapter when N divides 20, as 5 does) go to ``heldout`` instead of train: chapters no model
    trains on, for the contrastive test (contrastive.py)."""
    if index % 20 == 10:
        return "test"
    if index % 40 == 0:
        return "dev"
    if heldout and index % heldout == 3:
        return "heldout"
    return "train"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default="runs/bible-en-es/data", help="output folder (default runs/bible-en-es/data)")
    ap.add_argument("--sword", default="/usr/share/sword", help="SWORD library root holding mods.d/ and modules/")
    ap.add_argument("--heldout", type=int, default=0, metavar="N", help="also hold out the chapters whose index is 3 mod N from train, as the split heldout (default 0: none; the study uses 5)")
    args = ap.parse_args()
    if args.heldout < 0 or (args.heldout and 20 % args.heldout):
        ap.error(f"--heldout must divide 20 (so that no test or dev chapter is held out), got {args.heldout}")
    verses = read_verses(args.sword)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    splits = ("train", "dev", "test", "heldout") if args.heldout else ("train", "dev", "test")
    files = {split: {ext: [] for ext in ("en", "es", "docs")} for split in splits}
    n_chapters = {split: 0 for split in files}
    dropped = []
    for index, (book, chapter, pairs) in enumerate(chapters_in_order(verses)):
        split = split_of(index, args.heldout)
        if not aligned(pairs):
            dropped.append(f"{book}.{chapter} ({split})")
            continue
        n_chapters[split] += 1
        for en_text, es_text in pairs:
            files[split]["en"].append(en_text)
            files[split]["es"].append(es_text)
            files[split]["docs"].append(f"{book}.{chapter}")
    both = sum(1 for ref, text in verses["es"].items() if text and verses["en"].get(ref))
    print(f"verses: {len(verses['en'])} in {MODULES['en']}, {len(verses['es'])} in {MODULES['es']}, {both} present and non-empty in both")
    print(f"dropped {len(dropped)} chapters with a verse pair of word counts > 2.5x apart: {', '.join(dropped)}")
    print(f"{'split':6} {'chapters':>8} {'verses':>7} {'en tokens':>10} {'es tokens':>10}")
    for split, cols in files.items():
        for ext, lines in cols.items():
            (out / f"{split}.{ext}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        tokens = {lang: sum(len(line.split()) for line in cols[lang]) for lang in ("en", "es")}
        print(f"{split:6} {n_chapters[split]:8d} {len(cols['en']):7d} {tokens['en']:10d} {tokens['es']:10d}")
    print(f"written to {out}/{{{','.join(splits)}}}.{{en,es,docs}} (tokens: whitespace-separated words)")


if __name__ == "__main__":
    main()
