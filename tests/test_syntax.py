"""Tree relations: the thesis example, and agreement with breadth-first search on random trees."""

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syntaxnmt.syntax import N_SPECIAL, REL_SAME_WORD, REL_SPECIAL, bie_tags, linear_relation_ids, path_vocabulary, subword_relations, tree_distance_ids, tree_distances, tree_moves, tree_path_ids, tree_paths

WORDS = "I think this is a good idea .".split()
HEADS = [2, 0, 4, 2, 7, 7, 4, 0]


def test_thesis_example_distances_and_paths_from_is():
    d, p = tree_distances(HEADS), tree_paths(HEADS)
    i = WORDS.index("is")
    assert dict(zip(WORDS, d[i].tolist())) == {"I": 2, "think": 1, "this": 1, "is": 0, "a": 2, "good": 2, "idea": 1, ".": 3}
    paths = dict(zip(WORDS, p[i].tolist()))
    assert {w: paths[w] for w in ("I", "think", "this", "a", "idea", ".")} == {"I": "UD", "think": "U", "this": "D", "a": "DD", "idea": "D", ".": "UUD"}
    assert paths["is"] == ""


def test_diagonal_and_symmetry():
    d, p = tree_distances(HEADS), tree_paths(HEADS)
    assert d.shape == (8, 8) and d.dtype.kind == "i"
    assert (np.diag(d) == 0).all() and all(s == "" for s in np.diag(p))
    assert (d == d.T).all()
    # the reverse path swaps U and D and reverses the order
    for i in range(8):
        for j in range(8):
            assert p[j, i] == p[i, j][::-1].translate(str.maketrans("UD", "DU"))


def bfs_paths(heads):
    """Reference: BFS over the undirected tree with a virtual ROOT node 0."""
    n = len(heads)
    adj = {v: [] for v in range(n + 1)}
    for k, h in enumerate(heads, start=1):
        adj[k].append((h, "U"))
        adj[h].append((k, "D"))
    out = np.empty((n, n), dtype=object)
    for s in range(1, n + 1):
        seen = {s: ""}
        queue = deque([s])
        while queue:
            v = queue.popleft()
            for u, move in adj[v]:
                if u not in seen:
                    seen[u] = seen[v] + move
                    queue.append(u)
        for t in range(1, n + 1):
            out[s - 1, t - 1] = seen[t]
    return out


@st.composite
def random_trees(draw):
    n = draw(st.integers(1, 25))
    order = draw(st.permutations(list(range(1, n + 1))))
    heads = [0] * n
    n_roots = draw(st.integers(1, min(3, n)))
    for pos, node in enumerate(order):
        if pos >= n_roots:  # attach to an earlier node: always a forest, no cycle
            heads[node - 1] = order[draw(st.integers(0, pos - 1))]
    return heads


@settings(max_examples=150, deadline=None)
@given(random_trees())
def test_paths_and_distances_agree_with_bfs(heads):
    ref = bfs_paths(heads)
    paths, dist = tree_paths(heads), tree_distances(heads)
    assert (paths == ref).all()
    assert (dist == np.vectorize(len)(ref)).all()


def test_bad_trees_raise():
    with pytest.raises(ValueError, match="cycle"):
        tree_distances([2, 1])
    with pytest.raises(ValueError, match="out of range"):
        tree_distances([0, 5])


def test_linear_relation_ids_clip():
    ids = linear_relation_ids(5, 2)
    assert ids[0].tolist() == [2, 3, 4, 4, 4] and ids[4].tolist() == [0, 0, 0, 1, 2]


def test_path_ids_match_vocabulary_and_buckets():
    vocab = path_vocabulary(3)
    up, down = tree_moves(HEADS)
    ids = tree_path_ids(up, down, 3)
    strings = tree_paths(HEADS)
    for i in range(8):
        for j in range(8):
            s = strings[i, j]
            assert vocab[ids[i, j]] == (s if len(s) <= 3 else s[:3] + "+")
    assert len(set(vocab)) == len(vocab)
    # long paths share a bucket per their first moves
    long_up, long_down = np.array([[4, 3]]), np.array([[1, 2]])  # UUUUD and UUUDD
    a, b = tree_path_ids(long_up, long_down, 3)[0]
    assert vocab[a] == vocab[b] == "UUU+"


def test_distance_ids_clip_and_offset():
    up, down = tree_moves(HEADS)
    ids = tree_distance_ids(up, down, 2)
    assert ids.min() == N_SPECIAL and ids.max() == N_SPECIAL + 2


def test_subword_expansion_same_word_and_special():
    word_rel = np.arange(9).reshape(3, 3) + N_SPECIAL
    w = np.array([0, 1, 1, 2, -1])  # word 1 has two pieces; the last position is EOS
    rel = subword_relations(word_rel, w)
    assert rel[1, 2] == rel[2, 1] == REL_SAME_WORD
    assert rel[1, 1] == word_rel[1, 1]  # a piece and itself keep the diagonal relation
    assert rel[0, 2] == word_rel[0, 1] and rel[3, 1] == word_rel[2, 1]  # pieces inherit their word's relation
    assert (rel[4] == REL_SPECIAL).all() and (rel[:, 4] == REL_SPECIAL).all()


def test_bie_tags():
    # words: 0 (one piece), 1 (three pieces), 2 (two pieces), EOS
    assert bie_tags([0, 1, 1, 1, 2, 2, -1]).tolist() == [5, 2, 3, 4, 2, 4, 1]
