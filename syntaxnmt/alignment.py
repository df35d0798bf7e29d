"""Word alignments: Pharaoh files, AER, word/subword projection, symmetrization, attention.

Conventions used throughout
---------------------------
A *link* is a pair ``(i, j)``: ``i`` is a **source** position, ``j`` a **target** position,
both 0-indexed. An alignment is a ``set`` of links.

Pharaoh format: one sentence pair per line, links separated by spaces. ``i-j`` is a sure link;
gold files may also contain ``ipj``, a possible link. Some gold files (the HLT-NAACL 2003
Hansards, WPT 2005 Romanian-English) count from 1: read them with ``one_indexed=True``.
Files written by this module are always 0-indexed, sorted, sure links only.

Alignment error rate (Och & Ney 2003, "A Systematic Comparison of Various Statistical
Alignment Models", Computational Linguistics 29(1)), with sure links S, possible links
P (S ⊆ P) and hypothesis links A, all counted over the whole corpus::

    precision = |A ∩ P| / |A|        recall = |A ∩ S| / |S|
    AER       = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Attention as alignment: the cross-attention of a Transformer is (B, H, T, S) per decoder layer;
row ``t`` is the decoder position that *predicts* target token ``tgt_out[t]``, so a link from
row ``t`` to column ``s`` is the link ``(s, t)`` between source token ``src[s]`` and target
token ``tgt_out[t]``. The last non-padding source position is EOS and ``tgt_out`` ends with EOS;
:func:`extract_alignments` drops both (and padding) before choosing links, so every link joins
two real subwords.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from syntaxnmt.errors import UserError
from syntaxnmt.subwords import PAD
from syntaxnmt.textio import iter_lines, write_lines

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


def aer_files(
    gold: str | os.PathLike,
    hyp: str | os.PathLike,
    one_indexed_gold: bool = False,
    src_lengths: Sequence[int] | None = None,
    tgt_lengths: Sequence[int] | None = None,
    one_indexed_hyp: bool = False,
) -> AERResult:
    """AER of a hypothesis Pharaoh file (``i-j`` links) against a gold file (``i-j`` and ``ipj``).

    The files must have the same number of lines. A hypothesis with possible (``ipj``) links is
    refused: it is most likely the gold file given in the wrong place.
    """
    g = read_alignments(gold, one_indexed_gold, src_lengths, tgt_lengths)
    h = read_alignments(hyp, one_indexed_hyp, src_lengths, tgt_lengths)
    if len(g) != len(h):
        raise UserError(f"gold alignments {gold} have {len(g)} lines but hypothesis alignments {hyp} have {len(h)} lines")
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


# --------------------------------------------------------------------------------------
# Symmetrization
# --------------------------------------------------------------------------------------

# Koehn's order: horizontal/vertical neighbours first, then the diagonal ones.
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))

SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")


def intersection(forward: Iterable[Link], reverse: Iterable[Link]) -> Links:
    """Links present in both directional alignments (high precision)."""
    return set(forward) & set(reverse)


def union(forward: Iterable[Link], reverse: Iterable[Link]) -> Links:
    """Links present in either directional alignment (high recall)."""
    return set(forward) | set(reverse)


def _grow_diag(forward: Links, reverse: Links) -> tuple[Links, set[int], set[int]]:
    """GROW-DIAG of Koehn et al. (2005): grow the intersection towards neighbouring union points.

    Scans the alignment matrix row by row (source position outer, target inner), seeing points
    added earlier in the same scan, and repeats until a scan adds nothing. A neighbour of an
    aligned point (8-neighbourhood) is added if it is in the union and its source or its target
    word is still unaligned.
    """
    uni = forward | reverse
    alignment = forward & reverse
    src_aligned = {i for i, _ in alignment}
    tgt_aligned = {j for _, j in alignment}
    if not uni:
        return alignment, src_aligned, tgt_aligned
    n_src = max(i for i, _ in uni) + 1
    n_tgt = max(j for _, j in uni) + 1
    added = True
    while added:
        added = False
        for i in range(n_src):
            for j in range(n_tgt):
                if (i, j) not in alignment:
                    continue
                for di, dj in _NEIGHBOURS:
                    ni, nj = i + di, j + dj
                    if (ni not in src_aligned or nj not in tgt_aligned) and (ni, nj) in uni:
                        alignment.add((ni, nj))
                        src_aligned.add(ni)
                        tgt_aligned.add(nj)
                        added = True
    return alignment, src_aligned, tgt_aligned


def _final(alignment: Links, src_aligned: set[int], tgt_aligned: set[int], direction: Links, both: bool) -> None:
    """FINAL / FINAL-AND: add links of ``direction`` (in (i, j) order) whose words are unaligned.

    FINAL needs the source *or* the target word unaligned, FINAL-AND both.
    """
    for i, j in sorted(direction):
        if (i, j) in alignment:
            continue
        free_i, free_j = i not in src_aligned, j not in tgt_aligned
        if (free_i and free_j) if both else (free_i or free_j):
            alignment.add((i, j))
            src_aligned.add(i)
            tgt_aligned.add(j)


def grow_diag(forward: Iterable[Link], reverse: Iterable[Link]) -> Links:
    """GROW-DIAG (Koehn et al. 2005) without a final step."""
    return _grow_diag(set(forward), set(reverse))[0]


def grow_diag_final(forward: Iterable[Link], reverse: Iterable[Link]) -> Links:
    """GROW-DIAG-FINAL: GROW-DIAG, then FINAL(forward), then FINAL(reverse)."""
    forward, reverse = set(forward), set(reverse)
    alignment, sa, ta = _grow_diag(forward, reverse)
    _final(alignment, sa, ta, forward, both=False)
    _final(alignment, sa, ta, reverse, both=False)
    return alignment


def grow_diag_final_and(forward: Iterable[Link], reverse: Iterable[Link]) -> Links:
    """GROW-DIAG-FINAL-AND (Koehn et al. 2005, "Edinburgh System Description for the 2005 IWSLT").

    Start from the intersection, GROW-DIAG towards union points, then FINAL-AND(forward) and
    FINAL-AND(reverse): add a remaining directional link only if *both* its words are still
    unaligned. ``forward`` is the source→target direction (each target word has at most one
    source word), ``reverse`` the target→source one; the final steps take ``forward`` first.
    """
    forward, reverse = set(forward), set(reverse)
    alignment, sa, ta = _grow_diag(forward, reverse)
    _final(alignment, sa, ta, forward, both=True)
    _final(alignment, sa, ta, reverse, both=True)
    return alignment


def symmetrize(forward: Iterable[Link], reverse: Iterable[Link], method: str = "grow-diag-final-and") -> Links:
    """Combine two directional alignments with one of :data:`SYMMETRIZATIONS`."""
    functions = {
        "intersection": intersection,
        "union": union,
        "grow-diag": grow_diag,
        "grow-diag-final": grow_diag_final,
        "grow-diag-final-and": grow_diag_final_and,
    }
    if method not in functions:
        raise UserError(f"unknown symmetrization {method!r}; choose one of {', '.join(SYMMETRIZATIONS)}")
    return functions[method](forward, reverse)


# --------------------------------------------------------------------------------------
# Alignments from attention
# --------------------------------------------------------------------------------------

ATTENTION_METHODS = ("argmax", "threshold")


def _to_numpy(weights) -> np.ndarray:
    if hasattr(weights, "detach"):
        weights = weights.detach().float().cpu().numpy()
    return np.asarray(weights, dtype=np.float64)


def alignment_from_attention(weights, method: str = "argmax", threshold: float = 0.5) -> Links:
    """Links ``(i, j)`` read off an attention matrix ``weights`` (T, S): row j = target, column i = source.

    ``argmax``: every target position j links to its most attended source position (the first
    one on ties). ``threshold``: every (i, j) with ``weights[j, i] >= threshold``.
    ``weights`` is a NumPy array or a tensor (any device, detached here).
    """
    w = _to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"attention weights must be (T, S), got shape {w.shape}")
    if method == "argmax":
        if w.shape[1] == 0:
            return set()
        return {(int(i), j) for j, i in enumerate(w.argmax(axis=1))}
    if method == "threshold":
        js, is_ = np.nonzero(w >= threshold)
        return {(int(i), int(j)) for j, i in zip(js, is_)}
    raise UserError(f"unknown attention alignment method {method!r}; choose one of {', '.join(ATTENTION_METHODS)}")


def average_heads(cross_attention: Sequence[torch.Tensor], layer: int | None = None, head: int | None = None) -> torch.Tensor:
    """One (B, T, S) attention from a list of per-layer (B, H, T, S) tensors.

    ``layer``/``head`` pick one decoder layer / head (negative values count from the end);
    ``None`` averages over all layers / heads.
    """
    if not cross_attention:
        raise ValueError("no cross-attention weights (call the model with need_weights=True)")
    n_layers, n_heads = len(cross_attention), cross_attention[0].size(1)
    if layer is not None:
        if not -n_layers <= layer < n_layers:
            raise UserError(f"alignment layer {layer} out of range: the model has {n_layers} decoder layers")
        layers = [cross_attention[layer]]
    else:
        layers = list(cross_attention)
    if head is not None:
        if not -n_heads <= head < n_heads:
            raise UserError(f"alignment head {head} out of range: the model has {n_heads} heads")
        per_layer = [w[:, head] for w in layers]
    else:
        per_layer = [w.mean(dim=1) for w in layers]
    return torch.stack(per_layer).mean(dim=0)


def extract_alignments(
    model,
    batch,
    layer: int | None = None,
    head: int | None = None,
    method: str = "argmax",
    threshold: float = 0.5,
) -> list[Links]:
    """Subword links per sentence from the cross-attention when force-decoding the reference.

    Runs ``model(batch, need_weights=True)`` in eval mode without gradients (restoring the
    model's mode), picks/averages layers and heads with :func:`average_heads` and reads links with
    :func:`alignment_from_attention`. Rows are target positions of ``batch.tgt_out`` (the token
    each decoder position predicts); the EOS row, the source EOS column and padding are cut off
    *before* links are chosen, so with ``argmax`` each target subword gets exactly one link to a
    real source subword. Links are ``(source piece, target piece)``, 0-indexed, without BOS/EOS.
    """
    if batch.tgt_out is None:
        raise ValueError("extract_alignments needs a batch with reference targets")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(batch, need_weights=True)
    finally:
        model.train(was_training)
    attn = average_heads(out.cross_attention, layer, head).float().cpu()  # (B, T, S)
    src_lens = batch.src.ne(PAD).sum(dim=1).tolist()
    tgt_lens = batch.tgt_out.ne(PAD).sum(dim=1).tolist()
    links = []
    for b in range(attn.size(0)):
        n_src, n_tgt = max(src_lens[b] - 1, 0), max(tgt_lens[b] - 1, 0)  # minus EOS
        links.append(alignment_from_attention(attn[b, :n_tgt, :n_src], method, threshold))
    return links
