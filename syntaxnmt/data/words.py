"""Word-level vocabularies (``data.vocab: word``): the classic closed vocabulary with a size cap.

The ``vocab_size - 4`` most frequent whitespace-separated words of the training text (after the
normalization SentencePiece would see: lowercasing, Moses) form the vocabulary; every other word
is ``<unk>`` (Luong et al. 2015, "Addressing the Rare Word Problem in NMT"; Jean et al. 2015).
:class:`WordProcessor` offers the part of ``sentencepiece.SentencePieceProcessor`` that
:class:`syntaxnmt.data.subwords.Tokenizer` and :mod:`syntaxnmt.data.prepare` use, so a word vocabulary
plugs in where a SentencePiece model would. Its pieces are the words with SentencePiece's word
boundary "▁" in front, so that every piece starts a word (word alignments, attention analysis).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, EOS, PAD, SPECIALS, UNK  # noqa: F401 (re-exported)
from syntaxnmt.textio import atomic_write_text

WORD_BOUNDARY = "\u2581"
UNK_TEXT = "<unk>"
"""How an unknown word is written in decoded text."""


def train_word_vocab(sentences: Iterable[str], path: str | os.PathLike, vocab_size: int, symbols: Sequence[str] = ()) -> Path:
    """Write the ``vocab_size`` most frequent words (specials and ``symbols`` included), one
    ``word<TAB>count`` per line, most frequent first (ties broken alphabetically, so the file is deterministic)."""
    counts = Counter(w for s in sentences for w in s.split() if w not in symbols)
    keep = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max(0, vocab_size - len(SPECIALS) - len(symbols))]
    lines = [f"{s}\t0" for s in (*SPECIALS, *symbols)] + [f"{w}\t{c}" for w, c in keep]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


MAGIC = b"syntaxnmt word vocabulary\n"
"""First line of a word vocabulary serialized into a checkpoint (:meth:`WordProcessor.serialized_model_proto`)."""


def is_word_vocab(model: bytes) -> bool:
    """Whether checkpoint bytes hold a word vocabulary (else a SentencePiece model)."""
    return model.startswith(MAGIC)


class WordProcessor:
    """A word vocabulary with the SentencePiece processor's interface (``encode``, ``decode``,
    ``id_to_piece``, ``get_piece_size``, ``pad_id``, ``eos_id``, ``serialized_model_proto``)."""

    def __init__(self, path: str | os.PathLike | bytes):
        """``path``: a ``.words`` file, or the bytes of :meth:`serialized_model_proto`."""
        text = path[len(MAGIC):].decode("utf-8") if isinstance(path, bytes) else Path(path).read_text(encoding="utf-8")
        self.words = [line.split("\t")[0] for line in text.splitlines() if line]
        if tuple(self.words[: len(SPECIALS)]) != SPECIALS:
            name = "checkpoint word vocabulary" if isinstance(path, bytes) else path
            raise UserError(f"{name}: not a word vocabulary (the first entries must be {', '.join(SPECIALS)})")
        self.index = {w: i for i, w in enumerate(self.words)}

    def serialized_model_proto(self) -> bytes:
        """The vocabulary as bytes, for a self-contained checkpoint."""
        return MAGIC + "\n".join(self.words).encode("utf-8") + b"\n"

    def get_piece_size(self) -> int:
        return len(self.words)

    def pad_id(self) -> int:
        return PAD

    def piece_to_id(self, piece: str) -> int:
        return self.index.get(piece, UNK)

    def eos_id(self) -> int:
        return EOS

    def _ids(self, text: str) -> list[int]:
        return [self.index.get(w, UNK) for w in text.split()]

    def encode(self, text: str | Sequence[str], out_type: type = int):
        """Ids (or pieces with ``out_type=str``) of one text or of a list of texts."""
        if not isinstance(text, str):
            return [self.encode(t, out_type) for t in text]
        ids = self._ids(text)
        return [self.id_to_piece(i) for i in ids] if out_type is str else ids

    def id_to_piece(self, i):
        """"▁word" for a word id and "▁<unk>" for an unknown word (each is a word of its own), the
        special's name for the others; a list maps element-wise."""
        if not isinstance(i, int):
            return [self.id_to_piece(int(x)) for x in i]
        return self.words[i] if i < len(SPECIALS) and i != UNK else WORD_BOUNDARY + self.words[i]

    def decode(self, ids: Sequence[int]) -> str:
        """Words joined by spaces; ``<unk>`` stays visible (padding, BOS and EOS are dropped)."""
        return " ".join(UNK_TEXT if i == UNK else self.words[i] for i in ids if i not in (PAD, BOS, EOS))
