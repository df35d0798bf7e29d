"""The Python API: translate and score sentences with a trained checkpoint or an ensemble
(:class:`Translator`); ``syntaxnmt translate`` and ``syntaxnmt serve`` run through it.

    import syntaxnmt
    translator = syntaxnmt.Translator.from_checkpoint("runs/x/best.pt")   # a file, a run folder, or several: an ensemble
    results = translator.translate(["the dog sees a cat ."], beam=5, nbest=2, alignments=True, attention=True)
    scored = translator.score(["the dog sees a cat ."], ["le chien voit un chat ."])
    constrained = translator.translate(["the dog sees a cat ."], constraints=[["le chat"]], terminology="terms.tsv")

Every result is a :class:`Translation`: the text, its score (log P / lp(y), the search's ranking
score) and total log-probability, the n-best :class:`Candidate` list, and on request the word
alignment and the cross-attention (:class:`Attention`) of the best translation, read by
force-decoding it: the alignment as ``syntaxnmt translate --alignments`` reads it (one model,
:func:`syntaxnmt.alignment.extract.alignments_for_translations`), the attention as ``syntaxnmt
attention`` reads it. Options are those
of ``syntaxnmt translate``: the ``decode`` keys (``beam_size``, ``length_penalty``, ...), and at
loading the decode-time model options ``hard_attention`` (``decode`` or ``none``) and
``spacy_pipeline`` (:data:`syntaxnmt.decoding.loading.TRANSLATE_TIME_KEYS`). Mistakes raise
:class:`syntaxnmt.errors.UserError` with the message the command line prints.

The search runs in one of two engines behind the same :meth:`Translator.translate`: the PyTorch
model (``engine="torch"``, every option) or CTranslate2 (``engine="ctranslate2"``,
:mod:`syntaxnmt.decoding.ct2_engine`: one exported model, no document context; scoring and
attention read the PyTorch model and are refused; so are constraints and term dictionaries:
lexically constrained search, docs/decoding.md, runs in the PyTorch engine; alignments are read
from the export's alignment layer and heads, :func:`~syntaxnmt.alignment.extract.engine_alignments_for_translations`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from syntaxnmt.alignment.extract import alignments_for_translations, engine_alignments_for_translations
from syntaxnmt.analysis.export import (
    EncodedSource,
    SentenceAttention,
    SentenceContext,
    Target,
    attention_of_targets,
    context_targets,
    encode_sources,
    output_target,
    reference_target,
    sentence_contexts,
    unit_labels,
    word_level,
)
from syntaxnmt.config import Config, DecodeConfig, merge_trees
from syntaxnmt.cpu.calibration import configure as configure_cpu_kernels
from syntaxnmt.cpu.threads import configure_threads
from syntaxnmt.data.prepare import Tokenizers
from syntaxnmt.decoding.ct2_engine import CT2Engine, ct2_device
from syntaxnmt.decoding.ensemble import load_ensemble
from syntaxnmt.decoding.forced import normalized_score, score_ids
from syntaxnmt.decoding.loading import apply_translation_config, checkpoint_file, load_model, translation_config
from syntaxnmt.decoding.output import Output, Phrases, translate_outputs
from syntaxnmt.decoding.terminology import TermDictionary, source_words
from syntaxnmt.errors import UserError
from syntaxnmt.model.outputs import layer_head
from syntaxnmt.runtime import resolve_device

__all__ = ["Attention", "Candidate", "Translation", "Translator"]

LOAD_OPTIONS = {"hard_attention": "model", "spacy_pipeline": "data"}
"""Options of :meth:`Translator.from_checkpoint` beside the ``decode`` keys: their config section."""

ENGINES = ("torch", "ctranslate2")
"""What searches (:meth:`Translator.from_checkpoint`'s ``engine``): the PyTorch model, or CTranslate2."""


@dataclass
class Candidate:
    """One entry of an n-best list."""

    text: str
    score: float
    """log P(y|x) / lp(y): the score the search ranks by (``decode.length_penalty``; 0 = log P)."""
    log_prob: float
    """log P(y|x), the end of sentence included."""
    alignment: list[tuple[int, int]] | None = None
    """With ``alignments=True``: this candidate's word links, as :attr:`Translation.alignment`
    (the line ``syntaxnmt translate --nbest N --alignments`` writes for it)."""
    alignment_words: tuple[list[str], list[str]] | None = None
    """The source and target words ``alignment`` indexes (with ``alignment``)."""


@dataclass
class Attention:
    """The cross-attention of a sentence pair: ``weights`` (target units x source units) at the word
    level (pieces combined as :func:`syntaxnmt.analysis.export.word_level` does; every row sums to 1
    except with RNN local-p attention), rows labelled by ``target`` and columns by ``source`` (their
    words, then ``</s>``). A single model's weights are its ``train.alignment`` layer and head of
    the translation pass (by default the mean of every layer and head; a ``full_context`` model's
    alignment pass is not among them: :attr:`Translation.alignment` reads it); an ensemble's
    are the mean over its members of each member's mean over layers and heads. ``members`` holds
    every weight of every member (encoder, decoder and cross-attention, every layer and head, at
    the subword level: :class:`syntaxnmt.analysis.export.SentenceAttention`)."""

    source: list[str]
    target: list[str]
    weights: np.ndarray
    members: list[SentenceAttention] = field(repr=False)


@dataclass
class Translation:
    """The result for one source sentence: the best translation (``text``, ``score``, ``log_prob``),
    the n-best list (best first), and when asked for, the word ``alignment`` and the ``attention``,
    both of the best translation (with ``alignments`` every :class:`Candidate` of ``nbest`` also
    carries its own links); an empty source line gets an empty translation (score 0) and
    neither. ``forced``: the text is a given reference (:meth:`Translator.score`).

    ``alignment``: sorted links ``(i, j)`` from source word i to target word j, 0-based over
    ``alignment_words`` -- the whitespace tokens of ``source`` and ``text`` after the model's
    lowercasing and Moses step (for a model without Moses, their own tokens) -- exactly the links
    ``syntaxnmt translate --alignments`` writes for this pair (the model's configured reading:
    ``train.alignment.layer``/``head``, the full-context pass of a ``full_context`` model; every
    target word's pieces link by argmax). These words can differ from ``attention.source`` /
    ``attention.target`` (the model's pieces joined into words)."""

    source: str
    text: str
    score: float
    log_prob: float
    nbest: list[Candidate]
    alignment: list[tuple[int, int]] | None = None
    alignment_words: tuple[list[str], list[str]] | None = None
    """The source and target words ``alignment`` indexes (with ``alignment``)."""
    attention: Attention | None = None
    forced: bool = False


def option_tree(options: dict[str, Any], allow_load: bool = True) -> dict:
    """Flat options (``beam_size=5``, ``hard_attention="decode"``) as the nested config overrides
    of :func:`~syntaxnmt.decoding.loading.translation_config`; an unknown name is a UserError."""
    tree: dict = {}
    for name, value in options.items():
        if name in DecodeConfig.model_fields:
            section = "decode"
        elif allow_load and name in LOAD_OPTIONS:
            section = LOAD_OPTIONS[name]
        else:
            known = ", ".join([*DecodeConfig.model_fields, *(LOAD_OPTIONS if allow_load else ())])
            where = "" if allow_load else " (hard_attention and spacy_pipeline are given to from_checkpoint)"
            raise UserError(f"unknown option {name!r}{where}: the options are {known}")
        tree.setdefault(section, {})[name] = value
    return tree


class Translator:
    """A loaded checkpoint (or ensemble) with its tokenizers, translating and scoring lists of
    sentences. Not thread-safe: call it from one thread (the server calls it from its worker).
    ``engine``: the CTranslate2 engine that searches instead of ``model`` (None: the PyTorch model
    searches; with an engine, ``model`` is None)."""

    def __init__(self, model: torch.nn.Module | None, cfg: Config, toks: Tokenizers, device: torch.device, checkpoints: Sequence[Path] = (), engine: CT2Engine | None = None):
        self.model, self.cfg, self.toks, self.device = model, cfg, toks, device
        self.checkpoints = list(checkpoints)
        self.engine = engine

    @classmethod
    def from_checkpoint(
        cls,
        *checkpoints: str | Path | Sequence[str | Path],
        device: str | torch.device = "auto",
        threads: int | None = None,
        cpu_kernels: str | None = None,
        engine: str = "torch",
        overrides: dict | None = None,
        **options: Any,
    ) -> "Translator":
        """Load a checkpoint file or a run folder (its ``best.pt``, else ``last.pt``); several
        (or one list of them): an ensemble averaging their log-probabilities. Checkpoints carry
        their tokenizers, so any working folder will do. ``device``: ``auto``, ``cpu``, ``cuda``;
        ``threads``: torch's CPU threads (for the whole process); ``cpu_kernels``: ``auto``,
        ``onednn`` or ``aten`` (:mod:`syntaxnmt.cpu.calibration`; None: the process's, ``--cpu-kernels``). ``options``: defaults of the
        ``decode`` keys, ``hard_attention`` and ``spacy_pipeline``; ``overrides``: the same as
        nested sections (``{"decode": {"beam_size": 3}}``, as ``--decode.beam_size=3``).
        ``engine`` (:data:`ENGINES`): ``ctranslate2`` searches one model with CTranslate2, the
        checkpoint a ``syntaxnmt export-ct2`` folder or a checkpoint file (exported on the fly);
        ``threads`` are then CTranslate2's (default: torch's)."""
        paths = [Path(p) for c in checkpoints for p in ([c] if isinstance(c, (str, Path)) else c)]
        if not paths:
            raise UserError("give at least one checkpoint")
        if engine not in ENGINES:
            raise UserError(f"engine {engine!r}: give one of {', '.join(ENGINES)}")
        if engine == "ctranslate2" and len(paths) > 1:
            raise UserError("--engine ctranslate2 translates with one model: give one --checkpoint (ensembles run with --engine torch)")
        if threads is not None:
            configure_threads(threads)
        configure_cpu_kernels(cpu_kernels)
        dev = device if isinstance(device, torch.device) else resolve_device(device)
        overrides = merge_trees(option_tree(options), overrides or {})
        if engine == "ctranslate2":
            ct2 = CT2Engine(paths[0], ct2_device(dev), threads=threads)
            cfg = translation_config(ct2.cfg, overrides)
            return cls(None, cfg, ct2.toks, dev, paths, engine=ct2.follow(cfg))
        files = [checkpoint_file(p) for p in paths]
        model, cfg, toks = load_ensemble(files, dev) if len(files) > 1 else load_model(files[0], dev)
        cfg = translation_config(cfg, overrides)
        return cls(apply_translation_config(model, cfg), cfg, toks, dev, files)

    # ------------------------------------------------------------ options

    @property
    def decode(self) -> DecodeConfig:
        """The search settings: the checkpoint's ``decode`` section with the options given at loading."""
        return self.cfg.decode

    @property
    def members(self) -> list[torch.nn.Module]:
        """The PyTorch models: the ensemble's members, or the one model (none with CTranslate2)."""
        return [] if self.model is None else list(getattr(self.model, "models", [self.model]))

    def decode_options(self, beam: int | None = None, **options: Any) -> DecodeConfig:
        """:attr:`decode` with ``beam`` (the beam size) and other ``decode`` keys given for one call, validated."""
        if beam is not None:
            options["beam_size"] = beam
        if not options:
            return self.decode
        return translation_config(self.cfg, option_tree(options, allow_load=False)).decode

    # ------------------------------------------------------------ translating

    def translate(
        self,
        sentences: Sequence[str],
        *,
        beam: int | None = None,
        nbest: int | None = None,
        alignments: bool = False,
        attention: bool = False,
        src_conllu: str | None = None,
        docs: Sequence[str] | None = None,
        source_name: str = "<input>",
        progress: bool = False,
        constraints: Phrases | None = None,
        terminology: str | Path | TermDictionary | None = None,
        constraints_name: str = "constraints",
        **options: Any,
    ) -> list[Translation]:
        """Translate raw sentences (one :class:`Translation` each, in order) with beam search of
        ``beam`` (default: ``decode.beam_size``; 1 = greedy) and the ``nbest`` best candidates
        (default ``decode.nbest``); ``alignments`` / ``attention``: also the word alignment
        (:class:`Translation`, and of every :class:`Candidate`; one model and no ``docs``, as
        ``translate --alignments``) and the cross-attention of each best translation. ``src_conllu``: the parses of the non-empty
        sentences (CoNLL-U), for models that use trees or tags. ``docs``: a document id per sentence,
        read by a context model (docs/documents.md); with ``attention`` its weights are those of
        the model reading the context (a concatenation model's source columns include it, HAN's
        weights are in ``attention.members``). ``constraints``: per sentence, the target phrases
        (in words; None or [] for none) every candidate contains (lexically constrained beam
        search, docs/decoding.md); ``terminology``: a term dictionary (a TSV file or
        :meth:`term_dictionary`) whose target terms become constraints where their source terms
        occur (with ``constraints``: the union); ``constraints_name`` names them in errors.
        ``options``: other ``decode`` keys for this call (``length_penalty=0.6``,
        ``unk_replace="copy"``, ...)."""
        lines = _sentences(sentences, "sentences")
        if constraints is not None or terminology is not None:
            check_constraints_engine("ctranslate2" if self.engine is not None else "torch")
        if terminology is not None and not isinstance(terminology, TermDictionary):
            terminology = self.term_dictionary(terminology)
        if alignments:
            self.check_aligning(docs)
        if attention:
            self._needs_model("attention")
        decode = self.decode_options(beam, **options)
        nbest = decode.nbest if nbest is None else nbest
        if nbest < 1:
            raise UserError(f"nbest {nbest}: give at least 1")
        if nbest > decode.beam_size:
            raise UserError(f"nbest {nbest} is larger than the beam size {decode.beam_size}")
        cons = {} if constraints is None and terminology is None else {"constraints": constraints, "terminology": terminology, "constraints_name": constraints_name}
        outputs = self._search(lines, decode, conllu=src_conllu, source_name=source_name, docs=docs, nbest=nbest, progress=progress, **cons)
        results = [
            Translation(line, nb[0].text, nb[0].score, nb[0].log_prob, [Candidate(o.text, o.score, o.log_prob) for o in nb])
            for line, nb in zip(lines, outputs)
        ]
        if alignments:
            self._align(results, src_conllu, source_name, decode)
        if attention:
            kept = [k for k, line in enumerate(lines) if line.strip()]
            dc = getattr(self.members[0], "document_context", None)
            # a target-side HAN model read its own translations of the previous sentences: they are its target context
            own = {k: output_target(self.toks.tgt, outputs[k][0].tokens, outputs[k][0].text) for k in kept} if docs is not None and dc is not None and dc.han_target else None
            contexts = None if docs is None else sentence_contexts(self.members[0], self.cfg, self.toks, lines, docs, kept, source_name=source_name, translations=own)
            if contexts is not None and dc.concat_target:  # 2-to-2: the model's own translation of the context is part of what it read
                contexts = [SentenceContext(c.lines, c.sources, context_targets(self.toks.tgt, outputs[k][0].context_tokens or [], dc.sep)) for c, k in zip(contexts, kept)]
            src = self._encode([lines[k] for k in kept], src_conllu, source_name)
            tgt = [output_target(self.toks.tgt, outputs[k][0].tokens, outputs[k][0].text) for k in kept]
            self._attach(results, kept, src, tgt, decode, forced=False, contexts=contexts)
        return results

    def term_dictionary(self, path: str | Path) -> TermDictionary:
        """A term dictionary (``source term<TAB>target term`` per line, docs/decoding.md) with its
        source terms read as this model reads its source (lowercasing, Moses tokenization)."""
        return TermDictionary.read(path, source_words(self.toks.src))

    def score(
        self,
        sources: Sequence[str],
        references: Sequence[str],
        *,
        alignments: bool = False,
        attention: bool = False,
        src_conllu: str | None = None,
        source_name: str = "<input>",
        **options: Any,
    ) -> list[Translation]:
        """Score given translations: ``log P(reference | source)`` by force-decoding each reference
        (its words after the model's normalization, each encoded on its own as ``syntaxnmt
        align`` and ``attention --ref`` encode them), and the score log P / lp(y) the search would
        rank it by (``decode.length_penalty``; the coverage penalty is not added). An ensemble
        scores with the distribution it searches with. ``alignments`` / ``attention`` as in
        :meth:`translate`, of each reference (the alignment of a pair is that of ``syntaxnmt align
        --normalize``); ``src_conllu`` holds one parse per source line."""
        src_lines, refs = _sentences(sources, "sources"), _sentences(references, "references")
        self._needs_model("scoring")
        if len(src_lines) != len(refs):
            raise UserError(f"{len(src_lines)} sources but {len(refs)} references: give one reference per source")
        if alignments:
            self.check_aligning(None)
        decode = self.decode_options(None, **options)
        src = self._encode(src_lines, src_conllu, source_name)
        tgt = [reference_target(self.toks.tgt, ref) for ref in refs]
        spec = self.model.feature_spec
        log_probs = score_ids(self.model, [s.ids for s in src], [t[0] for t in tgt], self.device, batch_size=decode.batch_size, annotations=[s.annotation for s in src] if spec else None)
        results = []
        for line, ref, t, lp in zip(src_lines, refs, tgt, log_probs):
            score = normalized_score(lp, len(t[0]), decode)
            results.append(Translation(line, ref, score, lp, [Candidate(ref, score, lp)], forced=True))
        if alignments:
            self._align(results, src_conllu, source_name, decode)
        if attention:
            self._attach(results, list(range(len(results))), src, tgt, decode, forced=True)
        return results

    def _search(self, lines: list[str], decode: DecodeConfig, **kw: Any) -> list[list[Output]]:
        """The n-best outputs of ``lines``: searched by the CTranslate2 engine when there is one,
        else by the PyTorch model (:func:`~syntaxnmt.decoding.output.translate_outputs`)."""
        if self.engine is not None:
            return self.engine.translate_outputs(lines, decode, **kw)
        return translate_outputs(self.model, self.cfg, self.toks, lines, decode, self.device, **kw)

    def _needs_model(self, what: str) -> None:
        """Refuse ``what`` (it reads the PyTorch model) when CTranslate2 searches."""
        if self.engine is not None:
            raise UserError(f"{what} reads the PyTorch model: load the checkpoint with engine='torch' (CTranslate2 only translates)")

    # ------------------------------------------------------------ weights

    def _encode(self, lines: list[str], conllu: str | None, source_name: str) -> list[EncodedSource]:
        """The sources as the model read them in :meth:`translate` (a CoNLL-U file counts only for
        a model of a parsed corpus, as in ``syntaxnmt translate``)."""
        uses_parses = self.cfg.data.annotate != "none" or self.model.feature_spec.needs_parse
        return encode_sources(self.model, self.cfg, self.toks, lines, conllu if uses_parses else None, False, source_name)

    def check_aligning(self, docs: Sequence[str] | None) -> None:
        """Refuse alignments where ``translate --alignments`` refuses them, before any work."""
        if self.engine is not None:
            self.engine.check_aligning()
            if docs is not None:
                raise UserError("--docs: document context needs --engine torch")
            return
        if len(self.members) > 1 or docs is not None:
            raise UserError("alignments read one model's attention, without document context (as translate --alignments): load one checkpoint and give no docs (an ensemble's averaged attention: attention=True)")

    def word_links(self, sources: list[str], texts: list[list[str]], batch_size: int, conllu: str | None, source_name: str, reading=None) -> list:
        """The word links of every source line with each of its translations: from the export's
        alignment layer and heads when CTranslate2 searches, else the PyTorch model's attention
        (``reading``: :func:`~syntaxnmt.alignment.extract.alignments_for_translations`'s; None: configured)."""
        if self.engine is not None:
            return engine_alignments_for_translations(self.engine, self.toks, sources, texts, batch_size=batch_size, source_name=source_name)
        return alignments_for_translations(self.model, self.cfg, self.toks, sources, texts, self.device, reading=reading, batch_size=batch_size, conllu=conllu, source_name=source_name)

    def _align(self, results: list[Translation], conllu: str | None, source_name: str, decode: DecodeConfig) -> None:
        """Attach the word alignment of every candidate of every result to its non-empty source
        (the best one's also to the result), read as ``translate --nbest N --alignments`` reads
        it (:func:`~syntaxnmt.alignment.extract.alignments_for_translations`, all hypotheses
        force-decoded in the same batches)."""
        links = self.word_links([r.source for r in results], [[c.text for c in r.nbest] for r in results], decode.batch_size, conllu, source_name)
        for r, per_candidate in zip(results, links):
            if not r.source.strip():
                continue
            words = self.toks.src.normalize(r.source).split()
            for c, pair in zip(r.nbest, per_candidate):
                c.alignment, c.alignment_words = sorted(pair), (words, self.toks.tgt.normalize(c.text).split())
            r.alignment, r.alignment_words = r.nbest[0].alignment, r.nbest[0].alignment_words

    def _attach(self, results: list[Translation], kept: list[int], src: list[EncodedSource], tgt: list[Target], decode: DecodeConfig, *, forced: bool, contexts: list[SentenceContext] | None = None) -> None:
        """Force-decode every member on ``tgt`` (with their document ``contexts``) and attach the attention to ``results[kept]``."""
        if not kept:
            return
        lines = [results[k].source for k in kept]
        per_member = [attention_of_targets(m, self.toks, lines, src, tgt, self.device, forced=forced, batch_size=decode.batch_size, contexts=contexts) for m in self.members]
        a = self.cfg.train.alignment
        layer, head = (layer_head(a.layer), layer_head(a.head)) if len(self.members) == 1 else (None, None)
        for n, k in enumerate(kept):
            records = [member[n] for member in per_member]
            pieces = np.mean([_cross(r.cross, layer, head) for r in records], axis=0)
            rows, cols = records[0].axes("cross")
            results[k].attention = Attention(
                source=unit_labels(*cols), target=unit_labels(*rows), weights=word_level(pieces, records[0].tgt_word_of_piece, records[0].src_word_of_piece), members=records
            )


def check_constraints_engine(engine: str) -> None:
    """Refuse constraints and term dictionaries with an engine that cannot search with them."""
    if engine == "ctranslate2":
        raise UserError("constraints (--constraints, --terminology) need the PyTorch search: translate with --engine torch (the CTranslate2 engine here searches without constraints)")


def _cross(cross: np.ndarray, layer: int | None, head: int | None) -> np.ndarray:
    """One (T, S) matrix of (L, H, T, S) cross-attention: a layer / head, or the mean (None)."""
    layers = cross if layer is None else cross[[layer]]
    return (layers.mean(1) if head is None else layers[:, head]).mean(0)


def _sentences(sentences: Sequence[str], what: str) -> list[str]:
    if isinstance(sentences, str):
        raise TypeError(f"{what}: give a list of strings (one sentence each), not a string")
    lines = list(sentences)
    bad = [type(s).__name__ for s in lines if not isinstance(s, str)]
    if bad:
        raise TypeError(f"{what}: every sentence must be a string (got {bad[0]})")
    return lines
