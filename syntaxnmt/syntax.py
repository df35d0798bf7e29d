"""Relations between the tokens of a dependency tree, computed without a loop over token pairs.

Trees use the CoNLL-U convention: ``heads[k-1]`` is the 1-based head of token ``k``, 0 for a root.
Every root hangs from one virtual ROOT node, so paths between tokens of different root subtrees
(a sentence-final '.' attached to ROOT, several sentences on one line) pass through ROOT.

The path between two tokens always climbs from ``i`` to their lowest common ancestor and then
descends to ``j``: it is ``'U' * up + 'D' * down``, and the tree distance is ``up + down``. For
"I think this is a good idea ." with heads [2, 0, 4, 2, 7, 7, 4, 0], from "is": I=UD (2),
think=U (1), this=D (1), a=DD (2), idea=D (1), .=UUD (3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np


def ancestors(heads: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Ancestor-or-self matrix and depths of the nodes ``0..n`` (node 0 is the virtual ROOT).

    Returns ``(anc, depth)``: ``anc[k, a]`` is True when node ``a`` lies on the path from node ``k``
    up to ROOT (``k`` included), ``depth[k]`` the number of edges from ``k`` to ROOT. One
    vectorized step per tree level: all nodes climb one edge at a time.
    """
    parent = np.concatenate([[0], np.asarray(heads, dtype=np.int64)])
    n = len(parent)
    if n > 1 and (parent[1:].min() < 0 or parent[1:].max() >= n):
        raise ValueError(f"head out of range in {list(heads)}")
    anc = np.eye(n, dtype=bool)
    depth = np.zeros(n, dtype=np.int64)
    nodes, current = np.arange(n), np.arange(n)
    for _ in range(n):
        climbing = current != 0
        if not climbing.any():
            return anc, depth
        depth += climbing
        current = np.where(climbing, parent[current], 0)
        anc[nodes, current] = True
    raise ValueError(f"the heads {list(heads)} contain a cycle")


def tree_moves(heads: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Up and down moves (two n×n integer arrays) of the tree path from token i to token j."""
    anc, depth = ancestors(heads)
    tok = anc[1:]  # (n, n+1): ancestors of the real tokens
    common = tok[:, None, :] & tok[None, :, :]  # (n, n, n+1)
    lca_depth = np.where(common, depth[None, None, :], -1).max(axis=-1)
    up = depth[1:, None] - lca_depth
    down = depth[None, 1:] - lca_depth
    return up, down


def tree_distances(heads: Sequence[int]) -> np.ndarray:
    """n×n number of edges on the tree path between tokens i and j (0 on the diagonal)."""
    up, down = tree_moves(heads)
    return up + down


def tree_paths(heads: Sequence[int]) -> np.ndarray:
    """n×n strings of U(p)/D(own) moves from token i to token j ("" on the diagonal)."""
    up, down = tree_moves(heads)
    return np.char.add(np.char.multiply("U", up), np.char.multiply("D", down)).astype(object)


# --- relation vocabularies -------------------------------------------------------------------
# Tree relations reserve three ids for the subword level: padding, a special token (EOS), and
# two different pieces of the same word.
REL_PAD, REL_SPECIAL, REL_SAME_WORD = 0, 1, 2
N_SPECIAL = 3


def linear_relation_ids(n: int, k: int) -> np.ndarray:
    """Shaw et al. (2018): clip(j - i, -k, k) + k, an n×n array of ids in [0, 2k]."""
    pos = np.arange(n)
    return np.clip(pos[None, :] - pos[:, None], -k, k) + k


def n_linear_relations(k: int) -> int:
    return 2 * k + 1


def tree_distance_ids(up: np.ndarray, down: np.ndarray, max_distance: int) -> np.ndarray:
    """Distance clipped to ``max_distance``, offset by the special ids."""
    return np.minimum(up + down, max_distance) + N_SPECIAL


def n_tree_distance_relations(max_distance: int) -> int:
    return N_SPECIAL + max_distance + 1


def _triangle(m: np.ndarray | int) -> np.ndarray | int:
    return m * (m + 1) // 2


def tree_path_ids(up: np.ndarray, down: np.ndarray, max_length: int) -> np.ndarray:
    """Ids of the paths ``U^up D^down``, offset by the special ids.

    Paths of at most ``max_length`` moves each get their own id (ordered by length, then by the
    number of D moves). Longer paths share a bucket per their first ``max_length`` moves — that
    is, per ``min(up, max_length)`` — written ``path[:max_length] + '+'`` in the vocabulary.
    """
    length = up + down
    exact = _triangle(length) + down
    overflow = _triangle(max_length + 1) + np.minimum(up, max_length)
    return np.where(length <= max_length, exact, overflow) + N_SPECIAL


def path_vocabulary(max_length: int) -> list[str]:
    """The strings behind the ids of :func:`tree_path_ids` (specials first)."""
    vocab = ["<pad>", "<special>", "<same-word>"]
    for length in range(max_length + 1):
        vocab += ["U" * (length - d) + "D" * d for d in range(length + 1)]
    vocab += [("U" * u + "D" * (max_length - u)) + "+" for u in range(max_length + 1)]
    return vocab


def n_tree_path_relations(max_length: int) -> int:
    return len(path_vocabulary(max_length))


def subword_relations(word_rel: np.ndarray, word_of_piece: np.ndarray) -> np.ndarray:
    """Expand word-level relation ids to pieces.

    ``word_of_piece[p]`` is the word index of piece ``p``, or -1 for a special token (EOS).
    Two pieces of one word get ``REL_SAME_WORD``, a piece and itself keeps the word's diagonal
    relation, anything involving a special token gets ``REL_SPECIAL``.
    """
    w = np.asarray(word_of_piece)
    safe = np.maximum(w, 0)
    rel = word_rel[safe[:, None], safe[None, :]]
    same = (w[:, None] == w[None, :]) & ~np.eye(len(w), dtype=bool)
    rel = np.where(same, REL_SAME_WORD, rel)
    special = (w[:, None] < 0) | (w[None, :] < 0)
    return np.where(special, REL_SPECIAL, rel)


# --- the relation kinds ------------------------------------------------------------------------


class SentenceTree:
    """One sentence as relation kinds see it: the word index of every source position (-1 for the
    special EOS) and the CoNLL-U heads of its words; tree moves are computed once, on demand."""

    def __init__(self, word_of_piece: np.ndarray, heads: np.ndarray):
        self.word_of_piece, self.heads = np.asarray(word_of_piece), np.asarray(heads)
        self._moves: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def moves(self) -> tuple[np.ndarray, np.ndarray]:
        if self._moves is None:
            self._moves = tree_moves(self.heads)
        return self._moves

    def __len__(self) -> int:
        return len(self.word_of_piece)


@dataclass(frozen=True)
class RelationKind:
    """A relation between source positions that relation-aware heads embed (Shaw et al. 2018).

    ``n_ids(syn)`` is the size of its embedding table and ``ids(sentence, syn)`` the (S, S) ids of
    one sentence (its pieces and EOS), both given ``model.syntax`` (for the clipping parameters).
    """

    name: str
    needs_parse: bool
    n_ids: Callable[[Any], int]
    ids: Callable[[SentenceTree, Any], np.ndarray]
    description: str


RELATION_KINDS: dict[str, RelationKind] = {
    kind.name: kind
    for kind in (
        RelationKind(
            "linear", False,
            lambda syn: n_linear_relations(syn.max_relative_position),
            lambda sent, syn: linear_relation_ids(len(sent), syn.max_relative_position),
            "relative position j - i clipped to ±max_relative_position (Shaw et al. 2018)",
        ),
        RelationKind(
            "tree_distance", True,
            lambda syn: n_tree_distance_relations(syn.max_tree_distance),
            lambda sent, syn: subword_relations(tree_distance_ids(*sent.moves, syn.max_tree_distance), sent.word_of_piece),
            "number of edges on the tree path between the two words, clipped to max_tree_distance",
        ),
        RelationKind(
            "tree_path", True,
            lambda syn: n_tree_path_relations(syn.max_path_length),
            lambda sent, syn: subword_relations(tree_path_ids(*sent.moves, syn.max_path_length), sent.word_of_piece),
            "the U(p)/D(own) moves of the tree path, bucketed beyond max_path_length moves",
        ),
    )
}


def bie_tags(word_of_piece: Sequence[int]) -> np.ndarray:
    """Subword position tags (Sennrich & Haddow 2016): B(egin), I(nside), E(nd) of a multi-piece
    word, O for a one-piece word; ids 2..5 (0 = padding, 1 = special token)."""
    w = np.asarray(word_of_piece)
    prev_same = np.concatenate([[False], w[1:] == w[:-1]])
    next_same = np.concatenate([w[:-1] == w[1:], [False]])
    tags = np.select([prev_same & next_same, next_same, prev_same], [3, 2, 4], default=5)
    return np.where(w < 0, 1, tags)


BIE_VOCAB = ["<pad>", "<special>", "B", "I", "E", "O"]
