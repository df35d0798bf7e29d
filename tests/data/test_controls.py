"""Random-structure controls (``data.structure_control``, syntaxnmt.data.controls): random trees are
valid and projective and reach every small projective tree, the tag bijections are bijections,
everything is a function of the sentence alone (the same in another process), and a control arm's
parses reach the model the way real parses do -- in the prepared corpus and at test time."""

from __future__ import annotations

import collections
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import deep_merge, parsed_data, tiny_tree, untrained_checkpoint

from syntaxnmt.config import load_config
from syntaxnmt.data.annotations import Parse, read_conllu, tree_problem, write_conllu
from syntaxnmt.data.batches import Split, collate
from syntaxnmt.data.controls import CONTROLS, apply_control, apply_controls, inventory_bijection, random_projective_heads, tag_inventories
from syntaxnmt.data.features import TagVocab, parent_positions
from syntaxnmt.data.prepare import load_tag_vocab, prepare
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.sources import encode_source_lines
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import TAG_NAMES
from syntaxnmt.textio import read_lines


def _projective(heads: list[int]) -> bool:
    """Every word between a head and its dependent descends from the head (ROOT = 0 heads every word)."""

    def descends(k: int, a: int) -> bool:
        while k:
            k = heads[k - 1]
            if k == a:
                return True
        return False

    return all(descends(k, h) for d, h in enumerate(heads, start=1) for k in range(min(h, d) + 1, max(h, d)))


def test_projectivity_checker():
    assert _projective([2, 0, 2]) and _projective([0, 1, 2, 3])
    assert not _projective([3, 4, 0, 3])  # 1 -> 3 spans 2, whose head is 4: arcs cross


def test_random_trees_are_single_rooted_projective_and_reach_every_small_tree():
    rng = np.random.default_rng(0)
    for n in list(range(1, 12)) + [40, 120]:
        for _ in range(50):
            heads = random_projective_heads(n, rng)
            assert tree_problem(heads) is None and heads.count(0) == 1 and _projective(heads)
    # Every single-rooted projective tree of up to 4 words comes out (enumerated by brute force).
    for n in range(1, 5):
        every = {t for t in itertools.product(range(n + 1), repeat=n) if tree_problem(t) is None and t.count(0) == 1 and _projective(list(t))}
        seen = collections.Counter(tuple(random_projective_heads(n, rng)) for _ in range(5000))
        assert set(seen) == every, n
    assert len(every) == 30  # the number of projective trees with one root over 4 words
    with pytest.raises(ValueError):
        random_projective_heads(0, rng)


def _parses(corpus, n: int = 60) -> list[Parse]:
    return read_conllu(corpus["train"]["conllu"])[:n]


def _inventories(parses: list[Parse]) -> dict[str, list[str]]:
    return {name: sorted({t for p in parses for t in getattr(p, name)}) for name in TAG_NAMES}


def test_inventory_bijection_is_a_bijection():
    inventory = ["amod", "case", "det", "nsubj", "obj", "punct", "root"]
    for seed in range(20):
        mapping = inventory_bijection(inventory, np.random.default_rng(seed))
        assert sorted(mapping) == inventory and sorted(mapping.values()) == inventory
    assert len({tuple(inventory_bijection(inventory, np.random.default_rng(s)).values()) for s in range(20)}) > 10


def test_random_tree_control_keeps_words_tags_and_the_label_multiset(corpus):
    parses = _parses(corpus)
    inventories = _inventories(parses)
    changed = 0
    for p in parses:
        c = apply_control(p, "random-tree", inventories)
        assert (c.words, c.upos, c.xpos, c.text) == (p.words, p.upos, p.xpos, p.text)
        assert tree_problem(c.heads) is None and c.heads.count(0) == 1 and _projective(c.heads)
        assert sorted(c.deprel) == sorted(p.deprel)  # the sentence's labels, dealt out again
        assert c.deprel[c.heads.index(0)] == p.deprel[p.heads.index(0)]  # the root keeps the root's label
        changed += c.heads != p.heads
    assert changed > len(parses) // 2
    assert apply_control(parses[0], "none", inventories) is parses[0]


@pytest.mark.parametrize("control,names", [("shuffled-labels", ["deprel"]), ("shuffled-tags", ["upos", "xpos"])])
def test_shuffled_controls_permute_an_inventory_per_sentence(corpus, control, names):
    parses = _parses(corpus)
    inventories = _inventories(parses)
    mappings = []
    for p in parses:
        c = apply_control(p, control, inventories)
        assert c.words == p.words and c.heads == p.heads  # the tree stays
        for name in TAG_NAMES:
            old, new = getattr(p, name), getattr(c, name)
            if name not in names:
                assert new == old
                continue
            # A consistent bijection: equal tags stay equal, different tags stay different.
            mapping = dict(zip(old, new))
            assert all(mapping[o] == n for o, n in zip(old, new))
            assert len(set(mapping.values())) == len(mapping) and set(new) <= set(inventories[name])
            if name == names[0]:
                mappings.append(tuple(sorted(mapping.items())))
    # Drawn per sentence: sentences with the same tags get different bijections.
    assert len(set(mappings)) > len(parses) // 2
    # A tag outside the inventory (unseen in training) is kept.
    odd = Parse(["a", "b"], ["NEW", "NOUN"], ["NEW", "NN"], [0, 1], ["root", "unseen"])
    c = apply_control(odd, control, inventories)
    assert "NEW" in c.upos + c.xpos or "unseen" in c.deprel


def test_controls_are_functions_of_the_sentence(corpus):
    """The same parse in every call and in another process (another PYTHONHASHSEED); another
    sentence with the same tree gets another random tree."""
    parses = _parses(corpus, 20)
    inventories = _inventories(parses)
    here = {control: [apply_control(p, control, inventories) for p in parses] for control in CONTROLS[1:]}
    again = {control: apply_controls(parses, control, _vocab(parses)) for control in CONTROLS[1:]}
    assert here == again
    script = (
        "import json, sys\n"
        "from syntaxnmt.data.annotations import read_conllu\n"
        "from syntaxnmt.data.controls import apply_control\n"
        "parses = read_conllu(sys.argv[1])[:20]\n"
        "inv = json.loads(sys.argv[2])\n"
        "print(json.dumps({c: [[p.heads, p.deprel, p.upos, p.xpos] for p in (apply_control(q, c, inv) for q in parses)] for c in sys.argv[3:]}))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", script, str(corpus["train"]["conllu"]), json.dumps(inventories), *CONTROLS[1:]], capture_output=True, text=True, env=env, timeout=120, check=True)
    other = json.loads(out.stdout)
    for control in CONTROLS[1:]:
        assert other[control] == [[p.heads, p.deprel, p.upos, p.xpos] for p in here[control]]
    # Only the words seed the randomness: the same tree and tags over other words give other trees.
    twins = [Parse([w + "x" for w in p.words], p.upos, p.xpos, p.heads, p.deprel) for p in parses]
    other_trees = sum(apply_control(t, "random-tree", inventories).heads != c.heads for t, c in zip(twins, here["random-tree"]))
    assert other_trees > len(parses) // 2


def _vocab(parses: list[Parse]) -> TagVocab:
    return TagVocab.from_parses(parses)


def test_a_control_needs_parses(corpus, tmp_path):
    with pytest.raises(UserError, match="data.structure_control random-tree changes parses: set data.annotate"):
        load_config(None, deep_merge(tiny_tree(corpus, tmp_path / "w"), {"data": {"structure_control": "random-tree"}}))
    with pytest.raises(UserError, match="structure_control"):
        load_config(None, deep_merge(tiny_tree(corpus, tmp_path / "w"), {"data": {**parsed_data(corpus), "structure_control": "random"}}))


@pytest.mark.parametrize("control", ["random-tree", "shuffled-tags"])
def test_a_control_reaches_the_model_through_the_path_of_real_parses(corpus, parsed_prepared_dir, tmp_path, control):
    """The control arm's prepared corpus (``<prepared_dir>-<control>``) holds the same subwords and
    tag vocabulary as the real one and the controlled parses; the batches of training carry them;
    a model of the arm reads the same controlled parse of a sentence at test time."""
    tree = deep_merge(tiny_tree(corpus, tmp_path / "w", parsed_prepared_dir), {"data": parsed_data(corpus), "model": {"syntax": {"relations": [["tree_distance"] * 4], "parent_scaled": [[True, False, False, False]], "input_features": ["upos", "deprel"]}}})
    real_cfg = load_config(None, tree)
    cfg = load_config(None, deep_merge(tree, {"work_dir": str(tmp_path / "control"), "data": {"structure_control": control}}))
    assert cfg.prepared_dir == Path(f"{parsed_prepared_dir}-{control}") and real_cfg.prepared_dir == parsed_prepared_dir
    logs: list[str] = []
    prepare(cfg, log=logs.append)
    assert any(f"structure control {control}" in m for m in logs)
    real, ctl = Split.load(real_cfg.prepared_dir, "train"), Split.load(cfg.prepared_dir, "train")
    # The same corpus: subwords, words of each piece, targets, tag vocabulary (so the same parameters).
    for field in ("src", "src_word", "tgt"):
        assert all(np.array_equal(real[field][i], ctl[field][i]) for i in range(len(real)))
    assert (parsed_prepared_dir / "tags.json").read_text() == (cfg.prepared_dir / "tags.json").read_text()
    # The stored parses are the controlled ones of the real parses.
    tags = load_tag_vocab(cfg)
    parses = read_conllu(corpus["train"]["conllu"])
    lines = [int(x) for x in read_lines(cfg.prepared_dir / "train.lines")]
    differs = 0
    for i, line in enumerate(lines):
        expected = apply_control(parses[line - 1], control, tag_inventories(tags))
        assert list(ctl["heads"][i]) == expected.heads
        for name in TAG_NAMES:
            assert list(ctl[name][i]) == list(tags.encode(name, getattr(expected, name)))
        differs += list(ctl["heads"][i]) != list(real["heads"][i]) or list(ctl["upos"][i]) != list(real["upos"][i])
    assert differs > len(lines) // 2
    # Training batches carry the controlled tree (parent positions) and tags.
    model, _, _ = load_model(untrained_checkpoint(cfg, tmp_path / "ctl.pt"), torch.device("cpu"))
    spec = model.feature_spec
    batch = collate(ctl, [0, 1], spec)
    assert np.array_equal(batch.features.parent[0, : len(ctl["src_word"][0])].numpy(), parent_positions(ctl["heads"][0], ctl["src_word"][0]))
    assert np.array_equal(batch.features.upos[0, : len(ctl["src_word"][0])].numpy(), ctl["upos"][0][ctl["src_word"][0]])
    # Test time: the arm's model reads the same controlled parse of a training sentence; a model
    # of the real corpus reads the real one.
    src_lines = read_lines(corpus["train"]["src"])
    some = lines[:5]
    conllu = tmp_path / "some.conllu"
    write_conllu(conllu, [parses[k - 1] for k in some])
    for model_cfg, split, path in ((cfg, ctl, tmp_path / "ctl.pt"), (real_cfg, real, untrained_checkpoint(real_cfg, tmp_path / "real.pt"))):
        model, stored_cfg, toks = load_model(path, torch.device("cpu"))
        assert stored_cfg.data.structure_control == model_cfg.data.structure_control
        ids, anns = encode_source_lines(stored_cfg, toks, [src_lines[k - 1] for k in some], model.feature_spec, str(conllu))
        for j in range(len(some)):
            assert np.array_equal(ids[j], split["src"][j])
            assert list(anns[j].heads) == list(split["heads"][j])
            for name in ("upos", "deprel"):
                assert list(anns[j].tags[name]) == list(split[name][j])

