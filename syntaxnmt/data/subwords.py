"""Text to subword ids and back: optional Moses tokenization (sacremoses), then SentencePiece.

The SentencePiece model doubles as the vocabulary. Its special ids are fixed for every model this
toolkit trains: ``pad=0, unk=1, bos=2, eos=3``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm
from sacremoses import MosesDetokenizer, MosesTokenizer

from syntaxnmt.data.words import WordProcessor, is_word_vocab
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, EOS, PAD, SPECIALS, UNK  # noqa: F401 (re-exported)
from syntaxnmt.textio import temporary_prefix


def train_sentencepiece(
    sentences: Iterable[str],
    model_path: str | os.PathLike,
    *,
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    max_sentences: int = 1_000_000,
    seed: int = 1,
    symbols: Sequence[str] = (),
) -> Path:
    """Train a SentencePiece model on ``sentences`` and write ``model_path`` (``.model``) atomically.

    ``vocab_size`` is an upper bound: a small corpus gets a smaller vocabulary instead of an error.
    """
    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    spm.set_random_generator_seed(seed)
    try:
        with tempfile.TemporaryDirectory(dir=model_path.parent, prefix=temporary_prefix(model_path), suffix=".tmp") as tmp:
            prefix = os.path.join(tmp, "spm")
            try:
                _train(sentences, prefix, vocab_size, model_type, character_coverage, max_sentences, symbols)
            except RuntimeError as e:  # e.g. fewer pieces than the corpus has characters
                reason = str(e).split("] ")[-1].strip()
                raise UserError(f"data.vocab_size {vocab_size}: SentencePiece cannot build this vocabulary ({reason or e}; see also data.spm_character_coverage)") from None
            os.replace(prefix + ".model", model_path)
            shutil.move(prefix + ".vocab", model_path.with_suffix(".vocab"))
    except OSError as e:  # a full disk: name the model file, not the scratch folder it is written in
        raise UserError(f"{model_path}: cannot write ({e.strerror or type(e).__name__})") from None
    return model_path


def _train(sentences: Iterable[str], prefix: str, vocab_size: int, model_type: str, character_coverage: float, max_sentences: int, symbols: Sequence[str] = ()) -> None:
    """``symbols``: pieces that are never split (the document separator of context models)."""
    extra = {"user_defined_symbols": list(symbols)} if symbols else {}
    spm.SentencePieceTrainer.train(
        **extra,
        sentence_iterator=iter(sentences),
        model_prefix=prefix,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        hard_vocab_limit=False,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        num_threads=max(1, os.cpu_count() or 1),
        minloglevel=2,
    )


class Tokenizer:
    """One language's text processing: lowercase, Moses, SentencePiece (encode) and the reverse."""

    def __init__(self, spm_model: str | os.PathLike | bytes, lang: str = "en", moses: bool = False, lowercase: bool = False):
        """``spm_model``: a SentencePiece model file, or the model itself (bytes, as checkpoints hold it)."""
        if isinstance(spm_model, bytes):
            self.sp = WordProcessor(spm_model) if is_word_vocab(spm_model) else spm.SentencePieceProcessor(model_proto=spm_model)
        elif Path(spm_model).suffix == ".words" and Path(spm_model).is_file():  # data.vocab: word
            self.sp = WordProcessor(spm_model)
        elif Path(spm_model).is_file():
            try:
                self.sp = spm.SentencePieceProcessor(model_file=str(spm_model))
            except RuntimeError as e:  # a damaged file of the prepared corpus
                reason = str(e).strip().removesuffix(f" from {spm_model}")[:200]
                raise UserError(f"{spm_model}: not a readable SentencePiece model ({reason}): re-run `syntaxnmt prepare --force`") from None
        else:
            raise UserError(f"{spm_model}: SentencePiece model not found (run `syntaxnmt prepare` first)")
        self.lang = lang
        self.lowercase = lowercase
        self._tok = MosesTokenizer(lang=lang) if moses else None
        self._detok = MosesDetokenizer(lang=lang) if moses else None
        assert self.sp.pad_id() == PAD and self.sp.eos_id() == EOS, "SentencePiece model with foreign special ids"

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def symbol_id(self, piece: str) -> int | None:
        """The id of a user-defined piece (e.g. the document separator), None when the vocabulary lacks it."""
        i = self.sp.piece_to_id(piece)
        return None if i == UNK or self.sp.id_to_piece(i) != piece else i

    def model_proto(self) -> bytes:
        """The SentencePiece model itself (what a checkpoint stores to be self-contained)."""
        return self.sp.serialized_model_proto()

    def normalize(self, text: str) -> str:
        """Lowercase and Moses-tokenize as configured (the text SentencePiece sees)."""
        text = text.strip()
        if self.lowercase:
            text = text.lower()
        if self._tok is not None:
            text = self._tok.tokenize(text, escape=False, return_str=True)
        return text

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(self.normalize(text))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode([self.normalize(t) for t in texts])

    def encode_with_words(self, texts: Sequence[str]) -> tuple[list[list[int]], list[list[int]]]:
        """Ids of raw lines and, for every piece, the index of the word it belongs to.

        A word starts at a piece beginning with SentencePiece's '▁' (whitespace-separated words).
        """
        ids = self.encode_batch(texts)
        words = []
        for sent in ids:
            starts = [self.sp.id_to_piece(i).startswith("▁") for i in sent]
            w, current = [], -1
            for start in starts:
                current += start or current < 0
                w.append(current)
            words.append(w)
        return ids, words

    def encode_words(self, sentences: Sequence[Sequence[str]]) -> tuple[list[list[int]], list[list[int]]]:
        """Ids of pre-tokenized sentences (e.g. a parser's words, no Moses), with each piece's word index.

        Every word is encoded on its own, so a piece never straddles two words (each distinct
        word once).
        """
        flat = [w.lower() if self.lowercase else w for sent in sentences for w in sent]
        distinct = list(dict.fromkeys(flat))
        pieces = dict(zip(distinct, self.sp.encode(distinct))) if distinct else {}
        ids, words, k = [], [], 0
        for sent in sentences:
            sent_ids, sent_words = [], []
            for wi in range(len(sent)):
                encoded = pieces[flat[k]]
                sent_ids += encoded
                sent_words += [wi] * len(encoded)
                k += 1
            ids.append(sent_ids)
            words.append(sent_words)
        return ids, words

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(self.normalize(text), out_type=str)

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def decode(self, ids: Sequence[int]) -> str:
        """Subword ids (specials are dropped) back to detokenized text."""
        return self.detokenize(self.sp.decode([i for i in ids if i not in (PAD, BOS, EOS)]))

    def detokenize(self, text: str) -> str:
        """Undo the Moses tokenization, when configured."""
        return self._detok.detokenize(text.split()) if self._detok is not None else text
