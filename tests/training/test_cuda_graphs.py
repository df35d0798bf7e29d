"""CUDA graphs of the training step (``train.cuda_graphs``): the same updates as eager training.

These tests need a CUDA device and are skipped without one (CI has none); run them on a GPU machine.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syntaxnmt.data.prepare import feature_vocab_sizes, load_split
from syntaxnmt.model import build_model
from syntaxnmt.training.cuda_graphs import GraphedStep
from syntaxnmt.training.optim import build_optimizer
from syntaxnmt.training.step import forward_loss, update

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _setup(make_config, extra: dict | None = None):
    tree = {"model": {"dropout": 0.0}, "train": {"shape_bucket": 8, "cuda_graphs": True, "precision": "fp32", "max_tokens": 512}}
    for k, v in (extra or {}).items():
        tree.setdefault(k, {}).update(v)
    cfg = make_config(tree)
    split = load_split(cfg, "train")
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        model = build_model(cfg.model, 200, 200, **feature_vocab_sizes(cfg)).cuda().train()
        models.append((model, *build_optimizer(model, cfg.train)))
    return cfg, split, models


def _groups(split, n: int):
    rng = np.random.default_rng(0)
    # batches of different lengths, so that several graphs are captured and replayed
    order = np.argsort(split["tgt"].lengths)
    return [[order[s : s + 16]] for s in rng.choice(len(split) - 16, n)]


def test_graphed_updates_equal_eager_updates(make_config):
    cfg, split, ((m1, o1, s1), (m2, o2, s2)) = _setup(make_config)
    graphed = GraphedStep(m2, lambda batch, step: forward_loss(m2, batch, cfg.train, (), step, static=True))
    device = torch.device("cuda")
    for step, group in enumerate(_groups(split, 12)):
        a = update(m1, o1, s1, split, group, cfg.train, device, step=step)
        b = update(m2, o2, s2, split, group, cfg.train, device, step=step, graphed=graphed)
        torch.testing.assert_close(b["loss"], a["loss"], rtol=1e-4, atol=1e-3)
    assert 1 < len(graphed.graphs) <= 12
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p2, p1, rtol=1e-3, atol=1e-4)


def test_graphed_training_with_dropout_and_bf16_learns(make_config):
    cfg, split, ((model, opt, sched), _) = _setup(make_config, {"model": {"dropout": 0.1}, "train": {"precision": "bf16", "lr": 3e-3, "warmup_steps": 5}})
    graphed = GraphedStep(model, lambda batch, step: forward_loss(model, batch, cfg.train, (), step, static=True))
    losses = []
    for step, group in enumerate(_groups(split, 40)):
        stats = update(model, opt, sched, split, group, cfg.train, torch.device("cuda"), step=step, graphed=graphed)
        losses.append(float(stats["loss"]) / stats["tokens"])
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5]), losses
