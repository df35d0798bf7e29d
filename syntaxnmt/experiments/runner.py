"""``syntaxnmt experiment SET --jobs N``: the (config, seed) runs of a set in N worker processes.

The parent prepares every distinct prepared corpus once (so no two workers build the same one),
then keeps N workers busy, each a fresh ``python -m syntaxnmt.experiments.runner`` process that trains and
translates one run exactly as the sequential runner does (:func:`experiments.run_config`), its
output appended to ``<work_dir>/train.log``. On one GPU the N processes share the GPU; on CPU each
gets ``max(1, cores // N)`` torch threads unless its config sets ``train.threads``. The parent shows
a bar over the runs and each running run's position in its log. A failed run does not stop the
others: once they are done, :class:`RunsFailed` names each failed run with the end of its log.
The results table is then made in the parent from the finished runs, as after sequential runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Sequence

from tqdm.auto import tqdm

from syntaxnmt.config import Config, config_from_dict
from syntaxnmt.cpu.machine import cpu_cores
from syntaxnmt.data.prepare import prepare
from syntaxnmt.data.synthetic import write_corpus
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import ExperimentSet, Run, control_pairs, is_finished, load_set, make_table, run_config, select_labels, set_runs, write_section
from syntaxnmt.runtime import run_command

TAIL_LINES = 15
POLL_SECONDS = 1.0
_BAR = re.compile(r"(train|translate|spaCy[^:]*):\s+\d+%\|[^|\r\n]*\|\s*(\d+)/(\d+)")


class RunsFailed(UserError):
    """Some runs failed; ``exit_code`` is 2 if each failed on a user error, else 1 (a crash)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class _Active:
    run: Run
    proc: subprocess.Popen
    log: IO[bytes]
    start: float = field(default_factory=time.perf_counter)


def worker_threads(cfg: Config, jobs: int, cores: int | None = None) -> int:
    """torch threads of one of ``jobs`` workers: the config's ``train.threads``, else cores // jobs."""
    return cfg.train.threads or max(1, (cores or cpu_cores()) // jobs)


def prepare_corpora(runs: Sequence[Run], log: Callable[[str], None]) -> None:
    """Prepare each distinct corpus of ``runs`` once; two data configs for one folder are an error."""
    by_dir: dict[Path, Run] = {}
    for run in runs:
        folder = run.cfg.prepared_dir.resolve()
        first = by_dir.setdefault(folder, run)
        if first.cfg.data != run.cfg.data:
            raise UserError(
                f"{first.name} and {run.name} share data.prepared_dir {run.cfg.prepared_dir} with different data "
                "configs: parallel runs would rebuild it under each other (give them different prepared_dirs)"
            )
    for run in by_dir.values():
        prepare(run.cfg, log=log)


def log_position(path: Path) -> str:
    """The last progress bar position in a run's log, e.g. ``"train 180/800"`` (``""`` if none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    found = _BAR.findall(tail)
    return f"{found[-1][0].split()[0]} {found[-1][1]}/{found[-1][2]}" if found else ""


def log_tail(path: Path, n: int = TAIL_LINES) -> str:
    """The last ``n`` lines of a log (progress-bar redraws folded into their last state)."""
    try:
        text = path.read_bytes()[-65536:].decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    lines = [[seg for seg in line.split("\r") if seg.strip()][-1:] for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join([seg[0] for seg in lines if seg][-n:])


def _start(run: Run, spec_tree: dict, threads: int) -> _Active:
    """Start a worker for ``run``; its stdout and stderr are appended to the run's log."""
    run.log_path.parent.mkdir(parents=True, exist_ok=True)
    cfg = run.cfg.model_copy(deep=True)
    cfg.train.threads = threads
    log = open(run.log_path, "ab")
    try:
        log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {run.name}: worker with {threads} torch threads\n".encode())
        log.flush()
    except OSError as e:  # a full disk: name the log, not only the errno
        with contextlib.suppress(OSError):  # closing flushes the same bytes again
            log.close()
        raise UserError(f"{run.log_path}: cannot write ({e.strerror or e})") from None
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "syntaxnmt.experiments.runner"],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # Ctrl-C reaches the parent only; it stops the workers one signal each
    )
    job = {"label": run.label, "set": spec_tree, "config": cfg.model_dump(mode="json")}
    proc.stdin.write(json.dumps(job).encode())
    proc.stdin.close()
    return _Active(run, proc, log)


def _stop_all(active: list[_Active], bar: tqdm) -> None:
    """SIGTERM each worker (it saves ``last.pt`` at the next update), then wait for all of them."""
    bar.write(f"interrupted: stopping {len(active)} running run(s) (they save last.pt; Ctrl-C again to kill)")
    for a in active:
        a.proc.send_signal(signal.SIGTERM)
    try:
        for a in active:
            a.proc.wait()
    except KeyboardInterrupt:
        for a in active:
            a.proc.kill()
        raise
    finally:
        for a in active:
            a.log.close()


def _failure_report(failed: list[tuple[Run, int]], total: int) -> RunsFailed:
    parts = []
    for run, code in failed:
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        parts.append(f"{run.name} ({how}; log {run.log_path})")
    exit_code = 2 if all(code == 2 for _, code in failed) else 1
    return RunsFailed(f"{len(failed)} of {total} runs failed: {'; '.join(parts)}", exit_code)


def _on_sigterm(handler):
    """Install a SIGTERM handler (in the main thread only); returns the previous one."""
    try:
        return signal.signal(signal.SIGTERM, handler)
    except (ValueError, TypeError):  # not the main thread, or no previous Python handler to restore
        return handler


def run_in_workers(runs: Sequence[Run], spec_tree: dict, jobs: int, log: Callable[[str], None] = print, cores: int | None = None) -> None:
    """Train and translate ``runs`` in ``jobs`` worker processes; raises :class:`RunsFailed` at the end
    if any failed (after printing the end of each failed run's log)."""
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    prepare_corpora(runs, log)
    pending, active, failed = list(runs), [], []
    threads = {id(r): worker_threads(r.cfg, jobs, cores) for r in runs}
    bar = tqdm(total=len(runs), desc="runs", unit="run", dynamic_ncols=True)
    old_term = _on_sigterm(signal.default_int_handler)  # SIGTERM stops the workers like Ctrl-C
    try:
        while pending or active:
            while pending and len(active) < jobs:
                run = pending.pop(0)
                active.append(_start(run, spec_tree, threads[id(run)]))
                bar.write(f"[{run.name}] started ({threads[id(run)]} threads), log {run.log_path}")
            time.sleep(POLL_SECONDS)
            for a in [a for a in active if a.proc.poll() is not None]:
                active.remove(a)
                a.log.close()
                minutes = (time.perf_counter() - a.start) / 60
                if a.proc.returncode == 0:
                    bar.write(f"[{a.run.name}] done in {minutes:.1f} min")
                else:
                    failed.append((a.run, a.proc.returncode))
                    bar.write(f"[{a.run.name}] FAILED (exit status {a.proc.returncode}) after {minutes:.1f} min; end of {a.run.log_path}:\n{log_tail(a.run.log_path)}")
                bar.update(1)
            bar.set_postfix_str(" | ".join(f"{a.run.name} {log_position(a.run.log_path)}".strip() for a in active), refresh=True)
    except KeyboardInterrupt:
        _stop_all(active, bar)
        raise
    finally:
        _on_sigterm(old_term)
        bar.close()
    if failed:
        raise _failure_report(failed, len(runs))


def worker_main() -> None:
    """``python -m syntaxnmt.experiments.runner``: run the job read from stdin (label, set, config as JSON)."""
    def job() -> None:
        tree = json.load(sys.stdin)
        cfg = config_from_dict(tree["config"], source="worker job")
        print(f"syntaxnmt experiment worker: {tree['label']} seed {cfg.seed} in {cfg.work_dir}, device {cfg.train.device}, {cfg.train.threads} threads", flush=True)
        run_config(tree["label"], cfg, ExperimentSet.model_validate(tree["set"]), log=lambda *a, **k: tqdm.write(" ".join(map(str, a))))

    run_command(job)


if __name__ == "__main__":
    worker_main()


def run_set(path: str | Path, seeds: list[int] | None = None, only: list[str] | None = None, output: str | None = None, log=print, jobs: int = 1) -> str:
    """Run the experiment set at ``path``; returns the Markdown section written to the output file.

    ``jobs`` > 1 trains and translates the unfinished runs in that many worker processes first
    (:mod:`syntaxnmt.experiments.runner`); the records and the table are then made here, as for ``jobs`` = 1.
    ``only``: the ``--only`` values (labels, or comma-separated labels: :func:`select_labels`); the baseline always runs.
    """
    spec = load_set(path)
    seeds = seeds or spec.seeds
    only = select_labels(only, list(spec.configs), str(path)) if only else None
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    labels = [k for k in spec.configs if not only or k in only or k == spec.baseline]
    if spec.synthetic_corpus and not (Path(spec.synthetic_corpus) / "test.tgt").is_file():
        n_train, n_dev, n_test = spec.synthetic_sizes
        write_corpus(spec.synthetic_corpus, n_train=n_train, n_dev=n_dev, n_test=n_test, seed=1)
        log(f"generated the synthetic corpus in {spec.synthetic_corpus}")
    for test in spec.test_sets.values():
        for f in (test.src, test.ref, test.conllu):
            if f and not Path(f).is_file():
                raise UserError(f"{path}: test file {f} not found")

    runs = set_runs(path, spec, labels, seeds)
    if jobs > 1:
        todo = {str(Path(r.cfg.work_dir).resolve()): r for r in runs if not is_finished(r.cfg, spec)}  # one worker per work_dir
        if todo:
            run_in_workers(list(todo.values()), spec.model_dump(mode="json"), jobs, log)
    records: dict[str, dict[int, dict]] = {label: {} for label in labels}
    for run in runs:
        records[run.label][run.seed] = run_config(run.label, run.cfg, spec, log)
    section = make_table(spec, records, seeds, control_pairs(runs))
    target = Path(output or spec.output)
    write_section(target, spec.name, section)
    log(section)
    log(f"results written to {target}")
    return section
