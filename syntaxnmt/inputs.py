"""What a model reads: a padded batch and its source-side linguistic features as typed tensors.

The data side (:mod:`syntaxnmt.data.batches`, :mod:`syntaxnmt.data.features`) builds these objects; the
models and their attention extensions only read them. A model states which source features it
needs with a :class:`FeatureSpec`, derived from ``model.syntax`` (and from the multi-task
objectives in training).

Source positions ``S`` are the subword pieces of a sentence plus its EOS, right-padded. Tag and
relation ids use 0 for padding and 1 for the special EOS token (see :mod:`syntaxnmt.data.features`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor

from syntaxnmt.config import SyntaxConfig
from syntaxnmt.syntax import RELATION_KINDS

# The special ids every vocabulary (subword or word) starts with, and their pieces.
PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")

TAG_NAMES = ("upos", "xpos", "deprel")


@dataclass
class SourceFeatures:
    """Per-batch source features; a field is None when the model does not use it."""

    upos: Tensor | None = None  # (B, S) universal POS tag ids
    xpos: Tensor | None = None  # (B, S) language-specific POS tag ids
    deprel: Tensor | None = None  # (B, S) dependency label ids (of the arc to the parent)
    bie: Tensor | None = None  # (B, S) subword position tags (B/I/E of a split word, O)
    parent: Tensor | None = None  # (B, S) position of the first piece of the parent word (root, EOS, padding: itself)
    relations: dict[str, Tensor] = field(default_factory=dict)  # relation kind -> (B, S, S) ids

    def tag(self, name: str) -> Tensor:
        """The (B, S) ids of tag set ``name`` (``upos``, ``xpos``, ``deprel`` or ``bie``)."""
        value = getattr(self, name, None) if name in TAG_NAMES + ("bie",) else None
        if value is None:
            raise ValueError(f"the batch lacks '{name}' tags: this model needs parsed source sentences")
        return value

    def relation(self, kind: str) -> Tensor:
        """The (B, S, S) relation ids of ``kind`` between source positions."""
        if kind not in self.relations:
            raise ValueError(f"the batch lacks '{kind}' relations: this model needs them computed for its source sentences")
        return self.relations[kind]

    def parents(self) -> Tensor:
        if self.parent is None:
            raise ValueError("the batch lacks parent positions: this model needs parsed source sentences")
        return self.parent

    def to(self, device: torch.device | str) -> "SourceFeatures":
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        tensors = {f.name: move(getattr(self, f.name)) for f in fields(self) if f.name != "relations"}
        return SourceFeatures(**tensors, relations={k: move(v) for k, v in self.relations.items()})

    def index_select(self, index: Tensor) -> "SourceFeatures":
        """Rows ``index`` of every tensor (beam search expands sentences into hypotheses)."""
        pick = lambda t: None if t is None else t.index_select(0, index.to(t.device))  # noqa: E731
        tensors = {f.name: pick(getattr(self, f.name)) for f in fields(self) if f.name != "relations"}
        return SourceFeatures(**tensors, relations={k: pick(v) for k, v in self.relations.items()})


@dataclass(frozen=True)
class FeatureSpec:
    """Which source features the batches of a model must carry."""

    relations: frozenset[str] = frozenset()  # relation kinds (see ``syntaxnmt.syntax.RELATION_KINDS``)
    tags: frozenset[str] = frozenset()  # of TAG_NAMES and ``bie``
    parent: bool = False
    syntax: SyntaxConfig | None = None  # clipping parameters of the relations

    @classmethod
    def from_config(cls, syn: SyntaxConfig) -> "FeatureSpec":
        """The features ``model.syntax`` reads at training and at translation time."""
        return cls(*syn.features(), syn)

    def union(self, other: "FeatureSpec") -> "FeatureSpec":
        return FeatureSpec(self.relations | other.relations, self.tags | other.tags, self.parent or other.parent, self.syntax or other.syntax)

    @property
    def names(self) -> set[str]:
        """Everything the spec asks for, by name (for messages)."""
        return {f"{k} relations" for k in self.relations} | set(self.tags) | ({"parent positions"} if self.parent else set())

    @property
    def needs_parse(self) -> bool:
        """Whether a sentence must be parsed (BIE tags and linear relations need only the segmentation)."""
        return bool(self.tags - {"bie"}) or self.parent or any(RELATION_KINDS[k].needs_parse for k in self.relations)

    def __bool__(self) -> bool:
        return bool(self.relations or self.tags or self.parent)


@dataclass
class Batch:
    """A padded mini-batch.

    ``src`` ends with EOS; ``tgt_in`` starts with BOS and ``tgt_out`` ends with EOS. ``features``
    carries the source features of enriched attention and multi-task objectives; ``alignment`` the
    row-normalized reference alignment A (B, T, S) of guided alignment training,
    ``A[b, t, s] > 0`` when target piece ``tgt_out[b, t]`` is linked to source piece ``src[b, s]``.
    A HAN model's batch (:func:`syntaxnmt.data.batches.make_batch`) holds the previous sentences
    as rows of their own: ``context_rows`` points at them, and a row that is only context (a
    lead-in) has a ``tgt_out`` of padding, so it adds no loss and no target token.
    """

    src: Tensor  # (B, S)
    tgt_in: Tensor | None  # (B, T)
    tgt_out: Tensor | None  # (B, T)
    ids: Tensor  # (B,) sentence indices in the split
    features: SourceFeatures = field(default_factory=SourceFeatures)
    alignment: Tensor | None = None  # (B, T, S), only for guided alignment
    context_rows: Tensor | None = None  # (B, k) HAN: the rows of this batch holding each row's previous sentences (nearest first), -1 where missing
    context_states: tuple[Tensor, ...] | None = None  # HAN, decoding: precomputed states of the previous sentences (ctx (B, k, Sc, D), its padding (B, k, Sc)[, the target side's two])

    @property
    def src_pad_mask(self) -> Tensor:
        """True at padding positions of the source."""
        return self.src.eq(PAD)

    @property
    def n_tgt_tokens(self) -> int:
        return int(self.tgt_out.ne(PAD).sum()) if self.tgt_out is not None else 0

    def __len__(self) -> int:
        return self.src.size(0)

    def to(self, device: torch.device | str) -> "Batch":
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return replace(self, src=move(self.src), tgt_in=move(self.tgt_in), tgt_out=move(self.tgt_out), features=self.features.to(device), alignment=move(self.alignment), context_rows=move(self.context_rows), context_states=None if self.context_states is None else tuple(move(t) for t in self.context_states))
