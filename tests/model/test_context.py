"""HAN (Miculicich et al. 2018): the formulas of the hierarchical context block, and a context model
trained, decoded with --docs and compared with its sentence-level behaviour."""

from __future__ import annotations

import pytest
import torch

from syntaxnmt.cpu import install
from syntaxnmt.model.context import HierarchicalContext

B, S, K, SC, D = 2, 5, 3, 4, 16


def _block(seed: int = 0) -> HierarchicalContext:
    torch.manual_seed(seed)
    return HierarchicalContext(D, 4, 32, dropout=0.0).eval()


def _inputs(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, S, D, generator=g)
    ctx = torch.randn(B, K, SC, D, generator=g)
    pad = torch.zeros(B, K, SC, dtype=torch.bool)
    pad[0, 0, 3:] = True  # a short context sentence
    pad[0, 2] = True  # sentence 1 has only two previous sentences
    pad[1] = True  # sentence 2 starts its document: no context
    return h, ctx, pad


def test_no_context_leaves_the_sentence_states_unchanged():
    block = _block()
    h, ctx, pad = _inputs()
    out, weights = block(h, ctx, pad)
    assert weights is None  # only on request
    torch.testing.assert_close(out[1], h[1], rtol=0, atol=0)
    assert not torch.allclose(out[0], h[0])


def test_padding_and_missing_sentences_get_no_weight():
    block = _block()
    h, ctx, pad = _inputs()
    out, weights = block(h, ctx, pad, need_weights=True)
    word, sentence, gate = weights.word, weights.sentence, weights.gate
    assert word.shape == (B, K, 4, S, SC) and sentence.shape == (B, 4, S, K) and gate.shape == (B, S)
    assert word[0, 0, :, :, 3:].abs().max() == 0  # padding of a short sentence
    torch.testing.assert_close(word[0, :2].sum(-1), torch.ones(2, 4, S))
    assert word[0, 2].abs().max() == 0  # the missing third sentence
    assert sentence[0, :, :, 2].abs().max() == 0
    torch.testing.assert_close(sentence[0].sum(-1), torch.ones(4, S))
    # No context at all (a document's first sentence): no weight anywhere, and the gate is shut.
    assert word[1].abs().max() == 0 and sentence[1].abs().max() == 0 and gate[1].abs().max() == 0
    assert bool(((gate[0] > 0) & (gate[0] < 1)).all())
    changed = ctx.clone()
    changed[0, 0, 3:] = 100.0  # what padding and missing sentences hold does not matter
    changed[0, 2] = -100.0
    torch.testing.assert_close(block(h, changed, pad)[0], out)


def test_a_batch_of_rows_in_training_reads_in_place_what_every_position_computes():
    """CPU training's path -- each context row's keys and values projected once and gathered for
    the sentences with a context only, their real positions read from and written into h in
    place -- gives, at every real position, what the plain computation over every position and
    sentence gives (the same values, bit for bit), and its gradients; other positions keep h."""
    from syntaxnmt.model.context import gather_context

    torch.manual_seed(0)
    block = HierarchicalContext(D, 4, 32, dropout=0.0).train()
    g = torch.Generator().manual_seed(3)
    states = torch.randn(5, 6, D, generator=g)
    pad = torch.arange(6)[None, :] >= torch.tensor([6, 3, 5, 2, 4])[:, None]
    rows = torch.tensor([[-1, -1], [0, -1], [1, 0], [-1, -1], [3, 2]])  # rows 0 and 3 start their documents

    def run(fast: bool):
        h = states.clone().requires_grad_(True)
        block.zero_grad()
        cache, ctx_pad = block.gathered_context(h, pad, rows)
        out = block(h, None, ctx_pad, cache=cache)[0] if fast else block._read(h, ctx_pad, gather_context(cache), False)[0]
        out.masked_fill(pad[..., None], 0.0).square().sum().backward()
        return out, h.grad, {n: p.grad.clone() for n, p in block.named_parameters()}

    (fast, fast_h, fast_p), (plain, plain_h, plain_p) = run(True), run(False)
    real = ~pad
    torch.testing.assert_close(fast[real], plain[real], rtol=0, atol=1e-6)
    torch.testing.assert_close(fast[[0, 3]], states[[0, 3]], rtol=0, atol=0)  # no context: h as it is
    assert not torch.allclose(fast[1][real[1]], states[1][real[1]])
    torch.testing.assert_close(fast_h, plain_h, rtol=1e-5, atol=1e-5)
    for name in plain_p:
        torch.testing.assert_close(fast_p[name], plain_p[name], rtol=1e-5, atol=1e-5)


def test_the_gate_is_a_fraction_and_closing_it_keeps_the_normalized_states():
    block = _block()
    h, ctx, pad = _inputs()
    gate = block.gate_values(h, torch.randn(B, S, D))
    assert bool(((gate > 0) & (gate < 1)).all())
    saturated = block.gate_values(h, torch.randn(B, S, D) * 1e4)  # float32 rounds, never leaves [0, 1]
    assert bool(((saturated >= 0) & (saturated <= 1)).all())
    with torch.no_grad():  # λ = 0 everywhere: h~ = LayerNorm(h)
        block.gate.weight.zero_()
        block.gate.bias.fill_(-1e4)
    out, weights = block(h, ctx, pad, need_weights=True)
    torch.testing.assert_close(out[0], torch.nn.functional.layer_norm(h[0], (D,)), rtol=1e-5, atol=1e-5)
    assert weights.gate.abs().max() == 0  # the exported gate is the one applied


def test_gradients_reach_the_context_states():
    block = _block().train()
    h, ctx, pad = _inputs()
    ctx.requires_grad_(True)
    block(h, ctx, pad)[0].sum().backward()
    assert ctx.grad[0, 0, :3].abs().sum() > 0 and ctx.grad[0, 0, 3:].abs().sum() == 0


def _toy(n: int, rng):
    """Sentences of words 4-9 whose translation is the sentence and 12 or 13: 12 when the previous
    sentence holds the marker 10, 13 when it holds 11 (a rule only the context decides)."""
    import numpy as np

    src, tgt, ctx = [], [], []
    for _ in range(n):
        marker = int(rng.integers(2))
        previous = rng.integers(4, 10, int(rng.integers(3, 6)))
        previous = np.insert(previous, int(rng.integers(len(previous) + 1)), 10 + marker)
        current = rng.integers(4, 10, int(rng.integers(2, 5)))
        src.append(current), ctx.append([previous]), tgt.append(np.append(current, 12 + marker))
    return src, tgt, ctx


def test_a_tiny_han_model_learns_a_rule_only_the_previous_sentence_decides():
    """Issue 21: trained on the batches training reads (static shapes on CPU), HAN learns to read
    the previous sentence; without it (what a sentence-level model sees) it is back at chance."""
    import numpy as np

    from syntaxnmt.config import ModelConfig, TrainConfig
    from syntaxnmt.data.batches import make_batch, pad_batch, shape_bucket
    from syntaxnmt.model import build_model
    from syntaxnmt.training.step import forward_loss

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = ModelConfig(d_model=32, heads=4, ffn_dim=64, enc_layers=1, dec_layers=1, dropout=0.0, context={"kind": "han", "sentences": 2})
    t = TrainConfig(max_tokens=512, label_smoothing=0.0)
    model = build_model(cfg, 16, 16)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(120):
        src, tgt, ctx = _toy(32, rng)
        batch = make_batch(src, tgt, range(len(src)), context=ctx, context_size=2)
        batch = pad_batch(batch, *shape_bucket(batch, t.max_tokens, 4))
        loss, _ = forward_loss(model, batch, t)
        opt.zero_grad()
        (loss / batch.n_tgt_tokens).backward()
        opt.step()
    model.eval()
    src, tgt, ctx = _toy(400, np.random.default_rng(1))
    truth = torch.tensor([int(y[-1]) - 12 for y in tgt])

    def accuracy(contexts) -> float:
        batch = make_batch(src, tgt, range(len(src)), context=contexts, context_size=2)
        with torch.no_grad():
            out = model(batch)
            last = out.states[torch.arange(len(src)), torch.tensor([len(s) for s in src])]
            return float((out.project(last)[:, 12:14].argmax(-1) == truth).float().mean())

    assert accuracy(ctx) >= 0.95
    assert accuracy([[] for _ in src]) <= 0.6  # the current sentence alone: chance (400 items, 50 % ± 5)


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def docs_files(corpus, tmp_path_factory):
    from syntaxnmt.textio import read_lines

    folder = tmp_path_factory.mktemp("docs")
    out = {}
    for split in ("train", "dev", "test"):
        n = len(read_lines(corpus[split]["src"]))
        out[split] = folder / f"{split}.docs"
        out[split].write_text("".join(f"{split}{i // 3}\n" for i in range(n)))
    return out


def _train(corpus, docs_files, work, context: dict, **train):
    from conftest import deep_merge, quiet, tiny_tree

    from syntaxnmt.config import load_config
    from syntaxnmt.training.train import train as run

    tree = deep_merge(tiny_tree(corpus, work / "run", work / "prepared"), {"data": {"train_docs": str(docs_files["train"]), "dev_docs": str(docs_files["dev"])}, "model": {"context": context}, "train": train})
    cfg = load_config(None, tree)
    run(cfg, log=quiet)
    return cfg


def test_a_han_model_trains_from_a_sentence_model_and_translates_documents(corpus, docs_files, tmp_path, capsys):
    from test_cli import run_cli

    from syntaxnmt.checkpoint import load_checkpoint

    sentence = _train(corpus, docs_files, tmp_path / "sentence", {"kind": "none"})
    han = _train(corpus, docs_files, tmp_path / "han", {"kind": "han", "sentences": 2}, init_from=f"{sentence.work_dir}/best.pt", max_steps=6)
    weights = load_checkpoint(f"{han.work_dir}/best.pt")["model"]
    assert any(k.startswith("han.") for k in weights)
    src = tmp_path / "test.src"
    src.write_text("".join(open(corpus["test"]["src"]).readlines()[:6]))
    docs = tmp_path / "test.docs"
    docs.write_text("".join(open(docs_files["test"]).readlines()[:6]))
    code, with_docs, err = run_cli(capsys, "translate", "--checkpoint", f"{han.work_dir}/best.pt", "-i", src, "--docs", docs)
    assert code == 0, err
    code, without, err = run_cli(capsys, "translate", "--checkpoint", f"{han.work_dir}/best.pt", "-i", src)
    assert code == 0, err
    assert len(with_docs.splitlines()) == len(without.splitlines()) == 6
    # First sentences of documents have no context: the same translation either way.
    assert with_docs.splitlines()[0] == without.splitlines()[0] and with_docs.splitlines()[3] == without.splitlines()[3]
    # A sentence-level model ignores --docs.
    code, a, _ = run_cli(capsys, "translate", "--checkpoint", f"{sentence.work_dir}/best.pt", "-i", src, "--docs", docs)
    code2, b, _ = run_cli(capsys, "translate", "--checkpoint", f"{sentence.work_dir}/best.pt", "-i", src)
    assert code == code2 == 0 and a == b


def test_a_concat_2_to_2_model_outputs_the_current_sentence_only(corpus, docs_files, tmp_path, capsys):
    from test_cli import run_cli

    cfg = _train(corpus, docs_files, tmp_path / "concat", {"kind": "concat", "sentences": 1, "side": "both"}, max_steps=4)
    src = tmp_path / "test.src"
    src.write_text("".join(open(corpus["test"]["src"]).readlines()[:3]))
    docs = tmp_path / "test.docs"
    docs.write_text("d\nd\nd\n")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", f"{cfg.work_dir}/best.pt", "-i", src, "--docs", docs)
    assert code == 0, err
    assert len(out.splitlines()) == 3 and "<sep>" not in out


# ---------------------------------------------------------------- target side (the HAN decoder)

V = 24


def _context_model(side: str = "target", seed: int = 0, tie: str = "decoder"):
    from syntaxnmt.config import ModelConfig
    from syntaxnmt.model import build_model

    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=16, heads=4, ffn_dim=32, enc_layers=1, dec_layers=2, dropout=0.0, tie_embeddings=tie, context={"kind": "han", "sentences": 2, "side": side})
    return build_model(cfg, V, V).eval()


def _doc_batch():
    """Three sentences: with two previous sentences (the second of them short), with one, at a document start."""
    import numpy as np

    from syntaxnmt.data.batches import make_batch

    a = lambda *x: np.array(x, dtype=np.int64)  # noqa: E731
    src = [a(5, 6, 7), a(8, 9), a(10, 11, 12, 13)]
    tgt = [a(14, 15, 16), a(17, 18, 19, 20), a(21, 5)]
    ctx_src = [[a(6, 6), a(7, 8, 9)], [a(11, 12, 13)], []]
    ctx_tgt = [[a(9, 10, 11, 12), a(13)], [a(22, 23)], []]
    return make_batch(src, tgt, [0, 1, 2], context=ctx_src, context_size=2, context_tgt=ctx_tgt)


def _gold_log_probs(model, batch):
    from syntaxnmt.inputs import PAD

    lp = torch.log_softmax(model(batch).logits.float(), dim=-1)
    return lp.gather(-1, batch.tgt_out[..., None]).squeeze(-1).masked_fill(batch.tgt_out.eq(PAD), 0.0)


def test_the_target_side_block_has_its_own_parameters_and_side_both_has_two():
    assert _context_model("target").han is None and _context_model("target").han_target is not None
    both = _context_model("both")
    assert both.han is not None and both.han_target is not None and both.han is not both.han_target
    assert _context_model("source").han_target is None


@pytest.mark.parametrize("side", ["target", "both"])
def test_a_document_start_gives_exactly_the_sentence_models_output(side):
    """Two-stage training: a context model holding a sentence model's weights (its HAN blocks as
    initialized) gives that model's logits wherever there is no previous sentence."""
    from syntaxnmt.config import ModelConfig
    from syntaxnmt.model import build_model

    model = _context_model(side)
    sentence = build_model(ModelConfig(d_model=16, heads=4, ffn_dim=32, enc_layers=1, dec_layers=2, dropout=0.0), V, V).eval()
    missing = model.load_state_dict(sentence.state_dict(), strict=False).missing_keys
    assert missing and all(k.startswith(("han.", "han_target.")) for k in missing)
    batch = _doc_batch()
    with torch.no_grad():
        with_context, alone = model(batch).logits, sentence(batch).logits
    torch.testing.assert_close(with_context[2], alone[2], rtol=0, atol=0)
    assert not torch.allclose(with_context[0], alone[0]) and not torch.allclose(with_context[1], alone[1])


def test_target_context_padding_and_missing_sentences_get_no_weight():
    from syntaxnmt.inputs import PAD

    model = _context_model("target")
    batch = _doc_batch()
    with torch.no_grad():
        result = model(batch, need_weights=True)
        out, weights = result.logits, result.target_context_attention  # the decoder-side block's, on the decoder output
        assert result.encoder.context_attention is None  # side: target has no encoder-side block
        word, sentence, gate = weights.word, weights.sentence, weights.gate
        # row 0's second previous sentence is BOS + 1 token: the other positions are padding
        assert word.shape[:2] == (6, 2) and word[0, 1, :, :, 2:].abs().max() == 0  # 3 sentences, then their 3 previous ones as rows
        assert sentence[1, :, :, 1].abs().max() == 0  # row 1 has one previous sentence
        torch.testing.assert_close(sentence[0].sum(-1), torch.ones_like(sentence[0].sum(-1)))
        assert gate.shape == batch.tgt_in.shape and gate[2].abs().max() == 0  # row 2 starts its document: gate shut
        assert bool(((gate[0] > 0) & (gate[0] < 1)).all())
        # More padding on every row (the context sentences' too) changes nothing.
        longer = _doc_batch()
        grow = lambda x: torch.cat([x, torch.full((x.size(0), 3), PAD)], dim=-1)  # noqa: E731
        longer.src, longer.tgt_in, longer.tgt_out = grow(longer.src), grow(longer.tgt_in), grow(longer.tgt_out)
        torch.testing.assert_close(model(longer).logits[:, : out.size(1)], out)


def test_the_target_side_block_is_causal_and_incremental_decoding_gives_the_forced_scores():
    """Position t reads the previous sentences and its own decoder state only: a changed later
    target token changes nothing before it, and decoding step by step (the state expanded over a
    beam of 2, as beam search does) gives the teacher-forced log-probabilities."""
    model = _context_model("both")
    batch = _doc_batch()
    with torch.no_grad():
        full = model(batch).logits
        changed = _doc_batch()
        changed.tgt_in[0, 3] = 7
        torch.testing.assert_close(model(changed).logits[0, :3], full[0, :3], rtol=0, atol=0)
        assert not torch.allclose(model(changed).logits[0, 3], full[0, 3])
        forced = _gold_log_probs(model, batch)[:3]
        beam = 2
        enc = _with_computed_target_context(model, batch)
        state = model.init_state(enc.index_select(torch.arange(3).repeat_interleave(beam)))
        steps = []
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = model.step(batch.tgt_in[:3, t].repeat_interleave(beam), state)
            steps.append(log_probs.view(3, beam, -1))
            if t == 1:  # beams swapped across sentences (sources not kept): the state follows
                index = torch.arange(3 * beam).view(3, beam).flip(1).reshape(-1)
                state = model.reorder_state(state, index, sources_kept=False)
        stepped = torch.stack(steps, dim=2)  # (3, beam, T, V)
    gold = stepped.gather(-1, batch.tgt_out[:3, None, :, None].expand(3, beam, -1, 1)).squeeze(-1)
    gold = gold.masked_fill(batch.tgt_out[:3].eq(0)[:, None], 0.0)
    torch.testing.assert_close(gold, forced[:, None].expand_as(gold), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("index", [[0, 0, 0, 1, 1, 1, 2, 2, 2], [1, 1, 0, 0], [0, 0, 1, 2, 2, 2], [2, 2, 2]], ids=["beams", "sentences-dropped", "not-blocks", "no-context"])
def test_beam_rows_read_their_sentences_target_context_as_copied_rows_do(index):
    """Incremental decoding of an encoder output expanded over hypotheses (``index_select``): the
    rows read their sentence's target-side context through ``target_context_index`` -- blocks of
    rows of one sentence as one block of queries, other layouts gathered, a wave without context
    skipped -- and get what the reference gets, every row with its own copy of the context."""
    from dataclasses import replace

    from syntaxnmt.model.context import beam_blocks

    model = _context_model("both")
    batch = _doc_batch()
    index = torch.tensor(index)
    with torch.no_grad():
        enc = _with_computed_target_context(model, batch)
        grouped = enc.index_select(index)
        assert grouped.target_context is enc.target_context and grouped.target_context_index.tolist() == index.tolist()
        copied = replace(grouped, target_context=tuple(t.index_select(0, index) for t in enc.target_context), target_context_index=None)
        states = [model.init_state(grouped), model.init_state(copied)]
        for t in range(3):
            tokens = batch.tgt_in[index, t]
            (fast, states[0]), (reference, states[1]) = (model.step(tokens, state) for state in states)
            torch.testing.assert_close(fast, reference, rtol=0, atol=1e-6)
    assert beam_blocks(torch.tensor([0, 0, 0, 1, 1, 1])) is not None and beam_blocks(torch.tensor([0, 0, 1, 2, 2, 2])) is None
    heads, r = beam_blocks(torch.tensor([4, 4, 2, 2]))
    assert heads.tolist() == [4, 2] and r == 2


def _with_computed_target_context(model, batch):
    """The encoder output of a batch of rows with the target-side context states computed, as a
    translation batch brings them (``batch.context_states``): incremental decoding reads them so.
    Each row's own states -- its decoder states, teacher-forced, reading its memory (after the
    source-side HAN for side both) -- gathered for the rows that read it."""
    from dataclasses import replace

    from syntaxnmt.inputs import PAD
    from syntaxnmt.model.context import gather_rows

    enc = model.encode(batch)
    states = model.decode_states(batch.tgt_in, enc.hidden, enc.pad_mask)
    return replace(enc, target_context=gather_rows(states, batch.tgt_in.eq(PAD), batch.context_rows), target_context_rows=None)


def test_gradients_reach_the_target_block_and_the_decoder_through_the_context():
    model = _context_model("target", tie="none").train()
    batch = _doc_batch()
    model(batch).logits[:3].logsumexp(-1).sum().backward()  # the three sentences, not their context rows
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.han_target.parameters())
    embed = model.tgt_embed.tokens.weight.grad
    assert embed[22].abs().sum() > 0 and embed[10].abs().sum() > 0  # tokens read only as context translations
    assert embed[4].abs().sum() == 0  # a token nobody reads


def _spy_on_context(model) -> tuple[dict, dict]:
    """Record what every batch gives the model as target-side context: per sentence id, the
    context rows' decoder inputs (without padding) of a batch of rows (training, scoring), and
    the computed states and padding of a translation batch (``batch.context_states``)."""
    from syntaxnmt.inputs import PAD

    rows_seen: dict[int, list[list[int]]] = {}
    states_seen: dict[int, tuple] = {}
    encode = model.encode

    def spy(batch, *args, **kwargs):
        for row, i in enumerate(batch.ids.tolist()):
            if batch.context_rows is not None and i >= 0:
                rows_seen[i] = [[t for t in batch.tgt_in[r].tolist() if t != PAD] for r in batch.context_rows[row].tolist() if r >= 0]
            if batch.context_states is not None and len(batch.context_states) > 2:  # (a source-only context: not a translation batch)
                states_seen[i] = (batch.context_states[2][row], batch.context_states[3][row])
        return encode(batch, *args, **kwargs)

    model.encode = spy
    return rows_seen, states_seen


@pytest.mark.parametrize("side", ["target", "both"])
def test_a_target_side_han_model_translates_documents_from_its_own_translations(corpus, docs_files, tmp_path, capsys, side):
    import numpy as np
    from test_cli import run_cli

    from syntaxnmt.decoding.loading import load_model
    from syntaxnmt.decoding.output import translate_outputs
    from syntaxnmt.decoding.scoring import ScoredPair, target_nll
    from syntaxnmt.errors import UserError
    from syntaxnmt.inputs import BOS
    from syntaxnmt.textio import read_lines

    cfg = _train(corpus, docs_files, tmp_path / "han-target", {"kind": "han", "sentences": 2, "side": side}, max_steps=6)
    lines = read_lines(corpus["test"]["src"])[:6]
    docs = read_lines(docs_files["test"])[:6]  # two documents of three lines
    src, docs_file = tmp_path / "test.src", tmp_path / "test.docs"
    src.write_text("".join(f"{line}\n" for line in lines))
    docs_file.write_text("".join(f"{d}\n" for d in docs))
    code, with_docs, err = run_cli(capsys, "translate", "--checkpoint", f"{cfg.work_dir}/best.pt", "-i", src, "--docs", docs_file)
    assert code == 0, err
    code, without, err = run_cli(capsys, "translate", "--checkpoint", f"{cfg.work_dir}/best.pt", "-i", src)
    assert code == 0, err
    assert len(with_docs.splitlines()) == 6
    assert [with_docs.splitlines()[i] for i in (0, 3)] == [without.splitlines()[i] for i in (0, 3)]  # document starts

    # The context translations the model reads are its own previous outputs, nearest first.
    model, mcfg, toks = load_model(f"{cfg.work_dir}/best.pt", torch.device("cpu"))
    seen, states = _spy_on_context(model)
    outs = translate_outputs(model, mcfg, toks, lines, mcfg.decode, torch.device("cpu"), docs=docs)
    assert "\n".join(o[0].text for o in outs) == with_docs.rstrip("\n")
    with torch.no_grad():
        for i in range(6):
            ctx, pad = states[i]
            for j in range(2):
                p = i - 1 - j
                if j >= i % 3:  # no such previous sentence in the document
                    assert bool(pad[j].all()), i
                    continue
                # the states the model computes for its own translation of sentence p (teacher-forced,
                # with p's own previous sentences as its source context): the full model run on p
                ids = lambda line: np.asarray(toks.src.encode(line), dtype=np.int64)  # noqa: E731
                expected = _own_states(model, ids(lines[p]), np.asarray(outs[p][0].tokens, dtype=np.int64), [ids(lines[q]) for q in range(p - 1, (p // 3) * 3 - 1, -1)], 2)
                n = len(outs[p][0].tokens) + 1
                assert pad[j].tolist() == [False] * n + [True] * (pad.size(1) - n), i
                torch.testing.assert_close(ctx[j, :n], expected, rtol=0, atol=1e-5)

    # Scoring reads the given (reference) translations of the context instead.
    refs = read_lines(corpus["test"]["tgt"])[:6]
    seen.clear()
    pair = ScoredPair(lines[2], refs[2], [lines[1], lines[0]], [refs[1], refs[0]])
    nll = target_nll(model, toks, [pair], torch.device("cpu"))
    assert seen[0] == [[BOS, *toks.tgt.encode(refs[1])], [BOS, *toks.tgt.encode(refs[0])]]
    other = target_nll(model, toks, [ScoredPair(lines[2], refs[2], [lines[1], lines[0]], [refs[4], refs[3]])], torch.device("cpu"))
    alone = target_nll(model, toks, [ScoredPair(lines[2], refs[2])], torch.device("cpu"))
    assert nll != other and nll != alone  # the target context changes the score
    with pytest.raises(UserError, match="target-side HAN model scores with the translations of the context sentences"):
        target_nll(model, toks, [ScoredPair(lines[2], refs[2], [lines[1]], [])], torch.device("cpu"))


# ---------------------------------------------------------------- document-contiguous batches


def _doc_split():
    """A prepared-split stand-in: documents of 4, 1 and 3 sentences (random ids and lengths)."""
    import numpy as np

    from syntaxnmt.data.batches import RaggedArray, Split

    rng = np.random.default_rng(3)
    docs = np.array([0, 0, 0, 0, 1, 2, 2, 2])

    def ragged(seqs):
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
        return RaggedArray(np.concatenate(seqs).astype(np.int32), offsets)

    src = [rng.integers(5, V, rng.integers(2, 7)) for _ in docs]
    tgt = [rng.integers(5, V, rng.integers(2, 7)) for _ in docs]
    return Split("train", {"src": ragged(src), "tgt": ragged(tgt), "doc": ragged([[d] for d in docs])})


def _context_states(model, sentences, k: int):
    """(ctx (1, k, L, D), padding (1, k, L)): ``sentences`` (nearest first) as context states."""
    d = model.cfg.d_model
    ctx = torch.zeros(1, k, max((len(s) for s in sentences), default=1), d)
    pad = torch.ones(1, k, ctx.size(2), dtype=torch.bool)
    for j, s in enumerate(sentences):
        ctx[0, j, : len(s)], pad[0, j, : len(s)] = s, False
    return ctx, pad


def _own_states(model, src, tgt, previous_src, k: int):
    """The states a target-side HAN reads of a sentence (Miculicich et al. 2018, Sec. 2.3): the full
    model run on it alone, teacher-forced, with its own previous source sentences (nearest first,
    each encoded alone) as its source context and no target context, so that its output states
    are those of the last decoder layer before the decoder-side HAN."""
    from syntaxnmt.data.batches import make_batch

    alone = make_batch([src], [tgt], [0])
    alone.context_states = _context_states(model, [model.encode_states(make_batch([p], None, [0]).src)[0] for p in previous_src[:k]], k)
    return model(alone).states[0]


def _per_sentence_log_probs(model, split, i: int, k: int):
    """The straightforward way, one sentence at a time: each of its previous sentences encoded on
    its own (the source-side context states) and run through the full model on its own, with its
    own previous sentences as context (the target-side ones), handed to the model as context states."""
    from syntaxnmt.data.batches import make_batch

    previous = split.previous(k)
    before = lambda j: [split["src"][int(q)] for q in previous[j] if q >= 0]  # noqa: E731
    batch = make_batch([split["src"][i]], [split["tgt"][i]], [i])
    src_states = [model.encode_states(make_batch([split["src"][int(j)]], None, [j]).src)[0] for j in previous[i] if j >= 0]
    tgt_states = [_own_states(model, split["src"][int(j)], split["tgt"][int(j)], before(int(j)), k) for j in previous[i] if j >= 0]
    batch.context_states = (*_context_states(model, src_states, k), *_context_states(model, tgt_states, k))
    return _gold_log_probs(model, batch)[0]


@pytest.mark.parametrize("first", [2, 3])
@pytest.mark.parametrize("side", ["source", "target", "both"])
def test_a_document_batch_gives_the_per_sentence_log_probs(side, first):
    """Issue 21, context cost: one encoder pass and one decoder pass over a batch of document runs,
    each sentence's context gathered from the rows of the batch, computes what running every
    sentence's previous sentences through the model on their own computes -- for a sentence whose
    previous sentences are lead-in rows (the run starts inside its document), at document starts,
    and inside runs. With side both a previous translation's states read its own source context,
    so a run starting at the fourth sentence needs the first one too (2k lead-ins)."""
    import numpy as np

    from syntaxnmt.data.batches import collate
    from syntaxnmt.data.documents import DocumentContext

    model = _context_model(side)
    split = _doc_split()
    indices = list(range(first, 8))  # document 0 from its third (fourth) sentence, documents 1 and 2 whole
    batch = collate(split, indices, context=DocumentContext("han", 2, side))
    ids = batch.ids.tolist()
    if first == 2:
        assert ids == [2, 3, 4, 5, 6, 7, 0, 1]  # the lead-ins after the sentences
        assert batch.context_rows[:6].tolist() == [[7, 6], [0, 7], [-1, -1], [-1, -1], [3, -1], [4, 3]]
    else:  # lead-ins 1 and 2; for side both 0 too, read by 1 (and 2) for their own source context
        assert ids == [3, 4, 5, 6, 7, 1, 2] + ([0] if side == "both" else [])
    reading = len(indices) + (2 if side == "both" else 0)  # the rows whose own context is read
    previous = split.previous(2)
    for row in range(len(ids)):
        expected = [ids.index(int(j)) if j >= 0 else -1 for j in previous[ids[row]]] if row < reading else [-1, -1]
        assert batch.context_rows[row].tolist() == expected, row
    n_loss = len(indices)
    assert batch.tgt_out[n_loss:].eq(0).all() and batch.n_tgt_tokens == sum(len(split["tgt"][i]) + 1 for i in indices)
    with torch.no_grad():
        together = _gold_log_probs(model, batch)
        for row, i in enumerate(indices):
            alone = _per_sentence_log_probs(model, split, i, 2)
            n = len(alone)
            torch.testing.assert_close(together[row, :n], alone, rtol=0, atol=1e-5)
            assert bool(together[row, n:].eq(0).all())
        if side == "both" and first == 3:  # the lead-in 0 matters: without it sentence 3 reads other states
            cut = collate(split, indices, context=DocumentContext("han", 2, side))
            cut.context_rows[cut.context_rows == ids.index(0)] = -1
            assert not torch.allclose(_gold_log_probs(model, cut)[0], together[0], atol=1e-4)
    # Training (no dropout here) with the CPU's execution computes the encoder on the real positions
    # only (CPU packing, a small granule so that this batch is packed): the same log-probabilities.
    install(model).train()
    model.stacks.pack_granule = 4
    assert model.stacks.rows(model, batch.src_pad_mask) is not None and model.stacks.rows(model, batch.tgt_out.eq(0)) is not None
    trained = _gold_log_probs(model, batch)
    torch.testing.assert_close(trained, together, rtol=0, atol=1e-5)
    # Gradients reach every HAN parameter through the gathered rows.
    (-trained.sum()).backward()
    blocks = [b for b in (model.han, model.han_target) if b is not None]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for b in blocks for p in b.parameters())
    assert np.isfinite(sum(float(p.grad.abs().sum()) for p in model.parameters() if p.grad is not None))


@pytest.mark.parametrize("side", ["target", "both"])
def test_a_batch_of_given_contexts_gives_the_per_sentence_log_probs(side):
    """Scoring and the attention export hand every sentence its previous sentences as a list
    (nearest first, :func:`syntaxnmt.data.batches.context_batch`): with side both the list reaches
    2k back and the k context rows read their own previous sentences, so the log-probabilities
    are the per-sentence reference's, as in training."""
    from syntaxnmt.data.batches import context_batch
    from syntaxnmt.data.documents import DocumentContext

    model = _context_model(side)
    split = _doc_split()
    doc = split.docs
    indices = [3, 2, 7, 5]
    before = [[j for j in range(i - 1, -1, -1) if doc[j] == doc[i]] for i in indices]  # the whole document before, nearest first
    src_ctx = [[split["src"][j] for j in b] for b in before]
    tgt_ctx = [[split["tgt"][j] for j in b] for b in before]
    batch = context_batch(DocumentContext("han", 2, side), [split["src"][i] for i in indices], [split["tgt"][i] for i in indices], range(4), src_ctx, tgt_ctx)
    # rows 4-8: sentences 2, 1, 0, 6, 5 (each once); with side both 2 and 1 read 1, 0 and 0, and 6 reads 5
    own = [[5, 6], [6, -1], [-1, -1], [8, -1], [-1, -1]] if side == "both" else [[-1, -1]] * 5
    assert batch.context_rows.tolist() == [[4, 5], [5, 6], [7, 8], [-1, -1], *own]
    with torch.no_grad():
        together = _gold_log_probs(model, batch)
        for row, i in enumerate(indices):
            alone = _per_sentence_log_probs(model, split, i, 2)
            torch.testing.assert_close(together[row, : len(alone)], alone, rtol=0, atol=1e-5)


def test_every_context_kind_of_the_config_has_its_context_model():
    """``model.context.kind`` is looked up in one registry: concatenation reads nothing in the
    network (its context is in the input sequences), HAN reads with its blocks on the sides it has."""
    from typing import get_args

    from syntaxnmt.config import ContextConfig
    from syntaxnmt.model.context import CONTEXT_MODELS, ContextModel, HanContext

    assert set(CONTEXT_MODELS) == set(get_args(ContextConfig.model_fields["kind"].annotation))
    assert CONTEXT_MODELS["concat"] is ContextModel and CONTEXT_MODELS["han"] is HanContext
    source, target = _context_model("source"), _context_model("target")
    assert isinstance(source.context, HanContext) and source.context.changes_encoder_output and source.context.target is None
    assert not target.context.changes_encoder_output and target.context.target is target.han_target


# ---------------------------------------------------------------- the kinds: one table, one registry


def test_every_context_kind_is_described_and_its_description_matches_its_model():
    """Each ``model.context.kind`` is in the config's table (CONTEXT_KINDS: what the code around the
    network asks of it) and in the model's registry (CONTEXT_MODELS), and the two agree: a kind
    that reads the previous sentences' states holds context blocks on every side it accepts and
    overrides the reads, a kind that does not (the sentence model, concatenation) holds none and
    reads nothing; a side outside the kind's ``sides`` is refused at load."""
    from typing import get_args

    from pydantic import ValidationError

    from syntaxnmt.config import CONTEXT_KINDS, ContextConfig, ModelConfig
    from syntaxnmt.model.context import CONTEXT_MODELS, ContextModel

    assert set(get_args(ContextConfig.model_fields["kind"].annotation)) == set(CONTEXT_KINDS) == set(CONTEXT_MODELS)
    for kind, described in CONTEXT_KINDS.items():
        model = CONTEXT_MODELS[kind]
        for side in ("source", "target", "both"):
            if side not in described.sides:
                with pytest.raises(ValidationError, match=f"model.context.side {side}"):
                    ContextConfig(kind=kind, side=side)
                continue
            cfg = ModelConfig(d_model=16, heads=4, ffn_dim=32, enc_layers=1, dec_layers=1, context={"kind": kind, "side": side})
            assert cfg.context.described is described and cfg.context.reads_states == described.reads_states
            blocks = model.blocks(cfg)
            assert any(b is not None for b in blocks) == described.reads_states, (kind, side)
            if described.reads_states:  # the block on the side it reads
                assert (blocks[0] is not None) == (side != "target") and (blocks[1] is not None) == (side != "source"), (kind, side)
        reads = [getattr(model, name) is not getattr(ContextModel, name) for name in ("read_source", "read_target", "memory")]
        assert all(reads) if described.reads_states else not any(reads), kind
    assert [k for k, d in CONTEXT_KINDS.items() if d.concatenates] == ["concat"] and [k for k, d in CONTEXT_KINDS.items() if d.reads_states] == ["han"]
    assert not ContextConfig().documents and all(ContextConfig(kind=k).documents for k in CONTEXT_KINDS if k != "none")


def kind_comparisons(root) -> list[str]:
    """``file:line`` of every comparison of a ``kind`` (an attribute or a name) with a context kind's
    name (== / != / in / not in) in the package's modules but config.py and model/context.py."""
    import ast
    from pathlib import Path

    from syntaxnmt.config import CONTEXT_KINDS

    def strings(node) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        return set()

    def is_kind(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "kind") or (isinstance(node, ast.Name) and node.id.endswith("kind"))

    root = Path(root)
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in ("config.py", "model/context.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(is_kind(o) for o in operands) and any(strings(o) & set(CONTEXT_KINDS) for o in operands):
                    found.append(f"{rel}:{node.lineno}")
    return found


def test_no_module_but_the_config_and_the_context_models_compares_context_kinds(tmp_path):
    """What a module needs of a context kind is a property (``concatenates``, ``reads_states``,
    ``documents`` ...), so a new kind touches config.py, model/context.py and at most one
    data-side function -- not the modules that batch, train, decode, serve or analyse."""
    from pathlib import Path

    import syntaxnmt

    assert kind_comparisons(Path(syntaxnmt.__file__).parent) == []
    (tmp_path / "data").mkdir()  # the check finds the comparisons it is meant to find
    (tmp_path / "data" / "x.py").write_text('if context.kind == "han":\n    pass\nhan = cfg.model.context.kind in ("concat", "x")\nok = arr.dtype.kind not in "iu"\n')
    assert kind_comparisons(tmp_path) == ["data/x.py:1", "data/x.py:3"]
