"""benchmarks/audit_bad_inputs.py: its case table covers every command, its judge fails what it
must, and a subset of its cases passes when run in-process through ``syntaxnmt.cli.main``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import load_script

from syntaxnmt.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]

SUBSET = [
    "config-yaml-bomb", "config-duplicate-key", "lr-inf", "translate-crafted-pickle", "translate-bare-state-dict",
    "translate-nan-weights", "export-force-cwd", "aer-empty-files", "experiment-n-seeds-zero", "plot-truncated-npz",
    "average-other-architecture", "align-batch-size-zero",
]


@pytest.fixture(scope="module")
def audit():
    try:
        yield load_script(ROOT / "benchmarks" / "audit_bad_inputs.py", register=True)  # its dataclasses look their module up
    finally:
        sys.modules.pop("audit_bad_inputs", None)


@pytest.fixture(scope="module")
def env(audit, tmp_path_factory):
    return audit.make_env(tmp_path_factory.mktemp("audit"), log=lambda *_: None)


def test_the_table_covers_every_command_with_at_least_110_cases(audit, env):
    table = audit.cases(env)
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    assert commands <= {c.command for c in table}, commands - {c.command for c in table}
    assert len(table) >= 110 and len([c for c in table if not c.extended]) >= 110
    assert len(audit.http_cases()) >= 20


def test_the_judge_fails_a_traceback_a_second_line_a_wrong_status_and_a_missing_fragment(audit):
    case = audit.Case("x", "translate", [], fragments=("in.txt",))
    assert audit.judge(case, 2, "", "syntaxnmt: error: in.txt: file not found\n", []) == []
    assert audit.judge(case, 2, "", "\rtranslate: 50%\r\rsyntaxnmt: error: in.txt: bad\n", []) == []  # an erased progress bar
    assert audit.judge(case, 1, "", "Traceback (most recent call last):\nValueError\n", [])
    assert audit.judge(case, 2, "", "syntaxnmt: error: in.txt\nmore\n", [])
    assert audit.judge(case, 0, "", "", [])
    assert audit.judge(case, 2, "", "syntaxnmt: error: out.txt: bad\n", [])
    assert audit.judge(case, None, "", "", [])  # no exit in time
    assert audit.judge(case, 2, "", "syntaxnmt: error: in.txt\n", ["the marker file appeared"])


def test_tree_state_sees_a_deleted_changed_or_replaced_file(audit, tmp_path):
    (tmp_path / "a").write_text("x")
    (tmp_path / "d").mkdir()
    before = audit.tree_state(tmp_path)
    assert audit.tree_diff(before, audit.tree_state(tmp_path)) is None
    (tmp_path / "a").write_text("y")
    assert "changed" in audit.tree_diff(before, audit.tree_state(tmp_path))
    (tmp_path / "d").rmdir()
    assert "deleted" in audit.tree_diff(before, audit.tree_state(tmp_path))


@pytest.mark.parametrize("name", SUBSET)
def test_a_subset_of_the_cases_passes_in_process(audit, env, name):
    case = next(c for c in audit.cases(env) if c.name == name)
    record = audit.run_case_in_process(case, env)
    assert record["passed"], (record["reasons"], record["stderr"][-2000:])
    assert not env.marker.exists()


ISSUE_51 = [
    "unknown-option-with-value", "sweep-unknown-option", "evaluate-threads", "score-threads-negative", "score-contrapro-without-context",
    "config-data-path-beside-config", "rnn-dot-sizes", "context-two-to-two-separate-vocab",
]


@pytest.mark.parametrize("name", ISSUE_51)
def test_the_bad_inputs_of_issue_51_pass_in_process(audit, env, name):
    case = next(c for c in audit.cases(env) if c.name == name)
    record = audit.run_case_in_process(case, env)
    assert record["passed"], (record["reasons"], record["stderr"][-2000:])


HYGIENE = ["bom-evaluate", "translate-line-over-limit", "evaluate-dev-zero", "translate-damaged-tokenizer", "translate-int64-weights", "translate-zip-bomb", "translate-stride-zero-weight"]
"""Issue 49 item 5 (input hygiene): the cases that run in-process."""


@pytest.mark.parametrize("name", HYGIENE)
def test_the_input_hygiene_cases_pass_in_process(audit, env, name):
    case = next(c for c in audit.cases(env) if c.name == name)
    record = audit.run_case_in_process(case, env)
    assert record["passed"], (record["reasons"], record["stderr"][-2000:])


def test_tree_state_sees_a_changed_mode(audit, tmp_path):
    """A protected file is unchanged in its permissions too (a write-protected output made writable fails the case)."""
    (tmp_path / "ro.txt").write_text("x")
    (tmp_path / "ro.txt").chmod(0o444)
    before = audit.tree_state(tmp_path)
    (tmp_path / "ro.txt").chmod(0o644)
    assert "changed: ro.txt" in audit.tree_diff(before, audit.tree_state(tmp_path))
