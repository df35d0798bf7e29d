"""Source-side features at the subword level, padded into the typed batch tensors models read.

From a sentence's annotation (its tree and tags at the word level, and the word index of every
subword piece) this module computes, once per batch and shared by all layers and heads, the
fields of :class:`~syntaxnmt.inputs.SourceFeatures`:

* ``relations[kind]`` (B, S, S): relation ids between source positions, one entry per relation
  kind of :data:`syntaxnmt.syntax.RELATION_KINDS` the model uses; for tree kinds, pieces of one
  word are related by ``REL_SAME_WORD`` and EOS by ``REL_SPECIAL``.
* ``upos`` / ``xpos`` / ``deprel`` / ``bie`` (B, S): tag ids of each piece (inherited from its word).
* ``parent`` (B, S): position of the first piece of each piece's dependency parent (a root, and
  EOS, point at themselves), for parent-scaled attention and syntactic supervision.

Tag ids: 0 = padding, 1 = special token (EOS), 2 = unknown tag, then the tags seen in training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import torch

from syntaxnmt.inputs import TAG_NAMES, FeatureSpec, SourceFeatures
from syntaxnmt.syntax import RELATION_KINDS, SentenceTree, bie_tags

TAG_SPECIALS = ["<pad>", "<special>", "<unk>"]
TAG_UNK = 2


@dataclass
class SourceAnnotation:
    """One source sentence's annotation, aligned to its subword pieces (EOS not included)."""

    word_of_piece: np.ndarray  # (m,) word index of each piece
    heads: np.ndarray  # (n,) CoNLL-U heads of the words
    tags: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (n,) tag ids


class TagVocab:
    """String <-> id maps for the tag sets (``upos``, ``xpos``, ``deprel``)."""

    def __init__(self, itos: dict[str, list[str]]):
        self.itos = itos
        self.stoi = {name: {t: i for i, t in enumerate(tags)} for name, tags in itos.items()}

    @classmethod
    def build(cls, tag_lists: dict[str, Iterable[Sequence[str]]]) -> "TagVocab":
        itos = {}
        for name, sentences in tag_lists.items():
            seen = sorted({t for sent in sentences for t in sent})
            itos[name] = TAG_SPECIALS + seen
        return cls(itos)

    @classmethod
    def from_parses(cls, parses: Sequence) -> "TagVocab":
        """The ``upos``, ``xpos`` and ``deprel`` inventories of ``parses``, each read from its own field."""
        return cls.build({name: [getattr(p, name) for p in parses] for name in TAG_NAMES})

    def problem(self) -> str | None:
        """Why this vocabulary cannot be used, or None. syntaxnmt 0.1 built ``upos`` and ``xpos``
        from the dependency labels (a generator bound late in a comprehension): every POS id was <unk>."""
        if "deprel" in self.itos and len(self.itos["deprel"]) > len(TAG_SPECIALS):
            if any(self.itos.get(name) == self.itos["deprel"] for name in ("upos", "xpos")):
                return "its POS tag vocabularies hold the dependency labels (written by syntaxnmt 0.1, whose POS ids were all <unk>)"
        return None

    def encode(self, name: str, tags: Sequence[str]) -> np.ndarray:
        table = self.stoi[name]
        return np.asarray([table.get(t, TAG_UNK) for t in tags], dtype=np.int64)

    def size(self, name: str) -> int:
        return len(self.itos[name])

    def is_empty(self, name: str) -> bool:
        """Whether the parses gave no tag of set ``name`` (each one was ``_``: CoNLL-U's empty field)."""
        return not set(self.itos.get(name, [])[len(TAG_SPECIALS):]) - {"_"}


def sentence_features(ann: SourceAnnotation, spec: FeatureSpec) -> dict[str, np.ndarray]:
    """The features of one sentence, over its pieces plus EOS (length m + 1), by field name
    (``rel:<kind>`` for relations)."""
    w = np.append(ann.word_of_piece, -1)  # EOS is a special token
    out: dict[str, np.ndarray] = {}
    sentence = SentenceTree(w, ann.heads)
    for kind in sorted(spec.relations):
        out[f"rel:{kind}"] = RELATION_KINDS[kind].ids(sentence, spec.syntax)
    for name in spec.tags:
        out[name] = bie_tags(w) if name == "bie" else np.where(w < 0, 1, ann.tags[name][np.maximum(w, 0)])
    if spec.parent:
        out["parent"] = parent_positions(ann.heads, w)
    return out


def parent_positions(heads: np.ndarray, w: np.ndarray) -> np.ndarray:
    """For each piece, the position of the first piece of its word's parent (roots and EOS: itself)."""
    m = len(w)
    first_piece = np.full(len(heads) + 1, -1, dtype=np.int64)  # by word index
    real = w >= 0
    # the first piece of a word is the smallest position holding it: reverse assignment keeps the first
    first_piece[w[real][::-1]] = np.arange(m)[real][::-1]
    own = np.arange(m)
    parent_word = np.where(real, np.asarray(heads)[np.maximum(w, 0)] - 1, -1)
    parent = np.where(parent_word >= 0, first_piece[np.maximum(parent_word, 0)], -1)
    return np.where(parent >= 0, parent, own)


def pad_features(per_sentence: Sequence[dict[str, np.ndarray]], length: int) -> SourceFeatures:
    """Stack per-sentence features into (B, S) or (B, S, S) tensors, zero-padded to ``length``.

    Parent positions pad with each position's own index (a padded query attends nowhere anyway).
    """
    out = SourceFeatures()
    if not per_sentence:
        return out
    b = len(per_sentence)
    for name in per_sentence[0]:
        two_d = per_sentence[0][name].ndim == 2
        arr = np.zeros((b, length, length) if two_d else (b, length), dtype=np.int64)
        if name == "parent":
            arr[:] = np.arange(length)
        for i, feats in enumerate(per_sentence):
            f = feats[name]
            if two_d:
                arr[i, : f.shape[0], : f.shape[1]] = f
            else:
                arr[i, : len(f)] = f
        if name.startswith("rel:"):
            out.relations[name[4:]] = torch.from_numpy(arr)
        else:
            setattr(out, name, torch.from_numpy(arr))
    return out
