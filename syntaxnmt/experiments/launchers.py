"""``syntaxnmt experiment SET --launcher slurm``: each (config, seed) run as a Slurm job, via submitit.

Each unfinished run is submitted as one job (``submitit.AutoExecutor``) that trains, translates and
scores it exactly as the local runner does (:func:`syntaxnmt.experiments.sets.run_config`): a
finished run is skipped, a stopped one resumes from ``last.pt`` when the set is run again. The
parent waits for every job, then makes the table from the runs' scores files (the run folders must
be on a file system the nodes share). submitit keeps each job's stdout, stderr and pickled result
in ``--slurm-folder`` (default ``runs/submitit/<set name>``). ``--launcher submitit-local`` runs
the same jobs as local processes (submitit's ``LocalExecutor``), for testing without a cluster.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable, Sequence

from syntaxnmt.config import config_from_dict
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import ExperimentSet, Run, RunsFailed, run_config
from syntaxnmt.textio import folder_lock

LAUNCHERS = ("local", "slurm", "submitit-local")
SLURM_DEFAULTS = {"timeout_min": 240, "gpus_per_node": 1, "cpus_per_task": 4, "mem_gb": 16}


def run_job(label: str, spec_tree: dict, cfg_tree: dict) -> int:
    """The body of one job: train, translate and score one run; returns its number of updates."""
    cfg = config_from_dict(cfg_tree, source="submitit job")
    log = lambda *a, **k: print(*a, flush=True)  # noqa: E731
    with folder_lock(cfg.work_dir, "work_dir", log):  # one writer per work_dir: training, translations, the scores
        record = run_config(label, cfg, ExperimentSet.model_validate(spec_tree), log=log)
    return int(record["steps"])


def make_executor(launcher: str, folder: Path, params: dict):
    """A submitit executor: ``slurm`` (``AutoExecutor(cluster="slurm")``, with ``params`` as
    ``slurm_*`` / generic parameters) or ``submitit-local`` (local processes)."""
    import submitit

    if launcher not in ("slurm", "submitit-local"):
        raise UserError(f"--launcher {launcher}: expected one of {', '.join(LAUNCHERS)}")
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm" if launcher == "slurm" else "local")
    except RuntimeError as e:  # no srun / sbatch on this machine
        raise UserError(f"--launcher {launcher}: {e}") from None
    merged = {**SLURM_DEFAULTS, **params} if launcher == "slurm" else {"timeout_min": int(params.get("timeout_min", 60))}
    try:
        executor.update_parameters(**merged)
    except (TypeError, ValueError) as e:  # an unknown slurm_* key
        raise UserError(f"--slurm parameters {merged}: {e}") from None
    return executor


def run_in_submitit(runs: Sequence[Run], spec_tree: dict, launcher: str, params: dict, log: Callable[[str], None] = print, prepare: Callable[[Sequence[Run]], None] | None = None) -> None:
    """Submit each run as a job and wait for all; a failed job does not stop the others, and
    :class:`RunsFailed` names each failed run with its job's error file at the end. ``prepare``
    (the corpora, once, here) runs after the executor is made, before any job is submitted."""
    import submitit

    params = dict(params)
    folder = Path(params.pop("folder", "") or f"runs/submitit/{spec_tree['name']}")
    executor = make_executor(launcher, folder, params)
    if prepare is not None:
        prepare(runs)
    jobs = []
    for run in runs:
        executor.update_parameters(name=f"{spec_tree['name']}:{run.label}:{run.seed}"[:128])
        try:
            job = executor.submit(run_job, run.label, spec_tree, run.cfg.model_dump(mode="json"))
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:  # sbatch refused the job
            raise UserError(f"--launcher {launcher}: submitting {run.name} failed: {str(e).strip().splitlines()[-1:] or e}") from None
        log(f"[{run.name}] submitted as job {job.job_id} ({launcher}; logs in {folder})")
        jobs.append((run, job))
    failed = []
    for run, job in jobs:
        try:
            steps = job.result()
            log(f"[{run.name}] job {job.job_id} done ({steps} updates)")
        except (submitit.core.utils.FailedJobError, submitit.core.utils.UncompletedJobError) as e:
            first = str(e).strip().splitlines()[-1:] or [""]
            failed.append(f"{run.name} (job {job.job_id}: {first[0][:200]}; log {job.paths.stderr})")
    if failed:
        raise RunsFailed(f"{len(failed)} of {len(runs)} jobs failed: {'; '.join(failed)}", 1)
