"""Translating with a trained model: load it, batch sentences by length, search, detokenize."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.checkpoint import load_model_checkpoint
from syntaxnmt.config import Config, DecodeConfig, config_from_dict
from syntaxnmt.data.annotations import spacy_parser
from syntaxnmt.data.batches import make_batch
from syntaxnmt.data.controls import apply_controls
from syntaxnmt.data.features import SourceAnnotation
from syntaxnmt.data.prepare import Tokenizers, load_tag_vocab, load_tokenizers, parse_source, tokenizers_from_assets
from syntaxnmt.decoding.search import Hypothesis, max_output_lengths, search
from syntaxnmt.decoding.unk import locate_unknown_words, translations_with_replacement
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import TAG_NAMES, FeatureSpec
from syntaxnmt.model import build_model


def checkpoint_path(cfg: Config, which: str) -> Path:
    """``best``/``last`` name a checkpoint of the run in ``cfg.work_dir``; anything else is a path."""
    return Path(cfg.work_dir) / f"{which}.pt" if which in ("best", "last") else Path(which)


def load_model(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, Config, Tokenizers]:
    """A model ready for inference, with the config it was trained with and its tokenizers (stored
    in the checkpoint; one written before they were is read with its run's prepared corpus)."""
    state = load_model_checkpoint(path)
    cfg = config_from_dict(state["config"], source=f"{path} (stored config)")
    if "assets" in state:
        toks = tokenizers_from_assets(cfg, state["assets"])
    else:
        try:
            toks = load_tokenizers(cfg)
        except UserError as e:
            raise UserError(f"{path} holds no tokenizers (an older checkpoint): it needs its prepared corpus, run from the folder it was trained in ({e})") from None
    model = build_model(cfg, **toks.vocab_sizes())
    model.load_state_dict(state["model"])
    return model.to(device).eval(), cfg, toks


def translate_ids(
    model: torch.nn.Module,
    sources: Sequence[np.ndarray],
    decode: DecodeConfig,
    device: torch.device,
    *,
    beam: int | None = None,
    nbest: int = 1,
    annotations: Sequence[SourceAnnotation] | None = None,
    progress: bool = False,
) -> list[list[Hypothesis]]:
    """Search every source (subword ids, no EOS) in batches of similar length; results in input order.

    ``annotations`` (one per source) are required when the model uses source features.
    """
    beam = decode.beam_size if beam is None else beam
    spec = model.feature_spec
    if spec and annotations is None:
        raise UserError(f"this model uses source features ({', '.join(sorted(spec.names))}): the input must be annotated")
    max_pos = model.cfg.max_positions - 2
    order = np.argsort([len(s) for s in sources], kind="stable")[::-1]
    results: list[list[Hypothesis]] = [None] * len(sources)  # type: ignore[list-item]
    model.eval()
    with tqdm(total=len(sources), desc="translate", unit="sent", disable=not progress, leave=False) as bar:
        for start in range(0, len(order), decode.batch_size):
            idx = order[start : start + decode.batch_size]
            anns = [_truncate(annotations[i], max_pos) for i in idx] if spec else None
            batch = make_batch([sources[i][:max_pos] for i in idx], None, idx.tolist(), anns, spec).to(device)
            src_lens = batch.src.ne(0).sum(1) - 1
            max_len = max_output_lengths(src_lens, decode.max_len_a, decode.max_len_b, max_pos)
            hyps = search(model, batch, beam, max_len, decode.min_len, decode.length_penalty, nbest, decode.coverage_penalty, decode.length_penalty_type)
            if decode.unk_replace != "none":
                locate_unknown_words(model, batch, hyps, decode)
            for i, h in zip(idx, hyps):
                results[i] = h
            bar.update(len(idx))
    return results


def _truncate(ann: SourceAnnotation, max_pieces: int) -> SourceAnnotation:
    return SourceAnnotation(ann.word_of_piece[:max_pieces], ann.heads, ann.tags) if len(ann.word_of_piece) > max_pieces else ann


def source_parses(cfg: Config, lines: Sequence[str], conllu: str | None = None, source_name: str = "<input>", why: str = "this model uses parses"):
    """Parses of raw source lines: from a CoNLL-U file (``conllu``) or as the corpus was parsed
    (``data.annotate``); a bad tree is an error. ``why`` starts the message when neither is available."""
    method = "conllu" if conllu else cfg.data.annotate
    if method in ("conllu", "none") and not conllu:
        raise UserError(f"{why}: give the parses of {source_name} with --src-conllu FILE")
    parse_cfg = cfg.model_copy(deep=True)
    parse_cfg.data.annotate, parse_cfg.data.bad_tree = method, "fail"
    parses, _ = parse_source(parse_cfg, list(lines), source_name, conllu or "", progress=False)
    return parses


def parse_annotations(cfg: Config, parses: Sequence, word_of_piece: Sequence[Sequence[int]], tags=None) -> list[SourceAnnotation]:
    """Source annotations (tree and tag ids) of parsed sentences whose pieces belong to ``word_of_piece``;
    ``tags``: the model's tag vocabularies (:attr:`Tokenizers.tags`; default: the prepared corpus's).
    A control arm's model (``data.structure_control``) reads the parses as its training did
    (:mod:`syntaxnmt.data.controls`): the same random tree or bijection for the same sentence."""
    tags = tags if tags is not None else load_tag_vocab(cfg)
    if tags is None:
        raise UserError(f"{cfg.prepared_dir}: the prepared corpus has no tag vocabulary (tags.json)")
    parses = apply_controls(parses, cfg.data.structure_control, tags)
    return [
        SourceAnnotation(np.asarray(w, dtype=np.int64), np.asarray(p.heads, dtype=np.int64), {t: tags.encode(t, getattr(p, t)) for t in TAG_NAMES})
        for p, w in zip(parses, word_of_piece)
    ]


def parser_words(cfg: Config, lines: Sequence[str], conllu: str | None = None, source_name: str = "<input>") -> list[list[str]] | None:
    """The words of raw source lines as a model trained on a parsed corpus saw them in training:
    the parser's tokens (:func:`syntaxnmt.data.prepare.model_words`), from ``conllu`` when given, else
    from the tokenizer alone of the corpus's spaCy pipeline (no parse). A corpus parsed from
    CoNLL-U files whose pipeline is not installed is taken to be tokenized: its lines' whitespace
    tokens. None for a corpus that was not parsed (the model reads the lines as they are)."""
    if cfg.data.annotate == "none":
        return None
    if conllu:
        return [p.words for p in source_parses(cfg, lines, conllu, source_name)]

    try:
        return spacy_parser(cfg.data.spacy_pipeline).tokenize(lines)
    except (ImportError, UserError) as e:
        if cfg.data.annotate == "conllu":
            return [line.split() for line in lines]
        raise UserError(f"this model was trained on a parser's words: give the parses of {source_name} with --src-conllu FILE, or install its spaCy pipeline ({e})") from None


def encode_source_lines(cfg: Config, toks: Tokenizers, lines: Sequence[str], spec: FeatureSpec, conllu: str | None = None, source_name: str = "<input>") -> tuple[list[np.ndarray], list[SourceAnnotation] | None]:
    """Subword ids of raw source lines and, when the model needs them, their annotations.

    A model with tree relations or tag heads needs the parse of every sentence: from spaCy when
    the corpus was parsed with spaCy, else from a CoNLL-U file (``conllu``) -- missing is an error.
    Any model trained on a parsed corpus reads the parser's words (:func:`parser_words`), so that
    every system of a study sees the same tokens, with or without linguistic features.
    """
    if not spec.needs_parse:
        words = parser_words(cfg, lines, conllu, source_name)
        ids, word_of_piece = toks.src.encode_words(words) if words is not None else toks.src.encode_with_words(list(lines))
        anns = [SourceAnnotation(np.asarray(w), np.zeros(0, dtype=np.int64)) for w in word_of_piece] if spec else None
        return [np.asarray(i, dtype=np.int64) for i in ids], anns
    parses = source_parses(cfg, lines, conllu, source_name, f"this model uses {', '.join(sorted(spec.names - {'bie'}))} from parses")
    ids, words = toks.src.encode_words([p.words for p in parses])
    return [np.asarray(i, dtype=np.int64) for i in ids], parse_annotations(cfg, parses, words, toks.tags)


def without_empty_lines(lines: Sequence[str], translate: Callable[[list[str], list[int]], list]) -> list[list[tuple[str, float]]]:
    """``translate(kept, numbers)`` of the lines with words (and their 1-based numbers); an empty
    or blank line gets an empty translation with score 0, in its place."""
    numbers = [n for n, line in enumerate(lines, start=1) if line.strip()]
    out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in lines]
    for n, nbest in zip(numbers, translate([lines[n - 1] for n in numbers], numbers) if numbers else []):
        out[n - 1] = nbest
    return out


def warn_cut_lines(sources: Sequence[np.ndarray], limit: int, source_name: str, line_numbers: Sequence[int] | None = None) -> None:
    """A warning on stderr for each source longer than the ``limit`` subwords the model reads (it is cut)."""
    for k, ids in enumerate(sources):
        if len(ids) > limit:
            n = line_numbers[k] if line_numbers is not None else k + 1
            tqdm.write(f"syntaxnmt: warning: {source_name}:{n}: {len(ids)} subwords, only the first {limit} are translated (the model's max_positions)", file=sys.stderr)


def translate_lines(model, cfg: Config, toks: Tokenizers, lines: Sequence[str], decode: DecodeConfig, device: torch.device, *, conllu: str | None = None, source_name: str = "<input>", line_numbers: Sequence[int] | None = None, **kw) -> list[list[tuple[str, float]]]:
    """Raw source lines to detokenized n-best lists of (translation, score).

    An empty or blank line translates to an empty line without reaching the model (with
    ``conllu``, the CoNLL-U file holds one sentence per non-empty line, as for ``prepare``); a line
    longer than the model's positions is cut, with a warning naming it (docs/robustness.md)."""
    if any(not line.strip() for line in lines):
        return without_empty_lines(lines, lambda kept, numbers: translate_lines(model, cfg, toks, kept, decode, device, conllu=conllu, source_name=source_name, line_numbers=numbers, **kw))
    sources, annotations = encode_source_lines(cfg, toks, lines, model.feature_spec, conllu, source_name)
    warn_cut_lines(sources, model.cfg.max_positions - 2, source_name, line_numbers)
    hyps = translate_ids(model, sources, decode, device, annotations=annotations, **kw)
    if decode.unk_replace != "none":
        words = parser_words(cfg, lines, conllu, source_name)
        return translations_with_replacement(toks, lines, sources, hyps, decode, words)
    return [[(toks.tgt.decode(h.tokens), h.score) for h in nb] for nb in hyps]
