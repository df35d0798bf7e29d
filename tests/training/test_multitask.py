"""Multi-task learning (syntaxnmt.training.multitask): the losses against their formulas, the classifiers on
the model, training, checkpoints, and translation of raw text with no parse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import deep_merge, quiet, tiny_tree

from syntaxnmt.config import load_config
from syntaxnmt.data.batches import collate, pad_batch
from syntaxnmt.data.prepare import load_split, load_tokenizers, prepare
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import EOS, PAD, SourceFeatures
from syntaxnmt.model import build_model
from syntaxnmt.model.attention import MultiHeadAttention
from syntaxnmt.model.heads import BiaffineParser
from syntaxnmt.model.syntax_attention import ParentAttention
from syntaxnmt.training.multitask import MultitaskObjective, lisa_loss, multitask_objective, parse_loss, tagging_loss, token_mask
from syntaxnmt.training.objectives import training_objectives
from syntaxnmt.training.optim import build_optimizer
from syntaxnmt.training.step import objective_requests, update
from syntaxnmt.training.train import train

ALL_TASKS = {
    "pos": {"weight": 1.0, "layer": 0},
    "deprel": {"weight": 1.0, "layer": 0},
    "lisa": {"weight": 1.0, "layer": 1, "heads": [0, 2]},
    "parse": {"weight": 1.0, "layer": -1, "arc_dim": 16, "label_dim": 8},
}


@pytest.fixture(scope="module")
def parsed(corpus, tmp_path_factory):
    """``parsed(multitask=None, work_dir=None, **extra) -> Config``: a tiny two-layer model on the
    synthetic corpus with its CoNLL-U parses (prepared once)."""
    prepared = tmp_path_factory.mktemp("parsed_prepared")
    runs = tmp_path_factory.mktemp("mtl_runs")
    data = {"annotate": "conllu", "train_conllu": str(corpus["train"]["conllu"]), "dev_conllu": str(corpus["dev"]["conllu"])}
    counter = {"n": 0}

    def make(multitask: dict | None = None, work_dir: Path | None = None, **extra) -> "Config":  # noqa: F821
        counter["n"] += 1
        tree = deep_merge(tiny_tree(corpus, work_dir or runs / f"run{counter['n']}", prepared), {"data": data, "model": {"enc_layers": 2}, "train": {"multitask": multitask or {}}})
        return load_config(None, deep_merge(tree, extra))

    prepare(make(), log=quiet)
    return make


# ---------------------------------------------------------------- the losses


def test_lisa_loss_equals_its_formula():
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(2, 2, 5, 5), dim=-1)  # (B, heads, S, S)
    src = torch.tensor([[7, 8, 9, EOS, PAD], [7, 8, 9, 10, EOS]])
    parent = torch.tensor([[1, 1, 1, 3, 4], [2, 2, 2, 2, 4]])  # roots (1; 2) attend to themselves
    keep = token_mask(src)
    expected = 0.0
    for b in range(2):
        for h in range(2):
            for i in range(5):
                if src[b, i] not in (EOS, PAD):
                    expected -= float(torch.log(weights[b, h, i, parent[b, i]]))
    assert lisa_loss(weights, parent, keep).item() == pytest.approx(expected, rel=1e-6)


def test_lisa_gradient_vanishes_as_attention_becomes_the_one_hot_parent():
    parent = torch.tensor([[2, 0, 2, 3]])  # token 2 is the root: it attends to itself
    keep = token_mask(torch.tensor([[5, 6, 7, EOS]]))
    one_hot = F.one_hot(parent, 4).float()[:, None]  # (1, 1, S, S)
    norms = []
    for margin in (0.0, 2.0, 5.0, 10.0, 20.0):
        scores = (margin * one_hot).requires_grad_()
        weights = torch.softmax(scores, dim=-1)
        lisa_loss(weights, parent, keep).backward()
        expected = (weights - one_hot).detach() * keep[:, None, :, None]  # d/ds of -log softmax(s)[p]
        assert torch.allclose(scores.grad, expected, atol=1e-6)
        norms.append(scores.grad.norm().item())
    assert all(a > b for a, b in zip(norms, norms[1:]))
    assert norms[-1] < 1e-7 and norms[0] > 1.0


def test_tagging_loss_is_the_cross_entropy_of_real_pieces():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    tags = torch.tensor([[3, 4, 1, 0], [5, 2, 3, 1]])
    keep = token_mask(torch.tensor([[9, 9, EOS, PAD], [9, 9, 9, EOS]]))
    expected = 0.0
    for b, i in keep.nonzero().tolist():
        row = logits[b, i].double().exp()
        expected -= float(torch.log(row[tags[b, i]] / row.sum()))
    assert tagging_loss(logits, tags, keep).item() == pytest.approx(expected, rel=1e-6)


def test_biaffine_parser_loss_on_a_hand_made_tree():
    """'dogs chase cats' + EOS + padding: chase (1) is the root; dogs, cats hang from it."""
    torch.manual_seed(0)
    parser = BiaffineParser(d_model=8, arc_dim=4, label_dim=3, n_labels=5).eval()
    with torch.no_grad():
        for p in (parser.arc_U, parser.arc_u, parser.label_U):
            p.normal_()
    states = torch.randn(1, 5, 8)
    keep = torch.tensor([[True, True, True, False, False]])
    parent = torch.tensor([[1, 1, 1, 3, 4]])
    labels = torch.tensor([[3, 2, 4, 1, 0]])  # nsubj, root, obj (EOS and padding ids are ignored)
    arc, label = parse_loss(parser, states, parent, labels, keep)
    with torch.no_grad():
        r = parser.norm(states)[0]
        dep, head = parser.arc_dep(r), parser.arc_head(r)
        ldep, lhead = parser.label_dep(r), parser.label_head(r)
        want_arc = want_label = 0.0
        for i in range(3):
            s = torch.stack([dep[i] @ parser.arc_U @ head[j] + head[j] @ parser.arc_u for j in range(3)])  # candidates: the 3 words
            want_arc -= float(torch.log_softmax(s, 0)[parent[0, i]])
            h = lhead[parent[0, i]]
            sl = torch.stack([ldep[i] @ parser.label_U[k] @ h + parser.label_W.weight[k] @ torch.cat([ldep[i], h]) + parser.label_W.bias[k] for k in range(5)])
            want_label -= float(torch.log_softmax(sl, 0)[labels[0, i]])
    assert arc.item() == pytest.approx(want_arc, rel=1e-5)
    assert label.item() == pytest.approx(want_label, rel=1e-5)


def test_parent_attention_is_one_hot_in_evaluation_only():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, extensions=[ParentAttention([1, 3])])
    x = torch.randn(2, 4, 16)
    pad = torch.tensor([[False, False, False, False], [False, False, True, True]])
    feats = SourceFeatures(parent=torch.tensor([[1, 1, 1, 3], [1, 1, 2, 3]]))
    _, trained = mha(x, key_padding_mask=pad, need_weights=True, features=feats)
    mha.eval()
    _, w = mha(x, key_padding_mask=pad, need_weights=True, features=feats)
    assert not torch.isnan(w).any()
    onehot = F.one_hot(feats.parent, 4).float()
    assert torch.equal(w[0, 1], onehot[0]) and torch.equal(w[0, 3], onehot[0])
    assert torch.equal(w[1, 1, :2], onehot[1, :2])  # real rows of the padded sentence
    assert torch.allclose(w[:, [0, 2]], trained[:, [0, 2]])  # the other heads are untouched
    assert not torch.allclose(trained[0, 1], onehot[0])  # in training the head attends freely


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    "multitask, extra, message",
    [
        ({"pos": {"weight": 1.0, "layer": 2}}, {}, "train.multitask.pos.layer 2 out of range"),
        ({"lisa": {"weight": 1.0, "layer": [0, -2]}}, {}, "names a layer twice"),
        ({"lisa": {"weight": 1.0, "heads": [4]}}, {}, "train.multitask.lisa.heads"),
        ({"parse": {"weight": 1.0, "decay": "linear"}}, {}, "needs an argument"),
        ({"deprel": {"weight": -1.0}}, {}, "must be >= 0"),
        ({"lisa": {"inject_parse": True}}, {}, "lisa.weight > 0"),
        ({"pos": {"weight": 1.0}}, {"data": {"annotate": "none"}}, "set data.annotate"),
        ({"pos": {"weight": 1.0}}, {"model": {"arch": "rnn"}}, "model.arch transformer"),
    ],
)
def test_config_is_checked_at_load(parsed, multitask, extra, message):
    with pytest.raises(UserError, match=message.replace(".", r"\.").replace("[", r"\[")):
        parsed(multitask, **extra)


# ---------------------------------------------------------------- model and training


def test_only_the_supervised_layer_computes_weights(parsed, monkeypatch):
    cfg = parsed({"lisa": {"weight": 1.0, "layer": -1, "heads": [0]}})
    toks = load_tokenizers(cfg)
    model = build_model(cfg, **toks.vocab_sizes()).train()
    objective = multitask_objective(cfg)
    spec, reference, kwargs = objective_requests(model, [objective])
    assert spec.parent and not reference and kwargs == {"need_weights": False, "encoder_weights": frozenset({1})}
    explicit = []
    original = MultiHeadAttention.explicit
    monkeypatch.setattr(MultiHeadAttention, "explicit", lambda self, *a: explicit.append(self) or original(self, *a))
    out = model(collate(load_split(cfg, "train"), np.arange(4), spec), **kwargs)
    assert explicit == [model.encoder[1].self_attn]  # the other encoder layer and the decoder stay fused
    assert out.encoder.self_attention[0] is None and out.encoder.self_attention[1].shape[1] == cfg.model.heads
    assert len(out.encoder.layers) == 2


def test_auxiliary_losses_decrease_in_training(parsed):
    torch.manual_seed(0)
    cfg = parsed(ALL_TASKS, train={"lr": 3e-3, "warmup_steps": 5})
    model = build_model(cfg, **load_tokenizers(cfg).vocab_sizes()).train()
    assert set(model.multitask) == {"pos", "deprel", "parse"}
    objectives = training_objectives(cfg)
    opt, sched = build_optimizer(model, cfg.train)
    split = load_split(cfg, "train")
    group = [np.arange(0, 40)]
    history = []
    for step in range(25):
        stats = update(model, opt, sched, split, group, cfg.train, torch.device("cpu"), objectives, step)
        history.append({k: float(v) / stats["tokens"] for k, v in stats.items() if k not in ("loss", "tokens")})
    assert set(history[0]) == {"pos", "deprel", "lisa", "parse_arc", "parse_label"}
    for term in history[0]:
        assert history[-1][term] < 0.8 * history[0][term], (term, history[0][term], history[-1][term])


def test_terms_are_the_same_on_a_static_padded_batch(parsed):
    """Bucketed static shapes (CUDA graphs): added padding rows and columns change no term and give no NaN."""
    torch.manual_seed(0)
    cfg = parsed(ALL_TASKS)
    model = build_model(cfg, **load_tokenizers(cfg).vocab_sizes()).eval()
    objective = multitask_objective(cfg)
    spec, _, kwargs = objective_requests(model, [objective])
    batch = collate(load_split(cfg, "train"), np.arange(6), spec)
    padded = pad_batch(batch, len(batch) + 3, max(batch.src.size(1), batch.tgt_out.size(1)) + 5)
    with torch.no_grad():
        plain = objective.terms(model, batch, model(batch, **kwargs))
        static = objective.terms(model, padded, model(padded, **kwargs))
    for name in plain:
        assert torch.isfinite(static[name]) and static[name].item() == pytest.approx(plain[name].item(), rel=1e-4), name
    total, logs = objective.loss(model, padded, model(padded, **kwargs), torch.tensor(3.0))
    assert total.requires_grad and set(logs) == set(plain) and not any(v.requires_grad for v in logs.values())


def test_decayed_weight_leaves_a_term_out_of_the_loss(parsed):
    cfg = parsed({"pos": {"weight": 2.0, "decay": "step:10"}, "lisa": {"weight": 0.5, "decay": "linear:100"}})
    objective = multitask_objective(cfg)
    assert objective.weights(0) == {"pos": 2.0, "lisa": 0.5, "parse_arc": 0.0, "parse_label": 0.0}
    assert objective.weights(50) == {"pos": 0.0, "lisa": 0.25, "parse_arc": 0.0, "parse_label": 0.0}
    on_device = objective.weights(torch.tensor(50.0))  # a step counter tensor (CUDA graphs)
    assert float(on_device["pos"]) == 0.0 and float(on_device["lisa"]) == pytest.approx(0.25)
    assert isinstance(objective, MultitaskObjective) and objective.feature_spec.tags == {"upos"} and objective.feature_spec.parent


def test_multitask_run_checkpoints_and_translates_stdin_with_no_parse(parsed, corpus, tmp_path):
    cfg = parsed(ALL_TASKS, work_dir=tmp_path / "mtl", train={"max_steps": 6, "valid_every": 3})
    train(cfg, log=quiet)
    model, loaded_cfg, _ = load_model(Path(cfg.work_dir) / "last.pt", torch.device("cpu"))
    assert not model.feature_spec  # the translation model reads no source features
    assert any(k.startswith("multitask.parse.") for k in model.state_dict())  # the classifiers are saved
    assert loaded_cfg.data.annotate == "conllu"  # so a parse would be demanded if the model needed one
    resumed = cfg.model_copy(deep=True)
    resumed.train.max_steps = 8
    assert train(resumed, resume=True, log=quiet).step == 8

    sources = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:5]
    proc = _translate_stdin(Path(cfg.work_dir) / "best.pt", sources, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 5 and all(lines)


def test_injected_parse_is_needed_at_translation(parsed, corpus, tmp_path):
    cfg = parsed({"lisa": {"weight": 1.0, "layer": 1, "heads": [3], "inject_parse": True}}, work_dir=tmp_path / "lisa", train={"max_steps": 3, "valid_every": 3})
    train(cfg, log=quiet)
    model, _, _ = load_model(Path(cfg.work_dir) / "last.pt", torch.device("cpu"))
    assert model.feature_spec.parent and model.feature_spec.needs_parse
    sources = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:3]
    proc = _translate_stdin(Path(cfg.work_dir) / "last.pt", sources, tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("syntaxnmt: error: ") and "--src-conllu" in proc.stderr
    conllu = tmp_path / "test3.conllu"
    blocks = corpus["test"]["conllu"].read_text(encoding="utf-8").split("\n\n")
    conllu.write_text("\n\n".join(blocks[:3]) + "\n\n", encoding="utf-8")
    proc = _translate_stdin(Path(cfg.work_dir) / "last.pt", sources, tmp_path, "--src-conllu", str(conllu))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 3


def test_train_joint_refuses_multitask(parsed):
    from syntaxnmt.training.joint import train_joint

    with pytest.raises(UserError, match="syntaxnmt train"):
        train_joint(parsed({"pos": {"weight": 1.0}}), log=quiet)


def _translate_stdin(checkpoint: Path, sources: list[str], cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "syntaxnmt", "translate", "--checkpoint", str(checkpoint), "--beam", "2", *extra],
        input="".join(s + "\n" for s in sources),
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
