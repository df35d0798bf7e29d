"""Tests for syntaxnmt.alignment.extract: links read off attention matrices and a model's cross-attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syntaxnmt.alignment.extract import alignment_from_attention, extract_alignments
from syntaxnmt.errors import UserError
from syntaxnmt.model.outputs import average_heads

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
    from syntaxnmt.config import ModelConfig
    from syntaxnmt.data.batches import make_batch
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
