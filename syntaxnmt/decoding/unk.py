"""Unknown-word replacement (``decode.unk_replace``): every ``<unk>`` of a translation becomes the
source word it attends to most, copied or translated with a lexical table.

Luong et al. (2015, "Addressing the Rare Word Problem in Neural Machine Translation") and Jean et
al. (2015, "On Using Very Large Target Vocabulary", Sec. 3.3) replace each unknown target word
with the source word of highest attention weight, then translate that word with a dictionary
built from word alignments of the training corpus (P(e|f), ``syntaxnmt lexicon``), copying it
when the dictionary has no entry (names, numbers).

The attention is read after the search: the model force-decodes every hypothesis
(``model(batch, need_weights=True)``) and the cross-attention of ``decode.unk_layer`` /
``decode.unk_head`` (or their average; an ensemble's members are averaged) gives, for the row of
each ``<unk>``, its most attended source piece (EOS and padding excluded). The piece's word is
the source word.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from syntaxnmt.config import DecodeConfig
from syntaxnmt.data.batches import pad_sequences
from syntaxnmt.data.links import word_ids_from_pieces
from syntaxnmt.data.subwords import BOS, EOS, PAD, UNK, Tokenizer
from syntaxnmt.decoding.search import Hypothesis
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import Batch
from syntaxnmt.model.outputs import average_heads
from syntaxnmt.textio import read_lines


def _spec(value: int | str) -> int | None:
    return None if value == "average" else int(value)


@torch.no_grad()
def forced_attention(model, batch: Batch, layer: int | None, head: int | None) -> Tensor:
    """Cross-attention (B, T, S) of ``model`` force-decoding ``batch.tgt_in``; for an ensemble
    (a ``models`` attribute) the mean of its members'."""
    members = list(model.models) if hasattr(model, "models") else [model]
    maps = [average_heads(m(batch, need_weights=True).cross_attention, layer, head).float() for m in members]
    return torch.stack(maps).mean(0)


def locate_unknown_words(model, batch: Batch, hyps: Sequence[Sequence[Hypothesis]], decode: DecodeConfig) -> None:
    """Set ``unk_sources`` of every hypothesis that has a ``<unk>``: the source piece each of its
    ``<unk>`` attends to most (``batch``: the sources the hypotheses translate, row b for ``hyps[b]``)."""
    pairs = [(b, h) for b, nb in enumerate(hyps) for h in nb if UNK in h.tokens]
    if not pairs:
        return
    device = batch.src.device
    rows = torch.tensor([b for b, _ in pairs], device=device)
    tgt_in = pad_sequences([[BOS, *h.tokens] for _, h in pairs]).to(device)
    tgt_out = pad_sequences([[*h.tokens, EOS] for _, h in pairs]).to(device)
    states = None if batch.context_states is None else tuple(t.index_select(0, rows) for t in batch.context_states)  # a HAN model's document context
    forced = Batch(batch.src.index_select(0, rows), tgt_in, tgt_out, batch.ids.index_select(0, rows.cpu()), batch.features.index_select(rows), context_states=states)
    attn = forced_attention(model, forced, _spec(decode.unk_layer), _spec(decode.unk_head)).cpu()
    src = forced.src.cpu()
    not_word = src.eq(PAD) | src.eq(EOS)
    attn = attn.masked_fill(not_word[:, None, :], float("-inf"))
    for k, (_, h) in enumerate(pairs):
        h.unk_sources = [int(attn[k, t].argmax()) for t, tok in enumerate(h.tokens) if tok == UNK]


@lru_cache(maxsize=4)
def _translations(path: str, mtime_ns: int) -> dict[str, str]:
    return read_best_translations(path)


def load_dictionary(path: str) -> dict[str, str]:
    """The best translation of every source word of a lexical table (read again when the file changes)."""
    mtime = Path(path).stat().st_mtime_ns if Path(path).is_file() else -1
    return _translations(str(path), mtime)


def replacement(word: str, mode: str, dictionary: dict[str, str] | None) -> str:
    """What an ``<unk>`` aligned to source ``word`` becomes: the word (``copy``), or its dictionary
    translation, copied when the dictionary has none (``dictionary``)."""
    if mode == "dictionary" and dictionary is not None:
        return dictionary.get(word, word)
    return word


def decode_replacing(tok: Tokenizer, ids: Sequence[int], words: Sequence[str]) -> str:
    """Detokenized text of ``ids`` with its ``<unk>`` tokens replaced by ``words`` (in order): the
    pieces between unknowns are decoded, then the whole is detokenized."""
    parts, segment, k = [], [], 0
    for i in ids:
        if i == UNK:
            parts += [tok.sp.decode(segment), words[k]]
            segment, k = [], k + 1
        elif i not in (PAD, BOS, EOS):
            segment.append(i)
    parts.append(tok.sp.decode(segment))
    return tok.detokenize(" ".join(p for p in parts if p))


def source_words(tok: Tokenizer, line: str, ids: np.ndarray, words: Sequence[str] | None) -> tuple[list[str], list[int]]:
    """The words of a source line as the model read them (``words``: the parser's, else the
    normalized line's whitespace tokens) and the word index of every piece of ``ids``."""
    if words is None:
        words = tok.normalize(line).split()
    return list(words), word_ids_from_pieces([tok.id_to_piece(int(i)) for i in ids])


def replace_in_translation(h: Hypothesis, toks, src_words: list[str], word_of_piece: list[int], decode: DecodeConfig, dictionary: dict[str, str] | None) -> tuple[str, list[tuple[str, str]]]:
    """The detokenized translation of ``h`` with every ``<unk>`` replaced (see the module
    docstring), and the (source word, replacement) of each."""
    sources = h.unk_sources
    if not sources:
        return toks.tgt.decode(h.tokens), []
    pairs = []
    for j in sources:
        w = word_of_piece[j] if j < len(word_of_piece) else -1
        word = src_words[w] if 0 <= w < len(src_words) else "<unk>"
        pairs.append((word, replacement(word, decode.unk_replace, dictionary)))
    return decode_replacing(toks.tgt, h.tokens, [new for _, new in pairs]), pairs


def translations_with_replacement(toks, lines: Sequence[str], sources: Sequence[np.ndarray], hyps: Sequence[Sequence[Hypothesis]], decode: DecodeConfig, words: Sequence[Sequence[str]] | None, replaced: list | None = None) -> list[list[tuple[str, float]]]:
    """Detokenized n-best lists of (translation, score) with unknown words replaced; ``words``: the
    source words as the model read them (the parser's), None for the normalized lines' tokens.
    ``replaced`` collects ``(sentence, source word, replacement)`` of the 1-best translations."""
    dictionary = load_dictionary(decode.unk_dictionary) if decode.unk_replace == "dictionary" else None
    out = []
    for k, (line, ids, nb) in enumerate(zip(lines, sources, hyps)):
        src_words, word_of_piece = source_words(toks.src, line, ids, None if words is None else words[k])
        texts = [replace_in_translation(h, toks, src_words, word_of_piece, decode, dictionary) for h in nb]
        if replaced is not None and texts:
            replaced += [(k, old, new) for old, new in texts[0][1]]
        out.append([(text, h.score) for (text, _), h in zip(texts, nb)])
    return out


def read_lexical_table(path: str | Path) -> Iterator[tuple[str, str, float, int | None]]:
    """The ``(f, e, P(e|f), c(f, e))`` of every line of a table written by ``syntaxnmt lexicon``
    (the count None where a line has none); a missing file or a malformed line is a :class:`UserError`."""
    if not Path(path).is_file():
        raise UserError(f"{path}: lexical table not found (write one with `syntaxnmt lexicon CONFIG -o {path}`)")
    for k, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        try:
            yield fields[0], fields[1], float(fields[2]), int(fields[3]) if len(fields) > 3 else None
        except (IndexError, ValueError):
            raise UserError(f"{path}:{k}: expected 'source<TAB>target<TAB>probability[<TAB>count]'") from None


def read_best_translations(path: str | Path) -> dict[str, str]:
    """The most probable translation of every source word of a table written by :func:`write_table`."""
    best: dict[str, tuple[float, str]] = {}
    for f, e, p, _ in read_lexical_table(path):
        if f not in best or p > best[f][0]:
            best[f] = (p, e)
    return {f: e for f, (_, e) in best.items()}
