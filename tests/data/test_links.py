"""Tests for syntaxnmt.data.links: Pharaoh I/O, AER, word/subword projection, the shared gold sets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syntaxnmt.data.links import AERResult, aer, aer_files, aer_from_statistics, aer_statistics, format_links, parse_links, read_alignments, read_bitext, subwords_to_words, word_ids_from_pieces, words_to_subwords, write_alignments
from syntaxnmt.errors import UserError

# Real data: ${SYNTAXNMT_DATA}, by default ../shared/data beside the repository (as in the recipes).
SHARED = Path(os.environ.get("SYNTAXNMT_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data"))


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


def test_aer_statistics_sum_to_the_corpus_aer():
    """The sentence counts behind aer(): [|A|, |S|, |A∩S|, |A∩P|] per sentence, summed for any subset."""
    s1 = {(0, 0), (1, 1)}
    p1 = s1 | {(1, 2), (2, 2)}
    a1 = {(0, 0), (1, 2), (2, 3)}
    sure, possible, hyp = [s1, {(0, 0)}, set(), {(1, 1)}], [p1, {(0, 0)}, set(), set()], [a1, {(0, 0)}, set(), {(0, 1)}]
    stats = aer_statistics(sure, possible, hyp)
    assert stats.tolist() == [[3, 2, 1, 2], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]]
    for subset in ([0], [0, 1], [2], [0, 1, 2, 3], [1, 3]):
        expected = aer([sure[i] for i in subset], [possible[i] for i in subset], [hyp[i] for i in subset]).aer
        assert aer_from_statistics(stats[subset].sum(0)) == pytest.approx(100 * expected)
    with pytest.raises(ValueError):
        aer_statistics([set()], [set()], [])


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
