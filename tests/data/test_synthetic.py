"""Tests for the synthetic language pair (syntaxnmt.data.synthetic)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syntaxnmt.data.synthetic import ADJECTIVES, DETERMINERS, INTRANSITIVE_VERBS, LEXICON, MARKERS, MAX_LEN, NOUNS, POST_HEAD, PREPOSITIONS, TRANSITIVE_VERBS, SyntheticPair, generate_pair, generate_pairs, make_pair, to_conllu, write_corpus
from syntaxnmt.errors import UserError

UPOS = {"DET", "ADJ", "NOUN", "VERB", "ADP", "PRON", "PUNCT"}
DEPREL = {"root", "nsubj", "obj", "det", "amod", "case", "obl", "nmod", "acl:relcl", "punct"}


@pytest.fixture(scope="module")
def pairs() -> list[SyntheticPair]:
    return generate_pairs(3000, seed=7)


# ---- helpers ---------------------------------------------------------------------------


def children(pair: SyntheticPair) -> dict[int, list[int]]:
    """0-based token index -> 0-based indices of its dependents (-1 is the root)."""
    kids: dict[int, list[int]] = {i: [] for i in range(-1, len(pair.src))}
    for i, head in enumerate(pair.heads):
        kids[head - 1].append(i)
    return kids


def subtree(kids: dict[int, list[int]], i: int) -> list[int]:
    out = [i]
    for c in kids[i]:
        out.extend(subtree(kids, c))
    return out


def translation_position(pair: SyntheticPair) -> dict[int, int]:
    """Source index -> target index of its translation, read off the alignment."""
    pos: dict[int, int] = {}
    for i, j in pair.alignment:
        if pair.tgt[j] == LEXICON[pair.src[i]]:
            assert i not in pos, f"source word {i} translated twice"
            pos[i] = j
    return pos


def check_tree(pair: SyntheticPair) -> None:
    n = len(pair.src)
    assert len(pair.heads) == len(pair.upos) == len(pair.deprel) == n
    assert pair.heads.count(0) == 1
    assert all(0 <= h <= n and h != i + 1 for i, h in enumerate(pair.heads))
    for i in range(1, n + 1):  # following heads from any token reaches 0
        seen, k = set(), i
        while k != 0:
            assert k not in seen, f"cycle through token {k}"
            seen.add(k)
            k = pair.heads[k - 1]
    root = pair.heads.index(0)
    assert pair.deprel[root] == "root" and pair.upos[root] == "VERB"
    assert pair.src[-1] == "." and pair.deprel[-1] == "punct" and pair.heads[-1] == root + 1
    assert set(pair.upos) <= UPOS and set(pair.deprel) <= DEPREL


def check_alignment(pair: SyntheticPair) -> None:
    assert all(0 <= i < len(pair.src) and 0 <= j < len(pair.tgt) for i, j in pair.alignment)
    assert {j for _, j in pair.alignment} == set(range(len(pair.tgt)))  # every target token
    assert {i for i, _ in pair.alignment} == set(range(len(pair.src)))  # every source token
    assert len(pair.alignment) == len(pair.tgt)  # each target token aligns to exactly one
    assert pair.alignment == sorted(set(pair.alignment))
    assert pair.tgt[-1] == "."
    n_markers = sum(rel in MARKERS for rel in pair.deprel)
    assert len(pair.tgt) == len(pair.src) + n_markers


def check_head_final(pair: SyntheticPair) -> None:
    """Dependents' subtrees precede their head, except POST_HEAD ones, which follow it;
    every subtree is a contiguous target span, and markers close the span of their dependent."""
    kids = children(pair)
    pos = translation_position(pair)
    assert sorted(pos) == list(range(len(pair.src)))
    span = {}  # source index -> target positions of its subtree (translations and markers)
    for i in range(len(pair.src)):
        words = subtree(kids, i)
        span[i] = sorted(j for k, j in pair.alignment if k in words)
        assert span[i] == list(range(span[i][0], span[i][-1] + 1)), "subtree not contiguous"
    for h in range(len(pair.src)):
        for c in kids[h]:
            if pair.deprel[c] in POST_HEAD:
                assert all(pos[h] < pos[d] for d in subtree(kids, c))
            else:
                assert all(pos[d] < pos[h] for d in subtree(kids, c))
    for i, j in pair.alignment:
        if j != pos[i]:  # an inserted marker: last token of its dependent's span
            assert pair.tgt[j] == MARKERS[pair.deprel[i]]
            assert j == span[i][-1] and pos[i] < j


# ---- lexicon ---------------------------------------------------------------------------


def test_lexicon_is_fixed_one_to_one_and_sized_as_documented():
    assert (len(NOUNS), len(ADJECTIVES), len(PREPOSITIONS), len(DETERMINERS)) == (30, 15, 6, 3)
    assert len(TRANSITIVE_VERBS) + len(INTRANSITIVE_VERBS) == 20
    assert len(set(LEXICON.values())) == len(LEXICON)
    assert not set(MARKERS.values()) & set(LEXICON.values())
    assert LEXICON["dog"] == "inu" and LEXICON["."] == "."


# ---- generation ------------------------------------------------------------------------


def test_same_seed_same_pairs_different_seed_different_pairs():
    assert generate_pairs(300, seed=3) == generate_pairs(300, seed=3)
    assert generate_pairs(300, seed=3) != generate_pairs(300, seed=4)
    assert generate_pair(random.Random(5)) == generate_pair(random.Random(5))


def test_every_tree_is_valid(pairs):
    for pair in pairs:
        check_tree(pair)


def test_alignment_covers_every_token_and_is_in_range(pairs):
    for pair in pairs:
        check_alignment(pair)


def test_target_is_head_final(pairs):
    for pair in pairs:
        check_head_final(pair)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**64))
def test_invariants_hold_for_any_seed(seed):
    pair = generate_pair(random.Random(seed))
    check_tree(pair)
    check_alignment(pair)
    check_head_final(pair)


def test_lengths_and_constructions(pairs):
    lengths = [len(p.src) for p in pairs]
    assert min(lengths) >= 4 and max(lengths) <= MAX_LEN
    assert 7 <= sum(lengths) / len(lengths) <= 12
    assert sum(6 <= n <= 15 for n in lengths) > 0.6 * len(lengths)
    # every construction of the grammar occurs, including both kinds of relative clause
    assert set.union(*(set(p.deprel) for p in pairs)) == DEPREL
    rel_pronoun_roles = {p.deprel[i] for p in pairs for i, w in enumerate(p.src) if w == "that"}
    assert rel_pronoun_roles == {"nsubj", "obj"}
    # sentences are not all alike
    assert len({tuple(p.src) for p in pairs}) > 0.9 * len(pairs)


def test_structure_words_follow_ud_conventions(pairs):
    for p in pairs:
        for i, (w, upos, rel, h) in enumerate(zip(p.src, p.upos, p.deprel, p.heads)):
            head_upos = p.upos[h - 1] if h else None
            if upos == "ADP":
                assert rel == "case" and head_upos == "NOUN" and h - 1 > i
            if upos == "DET":
                assert rel == "det" and head_upos == "NOUN"
            if w == "that":
                assert upos == "PRON" and rel in {"nsubj", "obj"}
                assert p.deprel[h - 1] == "acl:relcl"
            if rel == "acl:relcl":
                assert head_upos == "NOUN" and upos == "VERB"


# ---- hand-checked examples: pin down the transduction rules ------------------------------


def test_simple_transitive_sentence():
    #          1      2      3       4    5      6
    pair = make_pair(
        ["the", "dog", "sees", "a", "cat", "."],
        [2, 3, 0, 5, 3, 3],
        ["DET", "NOUN", "VERB", "DET", "NOUN", "PUNCT"],
        ["det", "nsubj", "root", "det", "obj", "punct"],
    )
    assert pair.tgt == ["sono", "inu", "ga", "aru", "neko", "wo", "miru", "."]
    assert pair.alignment == [(0, 0), (1, 1), (1, 2), (2, 6), (3, 3), (4, 4), (4, 5), (5, 7)]


def test_subject_relative_clause():
    pair = make_pair(
        "the dog that sees a cat sleeps .".split(),
        [2, 7, 4, 2, 6, 4, 0, 7],
        ["DET", "NOUN", "PRON", "VERB", "DET", "NOUN", "VERB", "PUNCT"],
        ["det", "nsubj", "nsubj", "acl:relcl", "det", "obj", "root", "punct"],
    )
    assert " ".join(pair.tgt) == "sono sore ga aru neko wo miru inu ga nemuru ."
    assert pair.alignment == [
        (0, 0), (1, 7), (1, 8), (2, 1), (2, 2), (3, 6), (4, 3), (5, 4), (5, 5), (6, 9), (7, 10)
    ]


def test_pp_attachment_changes_the_translation():
    src = "the man sees the dog with a book .".split()
    upos = ["DET", "NOUN", "VERB", "DET", "NOUN", "ADP", "DET", "NOUN", "PUNCT"]
    # "with a book" modifies the verb (obl): postposition only
    verb_pp = make_pair(src, [2, 3, 0, 5, 3, 8, 8, 3, 3], upos,
                        ["det", "nsubj", "root", "det", "obj", "case", "det", "obl", "punct"])
    assert " ".join(verb_pp.tgt) == "sono otoko ga sono inu wo aru hon to miru ."
    # "with a book" modifies the noun (nmod): postposition + linker "no", inside the object
    noun_pp = make_pair(src, [2, 3, 0, 5, 3, 8, 8, 5, 3], upos,
                        ["det", "nsubj", "root", "det", "obj", "case", "det", "nmod", "punct"])
    assert " ".join(noun_pp.tgt) == "sono otoko ga sono aru hon to no inu wo miru ."
    # "no" (target 7) aligns to "book" (source 7), the head of the nmod dependent
    assert noun_pp.alignment == [
        (0, 0), (1, 1), (1, 2), (2, 10), (3, 3), (4, 8), (4, 9), (5, 6), (6, 4), (7, 5), (7, 7), (8, 11)
    ]


def test_generated_pair_matches_its_own_tree():
    pair = generate_pair(random.Random(0))
    assert pair == make_pair(pair.src, pair.heads, pair.upos, pair.deprel)


def test_unknown_word_and_bad_input_are_user_errors():
    with pytest.raises(UserError, match="zebra"):
        make_pair(["the", "zebra", "sleeps", "."], [2, 3, 0, 3],
                  ["DET", "NOUN", "VERB", "PUNCT"], ["det", "nsubj", "root", "punct"])
    with pytest.raises(UserError):
        make_pair(["the"], [0, 1], ["DET"], ["root"])
    with pytest.raises(UserError):
        generate_pairs(-1, seed=1)


# ---- output formats --------------------------------------------------------------------


def test_conllu_block(pairs):
    pair = pairs[0]
    block = to_conllu(pair, "train-1")
    assert block.endswith("\n\n")
    lines = block.rstrip("\n").split("\n")
    assert lines[0] == "# sent_id = train-1"
    assert lines[1] == "# text = " + " ".join(pair.src)
    rows = [line.split("\t") for line in lines[2:]]
    assert len(rows) == len(pair.src)
    for k, row in enumerate(rows):
        assert len(row) == 10
        assert row[0] == str(k + 1) and row[1] == pair.src[k] and row[3] == pair.upos[k]
        assert int(row[6]) == pair.heads[k] and row[7] == pair.deprel[k]
        assert row[2] == row[4] == row[5] == row[8] == row[9] == "_"


def test_write_corpus_files(tmp_path):
    paths = write_corpus(tmp_path / "corpus", n_train=120, n_dev=15, n_test=10, seed=2)
    sizes = {"train": 120, "dev": 15, "test": 10}
    assert set(paths) == set(sizes)
    for split, files in paths.items():
        assert set(files) == {"src", "tgt", "conllu", "align"}
        assert files["src"].name == f"{split}.src"
        src = files["src"].read_text("utf-8").splitlines()
        tgt = files["tgt"].read_text("utf-8").splitlines()
        align = files["align"].read_text("utf-8").splitlines()
        blocks = files["conllu"].read_text("utf-8").split("\n\n")
        assert blocks[-1] == ""
        assert len(src) == len(tgt) == len(align) == len(blocks) - 1 == sizes[split]
        for s, t, a, b in zip(src, tgt, align, blocks):
            s_toks, t_toks = s.split(" "), t.split(" ")
            links = [tuple(map(int, link.split("-"))) for link in a.split(" ")]
            assert all(0 <= i < len(s_toks) and 0 <= j < len(t_toks) for i, j in links)
            assert {j for _, j in links} == set(range(len(t_toks)))
            rows = [line for line in b.split("\n") if not line.startswith("#")]
            assert [r.split("\t")[1] for r in rows] == s_toks


def test_write_corpus_is_deterministic_and_splits_differ(tmp_path):
    def contents(out, seed):
        paths = write_corpus(out, n_train=50, n_dev=20, n_test=20, seed=seed)
        return {(s, k): p.read_bytes() for s, files in paths.items() for k, p in files.items()}

    first = contents(tmp_path / "a", seed=1)
    assert first == contents(tmp_path / "b", seed=1)
    assert first != contents(tmp_path / "c", seed=2)
    train = first["train", "src"].splitlines()
    assert first["dev", "src"].splitlines() != train[:20]
    assert first["dev", "src"] != first["test", "src"]
    with pytest.raises(UserError):
        write_corpus(tmp_path / "d", n_train=-1)


def test_held_out_sentences_are_unseen_in_train(tmp_path):
    paths = write_corpus(tmp_path, n_train=2000, n_dev=200, n_test=200, seed=3)
    src = {split: paths[split]["src"].read_text("utf-8").splitlines() for split in paths}
    assert len(set(src["dev"])) == len(src["dev"]) and len(set(src["test"])) == len(src["test"])
    assert not set(src["dev"]) & set(src["train"])
    assert not set(src["test"]) & (set(src["train"]) | set(src["dev"]))


def test_the_corpus_of_a_seed_never_changes(tmp_path):
    """Results in docs/ and the demo's BLEU rest on this exact corpus: its generator (and the
    string its random seeds are derived from) must not change, e.g. when modules move."""
    import hashlib

    write_corpus(tmp_path, n_train=50, n_dev=5, n_test=5, seed=1)
    src, tgt = (tmp_path / "train.src").read_bytes(), (tmp_path / "train.tgt").read_bytes()
    assert src.decode().splitlines()[0] == "every apple sees the garden ."
    assert hashlib.sha256(src + tgt).hexdigest() == "e711d3b4ddf5824ee0a58fc197c11793a037ac8b438159a08e7d7740ac2f3a50"


def test_synthetic_command_writes_the_corpus(capsys, tmp_path):
    """``syntaxnmt synthetic -o DIR`` writes the files ``write_corpus`` writes (text, CoNLL-U trees,
    gold alignments), byte for byte; a negative size is a one-line error."""
    from test_cli import assert_one_line_error, run_cli

    code, out, err = run_cli(capsys, "synthetic", "-o", tmp_path / "cli", "--train", "40", "--dev", "6", "--test", "5", "--seed", "3")
    assert code == 0 and out == "", err
    assert err.startswith(f"wrote the synthetic corpus (train 40, dev 6, test 5 sentence pairs, seed 3) to {tmp_path / 'cli'}")
    expected = write_corpus(tmp_path / "py", 40, 6, 5, seed=3)
    names = sorted(p.name for paths in expected.values() for p in paths.values())
    assert sorted(p.name for p in (tmp_path / "cli").iterdir() if p.name != ".syntaxnmt-synthetic") == names == sorted(f"{s}.{k}" for s in ("train", "dev", "test") for k in ("src", "tgt", "conllu", "align"))
    for name in names:
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "py" / name).read_bytes(), name
    assert len((tmp_path / "cli" / "dev.src").read_text(encoding="utf-8").splitlines()) == 6
    code, _, err = run_cli(capsys, "synthetic", "-o", tmp_path / "bad", "--dev", "-1")
    assert_one_line_error(code, err, "--dev -1: give 1 to 1,000,000 sentence pairs")
    assert not (tmp_path / "bad").exists()
    code, _, err = run_cli(capsys, "synthetic", "-o", tmp_path / "x", "--data.annotate=spacy")
    assert_one_line_error(code, err, "unexpected arguments")


def test_synthetic_refuses_a_folder_of_the_users_files_unless_forced(capsys, tmp_path):
    """Issues 49 and 51: ``synthetic -o DIR`` wrote over the user's ``train.src``/``train.tgt``
    and exited 0. A folder it did not write (no marker) that holds files is refused in one line
    listing them; ``--force`` writes anyway; a folder it wrote (marked) is rewritten freely."""
    from test_cli import assert_one_line_error, run_cli

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.src").write_text("my source\n")
    (mine / "train.tgt").write_text("my target\n")
    small = ("--train", "10", "--dev", "2", "--test", "2")
    code, _, err = run_cli(capsys, "synthetic", "-o", mine, *small)
    assert_one_line_error(code, err, f"{mine}: holds files `syntaxnmt synthetic` did not write (train.src, train.tgt)")
    assert (mine / "train.src").read_text() == "my source\n" and sorted(p.name for p in mine.iterdir()) == ["train.src", "train.tgt"]
    code, _, err = run_cli(capsys, "synthetic", "-o", mine, *small, "--force")
    assert code == 0 and (mine / "train.src").read_text() != "my source\n", err
    ours = tmp_path / "ours"
    for seed in ("1", "2"):  # its own folder: written again without --force
        code, _, err = run_cli(capsys, "synthetic", "-o", ours, *small, "--seed", seed)
        assert code == 0, err
    assert (ours / ".syntaxnmt-synthetic").is_file() and (ours / "train.src").read_text() == write_corpus(tmp_path / "py", 10, 2, 2, seed=2)["train"]["src"].read_text()
