"""Tests for word alignments (syntaxnmt.alignment): Pharaoh I/O, AER, projection, symmetrization, attention."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from syntaxnmt.alignment import (
    AERResult,
    aer,
    aer_files,
    alignment_from_attention,
    average_heads,
    extract_alignments,
    format_links,
    grow_diag,
    grow_diag_final,
    grow_diag_final_and,
    intersection,
    parse_links,
    read_alignments,
    read_bitext,
    subwords_to_words,
    symmetrize,
    union,
    word_ids_from_pieces,
    words_to_subwords,
    write_alignments,
)
from syntaxnmt.errors import UserError
from syntaxnmt.synthetic import generate_pairs

# Real data: ${SYNTAXNMT_DATA}, by default ../shared/data beside the repository (as in the recipes).
SHARED = Path(os.environ.get("SYNTAXNMT_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


# ---- parsing and files ----------------------------------------------------------------


def test_parse_sure_and_possible():
    sure, possible = parse_links("0-0 1p2  2-1\t3p3")
    assert sure == {(0, 0), (2, 1)}
    assert possible == {(0, 0), (1, 2), (2, 1), (3, 3)}
    assert sure <= possible


def test_parse_one_indexed():
    assert parse_links("1-1 2p3", one_indexed=True) == ({(0, 0)}, {(0, 0), (1, 2)})
    with pytest.raises(UserError, match="index 0"):
        parse_links("0-1", one_indexed=True)


def test_parse_link_both_sure_and_possible_is_sure():
    assert parse_links("1p1 1-1") == ({(1, 1)}, {(1, 1)})


def test_parse_empty_line():
    assert parse_links("") == (set(), set())
    assert parse_links("   ") == (set(), set())


@pytest.mark.parametrize("bad", ["1", "1-", "a-b", "1:2", "1-2-3", "1?2", "1 - 2"])
def test_parse_malformed(bad):
    with pytest.raises(UserError, match="gold.txt:7: malformed"):
        parse_links(bad, where="gold.txt:7")


def test_parse_negative():
    with pytest.raises(UserError, match="x:3: negative index"):
        parse_links("-1-2", where="x:3")
    with pytest.raises(UserError, match="negative"):
        parse_links("1--2")


def test_parse_out_of_range():
    assert parse_links("2-3", src_len=3, tgt_len=4)[0] == {(2, 3)}
    with pytest.raises(UserError, match="source index out of range"):
        parse_links("3-0", src_len=3, tgt_len=4)
    with pytest.raises(UserError, match="target index out of range"):
        parse_links("0p4", src_len=3, tgt_len=4)
    with pytest.raises(UserError, match="target index out of range"):
        parse_links("1-4", one_indexed=True, src_len=3, tgt_len=3)


def test_read_alignments_names_file_and_line(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_text("1-1 2p2\n\n1-x\n")
    with pytest.raises(UserError, match=r"gold\.txt:3: malformed alignment link '1-x'"):
        read_alignments(path, one_indexed=True)
    path.write_text("1-1 2p2\n\n3-1\n")
    with pytest.raises(UserError, match=r"gold\.txt:3: .*source index out of range"):
        read_alignments(path, one_indexed=True, src_lengths=[2, 0, 2], tgt_lengths=[2, 0, 2])
    with pytest.raises(UserError, match="3 alignment lines but 2 source"):
        read_alignments(path, one_indexed=True, src_lengths=[2, 2])
    gold = read_alignments(path, one_indexed=True, src_lengths=[2, 0, 3], tgt_lengths=[2, 0, 1])
    assert gold == [({(0, 0)}, {(0, 0), (1, 1)}), (set(), set()), ({(2, 0)}, {(2, 0)})]


def test_write_read_round_trip(tmp_path):
    links = [{(2, 1), (0, 0), (1, 3)}, set(), {(10, 2)}]
    path = tmp_path / "sub" / "hyp.align"
    write_alignments(path, links)
    assert path.read_text() == "0-0 1-3 2-1\n\n10-2\n"
    assert [s for s, _ in read_alignments(path)] == links
    assert format_links({(1, 0), (0, 1)}) == "0-1 1-0"


def test_read_bitext(tmp_path):
    path = tmp_path / "bi.txt"
    path.write_text("a b ||| c\nd ||| e f\n")
    assert read_bitext(path) == ([["a", "b"], ["d"]], [["c"], ["e", "f"]])
    path.write_text("a b c\n")
    with pytest.raises(UserError, match="bi.txt:1"):
        read_bitext(path)


# ---- AER --------------------------------------------------------------------------------


def test_aer_perfect():
    s = [{(0, 0), (1, 1)}, {(0, 1)}]
    p = [s[0] | {(1, 2)}, {(0, 1)}]
    r = aer(s, p, s)
    assert r == AERResult(0.0, 1.0, 1.0)
    # Any hypothesis between S and P is also perfect (AER 0, precision 1) though recall stays 1.
    assert aer(s, p, p).aer == 0.0


def test_aer_hand_computed():
    s1 = {(0, 0), (1, 1)}
    p1 = s1 | {(1, 2), (2, 2)}
    a1 = {(0, 0), (1, 2), (2, 3)}
    # |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 2
    r = aer([s1], [p1], [a1])
    assert r.aer == pytest.approx(1 - 3 / 5)
    assert r.precision == pytest.approx(2 / 3)
    assert r.recall == pytest.approx(1 / 2)
    # A second, perfect sentence: counts are summed over the corpus (2/7), not averaged (0.2).
    r2 = aer([s1, {(0, 0)}], [p1, {(0, 0)}], [a1, {(0, 0)}])
    assert r2.aer == pytest.approx(1 - 5 / 7)
    assert r2.precision == pytest.approx(3 / 4)
    assert r2.recall == pytest.approx(2 / 3)


def test_aer_possible_given_without_sure():
    # P is taken as P ∪ S: passing only the ipj links gives the same result.
    s, p_only, a = [{(0, 0)}], [{(1, 1)}], [{(0, 0), (1, 1)}]
    assert aer(s, p_only, a) == aer(s, [s[0] | p_only[0]], a) == AERResult(0.0, 1.0, 1.0)


def test_aer_empty():
    assert aer([set()], [set()], [set()]) == AERResult(0.0, 1.0, 1.0)
    assert aer([{(0, 0)}], [{(0, 0)}], [set()]) == AERResult(1.0, 1.0, 0.0)
    with pytest.raises(ValueError):
        aer([set()], [set()], [])


def test_aer_files(tmp_path):
    gold, hyp = tmp_path / "gold", tmp_path / "hyp"
    gold.write_text("1-1 2-2 2p3 3p3\n1-1\n")  # 1-indexed
    hyp.write_text("0-0 1-2 2-3\n0-0\n")
    r = aer_files(gold, hyp, one_indexed_gold=True)
    assert r.aer == pytest.approx(1 - 5 / 7)
    hyp.write_text("0-0\n")
    with pytest.raises(UserError, match=r"gold .* 2 lines but hypothesis .*hyp have 1 lines"):
        aer_files(gold, hyp, one_indexed_gold=True)
    hyp.write_text("0-0 1-2 2-3\n0-0\n")
    with pytest.raises(UserError, match=r"gold:1: possible \(ipj\) links in a hypothesis"):
        aer_files(hyp, gold)
    with pytest.raises(UserError, match=r"hyp:1: .*target index out of range"):
        aer_files(gold, hyp, one_indexed_gold=True, src_lengths=[3, 1], tgt_lengths=[3, 1])


# ---- words <-> subwords -----------------------------------------------------------------


def test_word_ids_from_pieces():
    assert word_ids_from_pieces(["▁the", "▁do", "g", "s", "▁run", "."]) == [0, 1, 1, 1, 2, 2]
    assert word_ids_from_pieces(["x", "y", "▁z"]) == [0, 0, 1]  # first piece without ▁
    assert word_ids_from_pieces(["▁", "abc", "▁d"]) == [0, 0, 1]  # a lone ▁ starts a word
    assert word_ids_from_pieces([]) == []


def test_words_to_subwords_and_back():
    src_ids = word_ids_from_pieces(["▁a", "b", "▁c"])  # [0, 0, 1]
    tgt_ids = word_ids_from_pieces(["▁x", "▁y", "z", "w"])  # [0, 1, 1, 1]
    words = {(0, 1), (1, 0)}
    pieces = words_to_subwords(words, src_ids, tgt_ids)
    assert pieces == {(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3), (2, 0)}
    assert subwords_to_words(pieces, src_ids, tgt_ids) == words
    # any one piece link is enough for the word link
    assert subwords_to_words({(1, 3)}, src_ids, tgt_ids) == {(0, 1)}
    with pytest.raises(UserError, match="word link 2-0"):
        words_to_subwords({(2, 0)}, src_ids, tgt_ids)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=5),
    st.lists(st.integers(1, 3), min_size=1, max_size=5),
    st.data(),
)
def test_projection_round_trip(src_sizes, tgt_sizes, data):
    src_ids = [w for w, n in enumerate(src_sizes) for _ in range(n)]
    tgt_ids = [w for w, n in enumerate(tgt_sizes) for _ in range(n)]
    pairs = st.tuples(st.integers(0, len(src_sizes) - 1), st.integers(0, len(tgt_sizes) - 1))
    words = data.draw(st.sets(pairs, max_size=8))
    pieces = words_to_subwords(words, src_ids, tgt_ids)
    assert len(pieces) == sum(src_sizes[i] * tgt_sizes[j] for i, j in words)
    assert subwords_to_words(pieces, src_ids, tgt_ids) == words


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


# ---- attention ------------------------------------------------------------------------


def test_alignment_from_attention_argmax_and_threshold():
    w = np.array(
        [  # rows: target 0..2, columns: source 0..3
            [0.7, 0.1, 0.1, 0.1],
            [0.1, 0.1, 0.2, 0.6],
            [0.0, 0.5, 0.5, 0.0],
        ]
    )
    assert alignment_from_attention(w) == {(0, 0), (3, 1), (1, 2)}  # ties: first
    assert alignment_from_attention(torch.tensor(w), "threshold", 0.5) == {(0, 0), (3, 1), (1, 2), (2, 2)}
    assert alignment_from_attention(w, "threshold", 0.65) == {(0, 0)}
    assert alignment_from_attention(np.zeros((2, 0))) == set()
    with pytest.raises(UserError, match="unknown attention"):
        alignment_from_attention(w, "max")
    with pytest.raises(ValueError):
        alignment_from_attention(w[0])


def test_average_heads():
    a = torch.rand(2, 3, 4, 5)
    b = torch.rand(2, 3, 4, 5)
    assert torch.allclose(average_heads([a, b]), (a.mean(1) + b.mean(1)) / 2)
    assert torch.equal(average_heads([a, b], layer=1, head=2), b[:, 2])
    assert torch.allclose(average_heads([a, b], layer=-2), a.mean(1))
    assert torch.allclose(average_heads([a, b], head=0), (a[:, 0] + b[:, 0]) / 2)
    with pytest.raises(UserError, match="layer 2 out of range"):
        average_heads([a, b], layer=2)
    with pytest.raises(UserError, match="head 3 out of range"):
        average_heads([a, b], head=3)


def test_extract_alignments_tiny_transformer():
    from syntaxnmt.batches import make_batch
    from syntaxnmt.config import ModelConfig
    from syntaxnmt.model import build_model

    torch.manual_seed(0)
    vocab = 20
    model = build_model(ModelConfig(d_model=16, heads=2, ffn_dim=32, enc_layers=1, dec_layers=1), vocab, vocab)
    model.train()
    src = [[5, 6, 7, 8], [9, 10], [11]]
    tgt = [[12, 13, 14], [15, 16, 17, 18, 19], []]
    batch = make_batch(src, tgt, range(3))
    links = extract_alignments(model, batch)
    assert model.training  # mode restored
    assert len(links) == 3
    for s, t, sent in zip(src, tgt, links):
        assert all(0 <= i < len(s) and 0 <= j < len(t) for i, j in sent)
        assert sorted(j for _, j in sent) == list(range(len(t)))  # one link per target subword
    assert links[2] == set()
    for method, kwargs in (("threshold", {"threshold": 0.0}), ("argmax", {"layer": 0, "head": 1})):
        for s, t, sent in zip(src, tgt, extract_alignments(model, batch, method=method, **kwargs)):
            assert all(0 <= i < len(s) and 0 <= j < len(t) for i, j in sent)
    # threshold 0 keeps every real (source, target) pair and nothing involving EOS
    full = extract_alignments(model, batch, method="threshold", threshold=0.0)
    assert full[0] == {(i, j) for i in range(4) for j in range(3)}
    # the links come from the attention rows of tgt_out and columns of src without EOS
    with torch.no_grad():
        model.eval()
        attn = average_heads(model(batch, need_weights=True).cross_attention)
    assert links[1] == {(int(attn[1, j, :2].argmax()), j) for j in range(5)}


# ---- the shared gold sets ---------------------------------------------------------------


def _shared(rel: str) -> Path:
    path = SHARED / rel
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing (shared data is required in CI)")
        pytest.skip(f"shared data not found at {path} (set SYNTAXNMT_DATA)")
    return path


@pytest.mark.parametrize(
    "gold, bitext, n_lines, n_sure, n_possible",
    [
        ("alignment/enfr-hansards/enfr.gold", "alignment/enfr-hansards/enfr.src-tgt", 447, 4038, 17438),
        ("alignment/roen/roen.gold", "alignment/roen/roen.src-tgt", 248, 6198, 6198),
    ],
)
def test_shared_gold_files(gold, bitext, n_lines, n_sure, n_possible):
    src, tgt = read_bitext(_shared(bitext))
    links = read_alignments(_shared(gold), one_indexed=True, src_lengths=[len(s) for s in src], tgt_lengths=[len(t) for t in tgt])
    assert len(links) == n_lines
    assert sum(len(s) for s, _ in links) == n_sure
    assert sum(len(p) for _, p in links) == n_possible
    assert all(s <= p for s, p in links)
    sure = [s for s, _ in links]
    assert aer(sure, [p for _, p in links], sure).aer == 0.0
