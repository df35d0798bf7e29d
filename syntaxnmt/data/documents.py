"""Documents: doc-id files and the previous sentences of every sentence.

A doc-id file has one document id per line of the text it belongs to (the convention of WMT test
sets), and the lines of a document are contiguous. :func:`read_doc_ids` turns it into a document
index per line; :func:`previous_sentences` gives, for every sentence, the positions of the k
sentences before it in its document (nearest first, -1 where the document has fewer). Context
models (``model.context``) read their context through these positions: a prepared split stores
the document index of each kept sentence (field ``doc``), and a sentence that the length filter
dropped is no one's context -- the previous *kept* sentence of the document takes its place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from syntaxnmt.config import ContextFlags
from syntaxnmt.errors import UserError
from syntaxnmt.textio import read_lines

SEP = "<sep>"
"""The piece between context sentences and the current sentence in concatenation models."""


def doc_index(ids: Sequence[str], source: str = "<doc ids>") -> np.ndarray:
    """A document index (0, 1, ...) per line from document ids; an id that comes back after another
    document started is an error naming the line (documents must be contiguous)."""
    index = np.empty(len(ids), dtype=np.int64)
    seen: dict[str, int] = {}
    previous = None
    for n, doc in enumerate(ids):
        doc = doc.strip()
        if not doc:
            raise UserError(f"{source}:{n + 1}: empty document id (give one id per line of the text)")
        if doc != previous:
            if doc in seen:
                raise UserError(f"{source}:{n + 1}: document {doc!r} continues after another document began at line {seen[doc] + 1} (the lines of a document must be contiguous)")
            seen[doc] = n
            previous = doc
        index[n] = len(seen) - 1
    return index


def read_doc_ids(path: str | os.PathLike, n_lines: int, text_path: str = "") -> np.ndarray:
    """The document index of each of the ``n_lines`` lines of ``text_path`` from its doc-id file."""
    ids = read_lines(path)
    if len(ids) != n_lines:
        raise UserError(f"{path}: {len(ids)} document ids for {n_lines} lines of {text_path or 'the text'} (give one id per line)")
    return doc_index(ids, str(path))


def previous_sentences(docs: np.ndarray, k: int) -> np.ndarray:
    """(N, k) positions of the k previous sentences of each sentence in its document, nearest first;
    -1 where the document has fewer (at its start)."""
    n = len(docs)
    out = np.full((n, k), -1, dtype=np.int64)
    positions = np.arange(n)
    for j in range(1, k + 1):
        before = positions - j
        same = (before >= 0) & (docs[np.maximum(before, 0)] == docs)
        out[:, j - 1] = np.where(same, before, -1)
    return out


def other_document_context(docs: np.ndarray, previous: np.ndarray, seed: int = 0) -> np.ndarray:
    """A control: each sentence gets the context positions of a sentence of another document (the
    same number of context sentences where possible), chosen with a fixed seed. A model that uses
    its context should fall back to what it does without one."""
    rng = np.random.default_rng(seed)
    out = np.full_like(previous, -1)
    n = len(docs)
    if len(np.unique(docs)) < 2:
        return out
    for i in range(n):
        for _ in range(100):
            j = int(rng.integers(n))
            if docs[j] != docs[i]:
                out[i] = previous[j]
                break
    return out


@dataclass(frozen=True)
class DocumentContext(ContextFlags):
    """How a context model (``model.context``) reads the previous sentences of a document:
    ``kind`` (one of :data:`syntaxnmt.config.CONTEXT_KINDS`; what it needs, :attr:`described` and
    the flags, as the config reads them: :class:`syntaxnmt.config.ContextFlags`), ``sentences`` k,
    ``side``, and ``sep`` the id of the :data:`SEP` piece (in the source and, for 2-to-2, the
    target vocabulary)."""

    kind: str
    sentences: int
    side: str = "source"
    sep: int = -1

    @property
    def reach(self) -> int:
        """How many previous sentences a sentence's output depends on: k, and 2k for HAN on both
        sides (:attr:`han_both`: the states of the k previous translations read k more sources)."""
        return 2 * self.sentences if self.han_both else self.sentences

    def concatenate(self, previous: Sequence[np.ndarray], current: np.ndarray) -> np.ndarray:
        """``c_k <sep> ... c_1 <sep> current`` from the previous sentences (nearest first)."""
        parts: list[np.ndarray] = []
        for sentence in reversed(list(previous)[: self.sentences]):
            parts += [np.asarray(sentence, dtype=np.int64), np.asarray([self.sep], dtype=np.int64)]
        return np.concatenate(parts + [np.asarray(current, dtype=np.int64)])

    def current_part(self, tokens: Sequence[int]) -> list[int]:
        """The tokens after the last separator (2-to-2 output: the current sentence's translation)."""
        tokens = list(tokens)
        cut = max((i for i, t in enumerate(tokens) if t == self.sep), default=-1)
        return tokens[cut + 1 :]


def document_context(cfg, src_tok, tgt_tok) -> DocumentContext | None:
    """The :class:`DocumentContext` of a config's ``model.context`` with its tokenizers' separator
    ids; None for a sentence-level model."""
    c = cfg.model.context
    if not c.documents:
        return None
    sep = src_tok.symbol_id(SEP)
    if c.concatenates and (sep is None or (c.side == "both" and tgt_tok.symbol_id(SEP) != sep)):
        raise UserError(f"model.context concat needs the {SEP} piece in the vocabularies: prepare the corpus with data.train_docs set (and a joint vocabulary for side: both)")
    return DocumentContext(c.kind, c.sentences, c.side, -1 if sep is None else sep)
