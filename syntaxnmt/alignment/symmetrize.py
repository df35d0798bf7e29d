"""Symmetrization of two directional alignments (Och & Ney 2003; Koehn et al. 2003): intersection,
union, grow-diag, grow-diag-final and grow-diag-final-and (gdfa)."""

from __future__ import annotations

from typing import Iterable

from syntaxnmt.data.links import Link, Links
from syntaxnmt.errors import UserError

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

SHORT_NAMES = {"gdfa": "grow-diag-final-and", "gdf": "grow-diag-final", "gd": "grow-diag"}


def symmetrization(name: str) -> str:
    """A symmetrization heuristic by name (``gdfa``, ``gdf`` and ``gd`` abbreviate the grow-diag ones)."""
    method = SHORT_NAMES.get(name, name)
    if method not in SYMMETRIZATIONS:
        raise UserError(f"unknown symmetrization {name!r}; choose one of {', '.join(SYMMETRIZATIONS)} (or gdfa, gdf, gd)")
    return method
