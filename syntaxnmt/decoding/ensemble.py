"""Ensembles: several models decode as one, averaging their log-probabilities at every step.

:class:`Ensemble` exposes the incremental-decoding interface of a single model (``encode``,
``init_state``, ``step``, ``reorder_state``; see :mod:`syntaxnmt.decoding.search`), so greedy and beam
search, coverage penalty and unknown-word replacement work unchanged. At each step the members'
log-probabilities are averaged and renormalized (a product of experts, the geometric mean of the
members' distributions, as in Marian and Nematus ensembles)::

    log P(y_t | y_<t, x) = mean_k log P_k(y_t | y_<t, x) - log Σ_v exp(mean_k log P_k(v | y_<t, x))

Members may be of different families (Transformer and RNN) but must share their vocabularies and
their source preprocessing; an ensemble of one model is that model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor, nn

from syntaxnmt.config import Config
from syntaxnmt.data.prepare import Tokenizers
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import Batch


@dataclass
class EnsembleEncoding:
    """One encoder output per member."""

    members: list

    def index_select(self, index: Tensor) -> "EnsembleEncoding":
        return EnsembleEncoding([e.index_select(index) for e in self.members])


@dataclass
class EnsembleState:
    """One decoder state per member; ``last_cross_attention`` (N, S) is the members' mean, on request."""

    members: list
    last_cross_attention: Tensor | None = None
    step: int = field(default=0)


class Ensemble(nn.Module):
    """Models decoding together (same vocabularies): the mean of their log-probabilities, renormalized."""

    def __init__(self, models: Sequence[nn.Module]):
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        self.models = nn.ModuleList(models)
        self.feature_spec = models[0].feature_spec
        self.cfg = models[0].cfg.model_copy(update={"max_positions": min(m.cfg.max_positions for m in models)})

    def encode(self, batch: Batch, need_weights: bool = False) -> EnsembleEncoding:
        return EnsembleEncoding([m.encode(batch) for m in self.models])

    def init_state(self, enc: EnsembleEncoding, native: bool = False) -> EnsembleState:
        return EnsembleState([m.init_state(e, **({"native": True} if native else {})) for m, e in zip(self.models, enc.members)])

    @property
    def native_attention(self) -> bool:
        """Whether ``init_state(..., native=True)`` is supported: every member's is."""
        return all(getattr(m, "native_attention", False) for m in self.models)

    @property
    def step_rows(self) -> bool:
        """Whether ``step(..., rows=)`` is supported: every member's is."""
        return all(getattr(m, "step_rows", False) for m in self.models)

    def step(self, tokens: Tensor, state: EnsembleState, need_weights: bool = False, rows: Tensor | None = None) -> tuple[Tensor, EnsembleState]:
        """Log-probabilities (N, V) of the next token: the members' mean log-probability,
        renormalized (``rows``: of those rows only, (R, V))."""
        outs = [m.step(tokens, s, need_weights, rows=rows) for m, s in zip(self.models, state.members)]
        state.members = [s for _, s in outs]
        state.step += 1
        if len(self.models) == 1:
            log_probs = outs[0][0]
        else:
            log_probs = torch.log_softmax(torch.stack([lp for lp, _ in outs]).mean(0), dim=-1)
        state.last_cross_attention = torch.stack([s.last_cross_attention.float() for s in state.members]).mean(0) if need_weights else None
        return log_probs, state

    def reorder_state(self, state: EnsembleState, index: Tensor, sources_kept: bool = False) -> EnsembleState:
        state.members = [m.reorder_state(s, index, sources_kept) for m, s in zip(self.models, state.members)]
        return state


def vocabulary(tok) -> list[str]:
    """Every piece of a tokenizer's vocabulary, by id."""
    return [tok.id_to_piece(i) for i in range(len(tok))]


def check_compatible(paths: Sequence[Path], members: Sequence[tuple[nn.Module, Config, Tokenizers]]) -> None:
    """Members must share both vocabularies, the source preprocessing and the source features they read."""
    _, cfg0, toks0 = members[0]
    src0, tgt0 = vocabulary(toks0.src), vocabulary(toks0.tgt)
    keys = ("annotate", "spacy_pipeline", "moses_tokenize", "lowercase")
    for path, (model, cfg, toks) in zip(paths[1:], members[1:]):
        for side, ref, tok in (("source", src0, toks.src), ("target", tgt0, toks.tgt)):
            if vocabulary(tok) != ref:
                raise UserError(f"{path}: its {side} vocabulary differs from {paths[0]}'s: ensemble members must share their vocabularies")
        for key in keys:
            if getattr(cfg.data, key) != getattr(cfg0.data, key):
                raise UserError(f"{path}: data.{key} is {getattr(cfg.data, key)!r}, {paths[0]} has {getattr(cfg0.data, key)!r}: ensemble members must read the same source")
        spec, spec0 = model.feature_spec, members[0][0].feature_spec
        if (spec or spec0) and spec != spec0:
            raise UserError(f"{path}: it reads other source features than {paths[0]}: ensemble members must read the same input")


def load_ensemble(paths: Sequence[str | Path], device: torch.device) -> tuple[Ensemble, Config, Tokenizers]:
    """An ensemble of the checkpoints ``paths``, with the first one's config and tokenizers."""
    paths = [Path(p) for p in paths]
    members = [load_model(p, device) for p in paths]
    check_compatible(paths, members)
    return Ensemble([m for m, _, _ in members]).to(device).eval(), members[0][1], members[0][2]
