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
from typing import IO, Callable, Iterable, Sequence

from tqdm.auto import tqdm

from syntaxnmt.config import Config, config_from_dict
from syntaxnmt.data.prepare import prepare
from syntaxnmt.data.synthetic import write_corpus
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.budget import CURVE_FILE, describe, read_curve
from syntaxnmt.experiments.scores import SCORES_FILE, find_run_scores, label_slug, read_run_scores, results_file
from syntaxnmt.experiments.sets import ExperimentSet, Run, RunsFailed, control_pairs, curve_logger, is_finished, load_set, make_table, run_config, run_config_of, select_labels, set_runs, write_section
from syntaxnmt.runtime import cpu_cores, run_command
from syntaxnmt.textio import atomic_write, atomic_write_text, folder_lock
from syntaxnmt.training.train import train

TAIL_LINES = 15
POLL_SECONDS = 1.0
_BAR = re.compile(r"(train|translate|spaCy[^:]*):\s+\d+%\|[^|\r\n]*\|\s*(\d+)/(\d+)")


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
        log = lambda *a, **k: tqdm.write(" ".join(map(str, a)))  # noqa: E731
        with folder_lock(cfg.work_dir, "work_dir", log):  # one writer per work_dir: training, translations, done.json
            run_config(tree["label"], cfg, ExperimentSet.model_validate(tree["set"]), log=log)

    run_command(job)


if __name__ == "__main__":
    worker_main()


def load_records(path: str | Path, spec: ExperimentSet, runs: Sequence[Run]) -> dict[str, dict[int, dict]]:
    """Every run's record from its scores file (its run folder's, else the committed copy in the
    set's results folder); a :class:`UserError` names the runs without one (by system and seeds)."""
    records: dict[str, dict[int, dict]] = {}
    missing: dict[str, list[str]] = {}
    files = 0
    for run in runs:
        found = find_run_scores(run.cfg.work_dir, spec.results_folder, run.label, run.seed)
        if found is None:
            missing.setdefault(run.label, []).append(str(run.seed))
            continue
        files += 1
        record = read_run_scores(found)
        absent = [t for t in spec.test_sets if t not in record["tests"]]
        if absent:
            missing.setdefault(run.label, []).append(f"{run.seed} (no {', '.join(absent)} in {found})")
            continue
        records.setdefault(run.label, {})[run.seed] = record
    if missing:
        count = sum(map(len, missing.values()))
        where = f"<work_dir>/{SCORES_FILE} of each run, then {results_file(spec.results_folder, 'LABEL', 0).with_name('<label>-seed<S>.json.gz')}"
        if not files:  # a clean clone of a set whose scores were never collected: say so, not 66 names cut short
            raise UserError(f"{path}: --rescore found the scores of none of its {len(runs)} runs ({where}): train the set, or --collect its finished runs' scores and commit {spec.results_folder}")
        named = "; ".join(f"'{label}' seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}" for label, seeds in missing.items())
        raise UserError(f"{path}: --rescore needs the scores of {count} of {len(runs)} runs ({where}), missing: {named}")
    return records


def _copy_changed(source: Path, target: Path) -> bool:
    """Copy ``source`` to ``target`` atomically unless it holds the same bytes; whether it copied."""
    data = source.read_bytes()
    if target.is_file() and target.read_bytes() == data:
        return False
    atomic_write(target, lambda f: f.write(data))
    return True


def collect_results(spec: ExperimentSet, runs: Sequence[Run], log: Callable[[str], None] = print) -> list[Path]:
    """Copy each finished run's scores file into the set's results folder (the committed copy a
    clean clone re-scores from); returns the files written."""
    written = []
    for run in runs:
        source = Path(run.cfg.work_dir) / SCORES_FILE
        if not source.is_file():
            continue
        target = results_file(spec.results_folder, run.label, run.seed)
        if _copy_changed(source, target):
            written.append(target)
    log(f"collected {len(written)} new or changed run(s) into {spec.results_folder} ({sum(1 for r in runs if (Path(r.cfg.work_dir) / SCORES_FILE).is_file())} of {len(runs)} runs finished)")
    return written


def collect_curve(path: str | Path, spec: ExperimentSet, log: Callable[[str], None] = print) -> Path | None:
    """Copy the baseline's dev curve (``valid.log`` of :func:`curve_run`), as far as it has been
    trained, into the results folder as ``<baseline>-seed<S>-curve.valid.log``: the committed copy
    from which ``python -m syntaxnmt.experiments.budget`` re-derives the budget in a clean clone."""
    run = curve_run(path, spec)
    source = Path(run.cfg.work_dir) / CURVE_FILE
    if not source.is_file():
        return None
    target = Path(spec.results_folder) / f"{label_slug(run.label)}-seed{run.seed}-curve.{CURVE_FILE}"
    if _copy_changed(source, target):
        log(f"collected the dev curve ({len(read_curve(source))} validations) into {target}")
    return target


def curve_run(path: str | Path, spec: ExperimentSet) -> Run:
    """The baseline's dev-curve run of a set with a ``budget``: its first seed, ``budget.curve_steps``
    updates validated every ``budget.valid_every``, in ``<work_dir>[-<tag>]-curve``."""
    assert spec.budget is not None
    seed = spec.seeds_of(spec.baseline)[0]
    extra = [f"--seed={seed}", f"--train.max_steps={spec.budget.curve_steps}", f"--train.valid_every={spec.budget.valid_every}"]
    return Run(spec.baseline, seed, run_config_of(Path(path).parent / spec.configs[spec.baseline], spec, list(spec.overrides), "-curve", extra))


def run_curve(path: str | Path, spec: ExperimentSet, log: Callable[[str], None] = print) -> str:
    """``--curve``: train (or resume) the baseline's curve run and return its curve with the budget point.
    A curve finished at fewer updates than ``budget.curve_steps`` (the set file lengthened it after
    the rule found no plateau) resumes from its ``last.pt`` to the new length."""
    if spec.budget is None:
        raise UserError(f"{path}: --curve needs a 'budget:' section (curve_steps, valid_every) in the set file")
    run = curve_run(path, spec)
    work = Path(run.cfg.work_dir)
    done = work / "done.json"
    trained = json.loads(done.read_text(encoding="utf-8"))["steps"] if done.is_file() else 0
    if trained < spec.budget.curve_steps:  # not trained, stopped, or a curve lengthened since (it resumes from last.pt)
        log(f"[{run.name}] dev curve: {spec.budget.curve_steps} updates in {work}" + (f" (trained to {trained}: resumed)" if trained else ""))
        progress = train(run.cfg, resume=True, log=curve_logger(work, log))
        atomic_write_text(work / "done.json", json.dumps({"steps": progress.step}))
    text = describe(read_curve(work / CURVE_FILE), spec.budget.min_gain, spec.budget.horizon, spec.budget.smooth, spec.budget.tolerance)
    return text + f"\n(curve: {work / CURVE_FILE}; write the budget into {path} as budget.max_steps)"


def run_set(path: str | Path, seeds: list[int] | None = None, only: list[str] | None = None, output: str | None = None, log=print, jobs: int = 1, *, rescore: bool = False, collect: bool = False, launcher: str = "local", slurm: dict | None = None) -> str:
    """Run the experiment set at ``path``; returns the Markdown section written to the output file.

    ``jobs`` > 1 trains and translates the unfinished runs in that many worker processes first
    (:mod:`syntaxnmt.experiments.runner`); ``launcher`` ``slurm`` (or ``submitit-local``, its
    local test double) submits them as jobs through submitit instead (:mod:`syntaxnmt.experiments.launchers`).
    The records and the table are then made here, from the runs' scores files.
    ``rescore``: no training -- the table from the scores files alone (run folders, else the set's
    results folder). ``collect``: copy the finished runs' scores files into the results folder and,
    once every run has one, write the table from them (as ``rescore`` does).
    ``only``: the ``--only`` values (labels, or comma-separated labels: :func:`select_labels`); the baseline always runs.
    """
    spec = load_set(path)
    only = select_labels(only, list(spec.configs), str(path)) if only else None
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    labels = [k for k in spec.configs if not only or k in only or k == spec.baseline]
    training = not (rescore or collect)
    if training and spec.budget and spec.budget.max_steps is None:
        raise UserError(
            f"{path}: budget.max_steps is unset: no run may start before the budget is fixed on the baseline's dev curve "
            f"(run `syntaxnmt experiment {path} --curve`, then write the update it reports into budget.max_steps)"
        )
    if training:
        prepare_inputs(path, spec, log)
    runs = set_runs(path, spec, labels, seeds)
    if collect:
        collect_results(spec, runs, log)
        if spec.budget:
            collect_curve(path, spec, log)
        waiting = [run.name for run in runs if find_run_scores(run.cfg.work_dir, spec.results_folder, run.label, run.seed) is None]
        if waiting:
            log(f"the table waits for {len(waiting)} of {len(runs)} runs: {'; '.join(waiting)}")
            return ""
    if training:
        records = train_runs(path, spec, runs, jobs, launcher, slurm or {}, log)
    else:
        records = load_records(path, spec, runs)
    section = make_table(spec, records, None, control_pairs(runs))
    target = Path(output or spec.output)
    write_section(target, spec.name, section)
    log(section)
    log(f"results written to {target}")
    return section


def prepare_inputs(path: str | Path, spec: ExperimentSet, log) -> None:
    """Generate the set's synthetic corpus if it has one and it is missing; check its test files."""
    if spec.synthetic_corpus and not (Path(spec.synthetic_corpus) / "test.tgt").is_file():
        n_train, n_dev, n_test = spec.synthetic_sizes
        write_corpus(spec.synthetic_corpus, n_train=n_train, n_dev=n_dev, n_test=n_test, seed=1)
        log(f"generated the synthetic corpus in {spec.synthetic_corpus}")
    for test in spec.test_sets.values():
        for f in (test.src, test.ref, test.conllu):
            if f and not Path(f).is_file():
                raise UserError(f"{path}: test file {f} not found")


def training_order(runs: Iterable[Run]) -> list[Run]:
    """The order in which workers take ``runs``: stopped runs first (they resume from ``last.pt``),
    then seed by seed, the systems of a seed in table order -- a study stopped part-way (runs that
    span sessions) holds every system at its first seeds, not one system at all of its seeds."""
    return sorted(runs, key=lambda r: (not (Path(r.cfg.work_dir) / "last.pt").is_file(), r.seed))


def train_runs(path: str | Path, spec: ExperimentSet, runs: Sequence[Run], jobs: int, launcher: str, slurm: dict, log) -> dict[str, dict[int, dict]]:
    """Train, translate and score every unfinished run: in this process (``jobs`` 1), in worker
    processes, or as submitit jobs; a finished run is skipped, a stopped one resumes from ``last.pt``."""
    todo = training_order({str(Path(r.cfg.work_dir).resolve()): r for r in runs if not is_finished(r.cfg, spec)}.values())  # one worker per work_dir
    if launcher != "local":
        if todo:
            from syntaxnmt.experiments.launchers import run_in_submitit

            run_in_submitit(todo, spec.model_dump(mode="json"), launcher, slurm, log, prepare=lambda runs: prepare_corpora(runs, log))
    elif jobs > 1 and todo:
        run_in_workers(todo, spec.model_dump(mode="json"), jobs, log)
    records: dict[str, dict[int, dict]] = {}
    for run in runs:  # one writer per work_dir: an unfinished run holds its lock over training, translations and done.json
        with contextlib.nullcontext() if is_finished(run.cfg, spec) else folder_lock(run.cfg.work_dir, "work_dir", log):
            record = run_config(run.label, run.cfg, spec, log)
        # The table is made from the scores file, exactly as --rescore makes it.
        records.setdefault(run.label, {})[run.seed] = read_run_scores(record["scores"]) if "scores" in record else record
    return records
