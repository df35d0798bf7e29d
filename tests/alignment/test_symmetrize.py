"""Tests for syntaxnmt.alignment.symmetrize: intersection, union and the grow-diag heuristics."""

from __future__ import annotations

import pytest

from syntaxnmt.alignment.symmetrize import grow_diag, grow_diag_final, grow_diag_final_and, intersection, symmetrize, union
from syntaxnmt.data.synthetic import generate_pairs
from syntaxnmt.errors import UserError

# ---- symmetrization ---------------------------------------------------------------------

# Hand example (source positions 0..5, target 0..3):
#   forward (each target word -> one source word): t0->s0, t3->s3
#   reverse (each source word -> one target word): s0->t0, s1->t1, s3->t0, s5->t3
FORWARD = {(0, 0), (3, 3)}
REVERSE = {(0, 0), (1, 1), (3, 0), (5, 3)}


def test_intersection_and_union():
    assert intersection(FORWARD, REVERSE) == {(0, 0)}
    assert union(FORWARD, REVERSE) == {(0, 0), (1, 1), (3, 0), (3, 3), (5, 3)}


def test_grow_diag_hand_example():
    # (1,1) is a diagonal neighbour of (0,0) and s1 is unaligned: grown. (3,0), (3,3), (5,3)
    # touch no aligned point: not grown.
    assert grow_diag(FORWARD, REVERSE) == {(0, 0), (1, 1)}


def test_grow_diag_final_and_hand_example():
    # FINAL-AND(forward): (3,3) has s3 and t3 unaligned -> added.
    # FINAL-AND(reverse): (3,0): s3 and t0 aligned -> no; (5,3): t3 now aligned -> no.
    assert grow_diag_final_and(FORWARD, REVERSE) == {(0, 0), (1, 1), (3, 3)}
    assert symmetrize(FORWARD, REVERSE) == {(0, 0), (1, 1), (3, 3)}
    # FINAL (or): (5,3) has s5 unaligned -> added as well; (3,0) still has both words aligned.
    assert grow_diag_final(FORWARD, REVERSE) == {(0, 0), (1, 1), (3, 3), (5, 3)}


def test_grow_chains_through_added_points():
    # Scanning (0,0) adds (0,1) (t1 unaligned) and its diagonal (1,1) (s1 unaligned); scanning the
    # new (0,1) then adds (1,2) (t2 unaligned). (3,3) is isolated and only FINAL-AND adds it.
    fwd = {(0, 0), (0, 1), (1, 2)}
    rev = {(0, 0), (1, 1), (3, 3)}
    assert grow_diag(fwd, rev) == {(0, 0), (0, 1), (1, 1), (1, 2)}
    assert grow_diag_final_and(fwd, rev) == {(0, 0), (0, 1), (1, 1), (1, 2), (3, 3)}


def test_grow_needs_an_unaligned_word():
    # (1,0) neighbours (0,0) but both s1 (via (1,1)) and t0 are already aligned.
    fwd = {(0, 0), (1, 1), (1, 0)}
    rev = {(0, 0), (1, 1)}
    assert grow_diag_final_and(fwd, rev) == {(0, 0), (1, 1)}
    assert symmetrize(fwd, rev, "union") == fwd


def test_symmetrize_properties_on_synthetic_gold():
    for pair in generate_pairs(20, seed=3):
        gold = set(pair.alignment)
        assert grow_diag_final_and(gold, gold) == gold
        fwd = {(i, j) for i, j in gold if j % 2 == 0}
        rev = {(i, j) for i, j in gold if i % 3 != 0}
        g = grow_diag_final_and(fwd, rev)
        assert intersection(fwd, rev) <= g <= union(fwd, rev)


def test_symmetrize_unknown_method():
    with pytest.raises(UserError, match="unknown symmetrization"):
        symmetrize(set(), set(), "grow")
