"""Word alignments of whole files: ``syntaxnmt align-external``, ``align`` and ``aer``.

* :func:`align_external`: eflomal (both directions, symmetrized) over the training corpus of a
  config, on the words the model sees (:func:`syntaxnmt.prepare.model_words`); the Pharaoh file
  has one line per line of ``data.train_src`` and is what ``data.train_align`` reads.
* :func:`model_alignments`: links read off a trained model's cross-attention while it
  force-decodes the reference (:func:`syntaxnmt.alignment.extract_alignments`), subword links
  projected back to words; with a target→source model too, both directions are symmetrized.
  The words are the whitespace tokens of the given lines (tokenized like the training text;
  ``normalize`` first applies the model's lowercasing and Moses tokenization), each encoded on
  its own with SentencePiece, so link indices refer to exactly those tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from syntaxnmt.alignment import (
    SYMMETRIZATIONS,
    Links,
    aer_files,
    extract_alignments,
    format_links,
    subwords_to_words,
    symmetrize as symmetrize_links,
)
from syntaxnmt.batches import make_batch
from syntaxnmt.config import Config
from syntaxnmt.errors import UserError
from syntaxnmt.subwords import Tokenizer
from syntaxnmt.textio import read_lines, write_lines

SHORT_NAMES = {"gdfa": "grow-diag-final-and", "gdf": "grow-diag-final", "gd": "grow-diag"}


def symmetrization(name: str) -> str:
    """A symmetrization heuristic by name (``gdfa``, ``gdf`` and ``gd`` abbreviate the grow-diag ones)."""
    method = SHORT_NAMES.get(name, name)
    if method not in SYMMETRIZATIONS:
        raise UserError(f"unknown symmetrization {name!r}; choose one of {', '.join(SYMMETRIZATIONS)} (or gdfa, gdf, gd)")
    return method


def align_external(cfg: Config, output: str | Path | None = None, symmetrize: str = "grow-diag-final-and", log=print) -> Path:
    """Align the training corpus of ``cfg`` with eflomal; write ``output`` (default ``data.train_align``).

    Pairs that ``prepare`` skips (an empty side, a bad tree with ``bad_tree: skip``) get an empty line.
    """
    from syntaxnmt.aligners import run_eflomal
    from syntaxnmt.corpus import read_parallel
    from syntaxnmt.prepare import _annotate_split, model_words

    d = cfg.data
    output = output or d.train_align
    if not output:
        raise UserError("give the output file with -o, or set data.train_align in the config")
    for key in ("train_src", "train_tgt"):
        if not getattr(d, key):
            raise UserError(f"data.{key} is not set in the config")
    method = symmetrization(symmetrize)
    text = read_parallel(d.train_src, d.train_tgt)
    parses = None
    if d.annotate != "none":
        text, parses, _ = _annotate_split(cfg, text, d.train_src, d.train_conllu, log)
    src_text, tgt_text = model_words(cfg, text, parses)
    log(f"aligning {len(src_text)} sentence pairs with eflomal ({method})")
    links = run_eflomal(src_text, tgt_text, symmetrize=method)
    lines = [""] * text.counts["read"]
    for line_number, pair_links in zip(text.line_numbers, links):
        lines[line_number - 1] = format_links(pair_links)
    write_lines(output, lines)
    log(f"{sum(len(x) for x in links)} links written to {output}")
    return Path(output)


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
) -> list[Links]:
    """Word links ``(source word, target word)`` of every pair from ``model``'s cross-attention.

    ``src``/``tgt`` are ``(ids, word indices)`` as returned by :func:`encode_words`.
    """
    (src_ids, src_words), (tgt_ids, tgt_words) = src, tgt
    if len(src_ids) != len(tgt_ids):
        raise UserError(f"{len(src_ids)} source sentences but {len(tgt_ids)} target sentences")
    if model.feature_spec:
        raise UserError(f"this model uses source features ({', '.join(sorted(model.feature_spec.names))}); align supports models without them")
    limit = model.cfg.max_positions - 1
    for k, (s, t) in enumerate(zip(src_ids, tgt_ids), start=1):
        if max(len(s), len(t)) >= limit:
            raise UserError(f"sentence pair {k} has {max(len(s), len(t))} subwords: more than the model's {limit - 1} positions")
    order = np.argsort([len(s) + len(t) for s, t in zip(src_ids, tgt_ids)], kind="stable")
    out: list[Links] = [set() for _ in src_ids]
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size].tolist()
        batch = make_batch([np.asarray(src_ids[i], dtype=np.int64) for i in idx], [np.asarray(tgt_ids[i], dtype=np.int64) for i in idx], idx).to(device)
        for i, links in zip(idx, extract_alignments(model, batch, layer, head, method, threshold)):
            out[i] = subwords_to_words(links, src_words[i], tgt_words[i])
    return out


def _spec(value: str | int | None, default) -> int | None:
    """``--layer``/``--head`` value: None = the model's ``train.alignment`` setting, ``average``, or an index."""
    from syntaxnmt.alignment_training import layer_head

    if value is None:
        value = default
    if value == "average":
        return None
    try:
        return layer_head(value)
    except ValueError:
        raise UserError(f"--layer/--head takes an integer or 'average' (got {value!r})") from None


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
) -> list[Links]:
    """Word alignments of line pairs from a source→target model (and a target→source one, symmetrized).

    ``layer``/``head`` default to each model's ``train.alignment`` setting (the supervised head).
    """
    from syntaxnmt.translate import load_model

    if len(src_lines) != len(tgt_lines):
        raise UserError(f"{len(src_lines)} source lines but {len(tgt_lines)} target lines: the files must be line-aligned")
    method_sym = symmetrization(symmetrize) if reverse_checkpoint else None
    directions = []
    for path, (a, b) in ((checkpoint, (src_lines, tgt_lines)), (reverse_checkpoint, (tgt_lines, src_lines))):
        if path is None:
            continue
        model, cfg, toks = load_model(path, device)
        a_cfg = cfg.train.alignment
        directions.append(
            attention_alignments(
                model,
                encode_words(toks.src, a, normalize),
                encode_words(toks.tgt, b, normalize),
                device,
                layer=_spec(layer, a_cfg.layer),
                head=_spec(head, a_cfg.head),
                method=method,
                threshold=threshold,
                batch_size=batch_size,
            )
        )
    if len(directions) == 1:
        return directions[0]
    forward, reverse = directions
    return [symmetrize_links(f, {(i, j) for j, i in r}, method_sym) for f, r in zip(forward, reverse)]


def sentence_lengths(src: str | None, tgt: str | None, bitext: str | None) -> tuple[list[int] | None, list[int] | None]:
    """Word counts per line, from tokenized ``src``/``tgt`` files or a ``source ||| target`` file."""
    from syntaxnmt.alignment import read_bitext

    if bitext:
        s, t = read_bitext(bitext)
        return [len(x) for x in s], [len(x) for x in t]
    return ([len(x.split()) for x in read_lines(src)] if src else None), ([len(x.split()) for x in read_lines(tgt)] if tgt else None)


def aer_report(gold: str, hyp: str, one_indexed_gold: bool = False, src: str | None = None, tgt: str | None = None, bitext: str | None = None) -> str:
    """``AER .. precision .. recall ..`` (percentages) of ``hyp`` against ``gold``; with sentence lengths
    (``src``/``tgt`` or ``bitext``) links outside a sentence are errors naming the line."""
    src_lengths, tgt_lengths = sentence_lengths(src, tgt, bitext)
    return str(aer_files(gold, hyp, one_indexed_gold, src_lengths, tgt_lengths))
