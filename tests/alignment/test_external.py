"""Tests for the external aligner wrapper (syntaxnmt.alignment.external): eflomal on a tiny synthetic corpus."""

from __future__ import annotations

import builtins
import os
import subprocess

import pytest

from syntaxnmt.alignment.external import run_eflomal
from syntaxnmt.alignment.symmetrize import grow_diag_final_and, intersection, union
from syntaxnmt.data.links import aer
from syntaxnmt.data.synthetic import generate_pairs
from syntaxnmt.errors import UserError


def _require_eflomal():
    try:
        import eflomal  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("eflomal is not installed (it is a dependency: pip install eflomal)")
        pytest.skip("eflomal is not installed (pip install eflomal; needs a C compiler)")


@pytest.fixture(scope="module")
def tiny_corpus():
    pairs = generate_pairs(10, seed=11) * 5  # 50 sentence pairs, each repeated 5 times
    return pairs, [" ".join(p.src) for p in pairs], [" ".join(p.tgt) for p in pairs]


@pytest.fixture(scope="module")
def directions(tiny_corpus):
    _require_eflomal()
    _, src, tgt = tiny_corpus
    # One sampler and fewer iterations: the machine is small and shared.
    kw = dict(n_samplers=1, rel_iterations=0.3)
    return run_eflomal(src, tgt, symmetrize="forward", **kw), run_eflomal(src, tgt, symmetrize="reverse", **kw)


def test_eflomal_links_in_range(tiny_corpus):
    _require_eflomal()
    pairs, src, tgt = tiny_corpus
    links = run_eflomal(src, tgt, n_samplers=1, rel_iterations=0.3)
    assert len(links) == len(pairs)
    for pair, sent in zip(pairs, links):
        assert all(0 <= i < len(pair.src) and 0 <= j < len(pair.tgt) for i, j in sent)
    assert sum(map(len, links)) > 0
    gold = [set(p.alignment) for p in pairs]
    result = aer(gold, gold, links)
    assert result.aer < 0.6, f"eflomal on the synthetic corpus: {result}"


def test_eflomal_directions(tiny_corpus, directions):
    pairs, _, _ = tiny_corpus
    forward, reverse = directions
    for pair, f, r in zip(pairs, forward, reverse):
        assert len({j for _, j in f}) == len(f)  # forward: at most one source word per target word
        assert len({i for i, _ in r}) == len(r)  # reverse: at most one target word per source word
        g = grow_diag_final_and(f, r)
        assert intersection(f, r) <= g <= union(f, r)
        assert all(0 <= i < len(pair.src) and 0 <= j < len(pair.tgt) for i, j in f | r)


def test_eflomal_empty_sentence_and_seed_warning():
    _require_eflomal()
    src = ["a b c", "", "a c"] * 4
    tgt = ["x y z", "q", "x z"] * 4
    with pytest.warns(UserWarning, match="seed"):
        links = run_eflomal(src, tgt, seed=1, n_samplers=1, rel_iterations=0.1, symmetrize="intersection")
    assert len(links) == 12 and links[1] == set()
    assert run_eflomal([], []) == []


def test_eflomal_input_errors():
    with pytest.raises(UserError, match="2 source sentences but 1 target"):
        run_eflomal(["a", "b"], ["x"])
    with pytest.raises(UserError, match="unknown symmetrization"):
        run_eflomal(["a"], ["x"], symmetrize="grow")
    with pytest.raises(UserError, match="line break"):
        run_eflomal(["a\nb"], ["x"])


def test_eflomal_missing(monkeypatch):
    real_import = builtins.__import__

    def no_eflomal(name, *args, **kwargs):
        if name == "eflomal" or name.startswith("eflomal."):
            raise ImportError("No module named 'eflomal'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_eflomal)
    with pytest.raises(UserError, match="eflomal is not installed; install it with `pip install eflomal`"):
        run_eflomal(["a b"], ["x y"])


@pytest.mark.parametrize("returncode, reason", [(-9, "killed by SIGKILL"), (1, "exit status 1")])
def test_eflomal_failure_names_no_temporary_file(monkeypatch, returncode, reason):
    """eflomal's command line names the temporary files it was given, gone by the time the user
    reads the error (issue 25: "some errors name internal temp files")."""
    _require_eflomal()
    import eflomal

    def fail(self, *args, **kwargs):
        raise subprocess.CalledProcessError(returncode, ["eflomal", "-s", "/tmp/tmpk2j3h4", "-t", "/tmp/tmpq9w8e7", "-f", "/tmp/syntaxnmt-eflomal-x/forward.links"])

    monkeypatch.setattr(eflomal.Aligner, "align", fail)
    with pytest.raises(UserError) as info:
        run_eflomal(["a b", "c"], ["x y", "z"])
    assert str(info.value) == f"eflomal failed ({reason}) aligning 2 sentence pairs"
