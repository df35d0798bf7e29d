"""Tests for syntaxnmt.data.batches: ragged arrays, token-bucketed batches, the sampler, padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syntaxnmt.data.batches import RaggedArray, Split, TokenBatchSampler, bucket_batches, collate, make_batch, pad_sequences
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, EOS, PAD

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _lengths(n: int, seed: int, high: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, high, n), rng.integers(1, high, n)


def _check_partition_and_budget(batches, src, tgt, max_tokens):
    flat = np.concatenate(batches) if batches else np.array([], dtype=int)
    assert sorted(flat.tolist()) == list(range(len(src)))  # every index exactly once
    for b in batches:
        assert len(b) > 0
        longest = int(np.maximum(src[b], tgt[b]).max()) + 1
        assert len(b) == 1 or len(b) * longest <= max_tokens


# ---------------------------------------------------------------- ragged arrays


def test_ragged_array_round_trip(tmp_path):
    seqs = [[5, 6, 7], [], [8], list(range(100, 150))]
    RaggedArray.save(tmp_path / "x", seqs)
    arr = RaggedArray.load(tmp_path / "x")
    assert len(arr) == 4
    assert [arr[i].tolist() for i in range(4)] == seqs
    assert arr.lengths.tolist() == [3, 0, 1, 50]


def _cut(path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize(
    "damage, fragment",
    [
        (lambda p: _cut(p.with_name("x.data.npy"), 150), "x.data.npy: the prepared corpus is damaged (mmap length is greater than file size)"),
        (lambda p: _cut(p.with_name("x.offsets.npy"), 140), "x.offsets.npy: the prepared corpus is damaged (Failed to read all data for array)"),
        (lambda p: p.with_name("x.offsets.npy").write_bytes(b""), "x.offsets.npy: the prepared corpus is damaged (No data left in file)"),
        (lambda p: p.with_name("x.data.npy").write_bytes(b"\x80\x04garbage"), "x.data.npy: the prepared corpus is damaged (not a NumPy array file)"),
        (lambda p: np.save(p.with_name("x.data.npy"), np.arange(10, dtype=np.int32)), "x: the prepared corpus is damaged (x.offsets.npy ends at 54 but x.data.npy holds 10 ids)"),
        (lambda p: np.save(p.with_name("x.offsets.npy"), np.array([0, 5, 3, 54])), "x: the prepared corpus is damaged (x.offsets.npy does not hold increasing offsets from 0)"),
        (lambda p: np.save(p.with_name("x.data.npy"), np.zeros(54)), "x.data.npy: the prepared corpus is damaged (not an integer array)"),
        (lambda p: p.with_name("x.data.npy").unlink(), "x.data.npy: missing from the prepared corpus"),
    ],
)
def test_damaged_ragged_array_is_a_user_error_naming_the_file(tmp_path, damage, fragment):
    """Only the inputs of the prepared corpus are hashed: a cache file cut short or damaged ended
    in NumPy's traceback (or, worse, was read with offsets past its data) -- issue 25."""
    RaggedArray.save(tmp_path / "x", [[5, 6, 7], [], [8], list(range(100, 150))])
    damage(tmp_path / "x")
    with pytest.raises(UserError) as info:
        RaggedArray.load(tmp_path / "x")
    message = str(info.value)
    assert message.startswith(str(tmp_path)) and fragment in message and message.endswith("re-run `syntaxnmt prepare --force`"), message


# ---------------------------------------------------------------- bucket_batches


@FAST
@given(
    lengths=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=0, max_size=120),
    max_tokens=st.integers(1, 400),
    seed=st.one_of(st.none(), st.integers(0, 2**16)),
)
def test_bucket_batches_partition_and_budget(lengths, max_tokens, seed):
    src = np.array([s for s, _ in lengths], dtype=np.int64)
    tgt = np.array([t for _, t in lengths], dtype=np.int64)
    rng = None if seed is None else np.random.default_rng(seed)
    batches = bucket_batches(src, tgt, max_tokens, rng)
    _check_partition_and_budget(batches, src, tgt, max_tokens)


def test_bucket_batches_fill_up_to_the_budget():
    # 100 sentences of length 9 (+1 = 10 tokens): exactly 10 per batch with max_tokens=100.
    src = tgt = np.full(100, 9)
    batches = bucket_batches(src, tgt, 100, None)
    assert [len(b) for b in batches] == [10] * 10


def test_bucket_batches_sorts_by_length():
    src, tgt = _lengths(300, seed=3)
    batches = bucket_batches(src, tgt, 500, np.random.default_rng(0))
    maxima = [int(tgt[b].max()) for b in batches]
    minima = [int(tgt[b].min()) for b in batches]
    assert all(hi <= lo for hi, lo in zip(maxima, minima[1:]))  # buckets do not overlap in target length


def test_oversized_sentence_gets_its_own_batch():
    src = np.array([3, 500, 4])
    tgt = np.array([3, 2, 4])
    batches = bucket_batches(src, tgt, 64, None)
    _check_partition_and_budget(batches, src, tgt, 64)
    assert [1] in [b.tolist() for b in batches]


# ---------------------------------------------------------------- the sampler


def test_sampler_is_deterministic_per_seed_and_epoch():
    src, tgt = _lengths(500, seed=1)
    a = TokenBatchSampler(src, tgt, 300, seed=5)
    b = TokenBatchSampler(src, tgt, 300, seed=5)
    for epoch in (0, 1, 7):
        ea, eb = a.epoch_batches(epoch), b.epoch_batches(epoch)
        assert len(ea) == len(eb) and all(np.array_equal(x, y) for x, y in zip(ea, eb))
        _check_partition_and_budget(ea, src, tgt, 300)

    def signature(batches):
        return [tuple(x.tolist()) for x in batches]

    assert signature(a.epoch_batches(0)) != signature(a.epoch_batches(1))  # epochs differ
    assert signature(a.epoch_batches(0)) != signature(TokenBatchSampler(src, tgt, 300, seed=6).epoch_batches(0))


def test_sampler_without_shuffle_is_the_same_every_epoch():
    src, tgt = _lengths(200, seed=2)
    s = TokenBatchSampler(src, tgt, 300, seed=1, shuffle=False)
    e0, e1 = s.epoch_batches(0), s.epoch_batches(1)
    assert all(np.array_equal(x, y) for x, y in zip(e0, e1)) and len(e0) == len(e1)


@pytest.mark.parametrize("start", [0, 1, 5, 17])
def test_iterate_from_a_position_is_the_tail_of_the_epoch(start):
    src, tgt = _lengths(400, seed=4)
    s = TokenBatchSampler(src, tgt, 250, seed=3)
    full = list(s.iterate(2))
    assert [p for p, _ in full] == list(range(len(full)))
    tail = list(s.iterate(2, start))
    assert len(tail) == len(full) - start > 0
    for (p1, b1), (p2, b2) in zip(tail, full[start:]):
        assert p1 == p2 and np.array_equal(b1, b2)
    assert list(s.iterate(2, len(full))) == []


def test_sharding_gives_disjoint_equal_shards():
    src, tgt = _lengths(500, seed=5)
    full = TokenBatchSampler(src, tgt, 300, seed=9).epoch_batches(3)
    shards = [TokenBatchSampler(src, tgt, 300, seed=9, num_shards=2, shard=r).epoch_batches(3) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == len(full) // 2
    seen0 = set(np.concatenate(shards[0]).tolist())
    seen1 = set(np.concatenate(shards[1]).tolist())
    assert not seen0 & seen1
    # Together the shards are the full epoch's batches, except at most one left-over batch.
    used = {tuple(b.tolist()) for shard in shards for b in shard}
    assert used <= {tuple(b.tolist()) for b in full}
    assert len(full) - len(used) == len(full) % 2


# ---------------------------------------------------------------- padding and batches


def test_pad_sequences():
    out = pad_sequences([[4, 5, 6], [7], []])
    assert out.dtype == torch.long
    assert out.tolist() == [[4, 5, 6], [7, PAD, PAD], [PAD, PAD, PAD]]
    # BOS/EOS framing, from lists and arrays alike; an empty sequence gets the markers only.
    seqs = [np.array([4, 5, 6]), [7], []]
    assert pad_sequences(seqs, first=BOS).tolist() == [[BOS, 4, 5, 6], [BOS, 7, PAD, PAD], [BOS, PAD, PAD, PAD]]
    assert pad_sequences(seqs, last=EOS).tolist() == [[4, 5, 6, EOS], [7, EOS, PAD, PAD], [EOS, PAD, PAD, PAD]]
    assert pad_sequences([], last=EOS).shape == (0, 0)


def test_make_batch_adds_eos_bos_and_pads_with_zero():
    src = [np.array([10, 11, 12]), np.array([13])]
    tgt = [np.array([20]), np.array([21, 22, 23, 24])]
    b = make_batch(src, tgt, [7, 3])
    assert b.src.tolist() == [[10, 11, 12, EOS], [13, EOS, 0, 0]]
    assert b.tgt_in.tolist() == [[BOS, 20, 0, 0, 0], [BOS, 21, 22, 23, 24]]
    assert b.tgt_out.tolist() == [[20, EOS, 0, 0, 0], [21, 22, 23, 24, EOS]]
    assert b.ids.tolist() == [7, 3]
    assert b.src_pad_mask.tolist() == [[False] * 4, [False, False, True, True]]
    assert b.n_tgt_tokens == 2 + 5
    assert len(b) == 2
    # Same padding; tgt_out is tgt_in shifted left by one, with EOS at the end.
    assert torch.equal(b.tgt_in.ne(PAD), b.tgt_out.ne(PAD))
    real = b.tgt_in[:, 1:].ne(PAD)
    assert torch.equal(b.tgt_in[:, 1:][real], b.tgt_out[:, :-1][real])


def test_make_batch_without_targets():
    b = make_batch([[5, 6], [7, 8, 9]], None, [0, 1])
    assert b.tgt_in is None and b.tgt_out is None and b.n_tgt_tokens == 0
    assert b.src.tolist() == [[5, 6, EOS, 0], [7, 8, 9, EOS]]
    moved = b.to("cpu")
    assert torch.equal(moved.src, b.src) and moved.tgt_in is None


def test_collate_from_a_prepared_split(tmp_path):
    src = [[4, 5], [6, 7, 8], [9]]
    tgt = [[10], [11, 12], [13, 14, 15]]
    RaggedArray.save(tmp_path / "train.src", src)
    RaggedArray.save(tmp_path / "train.tgt", tgt)
    split = Split.load(tmp_path, "train")
    assert len(split) == 3
    b = collate(split, np.array([2, 0]))
    assert b.src.tolist() == [[9, EOS, 0], [4, 5, EOS]]
    assert b.tgt_out.tolist() == [[13, 14, 15, EOS], [10, EOS, 0, 0]]
    assert b.ids.tolist() == [2, 0]


# ---------------------------------------------------------------- static shapes (train.shape_bucket)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), min_size=1, max_size=300), st.sampled_from([64, 500, 2048]), st.sampled_from([4, 8]))
def test_every_bucketed_batch_fits_its_static_shape(lengths, max_tokens, multiple):
    from syntaxnmt.data.batches import round_up

    src, tgt = np.array([a for a, _ in lengths]), np.array([b for _, b in lengths])
    for idx in bucket_batches(src, tgt, max_tokens, np.random.default_rng(0), multiple):
        longest = int(round_up(int(max(src[idx].max(), tgt[idx].max())) + 1, multiple))
        assert len(idx) == 1 or len(idx) * longest <= max_tokens
        assert len(idx) <= max(1, max_tokens // longest)


def test_pad_batch_adds_masked_positions_and_eos_rows():
    from syntaxnmt.data.batches import pad_batch
    from syntaxnmt.inputs import SourceFeatures

    b = make_batch([np.array([5, 6, 7]), np.array([8])], [np.array([9]), np.array([10, 11])], [0, 1])
    b.features = SourceFeatures(upos=torch.tensor([[3, 4, 5, 1], [3, 1, 0, 0]]), parent=torch.tensor([[1, 1, 1, 3], [0, 1, 2, 3]]), relations={"linear": torch.ones(2, 4, 4, dtype=torch.long)})
    p = pad_batch(b, 3, 8)
    assert p.src.shape == p.tgt_in.shape == p.tgt_out.shape == (3, 8)
    assert p.src[:2, :4].tolist() == b.src.tolist() and p.src[2].tolist() == [EOS] + [PAD] * 7
    assert p.tgt_in[2, 0] == BOS and p.tgt_out[2].eq(PAD).all()
    assert p.features.relations["linear"].shape == (3, 8, 8) and p.features.relations["linear"][:, 4:].eq(0).all()
    assert p.features.parent[0].tolist() == [1, 1, 1, 3, 4, 5, 6, 7]
    with pytest.raises(ValueError):
        pad_batch(b, 1, 8)


def test_bucketed_static_batches_give_the_same_loss_and_gradients(make_config):
    """Padding to a static shape (extra positions and EOS-only rows) changes neither the loss nor
    any gradient: the masked, static loss of the padded batch equals the loss of the batch."""
    from syntaxnmt.data.batches import pad_batch, shape_bucket
    from syntaxnmt.data.prepare import load_split
    from syntaxnmt.model import build_model
    from syntaxnmt.training.losses import sequence_loss

    cfg = make_config({"model": {"dropout": 0.0}})
    split = load_split(cfg, "train")
    torch.manual_seed(0)
    model = build_model(cfg.model, 200, 200).train()
    batch = collate(split, np.arange(12))
    padded = pad_batch(batch, *shape_bucket(batch, 2048, 16))
    assert padded.src.size(1) % 16 == 0 and len(padded) > len(batch)
    results = []
    for b, static in ((batch, False), (padded, True)):
        model.zero_grad()
        loss, nll = sequence_loss(model(b), b.tgt_out, 0.1, static=static)
        loss.backward()
        results.append((loss.detach(), nll, [p.grad.clone() for p in model.parameters()]))
    (l1, n1, g1), (l2, n2, g2) = results
    torch.testing.assert_close(l2, l1, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(n2, n1, rtol=1e-5, atol=1e-4)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
