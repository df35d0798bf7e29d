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
