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

from pathlib import Path
from typing import Callable, Sequence

from syntaxnmt.config import config_from_dict
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import ExperimentSet, Run, RunsFailed, run_config

LAUNCHERS = ("local", "slurm", "submitit-local")
SLURM_DEFAULTS = {"timeout_min": 240, "gpus_per_node": 1, "cpus_per_task": 4, "mem_gb": 16}


def run_job(label: str, spec_tree: dict, cfg_tree: dict) -> int:
    """The body of one job: train, translate and score one run; returns its number of updates."""
    cfg = config_from_dict(cfg_tree, source="submitit job")
    record = run_config(label, cfg, ExperimentSet.model_validate(spec_tree), log=lambda *a, **k: print(*a, flush=True))
    return int(record["steps"])


def make_executor(launcher: str, folder: Path, params: dict):
    """A submitit executor: ``slurm`` (``AutoExecutor(cluster="slurm")``, with ``params`` as
    ``slurm_*`` / generic parameters) or ``submitit-local`` (local processes)."""
    import submitit

    if launcher == "slurm":
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    elif launcher == "submitit-local":
        executor = submitit.AutoExecutor(folder=folder, cluster="local")
    else:
        raise UserError(f"--launcher {launcher}: expected one of {', '.join(LAUNCHERS)}")
    merged = {**SLURM_DEFAULTS, **params} if launcher == "slurm" else {"timeout_min": int(params.get("timeout_min", 60))}
    try:
        executor.update_parameters(**merged)
    except (TypeError, ValueError) as e:  # an unknown slurm_* key
        raise UserError(f"--slurm parameters {merged}: {e}") from None
    return executor


def run_in_submitit(runs: Sequence[Run], spec_tree: dict, launcher: str, params: dict, log: Callable[[str], None] = print) -> None:
    """Submit each run as a job and wait for all; a failed job does not stop the others, and
    :class:`RunsFailed` names each failed run with its job's error file at the end."""
    import submitit

    params = dict(params)
    folder = Path(params.pop("folder", "") or f"runs/submitit/{spec_tree['name']}")
    executor = make_executor(launcher, folder, params)
    jobs = []
    for run in runs:
        executor.update_parameters(name=f"{spec_tree['name']}:{run.label}:{run.seed}"[:128])
        job = executor.submit(run_job, run.label, spec_tree, run.cfg.model_dump(mode="json"))
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
