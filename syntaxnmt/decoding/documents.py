"""Translating documents with a HAN model (Miculicich et al. 2018): the sentences it reads as
context, their states computed once each, and the waves of sentences a target-side model
translates in order (the first sentence of every document, then the second ones, ...)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from syntaxnmt.data.batches import make_batch
from syntaxnmt.model.context import gather_rows


def sentence_pool(sources: Sequence[np.ndarray], contexts, previous: np.ndarray | None, k: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The sentences a HAN model reads while translating ``sources`` -- the sources, then any
    context sentence that is not one of them -- and (N, k) the positions in that pool of each
    source's previous sentences (from ``previous`` when given, else from ``contexts``)."""
    if previous is not None:
        return list(sources), np.asarray(previous)[:, :k]
    pool, seen = list(sources), {}
    rows = np.full((len(sources), k), -1, dtype=np.int64)
    for i, sentences in enumerate(contexts):
        for j, c in enumerate(list(sentences)[:k]):
            key = np.asarray(c, dtype=np.int64).tobytes()
            if key not in seen:
                seen[key] = len(pool)
                pool.append(np.asarray(c, dtype=np.int64))
            rows[i, j] = seen[key]
    return pool, rows


class DocumentStates:
    """The context states a HAN model reads while translating documents, each sentence's computed
    once: the encoder output of a source sentence (:meth:`~syntaxnmt.model.transformer.Transformer.encode_states`)
    and, for a target-side model, the decoder states of the model's own translation of it
    (:meth:`~syntaxnmt.model.transformer.Transformer.decode_states`, one forced pass reading the
    memory the sentence was translated with: its encoder output, after the source-side HAN over
    its own previous sentences for ``side: both`` -- Miculicich et al. 2018, Sec. 2.3). A
    translation batch gathers them for its sentences' previous sentences (``batch.context_states``)
    instead of encoding k previous sentences per sentence."""

    def __init__(self, model, sources: Sequence[np.ndarray], device: torch.device, batch_size: int):
        self.model, self.sources, self.device, self.batch_size = model, sources, device, batch_size
        self.src: dict[int, torch.Tensor] = {}  # sentence -> (S, D) encoder states, EOS included
        self.tgt: dict[int, torch.Tensor] = {}  # sentence -> (T, D) decoder states of its translation, BOS first

    @torch.no_grad()
    def encode(self, ids: np.ndarray) -> None:
        """Encode the sentences ``ids`` (not yet encoded), batched by length."""
        todo = sorted((int(i) for i in ids if int(i) not in self.src), key=lambda i: len(self.sources[i]))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            src = make_batch([self.sources[i] for i in chunk], None, chunk).src.to(self.device)
            hidden = self.model.encode_states(src)
            for b, i in enumerate(chunk):
                self.src[i] = hidden[b, : len(self.sources[i]) + 1]

    @torch.no_grad()
    def decode(self, ids: np.ndarray, translations: Sequence[Sequence[int]], previous: np.ndarray | None = None) -> None:
        """The decoder states of the sentences ``ids`` reading their ``translations``; a model with
        a source-side HAN (``side: both``) reads the memory it translated them with, its HAN over
        the sentences' own previous sentences ``previous`` (len(ids), k; -1 missing; encoded)."""
        ids = [int(i) for i in ids]
        self.encode(np.asarray(ids, dtype=np.int64))
        if self.model.han is not None and previous is None:
            raise ValueError("a model with a source-side HAN decodes its context states with their own previous sentences (previous=)")
        for start in range(0, len(ids), self.batch_size):
            chunk, tokens = ids[start : start + self.batch_size], translations[start : start + self.batch_size]
            memory, memory_pad = self._stack([self.src[i] for i in chunk])
            if self.model.han is not None:
                memory = self.model.context_memory(memory, *self.gather(np.asarray(previous[start : start + self.batch_size]), False))
            tgt_in = make_batch([np.zeros(0, dtype=np.int64)] * len(chunk), [np.asarray(t, dtype=np.int64) for t in tokens], chunk).tgt_in.to(self.device)
            states = self.model.decode_states(tgt_in, memory, memory_pad)
            for b, (i, t) in enumerate(zip(chunk, tokens)):
                self.tgt[i] = states[b, : len(t) + 1]

    def _stack(self, states: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, L, D) the states padded with zeros and (N, L) their padding mask."""
        stacked = torch.nn.utils.rnn.pad_sequence(states, batch_first=True)
        lengths = torch.tensor([len(x) for x in states], device=stacked.device)
        return stacked, torch.arange(stacked.size(1), device=stacked.device)[None, :] >= lengths[:, None]

    def gather(self, previous: np.ndarray, target: bool) -> tuple[torch.Tensor, ...]:
        """``batch.context_states`` for sentences whose previous sentences are ``previous`` (B, k; -1
        missing): source states and padding, with ``target`` the target side's two as well."""
        present = np.unique(previous[previous >= 0])
        where = {int(j): r for r, j in enumerate(present)}
        rows = torch.tensor([[where.get(int(j), -1) for j in row] for row in previous], dtype=torch.long, device=self.device)
        out: list[torch.Tensor] = []
        for cache in (self.src, self.tgt) if target else (self.src,):
            if len(present):
                stacked, pad = self._stack([cache[int(j)] for j in present])
            else:
                d = self.model.cfg.d_model
                stacked, pad = torch.zeros(1, 1, d, device=self.device), torch.ones(1, 1, dtype=torch.bool, device=self.device)
            out += gather_rows(stacked, pad, rows)
        return tuple(out)


def document_waves(previous: np.ndarray, n: int) -> list[np.ndarray]:
    """The sentences grouped by their position in their document (0: first sentences), from the
    positions of their previous sentences (``previous[:, 0]``: the one just before, -1 at a start)."""
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        j = int(previous[i, 0]) if previous.shape[1] else -1
        depth[i] = 0 if j < 0 else depth[j] + 1  # j < i: the previous sentences come first
    return [np.flatnonzero(depth == d) for d in range(int(depth.max()) + 1 if n else 0)]
