"""Term dictionaries: the target terms a translation must contain, found in its source.

A dictionary is a UTF-8 TSV file, one ``source term<TAB>target term`` per line (both may be
several words; blank lines and lines starting with ``#`` are skipped). A source term is matched
against a sentence's words as the model reads them (the source tokenizer's lowercasing and Moses
tokenization: :func:`source_words`), so the term is normalized the same way when it is read. In a
sentence the longest source terms are taken first, then the shorter ones in what is left, never
overlapping (the leftmost of equally long ones first); each occurrence gives its target term as a
constraint of the search (:mod:`syntaxnmt.decoding.constraints`, in words: :func:`phrase_ids`),
the way terminology is injected in the WMT21 terminology task (Alam et al. 2021, "Findings of the
WMT Shared Task on Machine Translation Using Terminologies").

:func:`seed_from_lexicon` makes a dictionary from ``syntaxnmt lexicon``'s table P(e|f) (one
``f<TAB>e<TAB>P(e|f)<TAB>c(f,e)`` per line, :mod:`syntaxnmt.alignment.lexicon`): every source word's
most probable translation at or above a probability threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from syntaxnmt.data.subwords import Tokenizer
from syntaxnmt.decoding.constraints import phrase_ids
from syntaxnmt.decoding.unk import read_lexical_table
from syntaxnmt.errors import UserError
from syntaxnmt.textio import read_lines, write_lines

Words = Callable[[str], list[str]]
"""Text to the words the model reads (:func:`source_words`)."""


def source_words(tok: Tokenizer) -> Words:
    """The source side's words of a text: the tokenizer's normalization (lowercasing and Moses
    tokenization as the model was trained) split at whitespace."""
    return lambda text: tok.normalize(text).split()


@dataclass(frozen=True)
class TermMatch:
    """A source term found in a sentence: words ``start:end`` and its target term."""

    start: int
    end: int
    target: str


class TermDictionary:
    """Source terms (word tuples) and their target terms (text, as written in the dictionary)."""

    def __init__(self, terms: dict[tuple[str, ...], str]):
        self.terms = terms
        self.longest = max((len(s) for s in terms), default=0)

    @classmethod
    def read(cls, path: str | Path, words: Words = str.split) -> "TermDictionary":
        """Read a TSV dictionary, normalizing its source terms with ``words``. A line without
        exactly one tab, with an empty side, or a source term given twice with different targets
        is a :class:`UserError` naming the file and line."""
        if not Path(path).is_file():
            raise UserError(f"{path}: term dictionary not found")
        terms: dict[tuple[str, ...], str] = {}
        where: dict[tuple[str, ...], int] = {}
        for k, line in enumerate(read_lines(path), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise UserError(f"{path}:{k}: expected 'source term<TAB>target term' (one tab, both sides non-empty), got {line[:80]!r}")
            source, target = tuple(words(fields[0])), " ".join(fields[1].split())
            if not source:
                raise UserError(f"{path}:{k}: the source term {fields[0]!r} has no words after tokenization")
            if source in terms and terms[source] != target:
                raise UserError(f"{path}:{k}: source term {fields[0].strip()!r} already has the target {terms[source]!r} (line {where[source]})")
            terms[source], where[source] = target, k
        return cls(terms)

    def matches(self, words: Sequence[str]) -> list[TermMatch]:
        """The source terms in ``words``, longest first, non-overlapping, in sentence order."""
        found = [(n, i) for n in range(min(self.longest, len(words)), 0, -1) for i in range(len(words) - n + 1) if tuple(words[i : i + n]) in self.terms]
        taken = [False] * len(words)
        out = []
        for n, i in found:  # longest first, then leftmost
            if not any(taken[i : i + n]):
                taken[i : i + n] = [True] * n
                out.append(TermMatch(i, i + n, self.terms[tuple(words[i : i + n])]))
        return sorted(out, key=lambda m: m.start)

    def targets(self, words: Sequence[str]) -> list[str]:
        """The target terms a translation of ``words`` must contain (one per source occurrence)."""
        return [m.target for m in self.matches(words)]


def seed_from_lexicon(table: str | Path, threshold: float, output: str | Path | None = None, min_count: int = 1) -> list[tuple[str, str, float]]:
    """``(f, e, P(e|f))`` for every source word ``f`` of a ``syntaxnmt lexicon`` table whose most
    probable translation ``e`` has P(e|f) >= ``threshold`` and at least ``min_count`` links (when
    the table has counts), sorted by f; written as a term dictionary (``f<TAB>e``) to ``output``
    when given. A malformed line is a :class:`UserError` naming the file and line."""
    best: dict[str, tuple[float, str]] = {}
    for f, e, p, count in read_lexical_table(table):
        if (count is None or count >= min_count) and (f not in best or p > best[f][0]):
            best[f] = (p, e)
    seeded = [(f, e, p) for f, (p, e) in sorted(best.items()) if p >= threshold]
    if output is not None:
        write_lines(output, [f"{f}\t{e}" for f, e, _ in seeded])
    return seeded


def term_constraints(dictionary: TermDictionary, tgt: Tokenizer, sentences: Sequence[Sequence[str]], first_line: int = 1) -> list[list[list[int]]]:
    """Every sentence's constraints (target token ids, :func:`~syntaxnmt.decoding.constraints.phrase_ids`)
    from the dictionary's terms found in its source words ``sentences[i]`` (:func:`source_words`,
    or a parser's words); a target term the target vocabulary cannot write is a :class:`UserError`
    naming the line (``first_line`` + i) and the term."""
    return [phrase_ids(tgt, dictionary.targets(words), f"line {first_line + i}: term dictionary") for i, words in enumerate(sentences)]
