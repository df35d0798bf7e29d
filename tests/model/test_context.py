"""HAN (Miculicich et al. 2018): the formulas of the hierarchical context block, and a context model
trained, decoded with --docs and compared with its sentence-level behaviour."""

from __future__ import annotations

import pytest
import torch

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
    out = block(h, ctx, pad)
    torch.testing.assert_close(out[1], h[1], rtol=0, atol=0)
    assert not torch.allclose(out[0], h[0])


def test_padding_and_missing_sentences_get_no_weight():
    block = _block()
    h, ctx, pad = _inputs()
    out = block(h, ctx, pad, need_weights=True)
    word, sentence = block.last_weights
    assert word.shape == (B, K, 4, S, SC) and sentence.shape == (B, 4, S, K)
    assert word[0, 0, :, :, 3:].abs().max() == 0  # padding of a short sentence
    assert sentence[0, :, :, 2].abs().max() == 0  # the missing third sentence
    torch.testing.assert_close(sentence[0].sum(-1), torch.ones(4, S))
    changed = ctx.clone()
    changed[0, 0, 3:] = 100.0  # what padding and missing sentences hold does not matter
    changed[0, 2] = -100.0
    torch.testing.assert_close(block(h, changed, pad), out)


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
    out = block(h, ctx, pad)
    torch.testing.assert_close(out[0], torch.nn.functional.layer_norm(h[0], (D,)), rtol=1e-5, atol=1e-5)


def test_gradients_reach_the_context_states():
    block = _block().train()
    h, ctx, pad = _inputs()
    ctx.requires_grad_(True)
    block(h, ctx, pad).sum().backward()
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
    from syntaxnmt.data.batches import make_batch, pad_batch, round_up, shape_bucket
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
        batch = pad_batch(batch, *shape_bucket(batch, t.max_tokens, 4), context_length=int(round_up(batch.context.size(2), 4)))
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
