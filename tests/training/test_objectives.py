"""Tests for syntaxnmt.training.objectives: the auxiliary objectives listed with their config sections."""

from __future__ import annotations

import torch
from conftest import deep_merge, tiny_tree

from syntaxnmt.config import AlignmentConfig, TrainConfig, load_config
from syntaxnmt.training.losses import AuxiliaryObjective
from syntaxnmt.training.objectives import OBJECTIVES, Objective, training_objectives

ON = {"alignment": {"train": {"alignment": {"coverage_weight": 1.0}}}, "multitask": {"data": {"annotate": "conllu"}, "train": {"multitask": {"pos": {"weight": 1.0}}}}}
"""A setting of each listed section (and what it needs) that turns its objective on."""


def test_every_listed_objective_is_trained_and_a_new_one_needs_only_its_entry(monkeypatch, corpus, tmp_path):
    """An auxiliary objective listed in OBJECTIVES reaches training_objectives (used by train and
    train-joint) without any other edit of the training code."""

    assert {"alignment", "multitask"} <= set(OBJECTIVES)
    cfg = load_config(None, tiny_tree(corpus, tmp_path))
    assert training_objectives(cfg) == []  # both sections off

    class Constant(AuxiliaryObjective):
        def terms(self, model, batch, out):
            return {"constant": torch.ones(())}

        def weights(self, step):
            return {"constant": 0.5}

    monkeypatch.setitem(OBJECTIVES, "constant", Objective(AlignmentConfig, lambda cfg: Constant()))
    objectives = training_objectives(cfg)
    assert [type(o).__name__ for o in objectives] == ["Constant"]


def test_the_list_names_each_objectives_config_section_and_nothing_registers_on_import(corpus, tmp_path):
    """Each entry is the ``train.<name>`` section of the config (of the class it names), whose
    setting turns that objective, and only that one, on; the list is written out, so it holds its
    members however the package was imported (no registration by an import's side effect)."""
    import syntaxnmt.training.losses as losses

    assert list(OBJECTIVES) == ["alignment", "multitask"]
    assert not hasattr(losses, "register_objective") and not hasattr(losses, "OBJECTIVES")
    for name, objective in OBJECTIVES.items():
        assert TrainConfig.model_fields[name].annotation is objective.section
        cfg = load_config(None, deep_merge(tiny_tree(corpus, tmp_path), ON[name]))
        assert isinstance(getattr(cfg.train, name), objective.section)
        on = training_objectives(cfg)
        assert len(on) == 1 and type(on[0]) is type(objective.make(cfg)), name
