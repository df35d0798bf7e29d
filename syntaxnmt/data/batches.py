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


def pad_sequences(seqs: Sequence[np.ndarray | Sequence[int]], pad: int = PAD) -> torch.Tensor:
    """Right-pad integer sequences into a (B, max_len) LongTensor."""
    out = torch.full((len(seqs), max((len(s) for s in seqs), default=0)), pad, dtype=torch.long)
    for row, s in enumerate(seqs):
        out[row, : len(s)] = torch.as_tensor(np.asarray(s, dtype=np.int64))
    return out


def make_batch(
    src_seqs: Sequence,
    tgt_seqs: Sequence | None,
    ids: Sequence[int],
    annotations: Sequence[SourceAnnotation] | None = None,
    spec: FeatureSpec | None = None,
    context: Sequence[Sequence[np.ndarray]] | None = None,
    context_size: int = 0,
    context_tgt: Sequence[Sequence[np.ndarray]] | None = None,
) -> Batch:
    """Add EOS/BOS and pad. ``tgt_seqs`` is None for translation-only batches. With a non-empty
    ``spec``, the batch carries the source features it names, made from ``annotations`` (one per
    source sequence) -- the one way training, translation, alignment and attention export attach
    them. ``context`` (one list per sentence of its previous source sentences, nearest first) fills
    ``batch.context`` (B, ``context_size``, Sc) for a HAN model (each sentence ends with EOS; a
    missing sentence is a row of padding); ``context_tgt`` (their target sentences, as many per
    sentence) fills ``batch.context_tgt`` (B, ``context_size``, Tc) for a target-side HAN model,
    each sentence as the decoder reads it (starting with BOS)."""
    src = pad_sequences([np.append(s, EOS) for s in src_seqs])
    tgt_in = tgt_out = None
    if tgt_seqs is not None:
        tgt_in = pad_sequences([np.insert(t, 0, BOS) for t in tgt_seqs])
        tgt_out = pad_sequences([np.append(t, EOS) for t in tgt_seqs])
    batch = Batch(src, tgt_in, tgt_out, torch.as_tensor(list(ids), dtype=torch.long))
    if spec:
        if annotations is None:
            raise UserError(f"this model uses source features ({', '.join(sorted(spec.names))}): the input must be annotated")
        batch.features = pad_features([sentence_features(a, spec) for a in annotations], src.size(1))
    if context is not None and context_size:
        batch.context = _context_rows(context, context_size, lambda s: np.append(s, EOS))
    if context_tgt is not None and context_size:
        if context is None or any(len(a[:context_size]) != len(b[:context_size]) for a, b in zip(context, context_tgt)):
            raise UserError("a target-side context model reads the translation of every context sentence: give as many target as source context sentences")
        batch.context_tgt = _context_rows(context_tgt, context_size, lambda s: np.insert(s, 0, BOS))
    return batch


def _context_rows(context: Sequence[Sequence[np.ndarray]], k: int, mark) -> Tensor:
    """(B, k, L) the first ``k`` sentences of each row of ``context``, each with its marker
    (``mark``: EOS appended or BOS prepended), padded; a missing sentence is a row of padding."""
    rows = [[np.asarray(mark(np.asarray(s, dtype=np.int64))) for s in sentences[:k]] for sentences in context]
    length = max((len(r) for row in rows for r in row), default=1)
    out = torch.full((len(context), k, length), PAD, dtype=torch.long)
    for b, row in enumerate(rows):
        for j, r in enumerate(row):
            out[b, j, : len(r)] = torch.as_tensor(r)
    return out


def context_batch(context: DocumentContext, src: Sequence, tgt: Sequence | None, ids: Sequence[int], src_ctx: Sequence[Sequence], tgt_ctx: Sequence[Sequence] | None = None) -> Batch:
    """The batch a context model reads: for ``concat`` the sentences with their previous ones and
    separators in one sequence (the target too for 2-to-2, from ``tgt_ctx``), for ``han`` the
    sentences and ``batch.context`` (and ``batch.context_tgt``, from ``tgt_ctx``, when the HAN
    reads the target side)."""
    if context.kind == "han":
        if context.han_target and tgt_ctx is None:
            raise ValueError("a target-side HAN model needs the target sentences of its context (tgt_ctx)")
        return make_batch(src, tgt, ids, context=src_ctx, context_size=context.sentences, context_tgt=tgt_ctx if context.han_target else None)
    src = [context.concatenate(p, s) for p, s in zip(src_ctx, src)]
    if tgt is not None and context.concat_target:
        tgt = [context.concatenate(p, t) for p, t in zip(tgt_ctx, tgt)]
    return make_batch(src, tgt, ids)


def collate(split: Split, indices: Sequence[int], spec: FeatureSpec | None = None, alignment: bool = False, context: DocumentContext | None = None) -> Batch:
    """The batch of sentences ``indices`` of a prepared split, with the source features ``spec`` names,
    with ``alignment`` the reference alignment of the split's ``align`` field, and with ``context``
    the previous sentences of each sentence's document as the context model reads them."""
    if spec and spec.needs_parse and not split.has_parses:
        raise UserError(f"the model uses {', '.join(sorted(spec.names))} but the prepared corpus has no parses: set data.annotate (spacy or conllu)")
    annotations = [split.annotation(i) for i in indices] if spec else None
    src, tgt = [split["src"][i] for i in indices], [split["tgt"][i] for i in indices]
    if context is None:
        batch = make_batch(src, tgt, indices, annotations, spec)
    else:
        previous = split.previous(context.sentences)[np.asarray(indices)]
        src_ctx = [[split["src"][j] for j in row if j >= 0] for row in previous]
        tgt_ctx = [[split["tgt"][j] for j in row if j >= 0] for row in previous]
        batch = context_batch(context, src, tgt, indices, src_ctx, tgt_ctx)
    if alignment:
        if "align" not in split.fields:
            raise UserError("guided alignment needs the prepared corpus to hold alignments: set data.train_align")
        if context is not None and context.kind == "concat":
            raise UserError("guided alignment and concatenation context models do not go together (the alignments cover the current sentence only)")
        links = [split["align"][i].reshape(-1, 2).tolist() for i in indices]
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
    ids = torch.cat([batch.ids, batch.ids.new_full((rows - b,), -1)])
    # The document context of a HAN model: an added row has none (rows of padding).
    grow_rows = lambda x: None if x is None else torch.cat([x, x.new_full((rows - b,) + tuple(x.shape[1:]), PAD)])  # noqa: E731
    return Batch(src, tgt_in, grow(batch.tgt_out), ids, features, alignment, grow_rows(batch.context), grow_rows(batch.context_tgt))


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


class TokenBatchSampler:
    """Epochs of length-bucketed batches in a shuffled order determined by ``(seed, epoch)``.

    With ``num_shards > 1`` (distributed training) each rank takes every ``num_shards``-th batch.
    """

    def __init__(self, src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int, shuffle: bool = True, num_shards: int = 1, shard: int = 0, multiple: int = 0):
        self.src_lens, self.tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
        self.max_tokens, self.seed, self.shuffle, self.multiple = max_tokens, seed, shuffle, multiple
        self.num_shards, self.shard = num_shards, shard

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch]) if self.shuffle else None
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
