"""Attention weights of a trained model, sentence by sentence: compute, aggregate to words, write, read.

Python API (``syntaxnmt attention``, ``plot``, ``analyze-heads`` and the web viewer use it):

* :func:`attention_for_sentences` ``(model, cfg, toks, sources, *, refs=None, conllu=None, device,
  beam=1, parse=False, batch_size=32, progress=False) -> list[SentenceAttention]``: every layer and
  head of every attention of the model (from :func:`syntaxnmt.decoding.loading.load_model`) for each
  source line. Without ``refs`` the model first translates (greedy, or beam search with ``beam``)
  and its own output is then force-decoded to read all weights; with ``refs`` the given
  references are force-decoded. ``conllu`` (or ``parse=True``: the config's parser) attaches the
  source parse; models with source features get their tree and tags as ``translate`` builds them.
* :class:`SentenceAttention`: pieces, words and word index of each piece on both sides (-1 for
  ``</s>``), the translation, the parse or None, and float32 arrays ``encoder`` (L, H, S, S),
  ``decoder`` (L, H, T, T) and ``cross`` (L, H, T, S); RNN models have ``encoder = decoder =
  None`` and ``cross`` (1, 1, T, S). ``S`` counts the source pieces plus ``</s>``; ``T`` the target
  pieces plus ``</s>``. Row ``t`` of ``cross`` is the decoder position that *predicts*
  ``tgt_pieces[t]`` (as in :mod:`syntaxnmt.alignment`); decoder self-attention's queries and keys
  are the decoder *inputs* ``decoder_input_pieces`` = ``<s>`` + ``tgt_pieces[:-1]``.
* :func:`word_level` ``(weights, query_word_of_piece, key_word_of_piece)``: pieces combined into
  words as Clark et al. (2019, Sec. 4.1): attention *to* a split word is the **sum** over its
  pieces, attention *from* a split word the **mean** over its pieces, so every word-level row
  still sums to 1. Special tokens (``<s>``, ``</s>``) stay units of their own, in place.
  :meth:`SentenceAttention.word_level` applies it to one of the three attentions.
* :func:`write_attention` / :func:`read_attention`: the file format of docs/attention.md --
  ``OUT.jsonl`` (a header line, then one JSON object per sentence: tokens, words, parse, array
  shapes) and ``OUT.npz`` (arrays ``s{i}_{kind}`` and ``s{i}_{kind}_words`` for kind in
  encoder/decoder/cross), readable with ``json`` and ``numpy`` alone.
* Context models (docs/documents.md): with the document ids (``docs`` / ``--docs``,
  :func:`sentence_contexts`) the model reads each sentence's previous sentences as ``translate
  --docs`` does. A concatenation model's source (and 2-to-2 target) is the joined sequence, its
  first ``src_context`` (``tgt_context``) pieces the context; a HAN model adds its weights as
  its forward pass returns them (:class:`syntaxnmt.model.outputs.ContextAttention`):
  ``han_sentence`` (H, S, k) over the previous sentences, ``han_word`` (k, H, S, Sc) over their
  pieces, ``han_gate`` (S,) the mean gate λ of each source piece. A target-side HAN model
  (``side: target | both``) reads the previous target sentences -- its own translations of the
  document, made in document order as ``translate --docs`` makes them (the references with
  ``refs``) -- and adds the decoder-side block's ``han_target_sentence`` (H, T, k),
  ``han_target_word`` (k, H, T, Tc) over their decoder inputs (``<s>`` and their pieces) and
  ``han_target_gate`` (T,) per target position.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.config import Config
from syntaxnmt.data.annotations import Parse, annotate
from syntaxnmt.data.batches import make_batch
from syntaxnmt.data.documents import doc_index, previous_sentences
from syntaxnmt.data.features import SourceAnnotation
from syntaxnmt.data.links import WORD_BOUNDARY, word_ids_from_pieces
from syntaxnmt.data.prepare import Tokenizers
from syntaxnmt.data.subwords import Tokenizer
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_outputs
from syntaxnmt.decoding.sources import parse_annotations, parser_words, source_parses
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write, iter_lines, read_lines, write_lines

FORMAT, VERSION = "syntaxnmt-attention", 1
KINDS = ("encoder", "decoder", "cross")
HAN_KINDS = ("han_word", "han_sentence", "han_gate")
"""HAN's arrays (``model.context.kind: han``): word-level, sentence-level weights and the gate."""
HAN_TARGET_KINDS = ("han_target_word", "han_target_sentence", "han_target_gate")
"""The same of the decoder-side HAN (``side: target | both``), over the previous target sentences."""
BOS_PIECE, EOS_PIECE = "<s>", "</s>"


# ---------------------------------------------------------------- word-level aggregation


def word_units(word_of_piece: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The unit of every piece and the word of every unit (-1: a special token).

    A unit is a word (its pieces are consecutive) or one special token, in sentence order.
    """
    w = np.asarray(word_of_piece, dtype=np.int64)
    starts = np.ones(len(w), dtype=bool)
    starts[1:] = (w[1:] != w[:-1]) | (w[1:] < 0)
    unit_words = w[starts]
    real = unit_words[unit_words >= 0]
    if len(set(real.tolist())) != len(real):
        raise ValueError(f"the pieces of a word are not consecutive: {w.tolist()}")
    return np.cumsum(starts) - 1, unit_words


def word_level(weights: np.ndarray, query_word_of_piece: Sequence[int], key_word_of_piece: Sequence[int]) -> np.ndarray:
    """(..., Q, K) piece-level attention to (..., Uq, Uk) units (Clark et al. 2019, Sec. 4.1):
    columns of a word's pieces are summed (attention *to* it), rows averaged (attention *from* it)."""
    uq, _ = word_units(query_word_of_piece)
    uk, _ = word_units(key_word_of_piece)
    nq, nk = (int(uq.max()) + 1 if len(uq) else 0), (int(uk.max()) + 1 if len(uk) else 0)
    to_units = np.zeros((len(uk), nk), dtype=np.float64)
    to_units[np.arange(len(uk)), uk] = 1.0
    from_units = np.zeros((nq, len(uq)), dtype=np.float64)
    from_units[uq, np.arange(len(uq))] = 1.0
    from_units /= from_units.sum(1, keepdims=True)
    return (from_units @ np.asarray(weights, dtype=np.float64) @ to_units).astype(np.float32)


def unit_labels(pieces: Sequence[str], word_of_piece: Sequence[int], words: Sequence[str]) -> list[str]:
    """The label of every unit: its word, or the special token's piece."""
    units, unit_words = word_units(word_of_piece)
    first = {int(u): k for k, u in reversed(list(enumerate(units)))}
    return [words[w] if w >= 0 else pieces[first[u]] for u, w in enumerate(unit_words.tolist())]


def piece_words(pieces: Sequence[str], word_of_piece: Sequence[int]) -> list[str]:
    """Words spelled from their pieces (the '▁' word boundary removed)."""
    n = max(word_of_piece, default=-1) + 1
    words = [""] * n
    for p, w in zip(pieces, word_of_piece):
        if w >= 0:
            words[w] += p
    return [w.replace(WORD_BOUNDARY, "") or WORD_BOUNDARY for w in words]


# ---------------------------------------------------------------- one sentence's attention


@dataclass
class SentenceAttention:
    """All attention weights of one sentence pair, with the tokens they are over (module docstring)."""

    source: str
    translation: str  # the model's output (detokenized) or the forced reference
    forced: bool  # True: ``translation`` is a given reference, not the model's own output
    src_pieces: list[str]  # S: the source pieces, then "</s>"
    src_words: list[str]
    src_word_of_piece: list[int]  # S, -1 for "</s>"
    tgt_pieces: list[str]  # T: the target pieces, then "</s>"
    tgt_words: list[str]
    tgt_word_of_piece: list[int]  # T, -1 for "</s>"
    parse: Parse | None
    encoder: np.ndarray | None  # (L_enc, H, S, S); None for RNN models
    decoder: np.ndarray | None  # (L_dec, H, T, T); None for RNN models
    cross: np.ndarray  # (L_dec, H, T, S); RNN: (1, 1, T, S)
    # Document context (docs/documents.md), for a context model given the document ids:
    context_sources: list[str] | None = None  # the previous sentences it read, nearest first
    src_context: int = 0  # concat: the first src_context source pieces are context (separators included)
    tgt_context: int = 0  # 2-to-2: the first tgt_context target pieces are context
    context_pieces: list[list[str]] | None = None  # HAN: each previous sentence's pieces, then "</s>"
    han_word: np.ndarray | None = None  # HAN: (k, H, S, Sc) word-level weights over each previous sentence's pieces
    han_sentence: np.ndarray | None = None  # HAN: (H, S, k) sentence-level weights over the previous sentences
    han_gate: np.ndarray | None = None  # HAN: (S,) the gate λ of each source piece, mean over dimensions
    context_translations: list[str] | None = None  # target-side HAN: the previous target sentences it read, nearest first
    context_target_pieces: list[list[str]] | None = None  # target-side HAN: each of them as the decoder read it: "<s>", then its pieces
    han_target_word: np.ndarray | None = None  # target-side HAN: (k, H, T, Tc) word-level weights over each previous target sentence
    han_target_sentence: np.ndarray | None = None  # target-side HAN: (H, T, k) sentence-level weights over the previous target sentences
    han_target_gate: np.ndarray | None = None  # target-side HAN: (T,) the gate λ of each target position, mean over dimensions

    @property
    def decoder_input_pieces(self) -> list[str]:
        return [BOS_PIECE] + self.tgt_pieces[:-1]

    @property
    def decoder_input_word_of_piece(self) -> list[int]:
        return [-1] + self.tgt_word_of_piece[:-1]

    def axes(self, kind: str) -> tuple[tuple[list[str], list[int], list[str]], tuple[list[str], list[int], list[str]]]:
        """``(pieces, word_of_piece, words)`` of the query (row) and key (column) side of ``kind``."""
        src = (self.src_pieces, self.src_word_of_piece, self.src_words)
        tgt = (self.tgt_pieces, self.tgt_word_of_piece, self.tgt_words)
        dec_in = (self.decoder_input_pieces, self.decoder_input_word_of_piece, self.tgt_words)
        return {"encoder": (src, src), "decoder": (dec_in, dec_in), "cross": (tgt, src)}[check_kind(kind)]

    def weights(self, kind: str) -> np.ndarray | None:
        return getattr(self, check_kind(kind))

    def word_level(self, kind: str) -> np.ndarray | None:
        """``kind``'s weights with pieces combined into words (:func:`word_level`)."""
        w = self.weights(kind)
        (_, q, _), (_, k, _) = self.axes(kind)
        return None if w is None else word_level(w, q, k)

    def han_weights(self, side: str = "source") -> tuple[np.ndarray, np.ndarray] | None:
        """HAN's sentence weights (H, rows, k) and gate (rows,) of the encoder-side block
        (``source``: rows are source pieces) or the decoder-side one (``target``: target
        positions, the rows of ``cross``); None where the model has none."""
        if side not in ("source", "target"):
            raise ValueError(f"side {side!r}: source or target")
        if side == "source":
            return None if self.han_sentence is None else (self.han_sentence, self.han_gate)
        return None if self.han_target_sentence is None else (self.han_target_sentence, self.han_target_gate)

    def han_word_level(self, side: str = "source") -> tuple[np.ndarray, np.ndarray] | None:
        """HAN's sentence weights (H, U, k) and gate (U,) per source unit (per target unit with
        ``side="target"``): the mean over a word's pieces."""
        weights = self.han_weights(side)
        if weights is None:
            return None
        sentence, gate = weights
        wop = self.src_word_of_piece if side == "source" else self.tgt_word_of_piece
        k = sentence.shape[-1]
        return word_level(sentence, wop, [-1] * k), word_level(gate[:, None], wop, [-1])[:, 0]

    def context_units(self, side: str, words: bool) -> int:
        """How many leading rows/columns of the ``side`` (``source``, ``target`` or
        ``decoder_input``) axis are context (concatenation models): pieces, or units with ``words``."""
        n = {"source": self.src_context, "target": self.tgt_context, "decoder_input": self.tgt_context + (1 if self.tgt_context else 0)}[side]
        wop = {"source": self.src_word_of_piece, "target": self.tgt_word_of_piece, "decoder_input": self.decoder_input_word_of_piece}[side]
        if not n or not words:
            return n
        return int(word_units(wop)[0][n]) if n < len(wop) else int(word_units(wop)[0][-1]) + 1

    def labels(self, kind: str, words: bool = False) -> tuple[list[str], list[str]]:
        """Row and column labels of ``kind``: pieces, or word units with ``words``."""
        rows, cols = self.axes(kind)
        if not words:
            return list(rows[0]), list(cols[0])
        return unit_labels(*rows), unit_labels(*cols)


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise UserError(f"unknown attention {kind!r}: choose one of {', '.join(KINDS)}")
    return kind


# ---------------------------------------------------------------- computing it


@dataclass
class EncodedSource:
    ids: np.ndarray
    words: list[str]
    word_of_piece: list[int]
    parse: Parse | None
    annotation: SourceAnnotation | None


def encode_sources(
    model, cfg: Config, toks: Tokenizers, lines: Sequence[str], conllu: str | None = None, parse: bool = False, source_name: str = "<input>", parses: Sequence[Parse] | None = None
) -> list[EncodedSource]:
    """Source ids, words and (when given, asked for or needed by the model) parses, as ``translate``
    encodes them. ``parses``: parses already read (one per line), instead of ``conllu``."""
    spec = model.feature_spec
    if parses is not None:
        if len(parses) != len(lines):
            raise UserError(f"{len(parses)} parses for {len(lines)} source lines")
    elif conllu or parse or spec.needs_parse:
        why = "this model uses parses" if spec.needs_parse else "the analysis needs source parses"
        parses = source_parses(cfg, lines, conllu, source_name, why)
    model_words = parser_words(cfg, lines, None, source_name) if parses is None else None
    if parses is not None:
        ids, wop = toks.src.encode_words([p.words for p in parses])
        words = [list(p.words) for p in parses]
    elif model_words is not None:  # a model of a parsed corpus reads the parser's words, as in translate
        ids, wop = toks.src.encode_words(model_words)
        words = [list(w) for w in model_words]
    else:
        ids, wop = toks.src.encode_with_words(list(lines))
        words = [piece_words([toks.src.id_to_piece(i) for i in s], w) for s, w in zip(ids, wop)]
    anns: list[SourceAnnotation | None] = [None] * len(lines)
    if spec.needs_parse:
        anns = parse_annotations(cfg, parses, wop, toks.tags)
    elif spec:
        anns = [SourceAnnotation(np.asarray(w, dtype=np.int64), np.zeros(0, dtype=np.int64)) for w in wop]
    return [
        EncodedSource(np.asarray(i, dtype=np.int64), ws, list(w), parses[k] if parses else None, anns[k])
        for k, (i, w, ws) in enumerate(zip(ids, wop, words))
    ]


def target_from_ids(tok: Tokenizer, ids: Sequence[int]) -> tuple[list[int], list[str], list[int], str]:
    """A model output's ids, pieces, word of each piece and detokenized text."""
    pieces = [tok.id_to_piece(i) for i in ids]
    return list(ids), pieces, word_ids_from_pieces(pieces), tok.decode(ids)


def target_from_reference(tok: Tokenizer, line: str) -> tuple[list[int], list[str], list[int], list[str]]:
    """A reference's ids, pieces, word of each piece and words: its whitespace tokens after the
    model's normalization (lowercasing, Moses), each encoded on its own as in ``syntaxnmt align``."""
    words = tok.normalize(line).split()
    (ids,), (wop,) = tok.encode_words([words])
    return ids, [tok.id_to_piece(i) for i in ids], wop, words


def _check_lengths(model, sources: Sequence[EncodedSource], targets: Sequence[Sequence[int]] | None) -> None:
    limit = model.cfg.max_positions - 2
    for k, s in enumerate(sources, start=1):
        n = max(len(s.ids), len(targets[k - 1]) if targets is not None else 0)
        if n > limit:
            raise UserError(f"sentence {k} has {n} subwords: more than the model's {limit} positions")


def _layers(weights: list[torch.Tensor], b: int, q: int, k: int) -> np.ndarray | None:
    """Row ``b`` of per-layer (B, H, Tq, Tk) weights, unpadded, as one (L, H, q, k) float32 array."""
    if not weights:
        return None
    return torch.stack([w[b, :, :q, :k] for w in weights]).float().cpu().numpy()


def _han(weights, b: int, s: int, sc: int, prefix: str = "han") -> dict[str, np.ndarray]:
    """Row ``b`` of HAN's weights (:class:`~syntaxnmt.model.outputs.ContextAttention`), unpadded,
    named ``{prefix}_word``, ``{prefix}_sentence`` and ``{prefix}_gate``."""
    return {
        f"{prefix}_word": weights.word[b, :, :, :s, :sc].float().cpu().numpy(),
        f"{prefix}_sentence": weights.sentence[b, :, :s].float().cpu().numpy(),
        f"{prefix}_gate": weights.gate[b, :s].float().cpu().numpy(),
    }


@torch.no_grad()
def force_decode(
    model,
    sources: Sequence[EncodedSource],
    targets: Sequence[Sequence[int]],
    device: torch.device,
    batch_size: int = 32,
    progress: bool = False,
    contexts: Sequence[Sequence[np.ndarray]] | None = None,
    context_targets: Sequence[Sequence[np.ndarray]] | None = None,
) -> list[dict[str, np.ndarray | None]]:
    """Encoder, decoder and cross-attention weights while the model reads ``targets`` (teacher
    forcing); with ``contexts`` (a HAN model: each sentence's previous source sentences, nearest
    first; up to 2k for HAN on both sides, :func:`~syntaxnmt.data.batches.make_batch`) HAN's
    weights too (``han_word``, ``han_sentence``, ``han_gate``), and with ``context_targets`` (a
    target-side HAN model: the target sentences of the first k of those, as many) the
    decoder-side block's (``han_target_word``, ``han_target_sentence``, ``han_target_gate``)."""
    spec = model.feature_spec
    k = model.document_context.sentences if contexts is not None else 0
    order = np.argsort([len(s.ids) + len(t) for s, t in zip(sources, targets)], kind="stable")
    out: list[dict] = [{}] * len(sources)
    was_training = model.training
    model.eval()
    try:
        with tqdm(total=len(sources), desc="attention", unit="sent", disable=not progress, leave=False) as bar:
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size].tolist()
                anns = [sources[i].annotation for i in idx] if spec else None
                ctx = [contexts[i] for i in idx] if contexts is not None else None
                ctx_tgt = [context_targets[i] for i in idx] if context_targets is not None else None
                batch = make_batch([sources[i].ids for i in idx], [np.asarray(targets[i], dtype=np.int64) for i in idx], idx, anns, spec, context=ctx, context_size=k, context_tgt=ctx_tgt, context_depth=2 if k and model.document_context.han_both else 1)
                res = model(batch.to(device), need_weights=True)
                for b, i in enumerate(idx):
                    s, t = len(sources[i].ids) + 1, len(targets[i]) + 1
                    out[i] = {
                        "encoder": _layers(res.encoder.self_attention, b, s, s),
                        "decoder": _layers(getattr(res, "decoder_self_attention", []), b, t, t),
                        "cross": _layers(res.cross_attention, b, t, s),
                    }
                    if res.encoder.context_attention is not None:
                        out[i].update(_han(res.encoder.context_attention, b, s, max((len(c) + 1 for c in contexts[i][:k]), default=1)))
                    if getattr(res, "target_context_attention", None) is not None:  # the decoder inputs of each previous target sentence: <s> and its pieces
                        out[i].update(_han(res.target_context_attention, b, t, max((len(c) + 1 for c in context_targets[i]), default=1), prefix="han_target"))
                bar.update(len(idx))
    finally:
        model.train(was_training)
    return out


@dataclass
class SentenceContext:
    """What a context model reads beside one sentence: its previous source sentences (``lines``,
    encoded as ``sources``; nearest first, at most k -- 2k for HAN on both sides, whose previous
    translations' states read their own previous sentences) and, for a 2-to-2 or a target-side HAN
    model, the target side of that context (``targets``, nearest first: the references of the
    previous lines, or what the model wrote before the current sentence: for 2-to-2 its output
    before the last separator, for target-side HAN its translations of the previous lines).
    ``translation``: a target-side HAN model's own translation of the sentence itself, made in
    document order (:func:`document_translations`)."""

    lines: list[str]
    sources: list[EncodedSource]
    targets: list["Target"] | None = None
    translation: "Target | None" = None


def sentence_contexts(
    model,
    cfg: Config,
    toks: Tokenizers,
    lines: Sequence[str],
    docs: Sequence[str],
    keep: Sequence[int],
    refs: Sequence[str] | None = None,
    source_name: str = "<input>",
    translations: Mapping[int, "Target"] | None = None,
) -> list[SentenceContext] | None:
    """The :class:`SentenceContext` of the lines ``keep`` (0-based) of a document file: ``lines``
    all of its lines, ``docs`` a document id per line, ``refs`` the references (line-aligned), or
    ``translations`` the model's own translations of (at least) the previous lines of ``keep``
    and of ``keep`` themselves, by line (:func:`document_translations`): the target side of the
    context, and each sentence's :attr:`SentenceContext.translation`. Blank lines are nobody's
    context, as in ``syntaxnmt translate --docs``. None for a sentence-level model."""
    dc = getattr(model, "document_context", None)
    if dc is None:
        return None
    if len(docs) != len(lines):
        raise UserError(f"{len(docs)} document ids for {len(lines)} lines of {source_name} (give one id per line)")
    filled = [n for n, line in enumerate(lines) if line.strip()]
    row_of = {n: r for r, n in enumerate(filled)}
    previous = previous_sentences(doc_index([docs[n] for n in filled], f"{source_name} (document ids)"), dc.reach)
    before = {n: ([filled[j] for j in previous[row_of[n]] if j >= 0] if n in row_of else []) for n in keep}
    needed = sorted({m for prev in before.values() for m in prev})
    encoded = dict(zip(needed, encode_sources(model, cfg, toks, [lines[m] for m in needed], source_name=source_name)))
    if translations is not None:
        return [SentenceContext([lines[m] for m in before[n]], [encoded[m] for m in before[n]], [translations[m] for m in before[n]], translations.get(n)) for n in keep]
    return [
        SentenceContext([lines[m] for m in before[n]], [encoded[m] for m in before[n]], None if refs is None else [reference_target(toks.tgt, refs[m]) for m in before[n]])
        for n in keep
    ]


def document_translations(
    model, cfg: Config, toks: Tokenizers, lines: Sequence[str], docs: Sequence[str], keep: Sequence[int], device: torch.device, *, beam: int = 1, batch_size: int = 32, source_name: str = "<input>"
) -> dict[int, "Target"]:
    """The model's translations (best of ``beam``) of the lines of the documents of ``keep``, from
    each document's first line to its last line in ``keep``, made as ``translate --docs`` makes
    them: a target-side HAN model reads its own translations of the previous sentences, so a
    sentence's weights need the whole document before it translated first. By line (0-based)."""
    last: dict[str, int] = {}
    for n in keep:
        last[docs[n]] = max(last.get(docs[n], -1), n)
    todo = [n for n in range(len(lines)) if n <= last.get(docs[n], -1)]
    decode = cfg.decode.model_copy(update={"batch_size": batch_size, "beam_size": beam})
    outputs = translate_outputs(model, cfg, toks, [lines[n] for n in todo], decode, device, source_name=source_name, line_numbers=[n + 1 for n in todo], docs=[docs[n] for n in todo], nbest=1)
    return {n: output_target(toks.tgt, o[0].tokens, o[0].text) for n, o in zip(todo, outputs)}


def context_targets(tok: Tokenizer, tokens: Sequence[int], sep: int) -> list["Target"]:
    """The sentences a 2-to-2 model wrote before the current one (its output up to the last
    separator), nearest first."""
    parts, current = [], []
    for t in tokens:
        if t == sep:
            parts.append(current)
            current = []
        else:
            current.append(t)
    return [output_target(tok, p) for p in reversed(parts)]


def attention_for_sentences(
    model,
    cfg: Config,
    toks: Tokenizers,
    sources: list[str],
    *,
    refs: list[str] | None = None,
    conllu: str | None = None,
    device: torch.device,
    beam: int = 1,
    parse: bool = False,
    batch_size: int = 32,
    progress: bool = False,
    source_name: str = "<input>",
    parses: Sequence[Parse] | None = None,
    contexts: Sequence[SentenceContext] | None = None,
) -> list[SentenceAttention]:
    """Every attention weight of ``model`` for each source line (see the module docstring).
    ``parses`` (one per line, e.g. from :func:`read_inputs`) can replace ``conllu``; ``contexts``
    (one per line, :func:`sentence_contexts`): a context model reads them, as ``translate --docs``."""
    if refs is not None and len(refs) != len(sources):
        raise UserError(f"{len(sources)} source lines but {len(refs)} references: the files must be line-aligned")
    src = encode_sources(model, cfg, toks, sources, conllu, parse, source_name, parses)
    dc = getattr(model, "document_context", None)
    if refs is None and contexts is not None and dc is not None and dc.han_target:  # translated in document order already
        if any(c.translation is None for c in contexts):
            raise ValueError("a target-side HAN model's contexts need its own translations (sentence_contexts(..., translations=document_translations(...)))")
        tgt = [c.translation for c in contexts]
    elif refs is None:
        _check_lengths(model, src, None)
        anns = [s.annotation for s in src] if model.feature_spec else None
        decode = cfg.decode.model_copy(update={"batch_size": batch_size})
        ctx_ids = None if contexts is None else [[c.ids for c in ctx.sources] for ctx in contexts]
        hyps = translate_ids(model, [s.ids for s in src], decode, device, beam=beam, annotations=anns, contexts=ctx_ids, progress=progress)
        tgt = [output_target(toks.tgt, h[0].tokens) for h in hyps]
        if contexts is not None and dc is not None and dc.concat_target:
            contexts = [SentenceContext(c.lines, c.sources, context_targets(toks.tgt, h[0].context_tokens or [], dc.sep)) for c, h in zip(contexts, hyps)]
    else:
        tgt = [reference_target(toks.tgt, ref) for ref in refs]
    return attention_of_targets(model, toks, sources, src, tgt, device, forced=refs is not None, batch_size=batch_size, progress=progress, contexts=contexts)


Target = tuple[list[int], list[str], list[int], list[str], str]
"""A target side: ids, pieces, word of each piece, words, text."""


def output_target(tok: Tokenizer, ids: Sequence[int], text: str | None = None) -> Target:
    """The target side of a model's output ``ids`` (``text``: its detokenized text, when already made)."""
    ids, pieces, wop, decoded = target_from_ids(tok, ids)
    return ids, pieces, wop, piece_words(pieces, wop), decoded if text is None else text


def reference_target(tok: Tokenizer, line: str) -> Target:
    """The target side of a given reference (:func:`target_from_reference`)."""
    return (*target_from_reference(tok, line), line)


def _join(sep: int, parts: Sequence[tuple[Sequence[int], Sequence[int], Sequence[str]]]) -> tuple[list[int], list[int], list[str], int]:
    """Sentences (ids, word of each piece, words; oldest first, the current one last) joined as a
    concatenation model reads them (:meth:`DocumentContext.concatenate`): ids, word of each piece
    (-1 for a separator), words, and how many pieces come before the current sentence."""
    ids: list[int] = []
    wop: list[int] = []
    words: list[str] = []
    for n, (i, w, ws) in enumerate(parts):
        if n:
            ids.append(sep)
            wop.append(-1)
        ids += [int(x) for x in i]
        wop += [x + len(words) if x >= 0 else -1 for x in w]
        words += list(ws)
    return ids, wop, words, len(ids) - len(parts[-1][0])


def attention_of_targets(
    model,
    toks: Tokenizers,
    lines: Sequence[str],
    src: Sequence[EncodedSource],
    tgt: Sequence[Target],
    device: torch.device,
    *,
    forced: bool,
    batch_size: int = 32,
    progress: bool = False,
    contexts: Sequence[SentenceContext] | None = None,
) -> list[SentenceAttention]:
    """Every attention weight of ``model`` while it reads the given targets (force-decoding), one
    :class:`SentenceAttention` per source line. ``forced``: the targets are given references (not
    the model's output). ``contexts`` (one per line): a context model reads them -- a
    concatenation model's source (and 2-to-2 target) is then the joined sequence, its first
    ``src_context`` (``tgt_context``) pieces the context; a HAN model adds its weights (a
    target-side one reads the contexts' ``targets`` too)."""
    dc = getattr(model, "document_context", None) if contexts is not None else None
    n_src = n_tgt = [0] * len(src)
    han_ctx = han_tgt = None
    if dc is not None and dc.concatenates:
        joined = [_join(dc.sep, [(p.ids, p.word_of_piece, p.words) for p in reversed(c.sources[: dc.sentences])] + [(s.ids, s.word_of_piece, s.words)]) for s, c in zip(src, contexts)]
        src = [EncodedSource(np.asarray(ids, dtype=np.int64), words, wop, None, None) for ids, wop, words, _ in joined]
        n_src = [n for *_, n in joined]
        if dc.concat_target:
            joined_tgt = [_join(dc.sep, [(t[0], t[2], t[3]) for t in reversed((c.targets or [])[: dc.sentences])] + [(cur[0], cur[2], cur[3])]) for cur, c in zip(tgt, contexts)]
            tgt = [(ids, [toks.tgt.id_to_piece(i) for i in ids], wop, words, cur[4]) for (ids, wop, words, _), cur in zip(joined_tgt, tgt)]
            n_tgt = [n for *_, n in joined_tgt]
    elif dc is not None and dc.reads_states:
        han_ctx = [[p.ids for p in c.sources[: dc.reach]] for c in contexts]  # side both: the previous sentences' own previous ones too
        if dc.han_target:
            if any(c.targets is None for c in contexts):
                raise ValueError("a target-side HAN model reads the target side of its contexts: give SentenceContext.targets")
            han_tgt = [[np.asarray(t[0], dtype=np.int64) for t in c.targets[: dc.sentences]] for c in contexts]
    _check_lengths(model, src, [t[0] for t in tgt])
    weights = force_decode(model, src, [t[0] for t in tgt], device, batch_size, progress, contexts=han_ctx, context_targets=han_tgt)
    out = []
    for n, (line, s, (_, pieces, wop, words, text), w) in enumerate(zip(lines, src, tgt, weights)):
        extra: dict = {}
        if dc is not None:
            k = dc.sentences
            extra = {"context_sources": contexts[n].lines[:k], "src_context": n_src[n], "tgt_context": n_tgt[n]}
            if han_ctx is not None:
                extra["context_pieces"] = [[toks.src.id_to_piece(int(i)) for i in c] + [EOS_PIECE] for c in han_ctx[n][:k]]
            if han_tgt is not None:
                extra["context_translations"] = [t[4] for t in contexts[n].targets[:k]]
                extra["context_target_pieces"] = [[BOS_PIECE] + list(t[1]) for t in contexts[n].targets[:k]]
        out.append(
            SentenceAttention(
                source=line,
                translation=text,
                forced=forced,
                src_pieces=[toks.src.id_to_piece(int(i)) for i in s.ids] + [EOS_PIECE],
                src_words=s.words,
                src_word_of_piece=s.word_of_piece + [-1],
                tgt_pieces=pieces + [EOS_PIECE],
                tgt_words=words,
                tgt_word_of_piece=list(wop) + [-1],
                parse=s.parse,
                **w,
                **extra,
            )
        )
    return out


def model_info(model, cfg: Config) -> dict:
    """What a reader of the weights needs to know about the model (the export's header)."""
    info = {"arch": cfg.model.arch, "heads": cfg.model.heads if cfg.model.arch == "transformer" else 1}
    if cfg.model.arch == "transformer":
        info.update(encoder_layers=cfg.model.enc_layers, decoder_layers=cfg.model.dec_layers)
    else:
        info.update(encoder_layers=0, decoder_layers=1)
    info["syntax"] = cfg.model.syntax.model_dump(mode="json")
    a = cfg.train.alignment
    info["guided_alignment"] = {"weight": a.guided_weight, "layer": a.layer, "head": a.head} if a.guided_weight > 0 else None
    lisa = cfg.train.multitask.lisa
    info["supervised_heads"] = (
        {"layers": sorted(layer % cfg.model.enc_layers for layer in lisa.layers), "heads": list(lisa.heads), "weight": lisa.weight, "inject_parse": lisa.inject_parse}
        if lisa.weight > 0 and cfg.model.arch == "transformer"
        else None
    )
    m, window = cfg.model, cfg.model.rnn.local_window if cfg.model.arch == "rnn" else 0
    info["cross_attention"] = {"normalizer": m.attention_normalizer, "hard": m.hard_attention, "local_window": window or None, "rows_sum_to_one": not window}
    return info


# ---------------------------------------------------------------- the file format


def export_paths(out: str | Path) -> tuple[Path, Path]:
    """``OUT.jsonl`` and ``OUT.npz`` for ``OUT`` (given with or without either suffix)."""
    out = Path(out)
    if out.suffix in (".jsonl", ".npz"):
        out = out.with_suffix("")
    return out.with_name(out.name + ".jsonl"), out.with_name(out.name + ".npz")


def _parse_json(parse: Parse | None) -> dict | None:
    if parse is None:
        return None
    return {"words": parse.words, "heads": list(map(int, parse.heads)), "deprel": parse.deprel, "upos": parse.upos, "xpos": parse.xpos}


def sentence_record(index: int, s: SentenceAttention) -> dict:
    """The JSON object of one sentence (arrays excluded)."""
    return {
        "index": index,
        "source": s.source,
        "translation": s.translation,
        "forced": s.forced,
        "src_pieces": s.src_pieces,
        "src_words": s.src_words,
        "src_word_of_piece": s.src_word_of_piece,
        "tgt_pieces": s.tgt_pieces,
        "tgt_words": s.tgt_words,
        "tgt_word_of_piece": s.tgt_word_of_piece,
        "decoder_input_pieces": s.decoder_input_pieces,
        "src_units": s.labels("encoder", words=True)[1],
        "tgt_units": s.labels("cross", words=True)[0],
        "decoder_input_units": s.labels("decoder", words=True)[0],
        "parse": _parse_json(s.parse),
        "shapes": {k: (list(getattr(s, k).shape) if getattr(s, k) is not None else None) for k in KINDS + HAN_KINDS + HAN_TARGET_KINDS},
        "context_sources": s.context_sources,
        "src_context": s.src_context,
        "tgt_context": s.tgt_context,
        "context_pieces": s.context_pieces,
        "context_translations": s.context_translations,
        "context_target_pieces": s.context_target_pieces,
    }


def write_attention(out: str | Path, sentences: Sequence[SentenceAttention], info: dict | None = None) -> tuple[Path, Path]:
    """Write ``OUT.jsonl`` and ``OUT.npz`` atomically (docs/attention.md); return their paths."""
    jsonl, npz = export_paths(out)
    arrays: dict[str, np.ndarray] = {}
    for i, s in enumerate(sentences):
        for kind in KINDS:
            if getattr(s, kind) is not None:
                arrays[f"s{i}_{kind}"] = getattr(s, kind).astype(np.float32)
                arrays[f"s{i}_{kind}_words"] = s.word_level(kind)
        for side, prefix, kinds in (("source", "han", HAN_KINDS), ("target", "han_target", HAN_TARGET_KINDS)):
            if s.han_weights(side) is not None:
                for kind in kinds:
                    arrays[f"s{i}_{kind}"] = getattr(s, kind).astype(np.float32)
                arrays[f"s{i}_{prefix}_sentence_words"], arrays[f"s{i}_{prefix}_gate_words"] = s.han_word_level(side)
    header = {"format": FORMAT, "version": VERSION, "sentences": len(sentences), "arrays": npz.name, **(info or {})}
    atomic_write(npz, lambda f: np.savez_compressed(f, **arrays))
    write_lines(jsonl, [json.dumps(header, ensure_ascii=False)] + [json.dumps(sentence_record(i, s), ensure_ascii=False) for i, s in enumerate(sentences)])
    return jsonl, npz


def _json_line(path: Path, number: int, line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{number}: not JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise UserError(f"{path}:{number}: expected a JSON object")
    return obj


def _sentence_from_record(rec: dict, arrays, where: str) -> SentenceAttention:
    try:
        p = rec["parse"]
        parse = Parse(p["words"], p["upos"], p.get("xpos", ["_"] * len(p["words"])), p["heads"], p["deprel"]) if p else None
        i = rec["index"]
        got = {k: (arrays[f"s{i}_{k}"] if rec["shapes"].get(k) is not None else None) for k in KINDS + HAN_KINDS + HAN_TARGET_KINDS}
        fields = ("source", "translation", "forced", "src_pieces", "src_words", "src_word_of_piece", "tgt_pieces", "tgt_words", "tgt_word_of_piece")
        defaults = (("context_sources", None), ("src_context", 0), ("tgt_context", 0), ("context_pieces", None), ("context_translations", None), ("context_target_pieces", None))
        context = {f: rec.get(f, default) for f, default in defaults}
        return SentenceAttention(**{f: rec[f] for f in fields}, parse=parse, **got, **context)
    except KeyError as e:
        raise UserError(f"{where}: missing {e.args[0]!r}") from None


def read_attention(path: str | Path) -> tuple[dict, list[SentenceAttention]]:
    """The header and the sentences of an export (``OUT``, ``OUT.jsonl`` or ``OUT.npz``)."""
    jsonl, npz = export_paths(path)
    if not jsonl.is_file():
        raise UserError(f"{jsonl}: attention export not found (written by `syntaxnmt attention -o {jsonl.with_suffix('')}`)")
    lines = list(iter_lines(jsonl))
    header = _json_line(jsonl, 1, lines[0]) if lines else {}
    if header.get("format") != FORMAT:
        raise UserError(f"{jsonl}:1: not a syntaxnmt attention export (no header with format {FORMAT!r})")
    if not npz.is_file():
        raise UserError(f"{npz}: the arrays of {jsonl} are missing")
    try:
        arrays = np.load(npz, allow_pickle=False)
        if not isinstance(arrays, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with arrays:  # the arrays are read one by one, so damage may show at any of them
            out = [_sentence_from_record(_json_line(jsonl, n, line), arrays, f"{jsonl}:{n}") for n, line in enumerate(lines[1:], start=2)]
    except (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError) as e:  # cut short or damaged
        reason = "not an .npz archive" if "pickled" in str(e) else (str(e).split(". ")[0].strip()[:200] or type(e).__name__)
        raise UserError(f"{npz}: the attention arrays are damaged ({reason}): write them again with `syntaxnmt attention`") from None
    return header, out


# ---------------------------------------------------------------- the command


def parse_selection(spec: str | None, n: int, what: str = "--sentences") -> list[int]:
    """0-based line numbers from ``"0,3,5-7"`` (None: all ``n``); out of range is an error."""
    if not spec:
        return list(range(n))
    out: list[int] = []
    for part in spec.split(","):
        try:
            a, _, b = part.strip().partition("-")
            lo, hi = int(a), int(b) if b else int(a)
        except ValueError:
            raise UserError(f"{what}: {part!r} is not a line number or a range like 5-7") from None
        if not 0 <= lo <= hi < n:
            raise UserError(f"{what}: {part.strip()} is outside the input's lines 0-{n - 1}")
        out.extend(range(lo, hi + 1))
    return out


def read_inputs(src: str, ref: str | None = None, conllu: str | None = None, sentences: str | None = None) -> tuple[list[str], list[str] | None, list[Parse] | None, list[int]]:
    """Source lines, references and parses of the selected lines (``sentences``, see
    :func:`parse_selection`), and the selected line numbers. Parses are checked against the lines."""
    lines = read_lines(src)
    refs = read_lines(ref) if ref else None
    if refs is not None and len(refs) != len(lines):
        raise UserError(f"{src} has {len(lines)} lines but {ref} has {len(refs)}: the files must be line-aligned")
    parses = annotate(lines, method="conllu", conllu_path=conllu, text_path=src)[0] if conllu else None
    keep = parse_selection(sentences, len(lines))
    pick = lambda xs: None if xs is None else [xs[i] for i in keep]  # noqa: E731
    return pick(lines), pick(refs), pick(parses), keep


def read_contexts(
    model, cfg: Config, toks: Tokenizers, src: str, docs: str | None, keep: Sequence[int], ref: str | None = None, *, device: torch.device | None = None, beam: int = 1, batch_size: int = 32
) -> list[SentenceContext] | None:
    """The document context of the selected lines ``keep`` of ``src`` from the doc-id file ``docs``
    (:func:`sentence_contexts`); None without ``docs`` or for a sentence-level model. Without
    ``ref``, a target-side HAN model's documents are first translated up to the selected lines
    (:func:`document_translations`, on ``device`` with ``beam``): its own translations are its
    target context."""
    if not docs:
        return None
    lines, ids = read_lines(src), read_lines(docs)
    contexts = sentence_contexts(model, cfg, toks, lines, ids, keep, read_lines(ref) if ref else None, src)
    dc = getattr(model, "document_context", None)
    if contexts is None or ref or not dc.han_target:
        return contexts
    own = document_translations(model, cfg, toks, lines, ids, keep, device or torch.device("cpu"), beam=beam, batch_size=batch_size, source_name=src)
    return sentence_contexts(model, cfg, toks, lines, ids, keep, None, src, translations=own)


def export_attention(
    checkpoint: str | Path, src: str, out: str | Path, *, ref: str | None = None, conllu: str | None = None, sentences: str | None = None, parse: bool = False, beam: int | None = None, batch_size: int = 32, device: torch.device, docs: str | None = None
) -> tuple[Path, Path, int]:
    """``syntaxnmt attention``: load the model, compute every weight of the selected sentences, write the export.
    ``docs``: the doc-id file of ``src``, read by a context model (docs/documents.md); ``beam``
    (None: the checkpoint's ``decode.beam_size``, as ``translate``) searches its translations."""
    model, cfg, toks = load_model(checkpoint, device)
    beam = beam or cfg.decode.beam_size
    lines, refs, parses, keep = read_inputs(src, ref, conllu, sentences)
    contexts = read_contexts(model, cfg, toks, src, docs, keep, ref, device=device, beam=beam, batch_size=batch_size)
    result = attention_for_sentences(model, cfg, toks, lines, refs=refs, device=device, beam=beam, parse=parse, batch_size=batch_size, progress=True, source_name=src, parses=parses, contexts=contexts)
    info = {"checkpoint": str(checkpoint), "source_file": str(src), "reference_file": ref, "lines": keep, "target": "reference" if ref else "translation", "beam": None if ref else beam, **model_info(model, cfg)}
    info["context"] = {**cfg.model.context.model_dump(mode="json"), "docs_file": docs} if cfg.model.context.documents else None
    jsonl, npz = write_attention(out, result, info)
    return jsonl, npz, len(result)
