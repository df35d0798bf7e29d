"""Random-structure controls (``data.structure_control``): parses with the linguistic content taken out.

A control arm trains the same model as its syntax variant, with the same parameters and cost, on
parses whose structure is random, so that a gain of the variant over the baseline can be told
apart from a gain of extra parameters and noise acting as a regulariser (the control of Li et al.
2020, "Does Multi-Encoder Help?", for document context). The control applies where parses enter
the data path: to the training and dev parses when ``syntaxnmt prepare`` stores them, and to the
parses of every sentence a model reads at test time (:func:`syntaxnmt.decoding.sources.parse_annotations`).

* ``random-tree``: each sentence's tree is replaced by a random projective dependency tree over
  the same words (:func:`random_projective_heads`); its dependency labels are dealt out to the new
  arcs at random (the root word takes the real root's label), POS tags stay.
* ``shuffled-labels``: the tree and the POS tags stay; the dependency labels go through a random
  bijection of the label inventory, drawn per sentence.
* ``shuffled-tags``: the tree and the labels stay; UPOS and XPOS go through random bijections of
  their inventories, drawn per sentence.

The randomness of a sentence comes from a SHA-256 hash of its words and a constant (not the run's
seed): a sentence gets the same random tree and bijections in every run, in training and at test
time, and two different sentences independent ones. The bijections are drawn per sentence on
purpose: one bijection for the whole corpus would only rename the tags, which a learned embedding
or classifier undoes, so the arm would be its variant again; per sentence, a tag keeps only which
words of the sentence share it. The inventories are those of the prepared corpus's tag
vocabulary (``tags.json``, stored in checkpoints), so training and test time permute the same sets.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Sequence

import numpy as np

from syntaxnmt.data.annotations import Parse
from syntaxnmt.data.features import TAG_SPECIALS, TagVocab

CONTROLS = ("none", "random-tree", "shuffled-labels", "shuffled-tags")
_KEY = b"syntaxnmt structure control 1"  # changing it changes every control arm's parses


def sentence_rng(words: Sequence[str], purpose: str) -> np.random.Generator:
    """A generator seeded by a SHA-256 hash of the sentence's words and ``purpose`` (one stream per use)."""
    digest = hashlib.sha256(_KEY + b"\x00" + purpose.encode() + b"\x00" + "\x1f".join(words).encode("utf-8")).digest()
    return np.random.default_rng(np.frombuffer(digest, dtype=np.uint32))


def random_projective_heads(n: int, rng: np.random.Generator) -> list[int]:
    """Heads (1-based, 0 = root) of a random projective tree over ``n`` words, with one root.

    Top-down over spans of words that all descend from one head: the span is cut into runs of
    words (between two neighbours with probability 1/2; under the root, one run), each run a
    subtree whose root is drawn uniformly from it and depends on the span's head; the words left
    and right of that root are the two spans hanging from it. Every projective tree with one root
    has a positive probability (a test enumerates the small ones), and no arc crosses another.
    """
    if n < 1:
        raise ValueError(f"a tree needs at least one word, got {n}")
    heads = [0] * n
    spans = [(0, n - 1, 0)]  # (first word, last word, head: 1-based, 0 = ROOT); every word of the span descends from the head
    while spans:
        lo, hi, head = spans.pop()
        cuts = [k for k in range(lo + 1, hi + 1) if head and rng.random() < 0.5]  # a run starts at each cut
        for a, b in zip([lo, *cuts], [k - 1 for k in cuts] + [hi]):
            r = int(rng.integers(a, b + 1))
            heads[r] = head
            spans += [(x, y, r + 1) for x, y in ((a, r - 1), (r + 1, b)) if x <= y]
    return heads


def inventory_bijection(inventory: Sequence[str], rng: np.random.Generator) -> dict[str, str]:
    """A random bijection of ``inventory`` onto itself."""
    perm = rng.permutation(len(inventory))
    return {tag: inventory[int(p)] for tag, p in zip(inventory, perm)}


def tag_inventories(tags: TagVocab) -> dict[str, list[str]]:
    """The tags of each set of a tag vocabulary, its special symbols left out."""
    return {name: list(itos[len(TAG_SPECIALS) :]) for name, itos in tags.itos.items()}


def apply_control(parse: Parse, control: str, inventories: dict[str, Sequence[str]]) -> Parse:
    """``parse`` as the control ``control`` shows it (a new :class:`Parse`; ``none``: the parse itself).

    ``inventories``: the tag sets the bijections permute (:func:`tag_inventories`); a tag outside
    them (unseen in training) is kept, and becomes the unknown tag as usual.
    """
    if control == "none":
        return parse
    words = parse.words
    if control == "random-tree":
        rng = sentence_rng(words, "random-tree")
        heads = random_projective_heads(len(words), rng)
        root = parse.heads.index(0)
        others = [label for i, label in enumerate(parse.deprel) if i != root]
        dealt = iter(others[int(k)] for k in rng.permutation(len(others)))
        deprel = [parse.deprel[root] if h == 0 else next(dealt) for h in heads]
        return dataclasses.replace(parse, heads=heads, deprel=deprel)
    if control == "shuffled-labels":
        bijection = inventory_bijection(inventories["deprel"], sentence_rng(words, "deprel"))
        return dataclasses.replace(parse, deprel=[bijection.get(t, t) for t in parse.deprel])
    if control == "shuffled-tags":
        upos = inventory_bijection(inventories["upos"], sentence_rng(words, "upos"))
        xpos = inventory_bijection(inventories["xpos"], sentence_rng(words, "xpos"))
        return dataclasses.replace(parse, upos=[upos.get(t, t) for t in parse.upos], xpos=[xpos.get(t, t) for t in parse.xpos])
    raise ValueError(f"unknown structure control {control!r}: expected one of {', '.join(CONTROLS)}")


def apply_controls(parses: Sequence[Parse | None], control: str, tags: TagVocab) -> list[Parse | None]:
    """:func:`apply_control` on every parse (``None``, a skipped bad tree, stays ``None``), with the
    inventories of ``tags``, the corpus's tag vocabulary."""
    if control == "none":
        return list(parses)
    inventories = tag_inventories(tags)
    return [apply_control(p, control, inventories) if p is not None else None for p in parses]
