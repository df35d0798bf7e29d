"""Tests for syntaxnmt.data.words: word-level vocabularies with a size cap (data.vocab: word)."""

from __future__ import annotations

import pytest
from conftest import quiet

from syntaxnmt.data.prepare import load_tokenizers, prepare, spm_paths
from syntaxnmt.data.subwords import Tokenizer
from syntaxnmt.data.words import UNK, WordProcessor, train_word_vocab
from syntaxnmt.errors import UserError


def test_the_vocabulary_keeps_the_most_frequent_words(tmp_path):
    path = train_word_vocab(["a b c a", "b a d", "e"], tmp_path / "v.words", vocab_size=6)
    wp = WordProcessor(path)
    assert wp.words == ["<pad>", "<unk>", "<s>", "</s>", "a", "b"]
    assert wp.encode("a d b") == [4, UNK, 5]
    assert wp.encode(["a", "b e"]) == [[4], [5, UNK]]
    assert wp.encode("a d", out_type=str) == ["\u2581a", "\u2581<unk>"]
    assert wp.decode([2, 4, UNK, 5, 3, 0]) == "a <unk> b"
    assert wp.id_to_piece([4, 5]) == ["\u2581a", "\u2581b"]


def test_a_foreign_file_is_refused(tmp_path):
    (tmp_path / "x.words").write_text("hello\t3\n")
    with pytest.raises(UserError, match="not a word vocabulary"):
        Tokenizer(tmp_path / "x.words")


def test_tokenizer_with_a_word_vocabulary(tmp_path):
    path = train_word_vocab(["the cat sees the dog", "a dog"], tmp_path / "v.words", vocab_size=8)
    tok = Tokenizer(path, lowercase=True)
    ids, words = tok.encode_with_words(["The cat sees a bird"])
    assert words == [[0, 1, 2, 3, 4]] and ids[0][-1] == UNK
    assert tok.decode(ids[0]) == "the cat <unk> a <unk>"  # 4 words kept: the, dog (2), a, cat (1, alphabetical)
    assert tok.encode_words([["The", "zebra"]]) == ([[tok.encode("the")[0], UNK]], [[0, 1]])


@pytest.mark.parametrize("joint", [True, False])
def test_prepare_and_train_with_a_word_vocabulary(make_config, tmp_path, joint):
    from syntaxnmt.training.train import train

    cfg = make_config({"data": {"vocab": "word", "vocab_size": 30, "joint_vocab": joint}, "model": {"tie_embeddings": "all" if joint else "decoder"}, "train": {"max_steps": 2, "valid_every": 2}}, prepared_dir=tmp_path / "prep")
    counts = prepare(cfg, log=quiet)
    src, tgt = spm_paths(cfg.prepared_dir, cfg.data)
    assert src.suffix == ".words" and (src == tgt) == joint
    assert counts["src_vocab"] == 30 and counts["tgt_vocab"] == 30
    toks = load_tokenizers(cfg)
    assert UNK in toks.tgt.encode("the cat sees a bird") or UNK in toks.src.encode("the cat sees a bird")
    assert train(cfg, log=quiet).step == 2
