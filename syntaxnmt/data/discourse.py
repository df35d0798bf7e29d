"""Synthetic documents: the built-in language pair extended to pronoun gender, lexical cohesion and tense across sentences, with a contrastive test set that no context-free scorer can beat.

Documents have 3-6 sentences of the built-in pair (:mod:`syntaxnmt.data.synthetic`: same grammar,
lexicon and head-final transduction), with three phenomena that the current source sentence alone
cannot decide:

* **pronoun gender** -- every target noun has a grammatical gender (:data:`NOUN_GENDERS`, a fixed
  seeded assignment, half masculine, half feminine), visible inside sentences only through the
  agreeing target determiner (:data:`DETERMINER_FORMS`). A source sentence 1-4 sentences back
  introduces the antecedent as ``this NOUN`` (the subject of a transitive clause); the source
  pronoun ``it`` (one form) translates as ``kare`` or ``kanojo`` by the antecedent's gender.
  Between the two, the nouns (distractors) are of both genders.
* **lexical cohesion** -- an ambiguous source noun (:data:`AMBIGUOUS`, two target translations)
  is first mentioned with a cue adjective that selects its sense (:data:`CUES`); a later mention
  1-4 sentences on has no cue and repeats the first translation.
* **tense** -- the first sentence of every document starts with ``yesterday`` or ``tomorrow``;
  every target verb of the document is followed by the tense marker ``katta`` or ``darou``.

Test documents come in twin pairs that differ only in the phenomenon's variable (the
antecedent noun swapped for one of the other gender, the cue for the other sense, the adverb for
the other tense): each contrastive item has a twin with the same current source sentence and the
same candidates in the same order, the other one correct. A scorer that reads only the current
sentence (and the candidates) therefore scores exactly 50 % in every (phenomenon, distance) cell,
and so does any scorer whose window does not reach the cue. See docs/documents.md.
"""

from __future__ import annotations

import copy
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# The grammar's private tree builders are reused (not copied) so that documents are made of
# exactly the sentences the built-in corpus draws.
from syntaxnmt.data.synthetic import (
    LEXICON,
    MAX_LEN,
    NOUNS,
    SyntheticPair,
    _linearize,
    _Node,
    _sentence,
    to_conllu,
    to_pharaoh,
    transduce,
)
from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write_text, write_lines

# --------------------------------------------------------------------------------------
# The document language: what the built-in pair lacks (fixed, independent of any seed)
# --------------------------------------------------------------------------------------

MASCULINE, FEMININE = 0, 1


def _balanced_genders(words: Iterable[str], name: str) -> dict[str, int]:
    """Half the words masculine, half feminine, by a fixed seeded shuffle."""
    order = sorted(words)
    random.Random(f"syntaxnmt.discourse/genders/{name}").shuffle(order)
    return {w: MASCULINE if k < len(order) // 2 else FEMININE for k, w in enumerate(order)}


AMBIGUOUS: dict[str, tuple[str, str]] = {
    "bank": ("ginko", "kishi"), "bat": ("koumori", "batto"),
    "plant": ("shokubutsu", "koujou"), "star": ("hoshi", "sutaa"),
}
"""Ambiguous source noun -> its two target translations (sense 0, sense 1)."""

CUES: dict[str, tuple[str, str]] = {
    "bank": ("rich", "muddy"), "bat": ("flying", "wooden"),
    "plant": ("green", "noisy"), "star": ("bright", "famous"),
}
"""Ambiguous source noun -> the adjective that selects sense 0 and the one that selects sense 1."""

CUE_TRANSLATIONS: dict[str, str] = {
    "rich": "yutaka", "muddy": "doro", "flying": "tobu", "wooden": "mokusei",
    "green": "midori", "noisy": "urusai", "bright": "akarui", "famous": "yuumei",
}

_AMBIGUOUS_GENDERS = _balanced_genders(AMBIGUOUS, "ambiguous")
NOUN_GENDERS: dict[str, int] = {
    **_balanced_genders(NOUNS.values(), "nouns"),
    **{t: _AMBIGUOUS_GENDERS[w] for w, senses in AMBIGUOUS.items() for t in senses},
}
"""Target noun -> grammatical gender (0 masculine, 1 feminine); both senses of an ambiguous
noun share one gender, so that its two candidates differ in the noun only."""

DETERMINER_FORMS: dict[str, tuple[str, str]] = {
    "the": ("sono", "sana"), "a": ("aru", "ara"), "every": ("subete", "subeta"), "this": ("kono", "kana"),
}
"""Source determiner -> target form agreeing with a masculine / feminine noun (masculine = the
built-in pair's form)."""

ANTECEDENT_DETERMINER = "this"
PRONOUN = "it"
PRONOUN_FORMS: tuple[str, str] = ("kare", "kanojo")  # masculine, feminine

TENSE_ADVERBS: tuple[str, str] = ("yesterday", "tomorrow")  # past, future
ADVERB_TRANSLATIONS: dict[str, str] = {"yesterday": "kinou", "tomorrow": "ashita"}
TENSE_MARKERS: tuple[str, str] = ("katta", "darou")  # follows every target verb: past, future

PHENOMENA: tuple[str, str, str] = ("pronoun", "cohesion", "tense")
MIN_SENTENCES, MAX_SENTENCES = 3, 6
MAX_DISTANCE = 4

# Default sizes, chosen for a 2-core CPU study (issue 21: every system x 3 seeds in under 2 hours).
# With seed 1: 24,334 training sentences (the built-in corpus has 20,000), 494 dev sentences and 600
# twin pairs of test documents (5,860 sentences), giving 100 items in every pronoun and cohesion cell
# and 276-400 in every tense cell (docs/documents.md).
N_TRAIN_DOCS = 5000
N_DEV_DOCS = 100
N_TEST_DOCS = 1200

_MAX_TREE = MAX_LEN - 2  # room for the adverb and a cue adjective
_BASE_NOUNS = tuple(NOUNS)
_NOUNS_BY_GENDER = tuple(tuple(w for w in _BASE_NOUNS if NOUN_GENDERS[NOUNS[w]] == g) for g in (MASCULINE, FEMININE))
_AMBIGUOUS_WORDS = tuple(AMBIGUOUS)


# --------------------------------------------------------------------------------------
# Documents as source trees plus the values of their discourse variables
# --------------------------------------------------------------------------------------


@dataclass
class _Document:
    """Source trees of one document and the variables their translation depends on.

    ``value`` is the variable of ``phenomenon`` (antecedent gender, sense, tense); ``anchor`` the
    line that fixes it (antecedent, cue, adverb); ``item_lines`` the lines that depend on it.
    """

    trees: list[_Node]
    phenomenon: str
    value: int
    tense: int
    adverb: _Node
    anchor: int
    item_lines: list[int]
    antecedent: _Node | None = None
    antecedent_nouns: tuple[str, str] = ("", "")  # (masculine, feminine) source nouns
    ambiguous: str = ""
    sense: int = 0
    cue: _Node | None = None


def _with_value(doc: _Document, value: int) -> _Document:
    """A copy of ``doc`` with its phenomenon's variable set to ``value`` (everything else equal)."""
    twin = copy.deepcopy(doc)
    twin.value = value
    if doc.phenomenon == "pronoun":
        twin.antecedent.form = twin.antecedent_nouns[value]
    elif doc.phenomenon == "cohesion":
        twin.sense = value
        twin.cue.form = CUES[twin.ambiguous][value]
    else:
        twin.tense = value
        twin.adverb.form = TENSE_ADVERBS[value]
    return twin


def _nodes(root: _Node) -> list[_Node]:
    """The nodes of a tree in source order."""
    out: list[_Node] = []

    def visit(node: _Node) -> None:
        for child in node.left:
            visit(child)
        out.append(node)
        for child in node.right:
            visit(child)

    visit(root)
    return out


def _subject(root: _Node) -> _Node:
    return next(n for n in root.left if n.deprel == "nsubj")


def _object(root: _Node) -> _Node | None:
    return next((n for n in root.right if n.deprel == "obj"), None)


def _tree(rng: random.Random, banned: frozenset[str] = frozenset(), transitive: bool | None = None) -> _Node:
    """A sentence of the built-in grammar (short enough, transitive if asked) without ``banned`` nouns."""
    while True:
        root = _sentence(rng)
        if len(_nodes(root)) <= _MAX_TREE and (transitive is None or (_object(root) is not None) == transitive):
            break
    allowed = tuple(w for w in _BASE_NOUNS if w not in banned)
    for node in _nodes(root):
        if node.upos == "NOUN" and node.form in banned:
            node.form = rng.choice(allowed)
    return root


def _noun_phrase_slot(rng: random.Random, root: _Node) -> tuple[list[_Node], int]:
    """The subject or (half the time, when there is one) the object: (its parent's list, index)."""
    obj = _object(root)
    if obj is not None and rng.random() < 0.5:
        return root.right, root.right.index(obj)
    return root.left, root.left.index(_subject(root))


def _gender_of(form: str) -> int:
    """Gender of a base source noun's translation."""
    return NOUN_GENDERS[NOUNS[form]]


def _pronoun_document(rng: random.Random, n: int, distance: int, value: int) -> tuple[list[_Node], dict]:
    nouns = (rng.choice(_NOUNS_BY_GENDER[MASCULINE]), rng.choice(_NOUNS_BY_GENDER[FEMININE]))
    banned = frozenset(nouns)
    anchor = rng.randint(0, n - 1 - distance)
    while True:  # distractors of both genders between the antecedent and the pronoun
        antecedent_tree = _tree(rng, banned, transitive=True)
        between = [_tree(rng, banned) for _ in range(distance - 1)]
        antecedent = _subject(antecedent_tree)
        order = _nodes(antecedent_tree)
        after = order[order.index(antecedent) + 1:] + [node for tree in between for node in _nodes(tree)]
        if {_gender_of(node.form) for node in after if node.upos == "NOUN"} == {MASCULINE, FEMININE}:
            break
    antecedent.form = nouns[value]
    next(c for c in antecedent.left if c.upos == "DET").form = ANTECEDENT_DETERMINER
    pronoun_tree = _tree(rng, banned)
    siblings, k = _noun_phrase_slot(rng, pronoun_tree)
    siblings[k] = _Node(PRONOUN, "PRON", siblings[k].deprel)
    trees = [_tree(rng, banned) for _ in range(anchor)] + [antecedent_tree, *between, pronoun_tree]
    trees += [_tree(rng, banned) for _ in range(n - len(trees))]
    return trees, {"anchor": anchor, "antecedent": antecedent, "antecedent_nouns": nouns}


def _ambiguous_noun_phrase(rng: random.Random, root: _Node, word: str, cue: _Node | None) -> None:
    """Make the subject or object ``DET (CUE) word`` (its other adjectives dropped, PP/relative kept)."""
    siblings, k = _noun_phrase_slot(rng, root)
    phrase = siblings[k]
    phrase.form = word
    phrase.left = [next(c for c in phrase.left if c.upos == "DET")] + ([cue] if cue is not None else [])


def _cohesion_document(rng: random.Random, n: int, distance: int, value: int) -> tuple[list[_Node], dict]:
    word = rng.choice(_AMBIGUOUS_WORDS)
    anchor = rng.randint(0, n - 1 - distance)
    cue = _Node(CUES[word][value], "ADJ", "amod")
    trees = [_tree(rng) for _ in range(n)]
    _ambiguous_noun_phrase(rng, trees[anchor], word, cue)
    _ambiguous_noun_phrase(rng, trees[anchor + distance], word, None)
    return trees, {"anchor": anchor, "ambiguous": word, "sense": value, "cue": cue}


def _document(rng: random.Random, phenomenon: str, distance: int, value: int) -> _Document:
    """One document of 3-6 sentences whose ``phenomenon`` spans ``distance`` sentences (for
    tense: at least ``distance`` + 1 sentences, every line after the first an item)."""
    n = rng.randint(max(MIN_SENTENCES, distance + 1), MAX_SENTENCES)
    tense = value if phenomenon == "tense" else rng.randrange(2)
    if phenomenon == "pronoun":
        trees, extra = _pronoun_document(rng, n, distance, value)
    elif phenomenon == "cohesion":
        trees, extra = _cohesion_document(rng, n, distance, value)
    else:
        trees, extra = [_tree(rng) for _ in range(n)], {"anchor": 0}
    adverb = _Node(TENSE_ADVERBS[tense], "ADV", "advmod")
    trees[0].left.insert(0, adverb)
    anchor = extra.pop("anchor")
    items = list(range(1, min(MAX_DISTANCE, n - 1) + 1)) if phenomenon == "tense" else [anchor + distance]
    return _Document(trees, phenomenon, value, tense, adverb, anchor, items, **extra)


# --------------------------------------------------------------------------------------
# Translation of a document sentence
# --------------------------------------------------------------------------------------


def _noun_translation(doc: _Document, form: str) -> str:
    return AMBIGUOUS[form][doc.sense] if form in AMBIGUOUS else NOUNS[form]


def _word_translation(doc: _Document, i: int, src: list[str], heads: list[int], upos: list[str]) -> str:
    form = src[i]
    if upos[i] == "DET":
        return DETERMINER_FORMS[form][NOUN_GENDERS[_noun_translation(doc, src[heads[i] - 1])]]
    if upos[i] == "NOUN":
        return _noun_translation(doc, form)
    if form == PRONOUN:
        return PRONOUN_FORMS[_gender_of(doc.antecedent.form)]
    if form in ADVERB_TRANSLATIONS:
        return ADVERB_TRANSLATIONS[form]
    if form in CUE_TRANSLATIONS:
        return CUE_TRANSLATIONS[form]
    return LEXICON[form]


def _render(doc: _Document, line: int) -> SyntheticPair:
    """Sentence ``line`` of ``doc`` with its translation (the built-in transduction, then a tense
    marker after every verb) and gold alignment (a marker aligns to its verb)."""
    src, heads, upos, deprel = _linearize(doc.trees[line])
    words = [_word_translation(doc, i, src, heads, upos) for i in range(len(src))]
    tgt, alignment = transduce(words, heads, deprel, lexicon={w: w for w in words})
    first_link: dict[int, int] = {}  # source word -> its translation's position (links are sorted)
    for i, j in alignment:
        first_link.setdefault(i, j)
    verb_at = {j: i for i, j in first_link.items() if upos[i] == "VERB"}  # a verb triggers no marker: one link
    out: list[str] = []
    moved: dict[int, int] = {}
    links: list[tuple[int, int]] = []
    for j, token in enumerate(tgt):
        moved[j] = len(out)
        out.append(token)
        if j in verb_at:
            links.append((verb_at[j], len(out)))
            out.append(TENSE_MARKERS[doc.tense])
    alignment = sorted([(i, moved[j]) for i, j in alignment] + links)
    return SyntheticPair(src, heads, upos, deprel, out, alignment)


# --------------------------------------------------------------------------------------
# Splits and files
# --------------------------------------------------------------------------------------


def _random_documents(rng: random.Random, n: int) -> list[_Document]:
    """Training / dev documents: phenomenon, distance and value drawn at random."""
    return [_document(rng, rng.choice(PHENOMENA), rng.randint(1, MAX_DISTANCE), rng.randrange(2)) for _ in range(n)]


def _twin_documents(rng: random.Random, n: int) -> list[tuple[int, _Document]]:
    """Test documents: ``n / 2`` twin pairs (pair id, document), every (phenomenon, distance) in
    turn, shuffled so that twins are not neighbours."""
    docs: list[tuple[int, _Document]] = []
    for k in range(n // 2):
        phenomenon, distance = PHENOMENA[k % len(PHENOMENA)], 1 + (k // len(PHENOMENA)) % MAX_DISTANCE
        value = rng.randrange(2)
        doc = _document(rng, phenomenon, distance, value)
        docs += [(k, doc), (k, _with_value(doc, 1 - value))]
    while True:  # a few shuffles on average (with one pair, twins cannot be apart)
        rng.shuffle(docs)
        if len(docs) <= 2 or all(a[0] != b[0] for a, b in zip(docs, docs[1:])):
            return docs


def _contrastive_items(docs: list[tuple[int, _Document]], rendered: list[list[SyntheticPair]], ids: list[str]) -> list[dict]:
    """The contrastive items of the test documents, in file order (see docs/documents.md)."""
    items = []
    offset = 0
    for (pair, doc), sentences, doc_id in zip(docs, rendered, ids):
        for line in doc.item_lines:
            variants = [_render(_with_value(doc, v), line) for v in (0, 1)]
            assert variants[0].src == variants[1].src == sentences[line].src and variants[doc.value] == sentences[line]
            assert variants[0].tgt != variants[1].tgt
            items.append({
                "context_src": [" ".join(s.src) for s in sentences[:line]],
                "context_tgt": [" ".join(s.tgt) for s in sentences[:line]],
                "src": " ".join(sentences[line].src),
                "candidates": [" ".join(v.tgt) for v in variants],
                "correct": doc.value,
                "phenomenon": doc.phenomenon,
                "distance": line - doc.anchor,
                "doc": doc_id,
                "line": offset + line,
                "pair": pair,
            })
        offset += len(sentences)
    return items


def write_documents(
    out_dir: str | os.PathLike,
    n_train_docs: int = N_TRAIN_DOCS,
    n_dev_docs: int = N_DEV_DOCS,
    n_test_docs: int = N_TEST_DOCS,
    seed: int = 1,
) -> dict[str, dict[str, Path]]:
    """Write the document corpus into ``out_dir``: ``{split}.src/.tgt/.docs/.conllu/.align`` for
    train, dev and test, and ``contrastive.json`` from the test documents.

    ``.docs`` holds one document id per line, line-aligned with ``.src``/``.tgt`` (documents are
    contiguous); the CoNLL-U file has the gold source trees with ``# newdoc id`` at each document
    start; ``.align`` the gold alignments (Pharaoh). ``n_test_docs`` must be even (twin pairs); 24
    test documents cover every (phenomenon, distance) cell. The same arguments give byte-identical
    files. Returns ``{split: {"src"|"tgt"|"docs"|"conllu"|"align": path}}``, and ``"contrastive"``
    under ``"test"``.
    """
    out_dir = Path(out_dir)
    sizes = {"train": n_train_docs, "dev": n_dev_docs, "test": n_test_docs}
    for split, n in sizes.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise UserError(f"number of {split} documents must be an integer >= 0, got {n!r}")
    if n_test_docs % 2:
        raise UserError(f"number of test documents must be even (they come in twin pairs), got {n_test_docs}")
    written: dict[str, dict[str, Path]] = {}
    for split, n in sizes.items():
        rng = random.Random(f"syntaxnmt.discourse/{seed}/{split}")
        docs = _twin_documents(rng, n) if split == "test" else [(-1, d) for d in _random_documents(rng, n)]
        rendered = [[_render(doc, line) for line in range(len(doc.trees))] for _, doc in docs]
        ids = [f"{split}-doc{k + 1}" for k in range(len(docs))]
        paths = {kind: out_dir / f"{split}.{kind}" for kind in ("src", "tgt", "docs", "conllu", "align")}
        sentences = [(doc_id, pair) for doc_id, pairs in zip(ids, rendered) for pair in pairs]
        write_lines(paths["src"], (" ".join(p.src) for _, p in sentences))
        write_lines(paths["tgt"], (" ".join(p.tgt) for _, p in sentences))
        write_lines(paths["docs"], (doc_id for doc_id, _ in sentences))
        write_lines(paths["align"], (to_pharaoh(p.alignment) for _, p in sentences))
        blocks = []
        for k, (doc_id, pair) in enumerate(sentences):
            start = k == 0 or sentences[k - 1][0] != doc_id
            blocks.append((f"# newdoc id = {doc_id}\n" if start else "") + to_conllu(pair, f"{split}-{k + 1}"))
        atomic_write_text(paths["conllu"], "".join(blocks))
        if split == "test":
            items = _contrastive_items(docs, rendered, ids)
            paths["contrastive"] = out_dir / "contrastive.json"
            body = ",\n".join(json.dumps(item, ensure_ascii=False) for item in items)
            atomic_write_text(paths["contrastive"], '{"format": "syntaxnmt-contrastive", "version": 1, "items": [\n' + body + "\n]}\n")
        written[split] = paths
    return written
