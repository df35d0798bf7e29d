"""benchmarks/side_by_side.py --against REF: syntaxnmt at another git revision as one more toolkit
(the pieces that need no training: the option, the naming, the worktree, the ratios, the outputs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

from syntaxnmt.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "side_by_side.py"


@pytest.fixture(scope="module")
def sbs():
    return load_script(SCRIPT)


def run(toolkit: str, value: float, date: str, repeat: int = 1) -> dict:
    figures = dict.fromkeys(("train_tok_s", "decode_sent_s", "decode_sent_s_wall", "train_peak_mb", "decode_peak_mb"), value)
    return {"toolkit": toolkit, "repeat": repeat, "tokens_per_update": 3500, "params": 7, "date": date, **figures}


# ------------------------------------------------------------------------------------------------
# the option


def side_by_side(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_against_needs_this_checkouts_syntaxnmt(tmp_path):
    r = side_by_side("--toolkits", "onmt", "--against", "HEAD", "--work", str(tmp_path / "work"), cwd=tmp_path)
    assert r.returncode == 2
    assert "--against compares with this checkout's syntaxnmt: add syntaxnmt to --toolkits" in r.stderr
    assert not (tmp_path / "work").exists()  # refused before anything was made


def test_an_unknown_revision_is_one_line_before_any_work(tmp_path):
    work = tmp_path / "work"
    r = side_by_side("--toolkits", "syntaxnmt", "--against", "no-such-revision-48", "--work", str(work), "--tiny", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == f"syntaxnmt: error: --against no-such-revision-48: not a commit of the repository {ROOT}"
    assert "Traceback" not in r.stderr
    assert not (work / "data").exists() and not (work / "revisions").exists()  # no data prepared, no worktree


# ------------------------------------------------------------------------------------------------
# the worktree of a revision

EXTENSION = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&def);
    if (m) PyModule_AddIntConstant(m, "VERSION", %d);
    return m;
}
"""

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "pkg"
version = "0.1"

[tool.setuptools]
packages = ["pkg"]

[[tool.setuptools.ext-modules]]
name = "pkg._native"
sources = ["pkg/_native.c"]
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, version: int) -> str:
    (repo / "pkg" / "_native.c").write_text(EXTENSION % version)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"version {version}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository like this one in miniature: a pyproject declaring a C extension, two commits."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / ".gitignore").write_text("build/\n*.so\n*.egg-info/\n")
    git(repo, "init", "-q")
    commit(repo, 1)
    git(repo, "tag", "v1")
    commit(repo, 2)
    return repo


def version_at(tree: Path) -> int:
    out = subprocess.run([sys.executable, "-c", "import pkg._native as n; print(n.VERSION)"], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=True).stdout
    return int(out)


def test_a_revision_is_checked_out_once_in_the_work_folder_with_its_extension_built(sbs, repo, tmp_path):
    work = tmp_path / "work"
    sha = git(repo, "rev-parse", "v1")
    got, tree, native = sbs.materialise_revision("v1", work, repo)
    assert got == sha and tree == (work / "revisions" / sha).resolve()
    assert git(tree, "rev-parse", "HEAD") == sha and git(tree, "status", "--porcelain", "--untracked-files=no") == ""
    assert len(native) == 1 and Path(native[0]).parent == tree / "pkg"  # built in place, imported from there
    assert version_at(tree) == 1  # the revision's extension, not the checkout's (version 2)
    assert sbs.revision_name(sha) == f"syntaxnmt@{sha[:7]}"
    # the user's checkout is as it was: its commit, no change, nothing built in it
    assert git(repo, "rev-parse", "HEAD") != sha and git(repo, "status", "--porcelain", "--ignored") == ""

    # again: the same folder, not rebuilt
    built = Path(native[0]).stat().st_mtime_ns
    assert sbs.materialise_revision(sha[:10], work, repo)[1] == tree
    assert Path(native[0]).stat().st_mtime_ns == built


def test_a_folder_that_is_not_a_clean_checkout_of_the_revision_is_left_alone(sbs, repo, tmp_path):
    work = tmp_path / "work"
    sha = git(repo, "rev-parse", "v1")
    squatter = work / "revisions" / sha
    squatter.mkdir(parents=True)
    (squatter / "mine.txt").write_text("the user's")
    with pytest.raises(UserError, match=f"exists but is not a git checkout of {sha[:12]}; move it away"):
        sbs.materialise_revision("v1", work, repo)
    assert (squatter / "mine.txt").read_text() == "the user's"

    other = tmp_path / "other"
    _, tree, _ = sbs.materialise_revision("v1", other, repo)
    (tree / "pkg" / "__init__.py").write_text("# edited\n")
    with pytest.raises(UserError, match=r"has local changes \(pkg/__init__.py\); revert them or move the folder away"):
        sbs.materialise_revision("v1", other, repo)
    assert (tree / "pkg" / "__init__.py").read_text() == "# edited\n"


def test_an_extension_that_does_not_build_is_one_line_naming_its_log(sbs, repo, tmp_path):
    (repo / "pkg" / "_native.c").write_text("this is not C\n")
    git(repo, "commit", "-q", "-am", "broken")
    with pytest.raises(UserError) as e:
        sbs.materialise_revision("HEAD", tmp_path / "work", repo)
    sha = git(repo, "rev-parse", "HEAD")
    log = (tmp_path / "work" / "revisions").resolve() / f"{sha}.build.log"
    assert str(e.value) == f"--against HEAD: building its native extension (pkg._native) failed with exit code 1 (log {log})"
    assert "this is not C" in log.read_text()  # the compiler's message


def test_this_repository_names_its_native_extension_in_the_pyproject(sbs):
    # what build_native reads; 4ddc2eb named syntaxnmt._native, issue 48 moved it to the cpu package
    assert sbs.native_modules(ROOT) == ["syntaxnmt.cpu._native"]


# ------------------------------------------------------------------------------------------------
# the table, the ratios, the round order


def test_the_revision_is_a_toolkit_of_the_table_with_paired_ratios(sbs):
    rev = "syntaxnmt@4ddc2eb"
    runs = [run("onmt", 1000, "d1"), run("syntaxnmt", 2000, "d1"), run(rev, 1600, "d1"),
            run("onmt", 1000, "d1", 2), run("syntaxnmt", 2200, "d1", 2), run(rev, 2000, "d1", 2)]
    medians, ratios, lines = sbs.summarize(runs, ["onmt", "syntaxnmt", rev])
    assert set(ratios) == {"onmt"}  # the peers' ratios stay the peers'
    assert medians[rev]["train_tok_s"] == 1800
    a = sbs.against_ratios(runs, rev)
    assert a["paired"] and a["ratios"]["train_tok_s"] == pytest.approx(2100 / 1800)
    assert [r["train_tok_s"] for r in a["per_round"]] == [pytest.approx(2000 / 1600), pytest.approx(2200 / 2000)]
    assert any(line.startswith("syntaxnmt@4ddc2eb ") and line.split()[1] == "1800" for line in lines)
    assert any(line.startswith("syntaxnmt/syntaxnmt@4ddc2eb ") and line.split()[1] == "x1.17" for line in lines)
    summary = next(line for line in lines if line.startswith("SUMMARY syntaxnmt/syntaxnmt@4ddc2eb"))
    assert "train x1.167, decode x1.167" in summary and summary.endswith("per round: train x1.250, x1.100, decode x1.250, x1.100")


def test_figures_of_different_runs_are_not_paired(sbs):
    # a later run of syntaxnmt alone keeps the revision's figures in the results file: no ratio then
    rev = "syntaxnmt@4ddc2eb"
    runs = [run("syntaxnmt", 2000, "d2"), run(rev, 1600, "d1")]
    assert sbs.against_ratios(runs, rev) == {"paired": False, "dates": {"syntaxnmt": ["d2"], rev: ["d1"]}}
    lines = sbs.summarize(runs, ["syntaxnmt", rev])[2]
    assert "syntaxnmt/syntaxnmt@4ddc2eb: not paired (measured in different runs: {'syntaxnmt': ['d2'], 'syntaxnmt@4ddc2eb': ['d1']}), no ratio" in lines
    assert not any(line.startswith("syntaxnmt/syntaxnmt@4ddc2eb ") for line in lines)
    assert sbs.against_ratios([run("syntaxnmt", 2000, "d2")], rev) is None


def test_syntaxnmt_and_its_revision_swap_places_in_even_rounds(sbs):
    measured = ["onmt", "syntaxnmt", "syntaxnmt@4ddc2eb"]
    assert sbs.round_order(measured, 1) == measured
    assert sbs.round_order(measured, 2) == ["onmt", "syntaxnmt@4ddc2eb", "syntaxnmt"]
    assert sbs.round_order(["onmt", "syntaxnmt"], 2) == ["onmt", "syntaxnmt"]


def test_the_revisions_kernels_have_their_line(sbs):
    rev = "syntaxnmt@4ddc2eb"
    runs = [run("syntaxnmt", 2000, "d1") | {"cpu_kernels": {"train": "openblas, row packing", "decode": "aten"}},
            run(rev, 1600, "d1") | {"cpu_kernels": {"train": "onednn, row packing", "decode": "aten"}}]
    lines = sbs.summarize(runs, ["syntaxnmt", rev])[2]
    assert lines[-2:] == ["syntaxnmt's CPU kernels (the calibration's choice): train openblas, row packing in 1 round; decode aten in 1 round",
                          "syntaxnmt@4ddc2eb's CPU kernels (the calibration's choice): train onednn, row packing in 1 round; decode aten in 1 round"]


# ------------------------------------------------------------------------------------------------
# the outputs compared


def outputs(losses: list[float], hyps: list[list[int]], tokens: list[int] | None = None) -> dict:
    return {"train": {"losses": losses, "tokens": tokens or [10] * len(losses), "torch_threads": 2},
            "decode": {"hypotheses": hyps, "torch_threads": 2}}


def test_identical_outputs(sbs):
    a = outputs([9.5, 9.25, 9.0], [[5, 6], [7, 8]])
    c = sbs.compare_outputs(a, json.loads(json.dumps(a)))  # as read back from the processes' files
    assert c["losses_identical"] and c["hypotheses_identical"] and c["sentences_identical"] == 2 and c["max_rel_loss_diff"] == 0
    assert sbs.outputs_line("syntaxnmt@4ddc2eb", c) == ("OUTPUTS syntaxnmt against syntaxnmt@4ddc2eb (untimed, CPU kernels aten on both): "
                                                         "the losses of its 3 training updates are identical bit for bit; 2 of 2 decoded sentences identical")


def test_differing_outputs_say_where_and_by_how_much(sbs):
    c = sbs.compare_outputs(outputs([9.5, 9.25, 9.0 * (1 + 2e-7)], [[5, 6], [7, 9], [1, 2]]), outputs([9.5, 9.25, 9.0], [[5, 6], [7, 8], [1, 2]]))
    assert not c["losses_identical"] and c["updates_differing"] == 1 and c["first_differing_update"] == 3
    assert c["max_rel_loss_diff"] == pytest.approx(2e-7, rel=1e-3)
    assert c["sentences_identical"] == 2 and c["first_differing_sentence"] == 2 and not c["hypotheses_identical"]
    line = sbs.outputs_line("syntaxnmt@4ddc2eb", c)
    assert line.endswith("the losses of 1 of 3 training updates differ, from update 3 (at most 2.00e-07 relative); 2 of 3 decoded sentences identical (first difference: sentence 2)")
    fewer = sbs.compare_outputs(outputs([9.5], [[5, 6]]), outputs([9.5, 9.25], [[5, 6]]))
    assert not fewer["losses_identical"] and "the training updates differ in number (1 against 2)" in sbs.outputs_line("r", fewer)
