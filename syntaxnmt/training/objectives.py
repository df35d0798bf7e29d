"""The auxiliary objectives of training, listed: each with the config section that turns it on.

Training (``syntaxnmt train`` and ``train-joint``) adds the terms of every objective of this list
whose section is on (:func:`training_objectives`). A new objective is its module (an
:class:`~syntaxnmt.training.losses.AuxiliaryObjective` subclass and a factory ``cfg -> objective
or None``) and one entry here; its config section is a field of
:class:`syntaxnmt.config.TrainConfig` (the config is a leaf: it cannot import training).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel

from syntaxnmt.config import AlignmentConfig, Config, MultitaskConfig
from syntaxnmt.training.alignment import alignment_objective
from syntaxnmt.training.losses import AuxiliaryObjective
from syntaxnmt.training.multitask import multitask_objective


@dataclass(frozen=True)
class Objective:
    """One auxiliary objective: the config section of ``train.<name>`` that turns it on, and the
    factory that builds it from a whole config (None when the section leaves it off)."""

    section: type[BaseModel]
    make: Callable[[Config], AuxiliaryObjective | None]


OBJECTIVES: dict[str, Objective] = {
    "alignment": Objective(AlignmentConfig, alignment_objective),  # attention as alignment: guided alignment, coverage
    "multitask": Objective(MultitaskConfig, multitask_objective),  # encoder tasks learned from source parses
}
"""Every auxiliary objective, by its section's name under ``train``, in the order their terms are added."""


def training_objectives(cfg: Config) -> list[AuxiliaryObjective]:
    """The auxiliary objectives of ``cfg`` that are on (:data:`OBJECTIVES`)."""
    return [o for objective in OBJECTIVES.values() if (o := objective.make(cfg)) is not None]
