"""Documents as data: doc-id files, previous sentences, and the batches of context models."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import deep_merge, quiet, tiny_tree, write_doc_ids

from syntaxnmt.config import load_config
from syntaxnmt.data.batches import collate, pad_batch
from syntaxnmt.data.documents import SEP, DocumentContext, doc_index, document_context, previous_sentences, read_doc_ids
from syntaxnmt.data.prepare import load_split, load_tokenizers, prepare
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, EOS, PAD


def test_doc_index_numbers_documents_in_order_and_refuses_a_split_document():
    assert doc_index(["a", "a", "b", "c", "c"]).tolist() == [0, 0, 1, 2, 2]
    with pytest.raises(UserError, match=r"ids:4: document 'a' continues after another document began"):
        doc_index(["a", "b", "b", "a"], "ids")
    with pytest.raises(UserError, match=r"ids:2: empty document id"):
        doc_index(["a", " "], "ids")


def test_read_doc_ids_needs_one_id_per_line(tmp_path):
    (tmp_path / "d").write_text("x\nx\ny\n")
    assert read_doc_ids(tmp_path / "d", 3).tolist() == [0, 0, 1]
    with pytest.raises(UserError, match=r"3 document ids for 4 lines of t.src"):
        read_doc_ids(tmp_path / "d", 4, "t.src")


def test_a_byte_order_mark_does_not_split_the_first_document(tmp_path):
    (tmp_path / "d").write_bytes("\ufeffx\nx\ny\n".encode("utf-8"))  # issue 49: '\ufeffx' and 'x' were two documents
    assert read_doc_ids(tmp_path / "d", 3).tolist() == [0, 0, 1]


def test_previous_sentences_stop_at_document_starts():
    prev = previous_sentences(np.array([0, 0, 0, 1, 1, 2]), 2)
    assert prev.tolist() == [[-1, -1], [0, -1], [1, 0], [-1, -1], [3, -1], [-1, -1]]


def test_concatenation_both_ways():
    c = DocumentContext("concat", 2, "both", sep=9)
    assert c.concatenate([np.array([5]), np.array([6, 7]), np.array([8])], np.array([1, 2])).tolist() == [6, 7, 9, 5, 9, 1, 2]
    assert c.concatenate([], np.array([1])).tolist() == [1]
    assert c.current_part([6, 9, 5, 9, 1, 2]) == [1, 2] and c.current_part([1, 2]) == [1, 2]


def test_the_config_and_the_data_read_a_context_kind_alike():
    """``model.context`` and the DocumentContext made from it derive every flag from the one kind
    table (CONTEXT_KINDS) through the same code (config.ContextFlags), for every kind and side."""
    from syntaxnmt.config import CONTEXT_KINDS, ContextConfig, ContextFlags

    flags = [name for name, value in vars(ContextFlags).items() if isinstance(value, property)]
    assert {"described", "concatenates", "concat_target", "reads_states", "han_target", "han_both"} <= set(flags)
    expected = {  # (kind, side): (concatenates, concat_target, reads_states, han_target, han_both)
        ("none", "source"): (False,) * 5, ("none", "target"): (False,) * 5, ("none", "both"): (False,) * 5,
        ("concat", "source"): (True, False, False, False, False), ("concat", "both"): (True, True, False, False, False),
        ("han", "source"): (False, False, True, False, False), ("han", "target"): (False, False, True, True, False), ("han", "both"): (False, False, True, True, True),
    }
    for kind, described in CONTEXT_KINDS.items():
        for side in described.sides:
            config, data = ContextConfig(kind=kind, sentences=2, side=side), DocumentContext(kind, 2, side)
            assert config.described is data.described is described
            assert all(getattr(config, name) == getattr(data, name) for name in flags), (kind, side)
            assert tuple(getattr(data, name) for name in ("concatenates", "concat_target", "reads_states", "han_target", "han_both")) == expected[kind, side]


@pytest.fixture(scope="module")
def doc_corpus(corpus, tmp_path_factory):
    """The tiny corpus with documents of 4 lines (the last one shorter)."""
    return write_doc_ids(corpus, tmp_path_factory.mktemp("docs"), 4)


def doc_config(corpus, doc_corpus, tmp_path, context: dict, **extra):
    tree = deep_merge(tiny_tree(corpus, tmp_path / "run", tmp_path / "prepared"), {"data": {"train_docs": str(doc_corpus["train"]), "dev_docs": str(doc_corpus["dev"])}, "model": {"context": context}})
    return load_config(None, deep_merge(tree, extra))


def test_prepare_keeps_document_ids_and_batches_reach_the_previous_sentences(corpus, doc_corpus, tmp_path):
    cfg = doc_config(corpus, doc_corpus, tmp_path, {"kind": "han", "sentences": 2})
    prepare(cfg, log=quiet)
    split, toks = load_split(cfg, "train"), load_tokenizers(cfg)
    assert split.docs.tolist()[:9] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    assert toks.src.symbol_id(SEP) is not None
    context = document_context(cfg, toks.src, toks.tgt)
    indices = [5, 4, 8, 3]  # inside a document, at its start, at the next start, at a document's end
    batch = collate(split, indices, context=context)
    assert batch.context_rows.shape == (len(batch), 2)
    for row, i in enumerate(indices):
        for j in range(2):
            before = i - 1 - j
            r = int(batch.context_rows[row, j])
            if before >= 4 * (i // 4):  # the row holding that sentence: in the batch, or a lead-in after it
                assert int(batch.ids[r]) == before
                expected = np.append(split["src"][before], EOS).tolist()
                assert batch.src[r, : len(expected)].tolist() == expected and batch.src[r, len(expected) :].eq(PAD).all()
            else:
                assert r == -1
    assert batch.ids[len(indices) :].tolist() == [1, 2]  # the lead-ins (of sentence 3), no loss
    assert batch.tgt_out[len(indices) :].eq(PAD).all() and batch.n_tgt_tokens == sum(len(split["tgt"][i]) + 1 for i in indices)


def test_a_target_side_han_batch_holds_the_previous_target_sentences(corpus, doc_corpus, tmp_path):
    cfg = doc_config(corpus, doc_corpus, tmp_path, {"kind": "han", "sentences": 2, "side": "target"})
    prepare(cfg, log=quiet)
    split, toks = load_split(cfg, "train"), load_tokenizers(cfg)
    context = document_context(cfg, toks.src, toks.tgt)
    indices = [6, 4, 5]  # two previous sentences, none (a document start), one
    batch = collate(split, indices, context=context)
    for row, i in enumerate(indices):
        for j in range(2):
            before = i - 1 - j
            r = int(batch.context_rows[row, j])
            if before >= 4:
                expected = [BOS, *split["tgt"][before].tolist()]  # as the decoder reads it, teacher-forced
                assert batch.tgt_in[r, : len(expected)].tolist() == expected and batch.tgt_in[r, len(expected) :].eq(PAD).all()
                assert int(batch.ids[r]) == before and not batch.src[r].eq(PAD).all()  # its source is there too (the decoder's memory)
            else:
                assert r == -1
    # A source-side HAN batch reads the same rows.
    assert collate(split, indices, context=DocumentContext("han", 2, "source")).context_rows.tolist() == batch.context_rows.tolist()
    # Padded to a static shape (train.shape_bucket), the batch keeps its context; added rows have none.
    padded = pad_batch(batch, 5, 32)
    b = len(batch)
    assert padded.context_rows.shape == (5, 2) and padded.context_rows[:b].equal(batch.context_rows)
    assert padded.context_rows[b:].eq(-1).all() and padded.tgt_out[b:].eq(PAD).all()


def test_a_concat_batch_holds_the_previous_sentences_and_the_separator(corpus, doc_corpus, tmp_path):
    cfg = doc_config(corpus, doc_corpus, tmp_path, {"kind": "concat", "sentences": 1, "side": "both"})
    prepare(cfg, log=quiet)
    split, toks = load_split(cfg, "train"), load_tokenizers(cfg)
    sep = toks.src.symbol_id(SEP)
    batch = collate(split, [1, 4], context=document_context(cfg, toks.src, toks.tgt))
    first = np.concatenate([split["src"][0], [sep], split["src"][1], [EOS]]).tolist()
    assert batch.src[0, : len(first)].tolist() == first
    target = np.concatenate([split["tgt"][0], [sep], split["tgt"][1], [EOS]]).tolist()
    assert batch.tgt_out[0, : len(target)].tolist() == target
    alone = np.append(split["src"][4], EOS).tolist()  # a document start: no separator
    assert batch.src[1, : len(alone)].tolist() == alone


def test_a_context_model_needs_document_ids(corpus, tmp_path):
    with pytest.raises(UserError, match="needs the document ids of the corpus: set data.train_docs and data.dev_docs"):
        load_config(None, deep_merge(tiny_tree(corpus, tmp_path), {"model": {"context": {"kind": "han"}}}))


def test_static_shapes_keep_the_context_rows():
    """``pad_batch`` (train.shape_bucket) carries a HAN batch's context; added sentences have none."""
    from syntaxnmt.data.batches import make_batch, pad_batch

    batch = make_batch([np.array([5, 6]), np.array([7])], [np.array([8]), np.array([9])], [0, 1], context=[[np.array([10, 11, 12])], []], context_size=2)
    assert len(batch) == 3 and batch.context_rows.tolist() == [[2, -1], [-1, -1], [-1, -1]]  # the context sentence is row 2
    padded = pad_batch(batch, 5, 8)
    assert padded.context_rows.tolist() == [[2, -1], [-1, -1], [-1, -1], [-1, -1], [-1, -1]]
    assert padded.src[2].tolist() == [10, 11, 12, EOS] + [PAD] * 4 and padded.tgt_out[2:].eq(PAD).all()


def test_training_batches_of_a_han_model_reach_its_context(corpus, doc_corpus, tmp_path):
    """Issue 21: through the path training takes (sampler, ``training_batch`` with the CPU defaults,
    bucketed static shapes included), every sentence brings its previous sentences, and one update
    gives every parameter of the HAN block a gradient."""
    from syntaxnmt.data.batches import TokenBatchSampler
    from syntaxnmt.model import build_model
    from syntaxnmt.training.step import forward_loss, training_batch

    cfg = doc_config(corpus, doc_corpus, tmp_path, {"kind": "han", "sentences": 2})
    prepare(cfg, log=quiet)
    split, toks = load_split(cfg, "train"), load_tokenizers(cfg)
    context = document_context(cfg, toks.src, toks.tgt)
    t = cfg.train.for_device("cpu")
    assert t.shape_bucket  # the default on CPU: static shapes
    sampler = TokenBatchSampler(split["src"].lengths, split["tgt"].lengths, 256, cfg.seed, multiple=t.shape_bucket, docs=split.docs, context=2)
    assert sampler.epoch_batches(1)[0].tolist() == TokenBatchSampler(split["src"].lengths, split["tgt"].lengths, 256, cfg.seed, multiple=t.shape_bucket, docs=split.docs, context=2).epoch_batches(1)[0].tolist()
    seen = np.concatenate([idx for _, idx in sampler.iterate(0)])
    assert sorted(seen.tolist()) == list(range(len(split)))  # every sentence once per epoch
    checked = 0
    for _, idx in sampler.iterate(0):
        batch = training_batch(split, idx, None, t, (), context)
        assert batch.context_rows.size(0) == len(batch) and int(batch.ids.ge(0).sum()) * batch.src.size(1) <= 256  # lead-ins inside the budget (added rows: id -1)
        for row, i in enumerate(idx):
            for j in range(2):
                before = int(i) - 1 - j
                r = int(batch.context_rows[row, j])
                if before >= 4 * (int(i) // 4):
                    expected = np.append(split["src"][before], EOS).tolist()
                    assert int(batch.ids[r]) == before and batch.src[r, : len(expected)].tolist() == expected
                    checked += 1
                else:
                    assert r == -1
    assert checked > len(split)  # most sentences have two previous ones (documents of 4)
    model = build_model(cfg, **toks.vocab_sizes()).train()
    loss, _ = forward_loss(model, batch, t)
    loss.backward()
    for name, p in model.han.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
