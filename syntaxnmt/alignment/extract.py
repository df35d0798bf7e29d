"""Word links read off a trained model's cross-attention, for single sentence pairs and whole files.

The model force-decodes the reference; rows of its cross-attention are target positions (see the
conventions in :mod:`syntaxnmt.alignment`). Subword links are projected back to the words.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from syntaxnmt.alignment.symmetrize import symmetrization
from syntaxnmt.alignment.symmetrize import symmetrize as symmetrize_links
from syntaxnmt.cpu.pools import batches_side_by_side
from syntaxnmt.data.batches import make_batch
from syntaxnmt.data.features import SourceAnnotation
from syntaxnmt.data.links import Links, subwords_to_words, transposed
from syntaxnmt.data.subwords import PAD, Tokenizer
from syntaxnmt.decoding.forced import check_forced_pairs
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.sources import parse_annotations, source_parses
from syntaxnmt.errors import UserError
from syntaxnmt.model.outputs import average_heads, layer_head
from syntaxnmt.model.transformer import Transformer

ATTENTION_METHODS = ("argmax", "threshold")


@dataclass(frozen=True)
class AttentionReading:
    """Which cross-attention is read as alignment, and at which decoder step.

    ``layer``/``head``: a decoder layer / head (negative counts from the end) or None for the
    average; ``shift``: Shift-Att's step (:func:`attention_links`); ``full_context``: the
    supervised layer's extra pass without the causal mask (``train.alignment.full_context``;
    ``layer`` is then that layer's index, for the label only); ``null``: the reading is of a leaky
    model's supervised pass and its leak slot is the null word (:meth:`null_share`).
    """

    layer: int | None = None
    head: int | None = None
    shift: bool = False
    full_context: bool = False
    null: bool = False

    @property
    def label(self) -> str:
        layer = "all layers" if self.layer is None else f"layer {self.layer}" + (" full context" if self.full_context else "")
        head = "heads averaged" if self.head is None else f"head {self.head}"
        return f"{layer}, {head}" + (", shifted" if self.shift else "") + (", leak as null" if self.null else "")

    def attention(self, out) -> torch.Tensor:
        """The (B, T, S) attention this reading takes from a model output (called with ``need_weights``).

        A model with leaky attention (``train.alignment.leaky``) gives the leak slot a share of
        its supervised attention. Without ``null`` every row is renormalized over the real source
        positions; with ``null`` the rows keep the leak's share out (they sum to 1 - λ), on the
        scale of :meth:`null_share`."""
        if self.full_context:
            if out.alignment_attention is None:
                raise UserError("this model has no full-context alignment pass (train.alignment.full_context): read its layers with --layer")
            layers, layer = [out.alignment_attention], None
        else:
            layers, layer = out.cross_attention, self.layer
        if out.alignment_leak is not None and not self.null:
            layers = [None if w is None else w / w.sum(dim=-1, keepdim=True).clamp_min(1e-12) for w in layers]
        return average_heads(layers, layer, self.head)

    def null_share(self, out) -> torch.Tensor | None:
        """With ``null``: the (B, T) weight of the leak slot, the heads averaged as :meth:`attention`
        averages them, else None. The leak is trained as the null word: target positions without a
        reference link attend to it (:func:`syntaxnmt.training.alignment.leak_loss`). Read as
        alignment, it is one more column of the row (as NULL in the IBM models, Brown et al.
        1993): a target position whose leak weight is at least its largest source weight gets no
        link (:func:`attention_links`), so the words the teacher leaves unaligned stay unaligned
        instead of being forced onto a source word by the argmax."""
        if not self.null or out.alignment_leak is None:
            return None
        return out.alignment_leak.mean(dim=1) if self.head is None else out.alignment_leak[:, self.head]


def _to_numpy(weights) -> np.ndarray:
    if hasattr(weights, "detach"):
        weights = weights.detach().float().cpu().numpy()
    return np.asarray(weights, dtype=np.float64)


def alignment_from_attention(weights, method: str = "argmax", threshold: float = 0.5) -> Links:
    """Links ``(i, j)`` read off an attention matrix ``weights`` (T, S): row j = target, column i = source.

    ``argmax``: every target position j links to its most attended source position (the first
    one on ties). ``threshold``: every (i, j) with ``weights[j, i] >= threshold``.
    ``weights`` is a NumPy array or a tensor (any device, detached here).
    """
    w = _to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"attention weights must be (T, S), got shape {w.shape}")
    if method == "argmax":
        if w.shape[1] == 0:
            return set()
        return {(int(i), j) for j, i in enumerate(w.argmax(axis=1))}
    if method == "threshold":
        js, is_ = np.nonzero(w >= threshold)
        return {(int(i), int(j)) for j, i in zip(js, is_)}
    raise UserError(f"unknown attention alignment method {method!r}; choose one of {', '.join(ATTENTION_METHODS)}")


def needed_attention(model, readings: Sequence[AttentionReading]) -> tuple[set[int], bool]:
    """The decoder layers (0-based) whose cross-attention ``readings`` read, and whether one reads
    the full-context pass; every reading checked against the model first (:func:`check_reading`)."""
    n_layers = attention_shape(model)[0]
    layers: set[int] = set()
    full_context = False
    for r in readings:
        check_reading(model, r)
        if r.full_context:
            full_context = True
        elif r.layer is None:
            layers.update(range(n_layers))
        else:
            layers.add(r.layer % n_layers)
    return layers, full_context


def force_decode(model, batch, readings: Sequence[AttentionReading] | None = None, encoder_batch=None, encoder_rows: torch.Tensor | None = None):
    """The cross-attention of ``batch`` with its reference forced: eval mode, no gradients, the
    model's mode restored. A Transformer computes only what ``readings`` read
    (:meth:`~syntaxnmt.model.transformer.Transformer.forced_attention`; None: every layer and the
    full-context pass), with its self-attentions on their fused kernel; ``encoder_batch`` (the
    distinct sources) and ``encoder_rows`` (the row of each of ``batch``'s sentences in it) encode
    a source shared by several targets once. Another model runs its whole forward pass on ``batch``."""
    if batch.tgt_out is None:
        raise ValueError("force decoding needs a batch with reference targets")
    was_training = model.training
    if was_training:
        model.eval()
    try:
        with torch.no_grad():
            if not isinstance(model, Transformer):
                return model(batch, need_weights=True)
            if readings is None:
                layers, full_context = set(range(len(model.decoder))), True
            else:
                layers, full_context = needed_attention(model, readings)
            enc = model.encode(batch if encoder_batch is None else encoder_batch)
            enc = enc if encoder_rows is None else enc.index_select(encoder_rows)
            return model.forced_attention(batch, layers, full_context, enc)
    finally:
        if was_training:
            model.train()


def attention_links(
    attn: torch.Tensor,
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    shift: bool = False,
    method: str = "argmax",
    threshold: float = 0.5,
    null: torch.Tensor | None = None,
) -> list[Links]:
    """Piece links ``(source piece, target piece)`` of every sentence of a (B, T, S) attention.

    ``src_lens``/``tgt_lens`` count real pieces, without EOS. Target piece ``t`` is read from
    row ``t`` (the decoder step that *predicts* it) or, with ``shift`` (Shift-Att, Chen et al.
    2020, "Accurate Word Alignment Induction from Neural Machine Translation", EMNLP, Sec. 3),
    from row ``t + 1`` (the step where it is the decoder *input*; row ``T`` predicts EOS). The
    source EOS column and padding are cut off before links are chosen. ``null`` (B, T): the
    weight of a null column (a leaky model's leak, :meth:`AttentionReading.null_share`); with
    argmax a row whose null weight is at least its largest weight over the real source pieces
    gets no link (with ``threshold`` the null column simply takes its share).
    """
    start = 1 if shift else 0
    if method == "argmax":
        # One argmax over the batch, as alignment_from_attention's per sentence: columns past a
        # sentence's real source pieces are hidden, the first maximum wins; a row the null
        # column wins is marked -1 (no link).
        attn = torch.as_tensor(attn)
        cols = torch.arange(attn.size(-1), device=attn.device)
        hidden = cols[None, :] >= torch.as_tensor(list(src_lens), device=attn.device)[:, None]
        top, best = attn.masked_fill(hidden[:, None, :], float("-inf")).max(dim=-1)
        if null is not None:
            best = best.masked_fill(top <= torch.as_tensor(null, dtype=top.dtype, device=top.device), -1)
        best = best.tolist()
        return [{(i, j) for j, i in enumerate(best[b][start : start + n_tgt]) if i >= 0} if n_src else set() for b, (n_src, n_tgt) in enumerate(zip(src_lens, tgt_lens))]
    w = _to_numpy(attn)
    return [alignment_from_attention(w[b, start : start + n_tgt, :n_src], method, threshold) for b, (n_src, n_tgt) in enumerate(zip(src_lens, tgt_lens))]


def piece_lengths(batch) -> tuple[list[int], list[int]]:
    """Real source and target pieces per sentence of a batch with references (EOS left out)."""
    src = [max(n - 1, 0) for n in batch.src.ne(PAD).sum(dim=1).tolist()]
    tgt = [max(n - 1, 0) for n in batch.tgt_out.ne(PAD).sum(dim=1).tolist()]
    return src, tgt


def extract_alignments(
    model,
    batch,
    layer: int | None = None,
    head: int | None = None,
    method: str = "argmax",
    threshold: float = 0.5,
    shift: bool = False,
) -> list[Links]:
    """Subword links per sentence from the cross-attention when force-decoding the reference.

    Runs ``model(batch, need_weights=True)`` in eval mode without gradients (restoring the
    model's mode), picks/averages layers and heads with :func:`average_heads` and reads links with
    :func:`attention_links`: rows are target positions of ``batch.tgt_out`` (the token each
    decoder position predicts; with ``shift`` the next row, where it is the input); the EOS row,
    the source EOS column and padding are cut off *before* links are chosen, so with ``argmax``
    each target subword gets exactly one link to a real source subword. Links are
    ``(source piece, target piece)``, 0-indexed, without BOS/EOS.
    """
    readings = [AttentionReading(layer, head, shift)]
    return readings_links(force_decode(model, batch, readings), batch, readings, method, threshold)[0]


def readings_links(out, batch, readings: Sequence[AttentionReading], method: str = "argmax", threshold: float = 0.5) -> list[list[Links]]:
    """Piece links of every sentence of ``batch`` for each of ``readings`` of one force-decoding
    output ``out`` (:func:`force_decode`): one list per reading."""
    lengths = piece_lengths(batch)
    return [attention_links(r.attention(out).float().cpu(), *lengths, r.shift, method, threshold, _cpu(r.null_share(out))) for r in readings]


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.float().cpu()

def encode_words(tok: Tokenizer, lines: Sequence[str], normalize: bool = False) -> tuple[list[list[int]], list[list[int]]]:
    """Subword ids and the word index of every piece of whitespace-tokenized lines (see the module docstring)."""
    words = [(tok.normalize(line) if normalize else line).split() for line in lines]
    return tok.encode_words(words)


def attention_alignments(
    model: torch.nn.Module,
    src: tuple[list[list[int]], list[list[int]]],
    tgt: tuple[list[list[int]], list[list[int]]],
    device: torch.device,
    *,
    layer: int | None = None,
    head: int | None = None,
    method: str = "argmax",
    threshold: float = 0.5,
    batch_size: int = 64,
    annotations: Sequence[SourceAnnotation] | None = None,
    shift: bool = False,
) -> list[Links]:
    """Word links ``(source word, target word)`` of every pair from ``model``'s cross-attention.

    ``src``/``tgt`` are ``(ids, word indices)`` as returned by :func:`encode_words`;
    ``annotations`` (one per source, see :func:`source_annotations`) are required when the model
    uses source features.
    """
    reading = AttentionReading(layer, head, shift)
    return readings_alignments(model, src, tgt, device, [reading], method=method, threshold=threshold, batch_size=batch_size, annotations=annotations)[0]


def readings_alignments(
    model: torch.nn.Module,
    src: tuple[list[list[int]], list[list[int]]],
    tgt: tuple[list[list[int]], list[list[int]]],
    device: torch.device,
    readings: Sequence[AttentionReading],
    *,
    method: str = "argmax",
    threshold: float = 0.5,
    batch_size: int = 64,
    annotations: Sequence[SourceAnnotation] | None = None,
    source_of: Sequence[int] | None = None,
    workers: int = 0,
) -> list[list[Links]]:
    """:func:`attention_alignments` for several readings of one force-decoding pass: the word
    links of every pair, one list per reading (each batch is force-decoded once, computing only
    what the readings read: :func:`force_decode`).

    ``source_of``: pair p's source is ``src[source_of[p]]`` (an n-best list: several targets of
    one source; ``annotations`` then go with ``src``); the pairs of a source are batched together
    and their source encoded once per batch. Default: pair p reads ``src[p]``. Batches hold
    ``batch_size`` pairs of similar lengths; on the CPU ``workers`` of them are force-decoded at
    once (``decode.workers``, :func:`~syntaxnmt.cpu.pools.batches_side_by_side`; 0: one
    per torch thread)."""
    (src_ids, src_words), (tgt_ids, tgt_words) = src, tgt
    if source_of is None:
        if len(src_ids) != len(tgt_ids):
            raise UserError(f"{len(src_ids)} source sentences but {len(tgt_ids)} target sentences")
        source_of = range(len(tgt_ids))
    elif len(source_of) != len(tgt_ids):
        raise ValueError(f"{len(source_of)} source indices for {len(tgt_ids)} targets")
    check_forced_pairs(model, [src_ids[s] for s in source_of], tgt_ids, annotations, "sentence pair", "the source must be annotated (give --src-conllu)")
    spec = model.feature_spec
    # Pairs sorted by the length of their source and its longest target: a source's pairs stay
    # together (with one target per source: sorted by the pair's length, as plain batching would).
    longest: dict[int, int] = {}
    for s, t in zip(source_of, tgt_ids):
        longest[s] = max(longest.get(s, 0), len(t))
    order = sorted(range(len(tgt_ids)), key=lambda p: (len(src_ids[source_of[p]]) + longest[source_of[p]], source_of[p], p))
    out: list[list[Links]] = [[set() for _ in tgt_ids] for _ in readings]

    def align_batch(idx: list[int]) -> None:
        anns = [annotations[source_of[p]] for p in idx] if spec else None
        batch = make_batch([np.asarray(src_ids[source_of[p]], dtype=np.int64) for p in idx], [np.asarray(tgt_ids[p], dtype=np.int64) for p in idx], idx, anns, spec).to(device)
        sources = list(dict.fromkeys(source_of[p] for p in idx))  # the batch's distinct sources, in order
        encoder_batch = rows = None
        if len(sources) < len(idx):
            anns = [annotations[s] for s in sources] if spec else None
            encoder_batch = make_batch([np.asarray(src_ids[s], dtype=np.int64) for s in sources], None, sources, anns, spec).to(device)
            row = {s: r for r, s in enumerate(sources)}
            rows = torch.as_tensor([row[source_of[p]] for p in idx], dtype=torch.long, device=device)
        for per_reading, links in zip(out, readings_links(force_decode(model, batch, readings, encoder_batch, rows), batch, readings, method, threshold)):
            for p, sentence in zip(idx, links):
                per_reading[p] = subwords_to_words(sentence, src_words[source_of[p]], tgt_words[p])

    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    for _ in batches_side_by_side(align_batch, batches, workers, device):
        pass
    return out


def source_annotations(model, cfg, lines: Sequence[str], word_of_piece: Sequence[Sequence[int]], conllu: str | None = None, source_name: str = "--src", tags=None) -> list[SourceAnnotation] | None:
    """The source features' annotations of ``lines`` (whitespace-tokenized, pieces in ``word_of_piece``)
    as ``translate`` builds them, or None for a model without source features. The parse (from
    ``conllu``, or the config's parser) must have exactly the whitespace tokens of each line."""
    spec = model.feature_spec
    if not spec:
        return None
    if not spec.needs_parse:
        return [SourceAnnotation(np.asarray(w, dtype=np.int64), np.zeros(0, dtype=np.int64)) for w in word_of_piece]
    parses = source_parses(cfg, lines, conllu, source_name, f"this model uses {', '.join(sorted(spec.names - {'bie'}))} from parses")
    for k, (p, w) in enumerate(zip(parses, word_of_piece), start=1):
        if len(p.words) != max(w, default=-1) + 1:
            raise UserError(f"{source_name} line {k}: the parse has {len(p.words)} words but the line {max(w, default=-1) + 1} tokens (give --src-conllu with the line's tokens)")
    return parse_annotations(cfg, parses, word_of_piece, tags)


def _spec(value: str | int | None, default) -> int | None:
    """``--layer``/``--head`` value: None = the model's ``train.alignment`` setting, ``average``, or an index."""
    if value is None:
        value = default
    if value == "average":
        return None
    try:
        return layer_head(value)
    except ValueError:
        raise UserError(f"--layer/--head takes an integer or 'average' (got {value!r})") from None


def attention_shape(model) -> tuple[int, int]:
    """(decoder layers, heads) of a model's cross-attention (an RNN model has one of each)."""
    cfg = model.cfg
    return (cfg.dec_layers, cfg.heads) if cfg.arch == "transformer" else (1, 1)


def check_reading(model, reading: AttentionReading) -> AttentionReading:
    """``reading`` if the model has its layer and head, else a :class:`UserError` (before any work is done)."""
    n_layers, n_heads = attention_shape(model)
    if reading.layer is not None and not -n_layers <= reading.layer < n_layers:
        raise UserError(f"alignment layer {reading.layer} out of range: the model has {n_layers} decoder layers")
    if reading.head is not None and not -n_heads <= reading.head < n_heads:
        raise UserError(f"alignment head {reading.head} out of range: the model has {n_heads} heads")
    return reading


def configured_reading(cfg, layer: str | int | None = None, head: str | int | None = None, shift: bool = False, null: bool | None = None) -> AttentionReading:
    """The reading of ``--layer``/``--head`` (None: the model's ``train.alignment`` setting, the
    supervised head). Without ``layer``, a model trained with ``full_context`` is read from its
    full-context pass, as it was supervised; an explicit ``layer`` reads the model's own pass.
    ``null`` (None: whenever the reading is of the leak's pass): a leaky model's leak slot is read
    as the null word (:meth:`AttentionReading.null_share`); False renormalizes the leak away."""
    a = cfg.train.alignment
    full_context = a.full_context and layer is None
    leak_pass = a.leaky and layer is None  # the leak lives in the pass read without --layer (full-context or the model's own)
    return AttentionReading(_spec(layer, a.layer), _spec(head, a.head), shift, full_context, leak_pass and null is not False)


def encode_pairs(model, cfg, toks, src_lines: Sequence[str], tgt_lines: Sequence[str], normalize: bool = False, src_conllu: str | None = None, source_name: str = "--src"):
    """``(source, target, annotations)`` of whitespace-tokenized line pairs as :func:`readings_alignments` reads them."""
    source = encode_words(toks.src, src_lines, normalize)
    annotations = source_annotations(model, cfg, src_lines, source[1], src_conllu, source_name, tags=toks.tags)
    return source, encode_words(toks.tgt, tgt_lines, normalize), annotations


def model_alignments(
    checkpoint: str | Path,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    device: torch.device,
    *,
    reverse_checkpoint: str | Path | None = None,
    symmetrize: str = "grow-diag-final-and",
    layer: str | int | None = None,
    head: str | int | None = None,
    method: str = "argmax",
    threshold: float = 0.5,
    normalize: bool = False,
    batch_size: int = 64,
    src_conllu: str | None = None,
    shift: bool = False,
    null: bool | None = None,
) -> list[Links]:
    """Word alignments of line pairs from a source→target model (and a target→source one, symmetrized).

    ``layer``/``head`` default to each model's ``train.alignment`` setting (the supervised head);
    ``shift`` reads both directions Shift-Att's way (:func:`attention_links`); ``null``: a leaky
    model's leak as the null word (:func:`configured_reading`; None: on its leak's pass).
    A source→target model with source features gets them as ``translate`` builds them (parses
    from ``src_conllu`` or the config's parser); a target→source one with features is refused.
    """
    if len(src_lines) != len(tgt_lines):
        raise UserError(f"{len(src_lines)} source lines but {len(tgt_lines)} target lines: the files must be line-aligned")
    method_sym = symmetrization(symmetrize) if reverse_checkpoint else None
    directions = []
    for path, (a, b) in ((checkpoint, (src_lines, tgt_lines)), (reverse_checkpoint, (tgt_lines, src_lines))):
        if path is None:
            continue
        model, cfg, toks = load_model(path, device)
        if directions and model.feature_spec:
            raise UserError(f"{path}: the target->source model uses source features ({', '.join(sorted(model.feature_spec.names))}); --reverse-checkpoint supports models without them")
        source, target, annotations = encode_pairs(model, cfg, toks, a, b, normalize, src_conllu)
        reading = configured_reading(cfg, layer, head, shift, null)
        directions.append(readings_alignments(model, source, target, device, [reading], method=method, threshold=threshold, batch_size=batch_size, annotations=annotations)[0])
    if len(directions) == 1:
        return directions[0]
    forward, reverse = directions
    return [symmetrize_links(f, transposed(r), method_sym) for f, r in zip(forward, reverse)]


def alignments_for_translations(
    model,
    cfg,
    toks,
    sources: Sequence[str],
    translations: Sequence[Sequence[str]],
    device: torch.device,
    *,
    reading: AttentionReading | None = None,
    method: str = "argmax",
    threshold: float = 0.5,
    batch_size: int = 64,
    conllu: str | None = None,
    source_name: str = "<input>",
) -> list[list[Links]]:
    """Word links between every source line and each of its translations (an n-best list per line).

    ``reading`` defaults to the model's ``train.alignment`` layer/head (:func:`configured_reading`:
    the supervised head, its full-context pass for a ``full_context`` model). Each (source,
    translation) pair is force-decoded in batches (the hypotheses of a line together, its source
    encoded once) and read as :func:`model_alignments` reads it
    with ``normalize``: the links index the whitespace tokens of the lines after the model's
    lowercasing and Moses step (for a model without Moses: of the lines themselves), so they equal
    ``syntaxnmt align --normalize --src SOURCES --tgt TRANSLATIONS`` with the same reading. An
    empty line or translation gets no links; a pair longer than the model's positions neither,
    with a warning naming the line. ``conllu``: the parses of the non-empty source lines, for a
    model with source features (as ``translate`` takes them). This is the one function the
    ``translate --alignments`` command (and a server) calls after search.
    """
    if len(sources) != len(translations):
        raise ValueError(f"{len(sources)} sources but {len(translations)} n-best lists")
    reading = check_reading(model, reading or configured_reading(cfg))
    out: list[list[Links]] = [[set() for _ in nbest] for nbest in translations]
    kept = [n for n, line in enumerate(sources) if line.strip()]
    if not kept:
        return out
    src_lines = [toks.src.normalize(sources[n]) for n in kept]
    source = encode_words(toks.src, src_lines)
    annotations = source_annotations(model, cfg, [sources[n] for n in kept], source[1], conllu, source_name, tags=toks.tags)
    limit = model.cfg.max_positions - 1
    pairs: list[tuple[int, int, int]] = []  # (line, hypothesis, index among kept)
    for k, n in enumerate(kept):
        for h, text in enumerate(translations[n]):
            if text.strip():
                pairs.append((n, h, k))
    tgt = encode_words(toks.tgt, [translations[n][h] for n, h, _ in pairs], normalize=True)
    usable = []
    for p, (n, h, k) in enumerate(pairs):
        if max(len(source[0][k]), len(tgt[0][p])) >= limit:
            print(f"syntaxnmt: warning: {source_name}:{n + 1}: too long to align with the model's {limit - 1} positions; no links written", file=sys.stderr)
        else:
            usable.append(p)
    if not usable:
        return out
    links = readings_alignments(
        model,
        source,
        ([tgt[0][p] for p in usable], [tgt[1][p] for p in usable]),
        device,
        [reading],
        method=method,
        threshold=threshold,
        batch_size=batch_size,
        annotations=annotations,
        source_of=[pairs[p][2] for p in usable],
        workers=cfg.decode.workers,
    )[0]
    for p, sentence in zip(usable, links):
        n, h, _ = pairs[p]
        out[n][h] = sentence
    return out
