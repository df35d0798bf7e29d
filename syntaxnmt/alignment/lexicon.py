"""``syntaxnmt lexicon``: a lexical translation table P(e|f) from word alignments of the training corpus.

The training corpus (the words the model sees: normalized, or the parser's words) is aligned with
eflomal (:func:`syntaxnmt.alignment.external.run_eflomal`, grow-diag-final-and) or the links are
read from a Pharaoh file; then, by relative frequency over the links (Koehn et al. 2003, Sec. 3.3,
the maximum-likelihood lexical weights)::

    P(e | f) = c(f, e) / Σ_e' c(f, e')

The table is a text file, one ``f<TAB>e<TAB>P(e|f)<TAB>c(f,e)`` per line, each source word's
translations most probable first. Unknown-word replacement (``decode.unk_replace: dictionary``,
:mod:`syntaxnmt.decoding.unk`) translates a source word by its most probable e.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Sequence

from syntaxnmt.alignment.external import run_eflomal
from syntaxnmt.config import Config
from syntaxnmt.data.corpus import read_parallel
from syntaxnmt.data.links import Links, parse_links
from syntaxnmt.data.prepare import annotate_split, model_words
from syntaxnmt.errors import UserError
from syntaxnmt.textio import read_lines, write_lines

Table = dict[str, list[tuple[str, float, int]]]


def lexical_table(src_lines: Sequence[str], tgt_lines: Sequence[str], links: Sequence[Links], top: int = 5, min_count: int = 1) -> Table:
    """P(e|f) by relative frequency of the links ``(i, j)`` (source word i, target word j) of every
    pair; each f keeps its ``top`` most probable e with at least ``min_count`` links."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for src, tgt, pair in zip(src_lines, tgt_lines, links):
        s, t = src.split(), tgt.split()
        for i, j in pair:
            counts[s[i]][t[j]] += 1
    table: Table = {}
    for f, c in counts.items():
        total = sum(c.values())
        best = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
        kept = [(e, n / total, n) for e, n in best[:top] if n >= min_count]
        if kept:
            table[f] = kept
    return table


def write_table(path: str | Path, table: Table) -> None:
    write_lines(path, [f"{f}\t{e}\t{p:.6f}\t{n}" for f in sorted(table) for e, p, n in table[f]])


def build_lexicon(cfg: Config, output: str | Path, align: str | None = None, top: int = 5, min_count: int = 1, log=print) -> Table:
    """Align the training corpus of ``cfg`` with eflomal (or read the links of ``align``, one line
    per line of the training files, over the words the model sees) and write P(e|f) to ``output``."""
    d = cfg.data
    for key in ("train_src", "train_tgt"):
        if not getattr(d, key):
            raise UserError(f"data.{key} is not set in the config")
    text = read_parallel(d.train_src, d.train_tgt)
    parses = None
    if d.annotate != "none":
        text, parses, _ = annotate_split(cfg, text, d.train_src, d.train_conllu, log)
    src_text, tgt_text = model_words(cfg, text, parses)
    if align:
        lines = read_lines(align)
        if len(lines) != text.counts["read"]:
            raise UserError(f"{align}: {len(lines)} alignment lines but the training files have {text.counts['read']} lines")
        links = [parse_links(lines[n - 1], where=f"{align}:{n}", src_len=len(s.split()), tgt_len=len(t.split()))[1] for n, s, t in zip(text.line_numbers, src_text, tgt_text)]
    else:
        log(f"aligning {len(src_text)} sentence pairs with eflomal (grow-diag-final-and)")
        links = run_eflomal(src_text, tgt_text)
    table = lexical_table(src_text, tgt_text, links, top, min_count)
    write_table(output, table)
    log(f"lexical table of {len(table)} source words written to {output}")
    return table
