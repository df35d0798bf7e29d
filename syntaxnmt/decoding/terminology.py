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

A **terminology test set** (:func:`content_dictionary`, :func:`build_term_set`) and its measure,
**term accuracy** (:func:`term_accuracy`), as in the WMT21 terminology task (Alam et al. 2021,
Sec. 4: exact-match accuracy, the share of the required term occurrences the output contains),
on lowercased words of sacreBLEU's ``13a`` tokenization (:func:`eval_words`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from syntaxnmt.data.subwords import Tokenizer
from syntaxnmt.decoding.constraints import phrase_ids
from syntaxnmt.decoding.unk import read_lexical_table
from syntaxnmt.errors import UserError
from syntaxnmt.metrics import score
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


def eval_words(text: str) -> list[str]:
    """The words terms are matched on in a test set and in term accuracy: ``text`` lowercased and
    tokenized with sacreBLEU's ``13a`` tokenizer (what BLEU splits: punctuation apart), split at spaces."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()(text.lower()).split()


def _occurrences(words: Sequence[str], phrase: Sequence[str]) -> int:
    """Non-overlapping occurrences of ``phrase`` in ``words``."""
    found, i, n = 0, 0, len(phrase)
    while n and i + n <= len(words):
        if list(words[i : i + n]) == list(phrase):
            found, i = found + 1, i + n
        else:
            i += 1
    return found


def term_accuracy(hypotheses: Sequence[str], terms: Sequence[Sequence[str]]) -> tuple[int, int]:
    """Exact-match term accuracy (WMT21 terminology task, Alam et al. 2021): ``(found, required)``
    over all lines, ``terms[i]`` line i's required target terms (a term given n times is required
    n times). A term is found where its words (:func:`eval_words`) occur as a contiguous sequence
    of the output's words; each required occurrence counts once (min(required, found) per term)."""
    if len(hypotheses) != len(terms):
        raise UserError(f"{len(hypotheses)} output lines for {len(terms)} lines of terms")
    found = required = 0
    for hyp, line_terms in zip(hypotheses, terms):
        words = eval_words(hyp)
        for term, n in Counter(" ".join(eval_words(t)) for t in line_terms).items():
            required += n
            found += min(n, _occurrences(words, term.split()))
    return found, required


def content_dictionary(table: str | Path, threshold: float = 0.5, min_count: int = 5, skip_frequent: int = 100, min_chars: int = 3) -> dict[str, str]:
    """A one-word term dictionary from a ``syntaxnmt lexicon`` table, kept to content words:
    both sides lowercased (a word's case variants pooled: their links c(f, e) summed, f's total
    links c(f) = c(f, e) / P(e|f) summed), then every f's most probable e (ties: the
    alphabetically first) where P(e|f) >= ``threshold``, c(f, e) >= ``min_count``, both words
    alphabetic of ``min_chars`` characters or more, and f not among the ``skip_frequent`` source
    words with the most links (function words: articles, prepositions, auxiliaries)."""
    pair: dict[str, Counter] = defaultdict(Counter)
    links: dict[str, float] = {}  # c(f) of every word as written (each of its rows gives it)
    for f, e, p, count in read_lexical_table(table):
        if count is None:
            raise UserError(f"{table}: a table with link counts is needed (syntaxnmt lexicon writes them)")
        pair[f.lower()][e.lower()] += count
        links[f] = max(links.get(f, 0.0), count / p if p > 0 else 0.0)
    total: Counter = Counter()
    for f, n in links.items():
        total[f.lower()] += round(n)
    frequent = {f for f, _ in sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:skip_frequent]}
    out = {}
    for f in sorted(pair):
        e, c = min(pair[f].items(), key=lambda kv: (-kv[1], kv[0]))
        content = all(w.isalpha() and len(w) >= min_chars for w in (f, e))
        if content and f not in frequent and c >= min_count and c / total[f] >= threshold - 1e-9:
            out[f] = e
    return out


def build_term_set(dictionary: dict[str, str], sources: Sequence[str], references: Sequence[str]) -> list[list[str]]:
    """Every line's constraints for a terminology test set: for each occurrence of a dictionary
    source term in the source (:func:`eval_words`; longest first, non-overlapping, as
    :meth:`TermDictionary.matches`) whose target term occurs in the reference, the target term as
    the reference writes it (its cased words; one per occurrence, at most as many as the
    reference has)."""
    if len(sources) != len(references):
        raise UserError(f"{len(sources)} source lines but {len(references)} references")
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    terms = TermDictionary({tuple(eval_words(f)): e for f, e in dictionary.items()})
    out = []
    for src, ref in zip(sources, references):
        cased = Tokenizer13a()(ref).split()
        lower = [w.lower() for w in cased]
        line: list[str] = []
        for m in terms.matches(eval_words(src)):
            target = eval_words(m.target)
            at = [i for i in range(len(lower) - len(target) + 1) if lower[i : i + len(target)] == target]
            if at and line.count(" ".join(cased[at[0] : at[0] + len(target)])) < _occurrences(lower, target):
                line.append(" ".join(cased[at[0] : at[0] + len(target)]))
        out.append(line)
    return out


def write_term_set(table: str | Path, src: str | Path, ref: str | Path, output: str | Path, threshold: float = 0.5, min_count: int = 5, skip_frequent: int = 100) -> str:
    """Build a terminology test set into the folder ``output``: ``terms.tsv`` (the dictionary,
    :func:`content_dictionary` of the lexicon ``table``) and ``constraints.txt`` (one line per
    line of ``src``, its terms separated by tabs: :func:`build_term_set` against ``ref``, the
    format of ``translate --constraints``). Returns a one-line summary."""
    dictionary = content_dictionary(table, threshold, min_count, skip_frequent)
    sources, references = read_lines(src), read_lines(ref)
    if len(sources) != len(references):
        raise UserError(f"{ref}: {len(references)} references for {len(sources)} lines of {src}")
    terms = build_term_set(dictionary, sources, references)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    write_lines(out / "terms.tsv", [f"{f}\t{e}" for f, e in dictionary.items()])
    write_lines(out / "constraints.txt", ["\t".join(line) for line in terms])
    with_terms = sum(bool(line) for line in terms)
    return f"{out}: {len(dictionary)} terms in terms.tsv; {with_terms} of {len(terms)} lines with a term, {sum(map(len, terms))} term occurrences in constraints.txt"


def term_report(ref: str | Path, constraints: str | Path, systems: Sequence[tuple[str, str | Path]]) -> str:
    """A table of every system's (name, output file) sacreBLEU BLEU against ``ref`` and term
    accuracy (:func:`term_accuracy`) on the terms of ``constraints`` (a ``translate
    --constraints`` file: one line per reference line); the BLEU signature last."""
    from syntaxnmt.decoding.constraints import read_constraint_lines

    references = read_lines(ref)
    terms = read_constraint_lines(constraints, len(references))
    rows, signature = [], ""
    for name, path in systems:
        hyps = read_lines(path)
        if len(hyps) != len(references):
            raise UserError(f"{path}: {len(hyps)} lines for {len(references)} references ({ref})")
        found, required = term_accuracy(hyps, terms)
        scores = score(hyps, [references])
        signature = scores.bleu_signature
        rows.append(f"{name:<20} {scores.bleu:6.2f} {100 * found / max(required, 1):8.2f} % ({found}/{required})")
    return "\n".join([f"{'system':<20} {'BLEU':>6} {'term acc.':>10}", *rows, f"BLEU: {signature}; term accuracy: exact match of lowercased 13a words (WMT21)"])
