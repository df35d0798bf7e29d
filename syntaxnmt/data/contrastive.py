"""Contrastive test sets read into one item type: context sentences, the current source sentence, candidate translations and the index of the correct one.

Three formats (:func:`read_contrastive` tells them apart by their keys):

* **syntaxnmt** -- ``{"items": [...]}`` (or a bare list) of objects with ``src``,
  ``candidates``, ``correct`` and optionally ``context_src``, ``context_tgt`` (previous
  sentences, nearest last), ``phenomenon``, ``distance``, ``doc``, ``line``, ``pair``: the
  ``contrastive.json`` of :func:`syntaxnmt.data.discourse.write_documents`.
* **ContraPro** (Müller et al. 2018, https://github.com/ZurichNLP/ContraPro): a list of objects
  with ``src segment``, ``ref segment``, ``errors`` (``[{"contrastive": ...}, ...]``),
  ``ante distance``, ``src pronoun``, ``ref pronoun``, ``document id``, ``segment id``. The
  reference is candidate 0. The context lives in the OpenSubtitles documents; give it as the
  ``contrapro.context.{src,tgt}`` files that the repository's ``json2text_and_context.pl`` writes
  (``--context N`` lines for every scored row: the reference, then each contrastive), or read
  the items without context.
* **Voita et al. 2019** ("When a Good Translation is Wrong in Context",
  https://github.com/lena-voita/good-translation-wrong-in-context): ``consistency_testsets/*.json``,
  a list of groups ``{"src": ..., "dst": [...], "true_ind": k, "ctx_dist": d}`` where ``src`` and
  every ``dst`` are the context sentences and the current one joined by `` _eos ``. The context
  translation must be the same in every candidate of a group (it is in the published sets).

Bad files raise :class:`UserError` naming the file and the item (1-based) or line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from syntaxnmt.errors import UserError
from syntaxnmt.textio import read_lines, read_text

FORMATS = ("syntaxnmt", "contrapro", "voita")
VOITA_SEPARATOR = " _eos "


@dataclass(frozen=True)
class ContrastiveItem:
    """One test item: score every candidate as the translation of ``src`` given the context."""

    src: str
    candidates: tuple[str, ...]
    correct: int  # index of the correct candidate
    context_src: tuple[str, ...] = ()  # previous source sentences, nearest last
    context_tgt: tuple[str, ...] = ()  # their translations (empty when unknown)
    phenomenon: str = ""
    distance: int | None = None  # sentences between the current one and the one that decides it
    doc: str | None = None
    line: int | None = None  # 0-based line of the current sentence in its source text, if known
    pair: int | None = None  # twin id in syntaxnmt's synthetic set (same src, other answer)

    @property
    def reference(self) -> str:
        return self.candidates[self.correct]


def chance(items: Sequence[ContrastiveItem]) -> float:
    """The accuracy expected of a scorer that cannot tell the candidates apart: the mean of
    1 / (number of candidates). On syntaxnmt's synthetic set every context-free scorer gets
    exactly this (its items come in twin pairs)."""
    if not items:
        raise UserError("no contrastive items: chance is undefined")
    return sum(1 / len(item.candidates) for item in items) / len(items)


# --------------------------------------------------------------------------------------
# Validation helpers: every message names the file and the item
# --------------------------------------------------------------------------------------


def _load_json(path: Path) -> Any:
    text = read_text(path)  # a whole file: a JSON set may be one line longer than a text line may be
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}:{e.colno}: invalid JSON ({e.msg})") from None


def _get(obj: dict, key: str, kind: type | tuple[type, ...], where: str, required: bool = True) -> Any:
    if key not in obj or (obj[key] is None and not required):
        if required:
            raise UserError(f"{where}: missing key {key!r}")
        return None
    value = obj[key]
    if (isinstance(value, bool) and kind is int) or not isinstance(value, kind):  # JSON true is no index
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise UserError(f"{where}: {key!r} must be {names}, got {type(value).__name__} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _strings(obj: dict, key: str, where: str, required: bool = True, min_len: int = 0) -> tuple[str, ...]:
    value = _get(obj, key, list, where, required)
    if value is None:
        return ()
    for k, s in enumerate(value):
        if not isinstance(s, str):
            raise UserError(f"{where}: {key}[{k}] must be a string, got {type(s).__name__} {_short(s)}")
    if len(value) < min_len:
        raise UserError(f"{where}: {key!r} needs at least {min_len} entries, got {len(value)}")
    return tuple(value)


def _index(value: int, n: int, key: str, where: str) -> int:
    if not 0 <= value < n:
        raise UserError(f"{where}: {key!r} is {value}, not the index of one of the {n} candidates")
    return value


def _items_list(data: Any, path: Path) -> list:
    if isinstance(data, dict) and "items" in data:
        data = data["items"]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON list of items (or an object with \"items\"), got {type(data).__name__}")
    if not data:
        raise UserError(f"{path}: holds no contrastive items")
    for k, item in enumerate(data):
        if not isinstance(item, dict):
            raise UserError(f"{path}: item {k + 1}: expected a JSON object, got {type(item).__name__} {_short(item)}")
    return data


def detect_format(data: Any, path: str | os.PathLike = "<data>") -> str:
    """``syntaxnmt``, ``contrapro`` or ``voita``, from the keys of the file's first item."""
    if isinstance(data, dict) and "items" in data:
        return "syntaxnmt"
    first = _items_list(data, Path(path))[0]
    if "candidates" in first:
        return "syntaxnmt"
    if "src segment" in first:
        return "contrapro"
    if "dst" in first and "true_ind" in first:
        return "voita"
    raise UserError(
        f"{path}: cannot tell the contrastive format from item 1's keys {sorted(first)[:8]}: expected "
        "'candidates' (syntaxnmt), 'src segment' (ContraPro) or 'dst' and 'true_ind' (Voita et al. 2019)"
    )


# --------------------------------------------------------------------------------------
# The three formats
# --------------------------------------------------------------------------------------

_SYNTAXNMT_KEYS = {"src", "candidates", "correct", "context_src", "context_tgt", "phenomenon", "distance", "doc", "line", "pair"}


def _syntaxnmt_items(data: Any, path: Path) -> list[ContrastiveItem]:
    items = []
    for k, obj in enumerate(_items_list(data, path)):
        where = f"{path}: item {k + 1}"
        unknown = sorted(set(obj) - _SYNTAXNMT_KEYS)
        if unknown:
            raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_SYNTAXNMT_KEYS))})")
        candidates = _strings(obj, "candidates", where, min_len=2)
        context_src = _strings(obj, "context_src", where, required=False)
        context_tgt = _strings(obj, "context_tgt", where, required=False)
        if context_tgt and len(context_tgt) != len(context_src):
            raise UserError(f"{where}: 'context_tgt' has {len(context_tgt)} sentences, 'context_src' {len(context_src)}")
        distance = _get(obj, "distance", int, where, required=False)
        line = _get(obj, "line", int, where, required=False)
        for key, value in (("distance", distance), ("line", line)):
            if value is not None and value < 0:
                raise UserError(f"{where}: {key!r} must be >= 0, got {value}")
        items.append(ContrastiveItem(
            src=_get(obj, "src", str, where),
            candidates=candidates,
            correct=_index(_get(obj, "correct", int, where), len(candidates), "correct", where),
            context_src=context_src,
            context_tgt=context_tgt,
            phenomenon=_get(obj, "phenomenon", str, where, required=False) or "",
            distance=distance,
            doc=_get(obj, "doc", str, where, required=False),
            line=line,
            pair=_get(obj, "pair", int, where, required=False),
        ))
    return items


def _contrapro_contexts(
    items: list, path: Path, context_src: Path, context_tgt: Path
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each item's (source, target) context from json2text_and_context.pl's files: N lines (its
    ``--context N``, oldest first) for every scored row, one row for the reference and one per
    contrastive; the rows of an item must agree."""
    src_lines, tgt_lines = read_lines(context_src), read_lines(context_tgt)
    if len(src_lines) != len(tgt_lines):
        raise UserError(f"{context_src} has {len(src_lines)} lines but {context_tgt} has {len(tgt_lines)}")
    rows = sum(1 + len(obj["errors"]) for obj in items)
    n, rest = divmod(len(src_lines), rows)
    if rest or n == 0:
        raise UserError(
            f"{context_src}: {len(src_lines)} lines is not N context lines for each of the {rows} scored rows of {path} "
            "(the reference and every contrastive of each item, as json2text_and_context.pl writes them)"
        )
    contexts = []
    row = 0
    for k, obj in enumerate(items):
        start = row * n
        for r in range(1, 1 + len(obj["errors"])):  # every row of the item repeats the same context
            other = (row + r) * n
            for lines, name in ((src_lines, context_src), (tgt_lines, context_tgt)):
                if lines[other:other + n] != lines[start:start + n]:
                    raise UserError(f"{name}:{other + 1}: context of {path} item {k + 1}, row {r + 1} differs from its row 1 (line {start + 1}): files not made for this JSON?")
        block_src, block_tgt = src_lines[start:start + n], tgt_lines[start:start + n]
        segment = obj.get("segment id")
        keep = [
            c for c in range(n)  # line c is n - c sentences back
            if not (isinstance(segment, int) and segment - (n - c) < 1)  # before the document: the script prints a placeholder
        ]
        while keep and not block_src[keep[0]].strip() and not block_tgt[keep[0]].strip():  # empty at a document start
            keep.pop(0)
        contexts.append((tuple(block_src[c] for c in keep), tuple(block_tgt[c] for c in keep)))
        row += 1 + len(obj["errors"])
    return contexts


def _contrapro_items(data: Any, path: Path, context_src: Path | None, context_tgt: Path | None) -> list[ContrastiveItem]:
    objs = _items_list(data, path)
    for k, obj in enumerate(objs):
        where = f"{path}: item {k + 1}"
        errors = _get(obj, "errors", list, where)
        if not errors:
            raise UserError(f"{where}: 'errors' lists no contrastive translation")
        for e, error in enumerate(errors):
            if not isinstance(error, dict) or not isinstance(error.get("contrastive"), str):
                raise UserError(f"{where}: errors[{e}] must be an object with a string 'contrastive', got {_short(error)}")
    if (context_src is None) != (context_tgt is None):
        raise UserError("ContraPro context needs both files: the source context and the target context")
    contexts = _contrapro_contexts(objs, path, Path(context_src), Path(context_tgt)) if context_src is not None else [((), ())] * len(objs)
    items = []
    for k, (obj, (ctx_src, ctx_tgt)) in enumerate(zip(objs, contexts)):
        where = f"{path}: item {k + 1}"
        distance = _get(obj, "ante distance", int, where, required=False)
        segment = _get(obj, "segment id", int, where, required=False)
        src_pronoun = _get(obj, "src pronoun", str, where, required=False)
        ref_pronoun = _get(obj, "ref pronoun", str, where, required=False)
        doc = _get(obj, "document id", str, where, required=False)
        items.append(ContrastiveItem(
            src=_get(obj, "src segment", str, where),
            candidates=(_get(obj, "ref segment", str, where), *(e["contrastive"] for e in obj["errors"])),
            correct=0,
            context_src=ctx_src,
            context_tgt=ctx_tgt,
            phenomenon=f"{src_pronoun.lower()}:{ref_pronoun.lower()}" if src_pronoun and ref_pronoun else "pronoun",
            distance=distance,
            doc=doc,
            line=segment - 1 if segment is not None and segment >= 1 else None,
        ))
    return items


def _voita_phenomenon(path: Path) -> str:
    """``deixis_dev.json`` -> ``deixis``; ``ellipsis_vp.json`` -> ``ellipsis_vp``."""
    stem = path.name.split(".")[0]
    for split in ("_dev", "_test"):
        if stem.endswith(split):
            return stem[: -len(split)]
    return stem


def _voita_items(data: Any, path: Path, phenomenon: str | None) -> list[ContrastiveItem]:
    phenomenon = phenomenon or _voita_phenomenon(path)
    items = []
    for k, obj in enumerate(_items_list(data, path)):
        where = f"{path}: item {k + 1}"
        src = _get(obj, "src", str, where).split(VOITA_SEPARATOR)
        groups = [d.split(VOITA_SEPARATOR) for d in _strings(obj, "dst", where, min_len=2)]
        for c, sentences in enumerate(groups):
            if len(sentences) != len(src):
                raise UserError(f"{where}: dst[{c}] has {len(sentences)} sentences separated by '_eos', src has {len(src)}")
            if sentences[:-1] != groups[0][:-1]:
                raise UserError(f"{where}: dst[{c}] has another context translation than dst[0]; one item has one context")
        distance = _get(obj, "ctx_dist", int, where, required=False)
        items.append(ContrastiveItem(
            src=src[-1],
            candidates=tuple(g[-1] for g in groups),
            correct=_index(_get(obj, "true_ind", int, where), len(groups), "true_ind", where),
            context_src=tuple(src[:-1]),
            context_tgt=tuple(groups[0][:-1]),
            phenomenon=phenomenon,
            distance=distance,
        ))
    return items


def check_context(items: Sequence[ContrastiveItem], path: str | os.PathLike, context: str) -> None:
    """Scoring with context (``--context true`` or ``other-document``) needs items that carry some:
    a set read without any (ContraPro without its context files) would be scored context-free
    under a header that says otherwise, so it is a :class:`UserError`."""
    if context != "none" and items and not any(item.context_src or item.context_tgt for item in items):
        raise UserError(
            f"{path}: no item carries context, so --context {context} would score it context-free "
            "(ContraPro: give --context-src and --context-tgt, the files json2text_and_context.pl writes); "
            "or score without context with --context none"
        )


def read_contrastive(
    path: str | os.PathLike,
    format: str | None = None,
    context_src: str | os.PathLike | None = None,
    context_tgt: str | os.PathLike | None = None,
    phenomenon: str | None = None,
) -> list[ContrastiveItem]:
    """The items of a contrastive test set in any of :data:`FORMATS` (``format=None``: told from
    the keys). ``context_src``/``context_tgt``: ContraPro's context files (see the module
    docstring); ``phenomenon``: the label of Voita et al.'s items (default: the file name, e.g.
    ``deixis``)."""
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise UserError(f"unknown contrastive format {format!r} (known: {', '.join(FORMATS)})")
    data = _load_json(path)
    format = format or detect_format(data, path)
    if context_src is not None or context_tgt is not None:
        if format != "contrapro":
            raise UserError(f"{path}: context files are read for ContraPro only; a {format} file carries its context")
    if format == "syntaxnmt":
        return _syntaxnmt_items(data, path)
    if format == "contrapro":
        return _contrapro_items(data, path, context_src, context_tgt)
    return _voita_items(data, path, phenomenon)
