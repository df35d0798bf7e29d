"""RNN attentional encoder-decoders: encoder, the three decoders, incremental decoding, search, training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syntaxnmt.config import RNNConfig, load_config
from syntaxnmt.data.batches import make_batch
from syntaxnmt.decoding.search import beam_search, greedy_search
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, PAD
from syntaxnmt.model import build_model
from syntaxnmt.model.rnn import ConditionalGRUDecoder, LuongDecoder, RNNModel

VOCAB = 24
EMBED, HIDDEN = 8, 6


def make_model(rnn: dict | None = None, seed: int = 0, **model) -> RNNModel:
    torch.manual_seed(seed)
    tree = {"arch": "rnn", "d_model": EMBED, "heads": 1, "dropout": 0.1, **model, "rnn": {"hidden": HIDDEN, "attention_dim": 5, "rank": 3, **(rnn or {})}}
    cfg = load_config(None, {"model": tree})
    m = build_model(cfg.model, VOCAB, VOCAB)
    assert isinstance(m, RNNModel)
    return m.eval()


def make_toy_batch():
    src = [np.array([5, 6, 7, 8, 9]), np.array([10, 11]), np.array([12, 13, 14])]
    tgt = [np.array([5, 6, 7]), np.array([8, 9, 10, 11]), np.array([12])]
    return make_batch(src, tgt, [0, 1, 2])


DECODERS = [
    {"decoder": "bahdanau"},
    {"decoder": "bahdanau", "cell": "lstm", "dec_layers": 2, "enc_layers": 2, "score": "general"},
    {"decoder": "luong", "score": "dot", "dec_hidden": "annotations"},
    {"decoder": "luong", "cell": "lstm", "score": "scaled_dot", "input_feeding": False, "dec_hidden": "annotations"},
    {"decoder": "luong", "score": "mlp", "input_feeding": False, "position_bias": True, "local_window": 2},
    {"decoder": "luong", "score": "general", "local_window": 1, "positions": "log"},
    {"decoder": "cgru"},
    {"decoder": "cgru", "dec_layers": 2, "score": "bilinear_lowrank", "positions": "learned"},
    {"decoder": "cgru", "position_bias": True, "positions": "sinusoidal"},
    {"decoder": "bahdanau", "score": "mlp", "local_window": 2, "position_bias": True},
]
IDS = [",".join(f"{k}={v}" for k, v in d.items()) for d in DECODERS]


# --- config ------------------------------------------------------------------------------------


def test_config_keys_and_validation():
    cfg = load_config(None, {"model": {"arch": "rnn", "rnn": {"decoder": "luong", "score": "general", "local_window": 3}}})
    assert cfg.model.rnn.decoder == "luong" and cfg.model.rnn.local_window == 3
    assert set(RNNConfig.model_fields) >= {
        "cell", "enc_layers", "dec_layers", "hidden", "embed_dim", "decoder", "score", "rank",
        "attention_dim", "input_feeding", "local_window", "position_bias", "positions",
    }  # fmt: skip
    with pytest.raises(UserError, match="position_bias"):
        load_config(None, {"model": {"arch": "rnn", "rnn": {"score": "dot", "position_bias": True}}})
    with pytest.raises(UserError, match="cgru"):
        load_config(None, {"model": {"arch": "rnn", "rnn": {"decoder": "cgru", "cell": "lstm"}}})
    with pytest.raises(UserError, match="score"):
        load_config(None, {"model": {"arch": "rnn", "rnn": {"score": "cosine"}}})


@pytest.mark.parametrize("score", ["dot", "scaled_dot"])
def test_dot_scores_need_a_decoder_state_the_size_of_the_annotations(score):
    """The parameter-free dot scores are refused at load, with the sizes, unless the decoder state
    is as large as the bidirectional annotations (dec_hidden: annotations); they then have no weights."""
    with pytest.raises(UserError, match=rf"model.rnn.score {score} has no parameters: it needs the decoder state \(size 16\) as large as the annotations \(2 x hidden = 32\)"):
        load_config(None, {"model": {"arch": "rnn", "rnn": {"score": score, "hidden": 16}}})
    with pytest.raises(UserError, match=r"decoder state \(size 20\)"):
        load_config(None, {"model": {"arch": "rnn", "rnn": {"score": score, "hidden": 16, "dec_hidden": 20}}})
    cfg = load_config(None, {"model": {"arch": "rnn", "d_model": 16, "rnn": {"score": score, "hidden": 16, "dec_hidden": "annotations"}}})
    assert cfg.model.rnn.decoder_size == 32
    model = build_model(cfg.model, VOCAB, VOCAB)
    assert list(model.decoder.attention.score.parameters()) == []
    assert load_config(None, {"model": {"arch": "rnn", "rnn": {"score": "general", "hidden": 16, "dec_hidden": 24}}}).model.rnn.decoder_size == 24


def test_embed_dim_defaults_to_d_model_and_ties():
    m = make_model()
    assert m.tgt_embed.embedding_dim == EMBED and m.output.weight is m.tgt_embed.weight
    m = make_model({"embed_dim": 4, "decoder": "luong"}, tie_embeddings="all")
    assert m.src_embed is m.tgt_embed and m.tgt_embed.embedding_dim == 4
    assert isinstance(m.pre_output, torch.nn.Linear)  # h~_t (hidden 6) -> embedding size 4
    m = make_model({"decoder": "luong"}, tie_embeddings="none")
    assert m.output.weight is not m.tgt_embed.weight and m.output.in_features == HIDDEN


# --- encoder -----------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", ["none", "log", "learned", "sinusoidal"])
def test_encoder_is_bidirectional_and_ignores_padding(positions):
    m = make_model({"positions": positions, "enc_layers": 2})
    batch = make_toy_batch()
    enc = m.encode(batch)
    assert enc.hidden.shape == (3, 6, 2 * HIDDEN)
    assert torch.all(enc.hidden[1, 3:] == 0)  # padding (src 2 words + EOS)
    alone = m.encode(make_batch([np.array([10, 11])], None, [0]))
    assert torch.allclose(alone.hidden[0], enc.hidden[1, :3], atol=1e-6)
    assert m.encoder.rnn.input_size == EMBED + (1 if positions == "log" else 0)
    assert m.encoder.rnn.bidirectional


def test_initial_state_is_tanh_of_mean_annotation():
    m = make_model({"dec_layers": 2, "decoder": "bahdanau"})
    batch = make_toy_batch()
    enc = m.encode(batch)
    state = m.init_state(enc)
    mean = enc.hidden[1, :3].mean(0)
    expected = torch.tanh(m.bridge(mean)).view(2, HIDDEN)
    assert torch.allclose(state.hidden[:, 1], expected, atol=1e-6)
    assert torch.equal(state.source_len, torch.tensor([6.0, 3.0, 4.0]))
    assert torch.equal(state.target_len, state.source_len)  # I := J when decoding


# --- decoders ----------------------------------------------------------------------------------


def test_cgru_step_shapes_and_state_flow():
    m = make_model({"decoder": "cgru"})
    dec = m.decoder
    assert isinstance(dec, ConditionalGRUDecoder)
    batch = make_toy_batch()
    state = m.init_state(m.encode(batch))
    s_prev = state.hidden[0].clone()
    tokens = torch.full((3,), BOS)
    y = m.tgt_embed(tokens)
    log_probs, state = m.step(tokens, state, need_weights=True)
    assert log_probs.shape == (3, VOCAB) and state.hidden.shape == (1, 3, HIDDEN)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(3), atol=1e-5)
    # s'_i = GRU_1(y_{i-1}, s_{i-1})
    s_mid = dec.gru1(y, s_prev)
    assert torch.allclose(dec.last_intermediate, s_mid, atol=1e-6)
    # c_i = ATT(C, s'_i): the weights come from s'_i, not from s_{i-1}
    enc = state.encoder
    pos = torch.zeros(3)
    context, alpha = dec.attention(s_mid, enc.hidden, state.keys, enc.pad_mask, state.source_len, pos, state.target_len)
    assert torch.allclose(state.last_cross_attention, alpha, atol=1e-6)
    _, alpha_prev = dec.attention(s_prev, enc.hidden, state.keys, enc.pad_mask, state.source_len, pos, state.target_len)
    assert not torch.allclose(alpha_prev, alpha)
    # s_i = GRU_2(c_i, s'_i)
    assert torch.allclose(state.hidden[0], dec.gru2(context, s_mid), atol=1e-6)
    assert state.step == 1


def test_cgru_stacked_layers():
    m = make_model({"decoder": "cgru", "dec_layers": 3})
    state = m.init_state(m.encode(make_toy_batch()))
    _, state = m.step(torch.full((3,), BOS), state)
    assert state.hidden.shape == (3, 3, HIDDEN)


def test_luong_input_feeding_changes_the_input_size():
    with_feed = make_model({"decoder": "luong", "input_feeding": True})
    without = make_model({"decoder": "luong", "input_feeding": False})
    assert isinstance(with_feed.decoder, LuongDecoder)
    assert with_feed.decoder.rnn.input_size == EMBED + HIDDEN
    assert without.decoder.rnn.input_size == EMBED
    batch = make_toy_batch()
    state = with_feed.init_state(with_feed.encode(batch))
    assert torch.all(state.feed == 0) and state.feed.shape == (3, HIDDEN)  # h~_0 = 0
    tokens = torch.full((3,), BOS)
    y = with_feed.tgt_embed(tokens)
    h_tilde, _ = with_feed.decoder.step(y, state)
    assert torch.equal(state.feed, h_tilde)  # h~_1 is fed with the next input
    # the fed vector matters: the same next token with another h~ gives other log-probs
    other = with_feed.init_state(with_feed.encode(batch))
    with_feed.decoder.step(y, other)
    other.feed = torch.zeros_like(other.feed)
    state.step = other.step = 1
    lp_fed, _ = with_feed.step(torch.full((3,), 5), state)
    lp_zero, _ = with_feed.step(torch.full((3,), 5), other)
    assert not torch.allclose(lp_fed, lp_zero)
    assert without.init_state(without.encode(batch)).feed is None


@pytest.mark.parametrize("rnn", DECODERS, ids=IDS)
def test_teacher_forcing_equals_incremental_steps(rnn):
    m = make_model(rnn)
    batch = make_toy_batch()
    out = m(batch, need_weights=True)
    b, t = batch.tgt_in.shape
    s = batch.src.size(1)
    assert out.logits.shape == (b, t, VOCAB)
    assert len(out.cross_attention) == 1 and out.cross_attention[0].shape == (b, 1, t, s)
    weights = out.cross_attention[0][:, 0]
    assert torch.all(weights[batch.src_pad_mask[:, None, :].expand(b, t, s)] == 0)
    if not rnn.get("local_window"):
        assert torch.allclose(weights.sum(-1), torch.ones(b, t), atol=1e-5)
    # step by step with the reference lengths for I (what teacher forcing uses)
    state = m.init_state(m.encode(batch), batch.tgt_out.ne(PAD).sum(1))
    steps, step_weights = [], []
    for i in range(t):
        lp, state = m.step(batch.tgt_in[:, i], state, need_weights=True)
        steps.append(lp)
        step_weights.append(state.last_cross_attention)
    reference = torch.log_softmax(out.logits.float(), -1)
    assert torch.allclose(torch.stack(steps, 1), reference, atol=1e-5)
    assert torch.allclose(torch.stack(step_weights, 1), weights, atol=1e-5)


@pytest.mark.parametrize("rnn", DECODERS, ids=IDS)
def test_every_parameter_gets_a_gradient(rnn):
    m = make_model(rnn).train()
    batch = make_toy_batch()
    logits = m(batch).logits
    torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch.tgt_out.reshape(-1), ignore_index=PAD).backward()
    missing = [name for name, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def test_attention_export_gives_one_link_per_target_word():
    from syntaxnmt.alignment.extract import extract_alignments

    m = make_model({"decoder": "cgru"})
    batch = make_toy_batch()
    links = extract_alignments(m, batch)
    tgt_lens = batch.tgt_out.ne(PAD).sum(1) - 1
    src_lens = batch.src.ne(PAD).sum(1) - 1
    for b, sent in enumerate(links):
        assert len(sent) == tgt_lens[b]
        assert all(0 <= i < src_lens[b] for i, _ in sent)


def test_position_bias_uses_source_length_for_i_at_decoding():
    m = make_model({"decoder": "bahdanau", "position_bias": True})
    batch = make_toy_batch()
    enc = m.encode(batch)
    gold = batch.tgt_out.ne(PAD).sum(1)
    lp_gold, _ = m.step(batch.tgt_in[:, 0], m.init_state(enc, gold))
    lp_src, _ = m.step(batch.tgt_in[:, 0], m.init_state(enc))
    lp_same, _ = m.step(batch.tgt_in[:, 0], m.init_state(enc, (~enc.pad_mask).sum(1)))
    assert not torch.allclose(lp_gold, lp_src)
    assert torch.allclose(lp_src, lp_same)


# --- search ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rnn", DECODERS, ids=IDS)
def test_beam_one_equals_greedy(rnn):
    m = make_model(rnn, seed=1)
    batch = make_toy_batch()
    greedy = greedy_search(m, batch, max_len=7)
    beam = beam_search(m, batch, beam=1, max_len=7)
    assert [h[0].tokens for h in greedy] == [h[0].tokens for h in beam]
    assert [h[0].log_prob for h in greedy] == pytest.approx([h[0].log_prob for h in beam], abs=1e-4)
    wide = beam_search(m, batch, beam=3, max_len=7, nbest=3)
    assert all(len(h) == 3 for h in wide)
    assert all(wide[i][0].score >= greedy[i][0].score - 1e-4 for i in range(3))


def test_reorder_state_selects_every_tensor():
    m = make_model({"decoder": "luong", "cell": "lstm", "position_bias": True, "score": "mlp"})
    state = m.init_state(m.encode(make_toy_batch()))
    _, state = m.step(torch.full((3,), BOS), state, need_weights=True)
    index = torch.tensor([2, 2, 0])
    new = m.reorder_state(state, index)
    assert torch.equal(new.hidden, state.hidden[:, index]) and torch.equal(new.cell, state.cell[:, index])
    assert torch.equal(new.feed, state.feed[index]) and torch.equal(new.keys, state.keys[index])
    assert torch.equal(new.encoder.hidden, state.encoder.hidden[index])
    assert torch.equal(new.source_len, state.source_len[index]) and new.step == 1
    lp_new, _ = m.step(torch.tensor([5, 5, 6]), new)
    lp_old, _ = m.step(torch.tensor([6, 5, 5]), state)
    assert torch.allclose(lp_new[0], lp_old[2], atol=1e-6) and torch.allclose(lp_new[2], lp_old[0], atol=1e-6)


def test_syntax_config_is_rejected_when_loaded():
    with pytest.raises(UserError, match="Transformer-only"):
        load_config(None, {"model": {"arch": "rnn", "syntax": {"input_features": ["bie"]}}})


# --- training ----------------------------------------------------------------------------------

TRAIN_BLEU_THRESHOLD = 30.0  # measured 72.3 with 1 thread (79.7 with 2): luong, 400 updates, ~30 s on a busy 2-core CPU


@pytest.mark.slow
def test_short_training_run_learns_the_synthetic_language(tmp_path):
    from syntaxnmt.data.synthetic import write_corpus
    from syntaxnmt.training.train import train

    corpus = write_corpus(tmp_path / "corpus", n_train=1500, n_dev=100, n_test=100)
    tree = {
        "name": "rnn-tiny",
        "work_dir": str(tmp_path / "run"),
        "seed": 1,
        "data": {
            "train_src": str(corpus["train"]["src"]),
            "train_tgt": str(corpus["train"]["tgt"]),
            "dev_src": str(corpus["dev"]["src"]),
            "dev_tgt": str(corpus["dev"]["tgt"]),
            "vocab_size": 200,
        },
        "model": {
            "arch": "rnn",
            "d_model": 32,
            "heads": 1,
            "dropout": 0.1,
            "tie_embeddings": "decoder",
            "rnn": {"decoder": "luong", "score": "mlp", "hidden": 64, "attention_dim": 64, "input_feeding": True},
        },
        "train": {
            "max_tokens": 1024,
            "lr": 1e-2,
            "warmup_steps": 50,
            "max_steps": 400,
            "valid_every": 400,
            "label_smoothing": 0.0,
            "log_every": 1000,
            "tensorboard": False,
            "device": "cpu",
            "threads": 1,  # one thread is faster than two on a shared 2-core machine
        },
        "decode": {"batch_size": 100, "max_len_a": 1.5, "max_len_b": 5},
    }
    logs: list[str] = []
    threads = torch.get_num_threads()
    try:
        prog = train(load_config(None, tree), log=logs.append)
    finally:
        torch.set_num_threads(threads)  # train() sets it process-wide
    assert prog.step == 400
    assert any("BLEU" in line for line in logs)
    assert prog.best is not None and prog.best >= TRAIN_BLEU_THRESHOLD, logs
