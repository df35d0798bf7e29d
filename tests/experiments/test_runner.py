"""Worker processes of ``syntaxnmt experiment --jobs N`` (``syntaxnmt.experiments.runner``).

The end-to-end comparison with sequential runs and a failing run are in test_experiments.py;
here: thread counts, the corpus preparation guard, log reading, the failure report, and a worker
stopped by the parent (it saves ``last.pt`` and is not marked finished).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tqdm import tqdm

from syntaxnmt.errors import UserError
from syntaxnmt.experiments.runner import RunsFailed, _failure_report, _start, _stop_all, log_position, log_tail, prepare_corpora, worker_threads
from syntaxnmt.experiments.sets import ExperimentSet, Run


def test_worker_threads_split_the_cores_unless_the_config_sets_them(make_config):
    cfg = make_config({"train": {"threads": 0}})
    assert worker_threads(cfg, jobs=2, cores=16) == 8
    assert worker_threads(cfg, jobs=9, cores=16) == 1
    assert worker_threads(cfg, jobs=4, cores=2) == 1
    assert worker_threads(make_config({"train": {"threads": 3}}), jobs=9, cores=16) == 3


def test_prepare_corpora_refuses_one_folder_for_two_data_configs(make_config, tmp_path):
    logs: list[str] = []
    same = [Run("a", 1, make_config()), Run("b", 1, make_config())]
    prepare_corpora(same, logs.append)  # the shared corpus is prepared already: reused
    assert logs and all("up to date" in m for m in logs) and len(logs) == 1
    other = make_config({"data": {"vocab_size": 150}})
    with pytest.raises(UserError, match=r"a seed 1 and c seed 2 share data.prepared_dir .* with different data configs"):
        prepare_corpora([same[0], Run("c", 2, other)], logs.append)


def test_log_position_and_tail(tmp_path):
    log = tmp_path / "train.log"
    assert log_position(log) == "" and log_tail(log) == "(no log)"
    log.write_text(
        "header\n\rtrain:   0%|          | 0/800 [00:00<?, ?upd/s]\rtrain:  22%|##2       | 180/800 [01:00<03:20, 3.0upd/s, loss=5.1]\n"
        "update 200 | dev BLEU 3.00\n\rtranslate:  50%|#####     | 500/1000 [00:10<00:10]\r\n",
        encoding="utf-8",
    )
    assert log_position(log) == "translate 500/1000"
    tail = log_tail(log, n=3)
    assert tail.splitlines() == ["train:  22%|##2       | 180/800 [01:00<03:20, 3.0upd/s, loss=5.1]", "update 200 | dev BLEU 3.00", "translate:  50%|#####     | 500/1000 [00:10<00:10]"]


def test_failure_report_exit_codes(make_config):
    run_a, run_b = Run("a", 1, make_config()), Run("b", 2, make_config())
    report = _failure_report([(run_a, 2)], total=4)
    assert isinstance(report, RunsFailed) and report.exit_code == 2
    assert str(report) == f"1 of 4 runs failed: a seed 1 (exit status 2; log {run_a.log_path})"
    report = _failure_report([(run_a, 2), (run_b, -9)], total=4)
    assert report.exit_code == 1 and "b seed 2 (killed by signal 9;" in str(report)
    assert _failure_report([(run_b, 1)], total=1).exit_code == 1


def test_stopped_worker_saves_last_checkpoint_and_is_not_finished(make_config, corpus):
    """SIGTERM from the parent: the worker stops at an update boundary, saves ``last.pt``, exits 143
    (128 + SIGTERM) and writes no ``done.json``, so the next call resumes the run."""
    cfg = make_config({"train": {"max_steps": 100000, "valid_every": 100000, "threads": 1}})
    run = Run("long", 1, cfg)
    spec = ExperimentSet.model_validate({"name": "s", "baseline": "long", "configs": {"long": "x.yaml"}, "test_sets": {"t": {"src": str(corpus["test"]["src"]), "ref": str(corpus["test"]["tgt"])}}})
    active = _start(run, spec.model_dump(mode="json"), threads=1)
    deadline = time.monotonic() + 120
    while not log_position(run.log_path).startswith("train ") or log_position(run.log_path) == "train 0/100000":
        assert active.proc.poll() is None, log_tail(run.log_path)
        assert time.monotonic() < deadline, log_tail(run.log_path)
        time.sleep(0.2)
    with tqdm(disable=True) as bar:
        _stop_all([active], bar)
    work = Path(cfg.work_dir)
    assert active.proc.returncode == 143, log_tail(run.log_path)
    log = run.log_path.read_text(encoding="utf-8")
    assert "stopped (interrupted)" in log and "syntaxnmt: interrupted by SIGTERM" in log
    assert (work / "last.pt").is_file() and not (work / "done.json").exists()


def test_a_full_disk_at_a_workers_log_names_the_log(make_config, monkeypatch):
    """Issue 49: the log's first line on a full disk was an OSError naming no file."""
    import errno
    import io
    import os

    from syntaxnmt.experiments import runner

    class Full(io.BytesIO):
        def flush(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(runner, "open", lambda path, mode: Full(), raising=False)
    run = Run("full", 1, make_config())
    with pytest.raises(UserError, match=rf"^{run.log_path}: cannot write \(No space left on device\)$"):
        _start(run, {}, threads=1)
