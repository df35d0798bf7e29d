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


# ---- Shift-Att ------------------------------------------------------------------------


def _diagonal_attention() -> torch.Tensor:
    """One sentence of 3 source and 3 target pieces (+ EOS on both sides): every decoder step
    attends to the source piece of the token it is *given* (row t looks at source t - 1, row 0 at
    the source EOS column), as trained attention often does."""
    w = torch.full((1, 4, 4), 0.01)  # rows: steps predicting y0, y1, y2, EOS; columns: x0, x1, x2, EOS
    for row, col in ((0, 3), (1, 0), (2, 1), (3, 2)):
        w[0, row, col] = 0.97
    return w


def test_shifted_reading_picks_the_input_step():
    from syntaxnmt.alignment.extract import attention_links

    w = _diagonal_attention()
    # Unshifted: row t (predicting y_t) with the source EOS column cut off.
    assert attention_links(w, [3], [3]) == [{(0, 0), (0, 1), (1, 2)}]
    # Shift-Att: y_t is read at row t + 1, the step where it is the decoder input -- the diagonal.
    assert attention_links(w, [3], [3], shift=True) == [{(0, 0), (1, 1), (2, 2)}]
    assert attention_links(w, [3], [3], shift=True, method="threshold", threshold=0.5) == [{(0, 0), (1, 1), (2, 2)}]
    # A shorter second sentence in the batch: its rows past its EOS row are never read.
    batch = torch.cat([w, torch.zeros(1, 4, 4)])
    batch[1, 1, 1] = batch[1, 2, 0] = 1.0  # sentence 2: 2 source pieces, 1 target piece; row 2 is padding
    assert attention_links(batch, [3, 2], [3, 1], shift=True)[1] == {(1, 0)}
    assert attention_links(batch, [3, 2], [3, 1])[1] == {(0, 0)}  # row 0 is all zero: the first column


class _FixedAttention(torch.nn.Module):
    """A stand-in model whose force-decoding returns given cross-attention weights (per layer)."""

    def __init__(self, layers: list[torch.Tensor]):
        super().__init__()
        self.layers = layers

    def forward(self, batch, need_weights=False):
        from syntaxnmt.model.outputs import EncoderOutput, ModelOutput

        assert need_weights
        return ModelOutput(torch.zeros(1), lambda x: x, EncoderOutput(torch.zeros(1), torch.zeros(1)), cross_attention=self.layers)


def test_extract_alignments_shift_on_every_layer_and_head():
    from syntaxnmt.data.batches import make_batch

    w = _diagonal_attention()[0]  # (T, S)
    flipped = w.flip(1).roll(-1, dims=1)  # another head: the mirror image over x2..x0
    layer0 = torch.stack([flipped, w])[None]  # (1, H=2, T, S): head 1 is the diagonal one
    layer1 = torch.stack([w, flipped])[None]  # head 0 is
    model = _FixedAttention([layer0, layer1])
    batch = make_batch([[5, 6, 7]], [[8, 9, 10]], [0])
    assert extract_alignments(model, batch, layer=0, head=1, shift=True) == [{(0, 0), (1, 1), (2, 2)}]
    assert extract_alignments(model, batch, layer=-1, head=0, shift=True) == [{(0, 0), (1, 1), (2, 2)}]
    assert extract_alignments(model, batch, layer=1, head=0) == [{(0, 0), (0, 1), (1, 2)}]
    mirrored = {(2 - i, j) for i, j in {(0, 0), (1, 1), (2, 2)}}
    assert extract_alignments(model, batch, layer=1, head=1, shift=True) == [mirrored]


# ---- batched reading and shared sources -------------------------------------------------


@pytest.mark.parametrize("shift", [False, True])
def test_batched_argmax_equals_the_per_sentence_reading(shift):
    """attention_links reads a (B, T, S) tensor with one argmax; the links equal those of
    alignment_from_attention on each sentence's cut matrix (a NumPy input takes that path),
    ties (first maximum), the padding and EOS columns, and an empty side included."""
    from syntaxnmt.alignment.extract import attention_links

    rng = np.random.default_rng(0)
    w = torch.as_tensor(rng.integers(0, 4, size=(5, 8, 7)).astype(np.float32))  # many ties
    w[:, :, 6] = 9.0  # an EOS/padding column that must never win
    src_lens, tgt_lens = [6, 3, 1, 0, 5], [7, 2, 6, 3, 0]
    got = attention_links(w, src_lens, tgt_lens, shift=shift)
    assert got == attention_links(w.numpy(), src_lens, tgt_lens, shift=shift)
    start = 1 if shift else 0
    assert got[1] == alignment_from_attention(w[1, start : start + 2, :3])
    assert got[3] == set() and got[4] == set()
    assert all(i < n for links, n in zip(got, src_lens) for i, _ in links)


@pytest.mark.parametrize("shift", [False, True])
def test_null_column_leaves_target_words_unaligned(shift):
    """A leaky reading's leak is a null column: a row whose null weight is at least its largest
    weight over the real source pieces gets no link (ties go to null), the others keep their
    argmax; shifted readings take the null weight of the same row as the links; the NumPy path
    agrees with the batched one."""
    from syntaxnmt.alignment.extract import attention_links

    w = torch.tensor(
        [  # one sentence: 4 target rows (3 pieces + EOS), 3 source columns (2 pieces + EOS)
            [[0.5, 0.1, 0.1], [0.1, 0.2, 0.1], [0.3, 0.4, 0.0], [0.2, 0.2, 0.1]],
        ]
    )
    null = torch.tensor([[0.3, 0.6, 0.4, 0.5]])  # row 1: null wins; row 2: a tie (0.4) goes to null
    got = attention_links(w, [2], [3], shift=shift, null=null)
    assert got == attention_links(w.numpy(), [2], [3], shift=shift, null=null)
    if shift:  # target j reads row j + 1: rows 1, 2 have no link, row 3 (null 0.5 > 0.2) neither
        assert got == [set()]
    else:
        assert got == [{(0, 0)}]
    assert attention_links(w, [2], [3], shift=shift) == attention_links(w, [2], [3], shift=shift, null=torch.zeros(1, 4))
    assert len(attention_links(w, [2], [3])[0]) == 3  # without the null column every target piece is linked


def test_leak_reading_as_null_and_renormalized():
    """AttentionReading.null keeps the leak's share out of the rows and reports it per row (heads
    averaged as the weights are); without it the rows are renormalized and there is no null."""
    from types import SimpleNamespace

    from syntaxnmt.alignment.extract import AttentionReading

    real = torch.tensor([[[[0.2, 0.2], [0.6, 0.2]], [[0.5, 0.5], [0.4, 0.6]]]])  # (B=1, H=2, T=2, S=2)
    leak = torch.tensor([[[0.6, 0.2], [0.0, 0.0]]])  # head 0 leaks, head 1 has no leak
    out = SimpleNamespace(cross_attention=[None], alignment_attention=real, alignment_leak=leak)
    null = AttentionReading(0, 0, full_context=True, null=True)
    assert torch.allclose(null.attention(out), real[:, 0]) and torch.allclose(null.null_share(out), leak[:, 0])
    assert torch.allclose(AttentionReading(0, None, full_context=True, null=True).null_share(out), leak.mean(dim=1))
    renorm = AttentionReading(0, 0, full_context=True)
    assert renorm.null_share(out) is None and torch.allclose(renorm.attention(out), torch.tensor([[[0.5, 0.5], [0.75, 0.25]]]))
    assert "leak as null" in null.label and "leak" not in renorm.label


def test_sources_shared_by_several_targets_are_encoded_once():
    """readings_alignments with ``source_of`` (an n-best list per source) gives the links of the
    same pairs with every source repeated, encoding each source once per batch."""
    from syntaxnmt.alignment.extract import AttentionReading, readings_alignments
    from syntaxnmt.config import ModelConfig
    from syntaxnmt.model import build_model

    torch.manual_seed(1)
    model = build_model(ModelConfig(d_model=16, heads=2, ffn_dim=32, enc_layers=1, dec_layers=2), 30, 30).eval()
    rng = np.random.default_rng(2)
    src = [rng.integers(4, 30, n).tolist() for n in (5, 2, 7)]
    source_of = [0, 0, 1, 2, 2, 2, 1, 0]
    tgt = [rng.integers(4, 30, n).tolist() for n in (4, 6, 1, 3, 8, 2, 5, 3)]
    words = lambda seqs: [list(range(len(s))) for s in seqs]  # noqa: E731 (one word per piece)
    readings = [AttentionReading(), AttentionReading(0, 1, shift=True), AttentionReading(-1, 0)]
    encoded_rows = []
    encode = model.encode
    model.encode = lambda batch, *a, **k: encoded_rows.append(len(batch)) or encode(batch, *a, **k)
    try:
        shared = readings_alignments(model, (src, words(src)), (tgt, words(tgt)), torch.device("cpu"), readings, batch_size=4, source_of=source_of)
        assert sum(encoded_rows) < len(tgt)  # 3 sources, 8 targets: fewer rows encoded than pairs
        repeated = [src[s] for s in source_of]
        plain = readings_alignments(model, (repeated, words(repeated)), (tgt, words(tgt)), torch.device("cpu"), readings, batch_size=4)
    finally:
        del model.encode
    assert shared == plain
    assert all(sorted(j for _, j in links) == list(range(len(t))) for links, t in zip(shared[0], tgt))


def test_pairs_force_decoded_side_by_side_give_the_links_of_one_batch_at_a_time(trained_run, corpus):
    """``readings_alignments(..., workers=)``: batches force-decoded in threads of their own (one
    torch thread each) give every pair the links one batch after another on one thread gives."""
    from pathlib import Path

    from syntaxnmt.alignment.extract import AttentionReading, encode_pairs, readings_alignments
    from syntaxnmt.decoding.loading import load_model

    cpu = torch.device("cpu")
    model, cfg, toks = load_model(Path(trained_run.work_dir) / "best.pt", cpu)
    src = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:17]
    tgt = corpus["test"]["tgt"].read_text(encoding="utf-8").splitlines()[:17]
    source, target, _ = encode_pairs(model, cfg, toks, src, tgt)
    readings = [AttentionReading(None, None), AttentionReading(-1, 0, shift=True)]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = readings_alignments(model, source, target, cpu, readings, batch_size=4, workers=1)
        torch.set_num_threads(2)
        side = readings_alignments(model, source, target, cpu, readings, batch_size=4, workers=3)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert side == one and sum(len(links) for links in one[0]) > 17
