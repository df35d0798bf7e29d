"""The prepared corpus on disk and the batches made from it.

A split is stored as named :class:`RaggedArray` fields (``src``, ``tgt``; later work adds
source-side annotation fields of the same lengths as ``src``), each two ``.npy`` files that are
memory-mapped, so training never re-tokenizes. Batches are built by token count with length
bucketing; their order is a pure function of (seed, epoch), which makes resuming exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from syntaxnmt.data.documents import DocumentContext, previous_sentences
from syntaxnmt.data.features import SourceAnnotation, pad_features, sentence_features
from syntaxnmt.data.links import alignment_targets, normalize_alignment
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, EOS, PAD, TAG_NAMES, Batch, FeatureSpec, SourceFeatures
from syntaxnmt.textio import atomic_write

REBUILD = "re-run `syntaxnmt prepare --force`"  # what an error about a damaged prepared corpus tells the user


def _load_array(path: Path, mmap: bool) -> np.ndarray:
    """An integer ``.npy`` array of the prepared corpus; a missing, cut short or foreign file is a
    :class:`UserError` naming it (NumPy's own errors name no file)."""
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise UserError(f"{path}: missing from the prepared corpus: {REBUILD}") from None
    except (OSError, ValueError, EOFError) as e:
        reason = "not a NumPy array file" if "pickled" in str(e) else (str(e).split(". ")[0].strip()[:200] or type(e).__name__)
        raise UserError(f"{path}: the prepared corpus is damaged ({reason}): {REBUILD}") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "iu":
        raise UserError(f"{path}: the prepared corpus is damaged (not an integer array): {REBUILD}")
    return array


class RaggedArray:
    """A list of 1-D integer arrays stored flat (``<prefix>.data.npy``) with offsets (``<prefix>.offsets.npy``)."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        self.data, self.offsets = data, offsets

    @staticmethod
    def save(prefix: str | Path, seqs: Sequence[Sequence[int]], dtype=np.int32) -> None:
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.fromiter((x for s in seqs for x in s), dtype=dtype, count=int(offsets[-1]))
        for suffix, arr in ((".data.npy", data), (".offsets.npy", offsets)):
            atomic_write(f"{prefix}{suffix}", lambda f, a=arr: np.save(f, a))

    @classmethod
    def load(cls, prefix: str | Path) -> "RaggedArray":
        """The arrays saved at ``prefix`` (the data memory-mapped). A damaged pair -- a file cut
        short or unreadable, offsets that do not run from 0 up to the data's length -- is a
        :class:`UserError` naming the file and saying how to rebuild the prepared corpus."""
        data_path, offsets_path = Path(f"{prefix}.data.npy"), Path(f"{prefix}.offsets.npy")
        data, offsets = _load_array(data_path, mmap=True), _load_array(offsets_path, mmap=False)
        problem = None
        if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or bool(np.any(np.diff(offsets) < 0)):
            problem = f"{offsets_path.name} does not hold increasing offsets from 0"
        elif data.ndim != 1 or offsets[-1] != len(data):
            problem = f"{offsets_path.name} ends at {int(offsets[-1])} but {data_path.name} holds {len(data)} ids"
        if problem:
            raise UserError(f"{prefix}: the prepared corpus is damaged ({problem}): {REBUILD}")
        return cls(data, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return np.asarray(self.data[self.offsets[i] : self.offsets[i + 1]])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


class Split:
    """One prepared split (``train``, ``dev``, ...): named ragged fields of equal sentence count.

    Always ``src``, ``tgt`` and ``src_word``; with parses also ``heads``, ``upos``, ``xpos``, ``deprel``.
    """

    def __init__(self, name: str, fields: dict[str, RaggedArray]):
        sizes = {len(a) for a in fields.values()}
        assert "src" in fields and "tgt" in fields and len(sizes) == 1, f"split {name}: fields {sorted(fields)} of sizes {sorted(sizes)}"
        self.name, self.fields = name, fields

    @classmethod
    def load(cls, directory: str | Path, name: str) -> "Split":
        """The prepared split ``name`` of a cache folder (one memory-mapped array per field)."""
        directory = Path(directory)
        suffix = ".offsets.npy"
        names = [p.name[len(name) + 1 : -len(suffix)] for p in directory.glob(f"{name}.*{suffix}")]
        fields = {f: RaggedArray.load(directory / f"{name}.{f}") for f in names}
        missing = [f for f in ("src", "tgt") if f not in fields]
        counts = {f: len(a) for f, a in sorted(fields.items())}
        if missing or len(set(counts.values())) != 1:
            reason = f"no {' or '.join(f'{name}.{f}' for f in missing)} arrays" if missing else f"its fields hold different sentence counts: {counts}"
            raise UserError(f"{directory}: the prepared split {name} is incomplete ({reason}): {REBUILD}")
        return cls(name, fields)

    def swapped(self) -> "Split":
        """The other direction of this split: ``src`` and ``tgt`` exchanged (train-joint's reverse
        model); source-side fields (parses) are left out, since they belong to the old source."""
        return Split(self.name, {"src": self.fields["tgt"], "tgt": self.fields["src"]})

    def __len__(self) -> int:
        return len(self.fields["src"])

    def __getitem__(self, field_name: str) -> RaggedArray:
        return self.fields[field_name]

    @property
    def has_parses(self) -> bool:
        return "heads" in self.fields

    @property
    def docs(self) -> np.ndarray | None:
        """The document index of every sentence (prepared with ``data.*_docs``), else None."""
        return self.fields["doc"].data if "doc" in self.fields else None

    def previous(self, k: int) -> np.ndarray:
        """(N, k) positions of the k previous sentences of each sentence in its document, nearest
        first, -1 where there are fewer (:func:`syntaxnmt.data.documents.previous_sentences`)."""
        if self.docs is None:
            raise UserError(f"the prepared split {self.name} has no document ids: set data.train_docs and data.dev_docs (and re-run prepare)")
        cache = self.__dict__.setdefault("_previous", {})
        if k not in cache:
            cache[k] = previous_sentences(np.asarray(self.docs), k)
        return cache[k]

    def annotation(self, i: int) -> SourceAnnotation:
        """Sentence ``i``'s word-level tree and tags with the word index of each piece."""
        tags = {name: self.fields[name][i] for name in TAG_NAMES if name in self.fields}
        heads = self.fields["heads"][i] if self.has_parses else np.zeros(0, dtype=np.int64)
        return SourceAnnotation(self.fields["src_word"][i], heads, tags)


def pad_sequences(seqs: Sequence[np.ndarray | Sequence[int]], pad: int = PAD, first: int | None = None, last: int | None = None) -> torch.Tensor:
    """Right-pad integer sequences into a (B, max_len) LongTensor; ``first``/``last``: a token put
    before/after every sequence (BOS, EOS). Filled in NumPy, converted once."""
    lead, tail = int(first is not None), int(last is not None)
    out = np.full((len(seqs), max(len(s) for s in seqs) + lead + tail if len(seqs) else 0), pad, dtype=np.int64)
    if lead:
        out[:, 0] = first
    for row, s in enumerate(seqs):
        n = len(s)
        out[row, lead : lead + n] = s
        if tail:
            out[row, lead + n] = last
    return torch.from_numpy(out)


def make_batch(
    src_seqs: Sequence,
    tgt_seqs: Sequence | None,
    ids: Sequence[int],
    annotations: Sequence[SourceAnnotation] | None = None,
    spec: FeatureSpec | None = None,
    context: Sequence[Sequence[np.ndarray]] | None = None,
    context_size: int = 0,
    context_tgt: Sequence[Sequence[np.ndarray]] | None = None,
    context_depth: int = 1,
) -> Batch:
    """Add EOS/BOS and pad. ``tgt_seqs`` is None for translation-only batches. With a non-empty
    ``spec``, the batch carries the source features it names, made from ``annotations`` (one per
    source sequence) -- the one way training, translation, alignment and attention export attach
    them. ``context`` (one list per sentence of its previous source sentences, nearest first) makes
    the batch of a HAN model: every distinct context sentence becomes one more row after the given
    ones (a lead-in row: no loss, id -1) and ``batch.context_rows`` points at them (up to
    ``context_size`` per sentence); ``context_tgt`` (their target sentences, as many per sentence)
    gives those rows their targets, which a target-side HAN model reads teacher-forced.
    ``context_depth`` 2 (HAN on both sides, :attr:`DocumentContext.han_both`): the first
    ``context_size`` context rows read their own previous sentences -- the next ones of the list,
    which then holds up to 2k sentences of one document, nearest first -- as rows of their own."""
    if context is None or not context_size:
        return _padded(src_seqs, tgt_seqs, ids, annotations, spec)
    if spec:
        raise ValueError("a HAN batch carries no source features (model.context does not combine with model.syntax)")
    if context_tgt is not None and any(len(a[:context_size]) != len(b[:context_size]) for a, b in zip(context, context_tgt)):
        raise UserError("a target-side context model reads the translation of every context sentence: give as many target as source context sentences")
    k = context_size
    src, tgt = list(src_seqs), None if tgt_seqs is None else list(tgt_seqs)
    n, seen = len(src), {}
    own: dict[int, list[tuple]] = {}  # a context row that reads its own context: the keys of its previous sentences
    rows = np.full((n, k), -1, dtype=np.int64)

    def row_of(b: int, j: int, sentences: list[np.ndarray]) -> int:
        s = sentences[j]
        t = np.asarray(context_tgt[b][j], dtype=np.int64) if context_tgt is not None and j < len(context_tgt[b]) else np.zeros(0, dtype=np.int64)
        nested = context_depth > 1 and j < k
        # a sentence read by several rows is encoded once; one that reads its context, once per context
        key = (s.tobytes(), t.tobytes(), *(x.tobytes() for x in sentences[j + 1 : j + 1 + k])) if nested else (s.tobytes(), t.tobytes())
        if key not in seen:
            seen[key] = n + len(seen)
            src.append(s)
            if tgt is not None:
                tgt.append(t)
            if nested:
                own[seen[key]] = [row_of(b, i, sentences) for i in range(j + 1, min(j + 1 + k, len(sentences)))]
        return seen[key]

    for b, given in enumerate(context):
        sentences = [np.asarray(x, dtype=np.int64) for x in list(given)[: k * context_depth]]
        for j in range(min(k, len(sentences))):
            rows[b, j] = row_of(b, j, sentences)
    rows = np.concatenate([rows, np.full((len(seen), k), -1, dtype=np.int64)])
    for r, previous in own.items():
        rows[r, : len(previous)] = previous
    return _han_batch(src, tgt, list(ids) + [-1] * len(seen), rows, n)


def _padded(src_seqs: Sequence, tgt_seqs: Sequence | None, ids: Sequence[int], annotations=None, spec: FeatureSpec | None = None) -> Batch:
    """The padded batch of :func:`make_batch` without document context."""
    src = pad_sequences(src_seqs, last=EOS)
    tgt_in = tgt_out = None
    if tgt_seqs is not None:
        tgt_in = pad_sequences(tgt_seqs, first=BOS)
        tgt_out = pad_sequences(tgt_seqs, last=EOS)
    batch = Batch(src, tgt_in, tgt_out, torch.as_tensor(list(ids), dtype=torch.long))
    if spec:
        if annotations is None:
            raise UserError(f"this model uses source features ({', '.join(sorted(spec.names))}): the input must be annotated")
        batch.features = pad_features([sentence_features(a, spec) for a in annotations], src.size(1))
    return batch


def _han_batch(src: Sequence, tgt: Sequence | None, ids: Sequence[int], rows: np.ndarray, n_loss: int) -> Batch:
    """A HAN batch: sentences ``src``/``tgt`` whose first ``n_loss`` rows are the ones that count
    (the others are lead-ins: context only, their ``tgt_out`` padding) and ``rows`` (N, k) the rows
    of each row's previous sentences (-1 where missing)."""
    batch = _padded(src, tgt, ids)
    if batch.tgt_out is not None:
        batch.tgt_out[n_loss:] = PAD
    batch.context_rows = torch.as_tensor(rows, dtype=torch.long)
    return batch


def context_batch(context: DocumentContext, src: Sequence, tgt: Sequence | None, ids: Sequence[int], src_ctx: Sequence[Sequence], tgt_ctx: Sequence[Sequence] | None = None) -> Batch:
    """The batch a context model reads: for ``concat`` the sentences with their previous ones and
    separators in one sequence (the target too for 2-to-2, from ``tgt_ctx``), for ``han`` the
    sentences (rows 0..n-1) followed by their previous sentences as rows of their own
    (:func:`make_batch`; with their targets ``tgt_ctx`` when the HAN reads the target side)."""
    if context.reads_states:
        if context.han_target and tgt_ctx is None:
            raise ValueError("a target-side HAN model needs the target sentences of its context (tgt_ctx)")
        return make_batch(src, tgt, ids, context=src_ctx, context_size=context.sentences, context_tgt=tgt_ctx if context.han_target else None, context_depth=2 if context.han_both else 1)
    src = [context.concatenate(p, s) for p, s in zip(src_ctx, src)]
    if tgt is not None and context.concat_target:
        tgt = [context.concatenate(p, t) for p, t in zip(tgt_ctx, tgt)]
    return make_batch(src, tgt, ids)


def lead_in(previous: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The sentences (sorted) among ``previous[indices]`` (the previous sentences of ``indices``,
    -1 where missing) that are not in ``indices``: the lead-in rows a HAN batch adds."""
    wanted = np.unique(previous[indices])
    return np.setdiff1d(wanted[wanted >= 0], indices)


def collate(split: Split, indices: Sequence[int], spec: FeatureSpec | None = None, alignment: bool = False, context: DocumentContext | None = None) -> Batch:
    """The batch of sentences ``indices`` of a prepared split, with the source features ``spec`` names,
    with ``alignment`` the reference alignment of the split's ``align`` field, and with ``context``
    the previous sentences of each sentence's document as the context model reads them: for HAN,
    the previous sentences missing from ``indices`` come after them as lead-in rows (no loss) and
    every row points at the rows of its previous sentences (``batch.context_rows``). For HAN on
    both sides the lead-ins read their own previous sentences too (further lead-ins): their
    decoder states, the target-side context, are computed with their source-side HAN. Batches of
    contiguous runs of documents (:func:`document_batches`) need at most
    :attr:`~syntaxnmt.data.documents.DocumentContext.reach` lead-ins per run (k, 2k for both sides)."""
    if spec and spec.needs_parse and not split.has_parses:
        raise UserError(f"the model uses {', '.join(sorted(spec.names))} but the prepared corpus has no parses: set data.annotate (spacy or conllu)")
    annotations = [split.annotation(i) for i in indices] if spec else None
    idx = np.asarray(indices, dtype=np.int64)
    n = len(idx)
    if context is not None and context.reads_states:
        previous = split.previous(context.sentences)
        idx = np.concatenate([idx, lead_in(previous, idx)])
        reading = len(idx) if context.han_both else n  # the rows whose HAN output is read
        if context.han_both:  # the lead-ins' own previous sentences: source states only
            idx = np.concatenate([idx, lead_in(previous, idx)])
        where = np.full(len(split), -1, dtype=np.int64)
        where[idx] = np.arange(len(idx))
        rows = np.where(previous[idx] >= 0, where[np.maximum(previous[idx], 0)], -1)
        rows[reading:] = -1  # a row read only through its encoder states (before HAN) needs no context
        batch = _han_batch([split["src"][i] for i in idx], [split["tgt"][i] for i in idx], idx.tolist(), rows, n)
    elif context is not None:
        previous = split.previous(context.sentences)[idx]
        src_ctx = [[split["src"][j] for j in row if j >= 0] for row in previous]
        tgt_ctx = [[split["tgt"][j] for j in row if j >= 0] for row in previous]
        batch = context_batch(context, [split["src"][i] for i in idx], [split["tgt"][i] for i in idx], indices, src_ctx, tgt_ctx)
    else:
        batch = make_batch([split["src"][i] for i in idx], [split["tgt"][i] for i in idx], indices, annotations, spec)
    if alignment:
        if "align" not in split.fields:
            raise UserError("guided alignment needs the prepared corpus to hold alignments: set data.train_align")
        if context is not None and context.concatenates:
            raise UserError("guided alignment and concatenation context models do not go together (the alignments cover the current sentence only)")
        links = [split["align"][i].reshape(-1, 2).tolist() if r < n else [] for r, i in enumerate(idx)]
        ref = alignment_targets(links, batch.tgt_out.size(1), batch.src.size(1))
        batch.alignment = normalize_alignment(ref, batch.src_pad_mask, batch.tgt_out.eq(PAD))
    return batch


def round_up(length: int | np.ndarray, multiple: int) -> int | np.ndarray:
    """``length`` rounded up to a multiple of ``multiple`` (unchanged when ``multiple`` is 0 or 1)."""
    return length if multiple <= 1 else -(-length // multiple) * multiple


def shape_bucket(batch: Batch, max_tokens: int, multiple: int) -> tuple[int, int]:
    """The static shape (rows, length) of ``batch`` when shapes are bucketed: source and target
    padded to one length, a multiple of ``multiple``, and as many rows as ``max_tokens`` allows
    at that length. Batches from :func:`bucket_batches` with the same ``multiple`` always fit."""
    length = int(round_up(max(batch.src.size(1), batch.tgt_out.size(1)), multiple))
    return max(len(batch), max_tokens // length), length


def pad_batch(batch: Batch, rows: int, length: int) -> Batch:
    """``batch`` padded to ``rows`` sentences of ``length`` positions on both sides (a static shape).

    Padding is invisible to the loss: padded positions are PAD (masked keys, no target), and an
    added row is a sentence holding only EOS, with no target token, so that its attention has one
    key to attend to (a row of masked keys would give NaN) and it adds nothing to the loss.
    A HAN batch keeps its ``context_rows`` (an added sentence has no context: -1), so its lead-in
    rows count in the static shape like any other row.
    """
    b, s, t = len(batch), batch.src.size(1), batch.tgt_out.size(1)
    if rows < b or length < max(s, t):
        raise ValueError(f"cannot pad a batch of shape ({b}, {s}, {t}) to ({rows}, {length})")

    def grow(x: Tensor | None, fill: int = PAD, square: bool = False) -> Tensor | None:
        if x is None:
            return None
        shape = (rows, length, length) if square else (rows, length) + tuple(x.shape[2:])
        out = x.new_full(shape, fill)
        out[tuple(slice(0, n) for n in x.shape)] = x
        return out

    src = grow(batch.src)
    src[b:, 0] = EOS
    tgt_in = grow(batch.tgt_in)
    tgt_in[b:, 0] = BOS
    f = batch.features
    parent = None
    if f.parent is not None:
        parent = torch.arange(length).expand(rows, length).clone()
        parent[:b, : f.parent.size(1)] = f.parent
    features = SourceFeatures(
        upos=grow(f.upos), xpos=grow(f.xpos), deprel=grow(f.deprel), bie=grow(f.bie), parent=parent,
        relations={k: grow(v, square=True) for k, v in f.relations.items()},
    )
    alignment = None
    if batch.alignment is not None:
        alignment = batch.alignment.new_zeros(rows, length, length)
        alignment[:b, :t, :s] = batch.alignment
    context_rows = None
    if batch.context_rows is not None:
        context_rows = torch.cat([batch.context_rows, batch.context_rows.new_full((rows - b, batch.context_rows.size(1)), -1)])
    ids = torch.cat([batch.ids, batch.ids.new_full((rows - b,), -1)])
    return Batch(src, tgt_in, grow(batch.tgt_out), ids, features, alignment, context_rows=context_rows)


def bucket_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, rng: np.random.Generator | None, multiple: int = 0) -> list[np.ndarray]:
    """Group sentence indices into batches of at most ``max_tokens`` padded tokens.

    Sentences are sorted by (target, source) length -- ties broken randomly when ``rng`` is given --
    and cut greedily so that ``batch_size * longest_side <= max_tokens``; this keeps padding small.
    The +1 accounts for BOS/EOS. With ``multiple`` > 1, the longest side is first rounded up to a
    multiple of it, so every batch fits its :func:`shape_bucket`.
    """
    n = len(src_lens)
    order = rng.permutation(n) if rng is not None else np.arange(n)
    order = order[np.lexsort((src_lens[order], tgt_lens[order]))]
    longest = round_up(np.maximum(src_lens[order], tgt_lens[order]) + 1, multiple)
    batches, start, running_max = [], 0, 0
    for pos in range(n):
        cand = max(running_max, int(longest[pos]))
        if pos > start and cand * (pos - start + 1) > max_tokens:
            batches.append(order[start:pos])
            start, cand = pos, int(longest[pos])
        running_max = cand
    if start < n:
        batches.append(order[start:])
    return batches


def document_batches(docs: np.ndarray, src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, k: int, rng: np.random.Generator | None, multiple: int = 0) -> list[np.ndarray]:
    """Batches of contiguous runs of documents for a HAN model (as HAN_NMT, Miculicich et al. 2018,
    keeps documents together): the sentences of a batch read their previous sentences from rows of
    the same batch, so each is encoded once.

    ``docs`` is the document index of every sentence (documents contiguous, in order). A document
    is one *span*; one that does not fit ``max_tokens`` is cut into spans that do, and a span
    starting inside its document brings up to ``k`` lead-in rows (the sentences before it: context
    only, no loss; ``k`` is the context's reach, :attr:`DocumentContext.reach`), counted in its size. Spans are shuffled with ``rng``, sorted by their longest
    side (rounded up to ``multiple`` as in :func:`bucket_batches`, so every batch fits its
    :func:`shape_bucket`) and cut greedily so that ``rows * longest <= max_tokens``; a batch holds
    the indices of its spans' sentences (not the lead-ins, which :func:`collate` adds)."""
    n = len(docs)
    longest = np.asarray(round_up(np.maximum(src_lens, tgt_lens) + 1, multiple), dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]]) if n else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], n]
    spans: list[tuple[int, int, int, int]] = []  # (first, end, rows with lead-ins, longest side)
    for s, e in zip(starts.tolist(), ends.tolist()):
        p = s
        while p < e:
            lead = min(k, p - s)
            cur, q = int(longest[p - lead : p + 1].max()), p + 1
            while q < e and max(cur, int(longest[q])) * (q + 1 - p + lead) <= max_tokens:
                cur, q = max(cur, int(longest[q])), q + 1
            spans.append((p, q, q - p + lead, cur))
            p = q
    order = rng.permutation(len(spans)) if rng is not None else np.arange(len(spans))
    order = order[np.argsort(np.asarray([spans[i][3] for i in order], dtype=np.int64), kind="stable")]
    batches, current, rows, running_max = [], [], 0, 0
    for i in order.tolist():
        first, end, size, side = spans[i]
        if current and max(running_max, side) * (rows + size) > max_tokens:
            batches.append(np.concatenate(current))
            current, rows, running_max = [], 0, 0
        current.append(np.arange(first, end))
        rows, running_max = rows + size, max(running_max, side)
    if current:
        batches.append(np.concatenate(current))
    return batches


class TokenBatchSampler:
    """Epochs of length-bucketed batches in a shuffled order determined by ``(seed, epoch)``.

    With ``num_shards > 1`` (distributed training) each rank takes every ``num_shards``-th batch.
    With ``docs`` (the document index of every sentence) and ``context`` k (a HAN model) the
    batches are contiguous runs of documents (:func:`document_batches`) instead.
    """

    def __init__(self, src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int, shuffle: bool = True, num_shards: int = 1, shard: int = 0, multiple: int = 0, docs: np.ndarray | None = None, context: int = 0):
        self.src_lens, self.tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
        self.max_tokens, self.seed, self.shuffle, self.multiple = max_tokens, seed, shuffle, multiple
        self.num_shards, self.shard = num_shards, shard
        self.docs, self.context = None if docs is None else np.asarray(docs), context

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch]) if self.shuffle else None
        if self.docs is not None:
            batches = document_batches(self.docs, self.src_lens, self.tgt_lens, self.max_tokens, self.context, rng, self.multiple)
        else:
            batches = bucket_batches(self.src_lens, self.tgt_lens, self.max_tokens, rng, self.multiple)
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        if self.num_shards > 1:
            usable = len(batches) - len(batches) % self.num_shards
            batches = batches[self.shard : usable : self.num_shards]
        return batches

    def stream(self, epoch: int, start: int, max_epochs: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(epoch, position, indices)`` from batch ``start`` of ``epoch`` on, across epochs, until ``max_epochs``."""
        while epoch < max_epochs:
            for pos, idx in self.iterate(epoch, start):
                yield epoch, pos, idx
            epoch, start = epoch + 1, 0

    def iterate(self, epoch: int, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(position, indices)`` for the batches of ``epoch`` from position ``start`` on."""
        batches = self.epoch_batches(epoch)
        for pos in range(start, len(batches)):
            yield pos, batches[pos]
