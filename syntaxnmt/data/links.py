"""Alignment files and scores: Pharaoh format, alignment error rate, word/subword projection.

Pharaoh format: one sentence pair per line, links separated by spaces. ``i-j`` is a sure link;
gold files may also contain ``ipj``, a possible link. Some gold files (the HLT-NAACL 2003
Hansards, WPT 2005 Romanian-English) count from 1: read them with ``one_indexed=True``.
Files written by this module are always 0-indexed, sorted, sure links only.

Alignment error rate (Och & Ney 2003, "A Systematic Comparison of Various Statistical
Alignment Models", Computational Linguistics 29(1)), with sure links S, possible links
P (S ⊆ P) and hypothesis links A, all counted over the whole corpus::

    precision = |A ∩ P| / |A|        recall = |A ∩ S| / |S|
    AER       = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from syntaxnmt.errors import UserError
from syntaxnmt.textio import iter_lines, read_lines, write_lines

Link = tuple[int, int]
Links = set[Link]

WORD_BOUNDARY = "\u2581"  # SentencePiece's "▁", which starts every piece that begins a word

# --------------------------------------------------------------------------------------
# Pharaoh format
# --------------------------------------------------------------------------------------

_LINK = re.compile(r"^(-?[0-9]+)([-p])(-?[0-9]+)$")


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def parse_links(
    line: str,
    one_indexed: bool = False,
    where: str = "",
    *,
    src_len: int | None = None,
    tgt_len: int | None = None,
) -> tuple[Links, Links]:
    """Parse one Pharaoh line into ``(sure, possible)`` 0-indexed link sets, with sure ⊆ possible.

    ``i-j`` is a sure link, ``ipj`` a possible one; a link given as both is sure. With
    ``one_indexed`` the file counts from 1 (index 0 is then an error). ``src_len``/``tgt_len``,
    when given, bound the indices. ``where`` (e.g. ``"gold.txt:12"``) prefixes error messages.

    Raises :class:`UserError` for a malformed link, a negative index or one outside the sentence.
    """
    sure: Links = set()
    possible: Links = set()
    base = 1 if one_indexed else 0
    for token in line.split():
        m = _LINK.match(token)
        if m is None:
            raise UserError(f"{_prefix(where)}malformed alignment link {token!r} (expected i-j, or ipj for a possible link)")
        i, kind, j = int(m.group(1)), m.group(2), int(m.group(3))
        if i < 0 or j < 0:
            raise UserError(f"{_prefix(where)}negative index in alignment link {token!r}")
        if i < base or j < base:
            raise UserError(f"{_prefix(where)}index 0 in alignment link {token!r} of a 1-indexed file")
        i, j = i - base, j - base
        if src_len is not None and i >= src_len:
            raise UserError(f"{_prefix(where)}alignment link {token!r}: source index out of range (the source sentence has {src_len} words)")
        if tgt_len is not None and j >= tgt_len:
            raise UserError(f"{_prefix(where)}alignment link {token!r}: target index out of range (the target sentence has {tgt_len} words)")
        possible.add((i, j))
        if kind == "-":
            sure.add((i, j))
    return sure, possible


def _check_lengths(path, n_lines: int, lengths: Sequence[int] | None, side: str) -> None:
    if lengths is not None and len(lengths) != n_lines:
        raise UserError(f"{path}: {n_lines} alignment lines but {len(lengths)} {side} sentence lengths were given")


def read_alignments(
    path: str | os.PathLike,
    one_indexed: bool = False,
    src_lengths: Sequence[int] | None = None,
    tgt_lengths: Sequence[int] | None = None,
) -> list[tuple[Links, Links]]:
    """Read a Pharaoh file: one ``(sure, possible)`` pair of 0-indexed link sets per line.

    For a hypothesis file (sure links only) both sets are equal. ``src_lengths``/``tgt_lengths``
    (one per line) enable the range check. Errors name the file and line.
    """
    lines = list(iter_lines(path))
    _check_lengths(path, len(lines), src_lengths, "source")
    _check_lengths(path, len(lines), tgt_lengths, "target")
    out = []
    for k, line in enumerate(lines):
        out.append(
            parse_links(
                line,
                one_indexed,
                where=f"{path}:{k + 1}",
                src_len=None if src_lengths is None else src_lengths[k],
                tgt_len=None if tgt_lengths is None else tgt_lengths[k],
            )
        )
    return out


def transposed(links: Iterable[Link]) -> Links:
    """``(i, j)`` links as ``(j, i)``: a target->source model's links in source-target order, or back."""
    return {(j, i) for i, j in links}


def format_links(links: Iterable[Link]) -> str:
    """``"i-j i-j ..."``, sorted by (source, target), 0-indexed."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def write_alignments(path: str | os.PathLike, alignments: Iterable[Iterable[Link]]) -> None:
    """Write one line of sorted 0-indexed ``i-j`` links per sentence, atomically."""
    write_lines(path, [format_links(links) for links in alignments])


def read_bitext(path: str | os.PathLike) -> tuple[list[list[str]], list[list[str]]]:
    """Read a ``source ||| target`` file (the format of the shared gold sets) as token lists."""
    src, tgt = [], []
    for k, line in enumerate(iter_lines(path), start=1):
        parts = line.split(" ||| ")
        if len(parts) != 2:
            raise UserError(f"{path}:{k}: expected 'source ||| target'")
        src.append(parts[0].split())
        tgt.append(parts[1].split())
    return src, tgt


# --------------------------------------------------------------------------------------
# Alignment error rate
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AERResult:
    """Corpus-level alignment error rate, precision and recall (fractions in [0, 1])."""

    aer: float
    precision: float
    recall: float

    def __str__(self) -> str:
        return f"AER {100 * self.aer:.2f}  precision {100 * self.precision:.2f}  recall {100 * self.recall:.2f}"


def aer(sure_list: Sequence[Links], possible_list: Sequence[Links], hyp_list: Sequence[Links]) -> AERResult:
    """AER, precision and recall of hypotheses against gold (Och & Ney 2003), summed over the corpus.

    Counts are summed over all sentences before dividing (not averaged per sentence).
    ``possible_list[k]`` is taken together with ``sure_list[k]`` (P := P ∪ S), so passing only the
    ``ipj`` links is fine too. With no hypothesis links precision is 1 (vacuously), with no sure
    links recall is 1, and AER is 0 when both are empty.
    """
    if not len(sure_list) == len(possible_list) == len(hyp_list):
        raise ValueError(f"aer: {len(sure_list)} sure, {len(possible_list)} possible and {len(hyp_list)} hypothesis alignments")
    n_a = n_s = a_s = a_p = 0
    for s, p, a in zip(sure_list, possible_list, hyp_list):
        s, a = set(s), set(a)
        p = set(p) | s
        n_a += len(a)
        n_s += len(s)
        a_s += len(a & s)
        a_p += len(a & p)
    precision = a_p / n_a if n_a else 1.0
    recall = a_s / n_s if n_s else 1.0
    error = 1.0 - (a_s + a_p) / (n_a + n_s) if n_a + n_s else 0.0
    return AERResult(error, precision, recall)


def aer_statistics(sure_list: Sequence[Links], possible_list: Sequence[Links], hyp_list: Sequence[Links]) -> np.ndarray:
    """The sentence-level counts behind :func:`aer`, one row per sentence: ``[|A|, |S|, |A ∩ S|,
    |A ∩ P|]`` (P := P ∪ S). Their column sums give the corpus figures (:func:`aer_from_statistics`),
    so resampling and shuffling tests cost a sum each (:mod:`syntaxnmt.metrics`)."""
    if not len(sure_list) == len(possible_list) == len(hyp_list):
        raise ValueError(f"aer: {len(sure_list)} sure, {len(possible_list)} possible and {len(hyp_list)} hypothesis alignments")
    rows = []
    for s, p, a in zip(sure_list, possible_list, hyp_list):
        s, a = set(s), set(a)
        rows.append([len(a), len(s), len(a & s), len(a & (set(p) | s))])
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), 4)


def aer_from_statistics(stats: np.ndarray) -> np.ndarray:
    """AER in % of summed :func:`aer_statistics` ``(..., 4)``, vectorised (0 when both sets are empty, as :func:`aer`)."""
    stats = np.asarray(stats, dtype=np.float64)
    n_a, n_s, a_s, a_p = (stats[..., i] for i in range(4))
    den = n_a + n_s
    return 100.0 * np.where(den > 0, 1.0 - (a_s + a_p) / np.where(den > 0, den, 1.0), 0.0)


def aer_files(
    gold: str | os.PathLike,
    hyp: str | os.PathLike,
    one_indexed_gold: bool = False,
    src_lengths: Sequence[int] | None = None,
    tgt_lengths: Sequence[int] | None = None,
    one_indexed_hyp: bool = False,
) -> AERResult:
    """AER of a hypothesis Pharaoh file (``i-j`` links) against a gold file (``i-j`` and ``ipj``).

    The files must have the same number of lines, at least one. A hypothesis with possible (``ipj``) links is
    refused: it is most likely the gold file given in the wrong place.
    """
    g = read_alignments(gold, one_indexed_gold, src_lengths, tgt_lengths)
    h = read_alignments(hyp, one_indexed_hyp, src_lengths, tgt_lengths)
    if len(g) != len(h):
        raise UserError(f"gold alignments {gold} have {len(g)} lines but hypothesis alignments {hyp} have {len(h)} lines")
    if not g:
        raise UserError(f"gold alignments {gold} and hypothesis alignments {hyp} are empty: no sentence pairs to score")
    for k, (s, p) in enumerate(h, start=1):
        if s != p:
            raise UserError(f"{hyp}:{k}: possible (ipj) links in a hypothesis alignment (gold and hypothesis swapped?)")
    return aer([s for s, _ in g], [p for _, p in g], [p for _, p in h])


# --------------------------------------------------------------------------------------
# Words <-> subwords
# --------------------------------------------------------------------------------------


def word_ids_from_pieces(pieces: Sequence[str]) -> list[int]:
    """The word index of every SentencePiece piece: a piece starting with "▁" begins a new word.

    The first piece always belongs to word 0 (whether or not it starts with "▁"). The words are
    the whitespace-separated tokens of the text given to SentencePiece (after any Moses step).
    """
    ids, word = [], -1
    for k, piece in enumerate(pieces):
        if k == 0 or piece.startswith(WORD_BOUNDARY):
            word += 1
        ids.append(word)
    return ids


def _group(word_ids: Sequence[int]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for piece, word in enumerate(word_ids):
        groups.setdefault(word, []).append(piece)
    return groups


def words_to_subwords(links: Iterable[Link], src_word_ids: Sequence[int], tgt_word_ids: Sequence[int], where: str = "") -> Links:
    """Project word links onto pieces: every (source piece, target piece) pair of two linked words."""
    src_pieces, tgt_pieces = _group(src_word_ids), _group(tgt_word_ids)
    out: Links = set()
    for i, j in links:
        if i not in src_pieces or j not in tgt_pieces:
            raise UserError(
                f"{_prefix(where)}word link {i}-{j} outside the sentence pair "
                f"({len(src_pieces)} source words, {len(tgt_pieces)} target words)"
            )
        out.update((p, q) for p in src_pieces[i] for q in tgt_pieces[j])
    return out


def subwords_to_words(links: Iterable[Link], src_word_ids: Sequence[int], tgt_word_ids: Sequence[int]) -> Links:
    """Project piece links onto words: two words are linked if any of their pieces are."""
    return {(src_word_ids[p], tgt_word_ids[q]) for p, q in links}

def sentence_lengths(src: str | None, tgt: str | None, bitext: str | None) -> tuple[list[int] | None, list[int] | None]:
    """Word counts per line, from tokenized ``src``/``tgt`` files or a ``source ||| target`` file."""
    if bitext:
        s, t = read_bitext(bitext)
        return [len(x) for x in s], [len(x) for x in t]
    return ([len(x.split()) for x in read_lines(src)] if src else None), ([len(x.split()) for x in read_lines(tgt)] if tgt else None)


def aer_report(gold: str, hyp: str, one_indexed_gold: bool = False, src: str | None = None, tgt: str | None = None, bitext: str | None = None) -> str:
    """``AER .. precision .. recall ..`` (percentages) of ``hyp`` against ``gold``; with sentence lengths
    (``src``/``tgt`` or ``bitext``) links outside a sentence are errors naming the line."""
    src_lengths, tgt_lengths = sentence_lengths(src, tgt, bitext)
    return str(aer_files(gold, hyp, one_indexed_gold, src_lengths, tgt_lengths))


def alignment_targets(links: Sequence[Iterable[tuple[int, int]]], tgt_len: int, src_len: int, device=None) -> Tensor:
    """A 0/1 reference alignment (B, T, S) from link sets: ``A[b, j, i] = 1`` for link ``(i, j)``.

    Links are ``(source position, target position)`` as in :mod:`syntaxnmt.alignment` (e.g. the
    subword links of :func:`~syntaxnmt.alignment.words_to_subwords`); links outside
    ``(src_len, tgt_len)`` raise ``ValueError``.
    """
    out = torch.zeros(len(links), tgt_len, src_len, device=device)
    for b, sentence in enumerate(links):
        for i, j in sentence:
            if not (0 <= i < src_len and 0 <= j < tgt_len):
                raise ValueError(f"link {i}-{j} of sentence {b} outside a {src_len}x{tgt_len} (source x target) matrix")
            out[b, j, i] = 1.0
    return out


def normalize_alignment(ref: Tensor, src_pad_mask: Tensor | None = None, tgt_pad_mask: Tensor | None = None) -> Tensor:
    """Row-normalize a reference alignment (B, T, S): a target word linked to k source words gives
    each 1/k; rows without links (unaligned target words) and padding stay all-zero."""
    ref = ref if ref.is_floating_point() else ref.float()
    if src_pad_mask is not None:
        ref = ref.masked_fill(src_pad_mask[:, None, :], 0.0)
    if tgt_pad_mask is not None:
        ref = ref.masked_fill(tgt_pad_mask[:, :, None], 0.0)
    total = ref.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, ref / total.clamp_min(1e-12), torch.zeros_like(ref))
