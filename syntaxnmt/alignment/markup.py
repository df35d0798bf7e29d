"""Markup transfer (``translate --markup``): inline tags of the source put around the target words aligned to the words they enclosed.

The source line may hold XML-like inline tags: pairs (``<b>...</b>``, ``<a href="...">...</a>``)
and self-closing ones (``<br/>``). :func:`parse_markup` removes them and remembers, for every
element, the source words it encloses (a self-closing or empty element: the position between two
words); the text without tags is translated; :func:`transfer_markup` puts every element back into
the translation using word links between the two (``translate --alignments``'s links) -- a simple
alignment-based placement of the kind Hanneman & Dinu (2020) and Zenkel et al. (2021) study:

* an element covers the target words from the first to the last one linked to a word it encloses
  (the hull), cut to its parent's span; when it overlaps an element placed before it among its
  siblings (in source order), it keeps the larger part that does not, so the tags always nest;
* an element with no linked target word left (its words unaligned, a self-closing tag, an empty
  pair) is empty and goes where its source position points: right after the target words of the
  nearest linked source word before it, else right before those of the nearest one after it, moved
  to a valid place (inside its parent, outside its siblings).

Tags are copied as written (attributes included); text is not unescaped (``&amp;`` stays). A
``<`` that starts no tag, a tag that is never closed, one closed in the wrong order and a closing
tag with nothing to close are errors naming the line.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Sequence

from syntaxnmt.data.links import Links
from syntaxnmt.errors import UserError

_ATTRIBUTE = r"""\s+[A-Za-z_:][-\w:.]*(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
_TAG = re.compile(rf"<(/?)([A-Za-z][-\w:.]*)((?:{_ATTRIBUTE})*)\s*(/?)>")


@dataclass
class Element:
    """One element of the source markup: its tags as written and the character span of the text it encloses."""

    open: str
    close: str  # "" for a self-closing tag
    start: int  # characters of the text without tags
    end: int
    children: list["Element"] = field(default_factory=list)


@dataclass
class Markup:
    """A source line without its tags (``text``) and its elements (a forest, in source order)."""

    text: str
    elements: list[Element]

    @property
    def plain(self) -> str:
        """The text with every run of whitespace one space: what ``translate --markup`` (and the
        server's ``"markup": true``) translates and aligns."""
        return " ".join(self.text.split())


def parse_markup(line: str, where: str = "") -> Markup:
    """Split a line into its text and its inline elements; malformed markup is a :class:`UserError` naming ``where``."""
    prefix = f"{where}: " if where else ""
    text: list[str] = []
    length = 0
    root = Element("", "", 0, 0)
    stack: list[tuple[Element, str]] = [(root, "")]
    pos = 0
    while True:
        lt = line.find("<", pos)
        chunk = line[pos:] if lt < 0 else line[pos:lt]
        text.append(chunk)
        length += len(chunk)
        if lt < 0:
            break
        m = _TAG.match(line, lt)
        if m is None:
            raise UserError(f"{prefix}'<' at column {lt + 1} starts no tag (write &lt; for a literal '<')")
        closing, name, attributes, self_closing = m.group(1), m.group(2), m.group(3), m.group(4)
        if closing and (attributes or self_closing):
            raise UserError(f"{prefix}malformed closing tag {m.group(0)!r} at column {lt + 1}")
        if closing:
            parent, open_name = stack[-1]
            if len(stack) == 1:
                raise UserError(f"{prefix}{m.group(0)} at column {lt + 1} closes no open tag")
            if open_name != name:
                raise UserError(f"{prefix}{m.group(0)} at column {lt + 1} closes <{open_name}> (tags must nest)")
            parent.close, parent.end = m.group(0), length
            stack.pop()
        elif self_closing:
            stack[-1][0].children.append(Element(m.group(0), "", length, length))
        else:
            element = Element(m.group(0), "", length, length)
            stack[-1][0].children.append(element)
            stack.append((element, name))
        pos = m.end()
    if len(stack) > 1:
        raise UserError(f"{prefix}<{stack[-1][1]}> is never closed")
    return Markup("".join(text), root.children)


def token_spans(text: str, tokens: Sequence[str]) -> list[tuple[int, int]]:
    """The character span of every token in ``text``, found in order (case-insensitively); a token
    the text does not hold (a tokenizer changed it) gets an empty span where the search stands."""
    lowered = len(text.lower()) == len(text)
    haystack = text.lower() if lowered else text
    spans, cursor = [], 0
    for token in tokens:
        k = haystack.find(token.lower() if lowered else token, cursor)
        if k < 0:
            spans.append((cursor, cursor))
        else:
            spans.append((k, k + len(token)))
            cursor = k + len(token)
    return spans


@dataclass
class _Placed:
    element: Element
    start: int  # target word positions, end exclusive; start == end: an empty element at that position
    end: int
    children: list["_Placed"] = field(default_factory=list)


def _words_of(element: Element, spans: Sequence[tuple[int, int]]) -> range:
    """The source words an element encloses (those overlapping its characters), as a range; empty
    elements get an empty range at their position (after a word they cut in two)."""
    if element.end > element.start:
        inside = [k for k, (s, e) in enumerate(spans) if s < element.end and e > element.start]
        if inside:
            return range(inside[0], inside[-1] + 1)
    k = sum(1 for s, _ in spans if s < element.start)
    return range(k, k)


def _anchor(position: int, by_source: dict[int, list[int]], n_src: int) -> int | None:
    """The target position an empty element at source position ``position`` points to (see the module docstring)."""
    for i in range(position - 1, -1, -1):
        if i in by_source:
            return max(by_source[i]) + 1
    for i in range(position, n_src):
        if i in by_source:
            return min(by_source[i])
    return None


def _place(elements: Sequence[Element], lo: int, hi: int, spans, by_source, n_src: int, emptied: list[Element] | None = None) -> list[_Placed]:
    """Place sibling ``elements`` inside target span [lo, hi): non-empty ones first (source order), then the empty ones.
    ``emptied`` collects the elements that enclose source words but get no target word."""
    spans_of = [_words_of(e, spans) for e in elements]
    placed: list[_Placed | None] = [None] * len(elements)
    for k, (e, words) in enumerate(zip(elements, spans_of)):
        targets = [j for i in words for j in by_source.get(i, [])]
        if not targets:
            continue
        a, b = max(min(targets), lo), min(max(targets) + 1, hi)
        for other in placed:
            if other is None or a >= b or other.start >= other.end:
                continue
            if other.start < b and a < other.end:  # overlap: keep the larger part outside the other element
                left, right = (a, min(b, other.start)), (max(a, other.end), b)
                a, b = left if max(left[1] - left[0], 0) >= max(right[1] - right[0], 0) else right
        if a < b:
            placed[k] = _Placed(e, a, b)
    full = [p for p in placed if p is not None]
    for k, (e, words) in enumerate(zip(elements, spans_of)):
        if placed[k] is not None:
            continue
        anchor = _anchor(words.start, by_source, n_src)
        p = min(max(lo if anchor is None else anchor, lo), hi)
        for other in full:
            if other.start < p < other.end:  # not inside a sibling: its nearer edge
                p = other.start if p - other.start <= other.end - p else other.end
        placed[k] = _Placed(e, p, p)
        if len(words) and emptied is not None:
            emptied.append(e)
    for p in placed:
        p.children = _place(p.element.children, p.start, p.end, spans, by_source, n_src, emptied)
    return placed  # type: ignore[return-value]


def _events(nodes: Sequence[_Placed], lo: int, hi: int) -> list[tuple[str, object]]:
    """("word", j) and ("tag", (text, closes_words)) events of target span [lo, hi) with its elements."""
    order = sorted(range(len(nodes)), key=lambda k: (nodes[k].start, nodes[k].end > nodes[k].start, k))
    out: list[tuple[str, object]] = []
    cursor = lo
    for k in order:
        node = nodes[k]
        out += [("word", j) for j in range(cursor, node.start)]
        out.append(("tag", (node.element.open, False)))
        out += _events(node.children, node.start, node.end)
        if node.element.close:
            out.append(("tag", (node.element.close, node.end > node.start)))
        cursor = max(cursor, node.end)
    out += [("word", j) for j in range(cursor, hi)]
    return out


def transfer_markup(markup: Markup, src_tokens: Sequence[str], translation: str, tgt_tokens: Sequence[str], links: Links, emptied: list[Element] | None = None) -> str:
    """``translation`` with the elements of ``markup`` put back (see the module docstring).

    ``src_tokens``/``tgt_tokens``: the words ``links`` index (``(source word, target word)``),
    found in order in ``markup.text`` and ``translation``; the text between target words is kept
    as it is, a closing tag goes right after the last word it encloses and an opening one right
    before the first. ``emptied`` (a list) receives the elements that enclosed source words but
    enclose no target word (none of their words aligned, e.g. by a poorly aligned model).
    """
    src_spans, tgt_spans = token_spans(markup.text, src_tokens), token_spans(translation, tgt_tokens)
    by_source: dict[int, list[int]] = {}
    for i, j in sorted(links):
        if i < len(src_tokens) and j < len(tgt_tokens):
            by_source.setdefault(i, []).append(j)
    n = len(tgt_tokens)
    events = _events(_place(markup.elements, 0, n, src_spans, by_source, len(src_tokens), emptied), 0, n)
    bounds = [0] + [e for _, e in tgt_spans]  # gap k: the text between word k - 1 and word k
    starts = [s for s, _ in tgt_spans] + [len(translation)]
    out: list[str] = []
    run: list[tuple[str, bool]] = []

    def flush(k: int) -> None:
        """The tags before word k (or the end), with the text before word k after the last closing tag."""
        last_close = max((m for m, (_, closes) in enumerate(run) if closes), default=-1)
        out.extend(t for t, _ in run[: last_close + 1])
        out.append(translation[bounds[k] : max(starts[k], bounds[k])])
        out.extend(t for t, _ in run[last_close + 1 :])
        run.clear()

    for kind, value in events:
        if kind == "tag":
            run.append(value)  # type: ignore[arg-type]
        else:
            flush(value)  # type: ignore[arg-type]
            out.append(translation[tgt_spans[value][0] : tgt_spans[value][1]])  # type: ignore[index]
    flush(n)
    return "".join(out)


def transfer_to_translations(
    marked: Sequence[Markup],
    results: Sequence[Sequence[tuple[str, float]]],
    links: Sequence[Sequence[Links]],
    src_normalize: Callable[[str], str],
    tgt_normalize: Callable[[str], str],
    *,
    where: Sequence[str] | None = None,
) -> list[list[tuple[str, float]]]:
    """Every n-best translation with its source line's markup put back; ``links`` as
    :func:`~syntaxnmt.alignment.extract.alignments_for_translations` returns them (over the
    whitespace tokens of the lines after ``src_normalize``/``tgt_normalize``: the tokenizers'
    ``normalize``). With ``where`` (a name per line, e.g. ``FILE:LINE``), an element that enclosed
    source words and encloses none in a translation (``<a href=...></a>``) is a warning on stderr
    naming the line, once per line and element."""
    out = []
    for k, (m, nbest, per) in enumerate(zip(marked, results, links)):
        src_tokens = src_normalize(m.text).split()
        emptied: list[Element] = []
        out.append([(transfer_markup(m, src_tokens, text, tgt_normalize(text).split(), lk, emptied), score) for (text, score), lk in zip(nbest, per)])
        for e in {id(e): e for e in emptied}.values() if where is not None else ():
            enclosed = m.text[e.start : e.end].strip()
            print(
                f"syntaxnmt: warning: {where[k]}: {e.open}{e.close} enclosed {enclosed!r} but no word of the translation is aligned to it: "
                "it is empty in the translation (a poorly aligned model? see docs/alignment.md)",
                file=sys.stderr,
            )
    return out
