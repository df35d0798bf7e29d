"""``syntaxnmt experiment SET.yaml``: train a named set of configs with N seeds, evaluate, tabulate.

A set file lists labelled configs (one is the baseline), the seeds (the baseline may have more:
``baseline_seeds``), overrides applied to every run, the test sets and, for a converged study, an
update budget fixed on the baseline's dev curve (``budget``). Every (config, seed) run trains in
``<work_dir>[-<tag>]-seed<S>`` (resuming an interrupted run, skipping a finished one), translates
each test set with its best checkpoint and keeps its hypotheses and per-sentence statistics in
``scores.json.gz`` (:mod:`syntaxnmt.experiments.scores`); the table is made from those files only,
so ``--rescore`` rewrites it byte for byte without training.

The table (:func:`make_table`): BLEU (and lowercased BLEU) mean ± sd over seeds, chrF, dev BLEU,
cost; then per test set the seed-level inference -- the mean difference with a two-level bootstrap
interval (seeds, then sentences), Welch's t-test over the per-seed scores, ASO ε_min both ways at
deepsig's 0.2, the verdict -- beside the test-set-only columns (approximate randomization stratified
over seed pairs, the pooled sentence bootstrap) and s_sel / s_opt; the power line (the smallest
difference the seeds detect with 80 % power); and the A/A check (every split of the baseline's seeds
tested as two systems: each test's false-positive rate). The statistics are those of
:mod:`syntaxnmt.metrics` (Clark et al. 2011; Dror et al. 2019); :func:`seed_cells` and
:func:`seed_notes` (the power and A/A lines) make them for the decoding, alignment and document
tables too. The section replaces the set's in a Markdown file
(``docs/results.md`` by default).

With ``--jobs N`` the unfinished runs train and translate in N worker processes first
(:mod:`syntaxnmt.experiments.runner`), with ``--launcher slurm`` as submitit jobs
(:mod:`syntaxnmt.experiments.launchers`).

The sentence bootstrap compares the seed-matched outputs of all seeds at once: the hypotheses of
seeds 1..N are concatenated (and the references repeated), so every (sentence, seed) pair is one
item of the resampling -- it resamples fixed outputs and does not measure training variance.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Sequence

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from syntaxnmt.checkpoint import load_model_checkpoint
from syntaxnmt.config import Config, expand_env, load_config, read_yaml_file
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.budget import CURVE_FILE, VALID_LINE, read_curve
from syntaxnmt.experiments.scores import SCORES_FILE, read_run_scores, test_statistics, write_run_scores
from syntaxnmt.metrics import (
    ASO_THRESHOLD,
    POWER,
    SIGNIFICANCE_LEVEL,
    Metric,
    aa_splits,
    aso_epsilon_min,
    aso_verdict,
    bleu_from_statistics,
    chrf_from_statistics,
    minimum_detectable_difference,
    paired_bootstrap_p,
    run_scores,
    seed_statistics,
    stratified_approximate_randomization,
    two_level_bootstrap,
    welch_p,
)
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import atomic_write_text, read_lines, write_lines
from syntaxnmt.training.train import train


class RunsFailed(UserError):
    """Some runs failed; ``exit_code`` is 2 if each failed on a user error, else 1 (a crash)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class TestSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    src: str
    ref: str
    conllu: str = ""
    """Parses of ``src`` for models with tree features when the corpus was parsed from CoNLL-U."""


class Budget(BaseModel):
    """How a set's update budget is fixed: a baseline run of ``curve_steps`` updates validated every
    ``valid_every`` (``--curve``); its plateau point (:func:`syntaxnmt.experiments.budget.budget_point`)
    is written into ``max_steps`` by hand before any other run may start."""

    model_config = ConfigDict(extra="forbid")
    curve_steps: PositiveInt = Field(description="updates of the baseline's curve run")
    valid_every: PositiveInt = Field(description="validation interval of the curve run")
    min_gain: float = Field(0.3, description="the curve has plateaued when its last part raises its best (smoothed) dev BLEU by less than this")
    horizon: float = Field(0.2, description="that last part, as a fraction of the curve's updates")
    smooth: PositiveInt = Field(3, description="validations averaged into each point of the curve (one checkpoint's dev BLEU is noisy)")
    tolerance: float = Field(0.5, description="the budget: the first update whose smoothed dev BLEU is within this of the curve's best")
    max_steps: PositiveInt | None = Field(None, description="the budget of every run (train.max_steps); unset: only --curve runs")


class ExperimentSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    title: str = ""
    description: str = ""
    baseline: str
    configs: dict[str, str]
    """Label -> config path (relative to the set file)."""
    seeds: Annotated[list[int], Field(min_length=1)] = [1, 2, 3]
    """Three by default: the fewest replicates Clark et al. (2011) advise, and the fewest for ASO."""
    overrides: list[str] = []
    """``--section.key=value`` overrides applied to every run (e.g. a time budget)."""
    tag: str = ""
    """Appended to every run's work_dir, so that sets sharing configs with different overrides
    (e.g. a smaller model) keep their runs apart."""
    test_sets: dict[str, TestSet]
    synthetic_corpus: str = ""
    """If set, the built-in synthetic corpus is generated in this folder first (if missing)."""
    synthetic_sizes: tuple[int, int, int] = (20000, 500, 500)
    output: str = "docs/results.md"
    bootstrap: PositiveInt = 1000
    """Resamples of the sentence-level paired bootstrap and of the test-set spread s_sel."""
    shuffles: PositiveInt = 10_000
    """Shuffles of the approximate randomization test over seed pairs."""
    baseline_seeds: list[int] = []
    """Seeds of the baseline when it has more than the other systems (they feed the A/A check);
    empty: ``seeds``."""
    lowercase_bleu: bool = False
    """Also report lowercased BLEU (sacreBLEU ``lowercase=True``, 13a tokenization), the measure of
    the Multi30k literature, beside cased sacreBLEU."""
    results_dir: str = ""
    """Where ``--collect`` copies the finished runs' scores and ``--rescore`` finds them when a
    run folder is gone (default ``results/<name>``)."""
    budget: Budget | None = None
    """An update budget fixed on the baseline's dev curve (:mod:`syntaxnmt.experiments.budget`)."""

    def seeds_of(self, label: str, seeds: list[int] | None = None) -> list[int]:
        """The seeds of a system: ``seeds`` if given (``--seeds``), else the baseline's own or the set's."""
        if seeds:
            return list(seeds)
        return list(self.baseline_seeds or self.seeds) if label == self.baseline else list(self.seeds)

    @property
    def results_folder(self) -> Path:
        return Path(self.results_dir or f"results/{self.name}")


def read_set_file(path: str | Path, model: type[BaseModel]):
    """Validate an experiment-set YAML file into ``model``; problems name the file and the keys."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: experiment set not found")
    try:
        return model.model_validate(read_yaml_file(p) or {})
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise UserError(f"{path}: {problems}") from None


def load_set(path: str | Path) -> ExperimentSet:
    spec = read_set_file(path, ExperimentSet)
    for test in spec.test_sets.values():
        test.src, test.ref, test.conllu = expand_env(test.src), expand_env(test.ref), expand_env(test.conllu)
    spec.synthetic_corpus, spec.output = expand_env(spec.synthetic_corpus), expand_env(spec.output)
    if spec.baseline not in spec.configs:
        raise UserError(f"{path}: the baseline '{spec.baseline}' is not one of the configs")
    return spec


def select_labels(selection: Sequence[str], labels: Sequence[str], where: str) -> list[str]:
    """The systems named by ``--only`` values (each given once or several times), in the order given.

    A value is one label, or labels separated by commas; a label may itself hold a comma (``"+ input
    features, random-tree control"``), so the comma-separated pieces are re-joined into the longest
    run of pieces that forms a known label. A name that is no label is a :class:`UserError` listing the systems.
    """
    known = {label.strip(): label for label in labels}
    chosen: list[str] = []
    unknown: list[str] = []
    for value in selection:
        if value.strip() in known:
            chosen.append(known[value.strip()])
            continue
        pieces = value.split(",")
        i = 0
        while i < len(pieces):
            end = next((j for j in range(len(pieces), i, -1) if ",".join(pieces[i:j]).strip() in known), None)
            if end is None:
                if pieces[i].strip():  # "a,,b" or a trailing comma names nothing more
                    unknown.append(pieces[i].strip())
                i += 1
            else:
                chosen.append(known[",".join(pieces[i:end]).strip()])
                i = end
    if unknown:
        raise UserError(f"{where}: no system named {', '.join(map(repr, unknown))} (systems: {'; '.join(labels)})")
    return list(dict.fromkeys(chosen))


def curve_logger(work: Path, log):
    """``log`` that also appends training's validation lines (``update N | dev ...``) to
    ``<work>/valid.log``: the dev curve the budget is read from (:mod:`syntaxnmt.experiments.budget`)."""
    def write(*args, **kwargs):
        text = " ".join(map(str, args))
        if VALID_LINE.search(text):
            work.mkdir(parents=True, exist_ok=True)
            with open(work / CURVE_FILE, "a", encoding="utf-8") as f:
                f.write(text + "\n")
        log(*args, **kwargs)

    return write


def run_config(label: str, cfg: Config, spec: ExperimentSet, log) -> dict:
    """Train (or resume, or skip when finished) and translate every test set; score the outputs
    sentence by sentence into ``<work_dir>/scores.json.gz`` (:mod:`syntaxnmt.experiments.scores`);
    returns the run's record (``scores``: that file)."""
    work = Path(cfg.work_dir)
    done = work / "done.json"
    device = resolve_device(cfg.train.device)
    if done.is_file():
        record = json.loads(done.read_text())
        log(f"[{label} seed {cfg.seed}] trained already ({record['steps']} updates)")
    else:
        log(f"[{label} seed {cfg.seed}] training in {work}")
        progress = train(cfg, resume=True, log=curve_logger(work, log))  # a signal raises Interrupted once last.pt is saved
        record = {"steps": progress.step, "train_seconds": progress.train_seconds, "train_tokens": progress.train_tokens, "best": progress.best, "params": _count_params(work / "best.pt"), "device": device_name(device)}
        atomic_write_text(done, json.dumps(record))
    model, translated = None, False
    record["hyps"] = {}
    for name, test in spec.test_sets.items():
        hyp_path = work / f"{name}.hyp"
        if not hyp_path.is_file():
            if model is None:
                model, model_cfg, toks = load_model(work / "best.pt", device)
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = translate_lines(model, model_cfg, toks, read_lines(test.src), model_cfg.decode, device, conllu=test.conllu or None, source_name=test.src, progress=True)
            write_lines(hyp_path, [nb[0][0] for nb in out])
            translated = True
            log(f"[{label} seed {cfg.seed}] translated {name} in {time.perf_counter() - t0:.0f} s")
        record["hyps"][name] = str(hyp_path)
    if "params" not in record:  # done.json of an older run
        record["params"] = _count_params(work / "best.pt")
    scores = work / SCORES_FILE
    if translated or not _scores_cover(scores, spec):  # a new translation is scored again
        curve = read_curve(work / CURVE_FILE) if (work / CURVE_FILE).is_file() else []
        write_run_scores(work, label, cfg.seed, record, record["hyps"], {name: read_lines(t.ref) for name, t in spec.test_sets.items()}, curve)
    record["scores"] = str(scores)
    return record


def device_name(device: torch.device) -> str:
    """What a run trained on, kept in its ``done.json`` (``device``): ``cpu``, or the GPU's name.
    A ``done.json`` without it is from before it was kept (issue 50's runs then trained on the CPU)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _scores_cover(path: Path, spec: ExperimentSet) -> bool:
    """Whether a run's scores file exists and holds every test set of ``spec``."""
    if not path.is_file():
        return False
    try:
        return set(spec.test_sets) <= set(read_run_scores(path)["tests"])
    except UserError:
        return False


def _count_params(path: Path) -> int:
    state = load_model_checkpoint(path)["model"]
    seen, total = set(), 0
    for tensor in state.values():
        if tensor.data_ptr() not in seen:  # tied weights count once
            seen.add(tensor.data_ptr())
            total += tensor.numel()
    return total


@dataclass
class Run:
    """One (config, seed) run of a set."""

    label: str
    seed: int
    cfg: Config

    @property
    def name(self) -> str:
        return f"{self.label} seed {self.seed}"

    @property
    def log_path(self) -> Path:
        """Where a worker process of ``--jobs`` writes the run's output."""
        return Path(self.cfg.work_dir) / "train.log"


def set_runs(path: str | Path, spec: ExperimentSet, labels: list[str], seeds: list[int] | None = None) -> list[Run]:
    """The (config, seed) runs of a set, in table order, each config loaded with the set's overrides
    (and its fixed budget, ``budget.max_steps``), its seed and its per-seed ``work_dir``. ``seeds``:
    the same seeds for every system (``--seeds``); None: each system's own (:meth:`ExperimentSet.seeds_of`)."""
    base_dir = Path(path).parent
    overrides = list(spec.overrides)
    if spec.budget and spec.budget.max_steps:
        overrides.append(f"--train.max_steps={spec.budget.max_steps}")
    runs = []
    for label in labels:
        for seed in spec.seeds_of(label, seeds):
            runs.append(Run(label, seed, run_config_of(base_dir / spec.configs[label], spec, overrides, f"-seed{seed}", [f"--seed={seed}"])))
    return runs


def run_config_of(config: Path, spec: ExperimentSet, overrides: list[str], suffix: str, extra: list[str]) -> Config:
    """A set's config with ``overrides`` and ``extra``, its work_dir ``<work_dir>[-<tag>]<suffix>``."""
    base_cfg = load_config(config, overrides)
    work_dir = f"{base_cfg.work_dir}-{spec.tag}" if spec.tag else base_cfg.work_dir
    # The value is JSON (a YAML string), so characters like '#' or ': ' in the path survive.
    return load_config(config, overrides + extra + [f"--work_dir={json.dumps(f'{work_dir}{suffix}')}"])


def control_pairs(runs: Sequence[Run]) -> dict[str, str]:
    """Control arm -> its variant, among the systems of ``runs``: an arm (``data.structure_control``
    set, :mod:`syntaxnmt.data.controls`) controls the system whose config is the arm's with the
    control off (names and work_dirs aside)."""
    def key(cfg: Config) -> str:
        tree = cfg.model_dump(mode="json")
        tree.pop("name", None)
        tree.pop("work_dir", None)
        tree["data"]["structure_control"] = "none"
        return json.dumps(tree, sort_keys=True)

    first = {}
    for run in runs:
        first.setdefault(run.label, run.cfg)
    plain = {key(cfg): label for label, cfg in first.items() if cfg.data.structure_control == "none"}
    return {label: plain[key(cfg)] for label, cfg in first.items() if cfg.data.structure_control != "none" and key(cfg) in plain}


def is_finished(cfg: Config, spec: ExperimentSet) -> bool:
    """Whether a run has trained (``done.json``) and translated every test set."""
    work = Path(cfg.work_dir)
    return (work / "done.json").is_file() and all((work / f"{name}.hyp").is_file() for name in spec.test_sets)


def run_tests(spec: ExperimentSet, record: dict, refs: dict[str, list[str]]) -> dict[str, dict]:
    """A run's per-sentence statistics by test set: those of its scores file (``tests``), else
    computed from its hypothesis files (``hyps``) against ``refs``."""
    if "tests" in record:
        return record["tests"]
    return {name: {"hyps": read_lines(record["hyps"][name]), **test_statistics(read_lines(record["hyps"][name]), refs[name])} for name in spec.test_sets}


def make_table(spec: ExperimentSet, records: dict[str, dict[int, dict]], seeds: list[int] | None = None, controls: dict[str, str] | None = None) -> str:
    """The set's Markdown section, from each run's per-sentence statistics (its scores file, or
    its hypotheses). ``records``: label -> seed -> run record; a system's seeds are those of its
    records (``seeds``, if given, restricts them). ``controls`` (control arm -> variant,
    :func:`control_pairs`): with any pair among the systems, each variant is also compared with its
    control arm(s). Deterministic: every resampling has a fixed seed."""
    controls = {arm: variant for arm, variant in (controls or {}).items() if arm in records and variant in records}
    arms_of: dict[str, list[str]] = {}
    for arm, variant in controls.items():
        arms_of.setdefault(variant, []).append(arm)
    seeds_of = {label: [s for s in runs if not seeds or s in seeds] for label, runs in records.items()}
    tests = list(spec.test_sets)
    refs = {} if all("tests" in r for runs in records.values() for r in runs.values()) else {name: read_lines(t.ref) for name, t in spec.test_sets.items()}
    data = {label: {s: run_tests(spec, runs[s], refs) for s in seeds_of[label]} for label, runs in records.items()}
    stats = {label: {t: [data[label][s][t]["bleu"] for s in seeds_of[label]] for t in tests} for label in records}
    base = records[spec.baseline]
    base_step = statistics.mean(r["train_seconds"] / max(r["steps"], 1) for r in base.values())

    head = ["system", "seeds", "params", "dev BLEU"] + [f"{t} BLEU" for t in tests]
    head += [f"{t} BLEU (lc)" for t in tests] if spec.lowercase_bleu else []
    head += [f"{t} chrF" for t in tests] + ["updates", "train tok/s", "time/update (rel.)"]
    rows = []
    for label, runs in records.items():
        own = seeds_of[label]
        cells = [label, str(len(own)), f"{runs[own[0]]['params'] / 1e6:.2f}M", dev_bleu_cell(runs, own)]
        cells += [mean_sd_cell(run_scores(stats[label][t])) for t in tests]
        if spec.lowercase_bleu:
            cells += [mean_sd_cell(run_scores([data[label][s][t]["bleu_lc"] for s in own])) for t in tests]
        cells += [f"{statistics.mean(chrf_from_statistics(data[label][s][t]['chrf']) for s in own):.2f}" for t in tests]
        step = statistics.mean(r["train_seconds"] / max(r["steps"], 1) for r in runs.values())
        updates = statistics.mean(r["steps"] for r in runs.values())
        known = [r["train_tokens"] / max(r["train_seconds"], 1e-9) for r in runs.values() if r.get("train_tokens")]
        cells += [f"{updates:.0f}", f"{statistics.mean(known):.0f}" if known else "–", f"{step / base_step:.2f}×"]
        rows.append(cells)

    lines = section_heading(spec.title or spec.name, spec.description)
    seed_text = "; ".join(f"{label}: {', '.join(map(str, seeds_of[label]))}" for label in records) if len({tuple(v) for v in seeds_of.values()}) > 1 else ", ".join(map(str, seeds_of[spec.baseline]))
    lines += [
        f"Seeds: {seed_text}. BLEU: mean ± sd over seeds (sacreBLEU 13a, cased)"
        + ("; BLEU (lc): the same of lowercased text (sacreBLEU lowercase=True, 13a tokenization: the Multi30k literature's lowercased tokenized BLEU)" if spec.lowercase_bleu else "")
        + "; chrF: mean over seeds. dev BLEU: the best greedy dev BLEU of each run (that checkpoint decodes the test sets), the figure to choose systems by. "
        f"Overrides: `{' '.join(spec.overrides) or 'none'}`"
        + (f"; budget: train.max_steps={spec.budget.max_steps}, fixed on the baseline's dev curve (the first update whose dev BLEU, the mean of {spec.budget.smooth} validations, is within {spec.budget.tolerance} of the plateaued curve's best)" if spec.budget and spec.budget.max_steps else "")
        + ". tok/s and time/update are wall-clock figures of the training runs, disturbed by any other load on the machine "
        "(controlled step-time measurements: `benchmarks/syntax_overhead.py`, docs/benchmarks.md).",
        "",
        *markdown_table(head, rows),
        "",
    ]
    for t in tests:
        lines += [f"Seed-level inference on {t} (BLEU):", ""]
        lines += markdown_table(*inference_table(spec, stats, t, arms_of))
        lines += [""]
    others = [len(seeds_of[label]) for label in records if label != spec.baseline]
    for note in seed_notes(spec.baseline, stats[spec.baseline], others, spec.bootstrap, spec.shuffles):
        lines += [note, ""]
    lines += [inference_caption(spec, controls)]
    return "\n".join(lines) + "\n"


def mean_sd_cell(values: Sequence[float], digits: int = 2) -> str:
    """``mean ± sd`` (sd with n − 1; no sd with one value): every mean-over-seeds cell of the
    experiment, decoding and alignment tables."""
    return f"{statistics.mean(values):.{digits}f}" + (f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else "")


def inference_table(spec: ExperimentSet, stats: dict[str, dict[str, list[np.ndarray]]], test: str, arms_of: dict[str, list[str]]) -> tuple[list[str], list[list[str]]]:
    """Head and rows of the seed-level inference table of one test set."""
    b = spec.baseline
    head = ["system", f"Δ vs {b} [95 % CI]", "p, seeds (Welch)", "ASO ε_min (better / worse)", "verdict"]
    head += ["Δ vs own control [95 % CI]", "p vs own control, seeds (Welch)"] if arms_of else []
    head += ["s_sel / s_opt", f"p vs {b}, AR (test-set variance only)", f"p vs {b}, sentence bootstrap (test-set variance only)"]
    rows = []
    for label, by_test in stats.items():
        mine = by_test[test]
        cmp = seed_cells(stats[b][test], mine, spec.bootstrap, spec.shuffles, is_baseline=label == b)
        verdict = cmp["verdict"]
        row = [label, cmp["delta"], cmp["welch"], cmp["aso"]]
        control_cells = []
        if arms_of:
            versus = [(arm, seed_cells(stats[arm][test], mine, spec.bootstrap, spec.shuffles, randomization=False)) for arm in arms_of.get(label, [])]
            control_cells = ["; ".join(c[key] if len(versus) == 1 else f"{c[key]} ({arm})" for arm, c in versus) or "–" for key in ("delta", "welch")]
            if verdict == "better" and any(c["verdict"] != "better" for _, c in versus):
                verdict = "better, not than its control"
        row.append(verdict)
        row += control_cells
        row += [cmp["spread"], cmp["p"], "–" if label == b else sentence_bootstrap_cell(stats[b][test], mine, spec.bootstrap)]
        rows.append(row)
    return head, rows


def seed_notes(reference: str, runs: dict[str, Sequence[np.ndarray]], others: Sequence[int], bootstrap: int, shuffles: int, *, metric: Metric = bleu_from_statistics, measure: str = "BLEU", unit: str = "system", digits: int = 2) -> list[str]:
    """The lines under a table whose systems have several seeds: what the seeds can detect
    (:func:`power_line`) and the A/A calibration check on the reference's seeds (:func:`aa_line`);
    none when every system has one seed. Shared by the experiment, decoding, alignment and
    document tables.

    ``reference``: the system the table tests against, as the table names it (the baseline, a
    decoding table's first row); ``runs``: its runs' sentence statistics per test set;
    ``others``: the seed counts of the systems tested against it; ``metric`` / ``measure``: the
    score, higher is better (e.g. −AER for AER, :func:`syntaxnmt.experiments.alignment.negative_aer`)."""
    n_ref = len(next(iter(runs.values())))
    if max([n_ref, *others]) < 2:
        return []
    return [
        power_line(reference, runs, others, metric=metric, measure=measure, unit=unit, digits=digits),
        aa_line(reference, runs, bootstrap, shuffles, metric=metric, measure=measure),
    ]


def score_runs(scores: Sequence[float]) -> list[np.ndarray]:
    """Runs that kept only their score (a BLEU, an accuracy), each as the one statistic ``[[score]]``
    that :func:`power_line` reads with ``metric=``:func:`kept_score` (it needs per-seed scores only)."""
    return [np.array([[score]], dtype=np.float64) for score in scores]


def kept_score(stats: np.ndarray) -> np.ndarray:
    """The metric of :func:`score_runs`: the score a run kept."""
    return np.asarray(stats, dtype=np.float64)[..., 0]


def power_line(reference: str, runs: dict[str, Sequence[np.ndarray]], others: Sequence[int], *, metric: Metric = bleu_from_statistics, measure: str = "BLEU", unit: str = "system", digits: int = 2) -> str:
    """The smallest difference the table's seeds can detect (:func:`minimum_detectable_difference`)
    from the reference's s_opt on each test set; ``others``: the other systems' seed counts."""
    n_ref = len(next(iter(runs.values())))
    counts = sorted(set(others))
    versus = f"{'/'.join(map(str, counts))} seeds per other {unit}" if counts else f"as many seeds per other {unit}"
    parts = []
    for name, own in runs.items():
        scores = run_scores(own, metric)
        sd = statistics.stdev(scores) if len(scores) > 1 else None
        shown = " / ".join("–" if d is None else f"{d:.{digits}f}" for d in (minimum_detectable_difference(sd, n_ref, n) for n in counts or [n_ref]))
        parts.append(f"{name} {shown} {measure} (s_opt {'–' if sd is None else f'{sd:.{digits}f}'})")
    missing = f" ({reference} has one seed: no s_opt, so no power can be stated)" if n_ref < 2 else ""
    return (
        f"Power ({measure}): with {n_ref} seed{'s' if n_ref != 1 else ''} of {reference} and {versus}, the smallest true difference of mean {measure} that "
        f"Welch's test at α = {SIGNIFICANCE_LEVEL} detects with {POWER:.0%} power, taking the s_opt of {reference} as every {unit}'s seed sd: "
        + "; ".join(parts)
        + missing
        + ". (Two-sample t with ν = n₁ + n₂ − 2: δ solves P(|T| > t_{1−α/2,ν}) = 0.8 for T ~ noncentral t(ν, δ / (s_opt √(1/n₁ + 1/n₂))).) "
        "A difference below it that the test does not find is no evidence of no effect; a seed-level interval, where the table has one, says what is ruled out."
    )


AA_SHUFFLES = 1000
"""Shuffles of the A/A check's approximate randomization: p to 0.001 is enough to count p < 0.05."""
AA_MIN_RUNS = 4
"""Runs an A/A check needs: each of its two groups needs two seeds for the seed-level test."""


def aa_rates(runs: Sequence[np.ndarray], bootstrap: int, shuffles: int, metric: Metric = bleu_from_statistics) -> dict[str, tuple[int, int]] | None:
    """The A/A check on k runs of one configuration: every split into two groups (:func:`aa_splits`)
    tested as two systems; per test, (splits where it finds a difference at α = 0.05, splits).
    None with fewer than :data:`AA_MIN_RUNS` runs. The approximate randomization uses at most
    :data:`AA_SHUFFLES` shuffles."""
    if len(runs) < AA_MIN_RUNS:
        return None
    splits = aa_splits(len(runs))
    hits = {"welch": 0, "ci": 0, "ar": 0}
    for first, second in splits:
        a, b = [runs[i] for i in first], [runs[i] for i in second]
        p = welch_p(run_scores(a, metric), run_scores(b, metric))
        hits["welch"] += int(p is not None and p < SIGNIFICANCE_LEVEL)
        low, high = two_level_bootstrap(a, b, metric, n_samples=bootstrap)
        hits["ci"] += int(low > 0 or high < 0)
        pairs = min(len(a), len(b))
        hits["ar"] += int(stratified_approximate_randomization(np.stack(a[:pairs]), np.stack(b[:pairs]), metric, n_shuffles=min(shuffles, AA_SHUFFLES)) < SIGNIFICANCE_LEVEL)
    return {k: (v, len(splits)) for k, v in hits.items()}


def aa_line(reference: str, runs: dict[str, Sequence[np.ndarray]], bootstrap: int, shuffles: int, *, metric: Metric = bleu_from_statistics, measure: str = "BLEU") -> str:
    """The A/A calibration line of a table: false-positive rates of its tests on the reference's
    seeds (``runs``: per test set), or why there is none (fewer than :data:`AA_MIN_RUNS` seeds)."""
    k = len(next(iter(runs.values())))
    if k < AA_MIN_RUNS:
        return (
            f"A/A check ({measure}, calibration): not possible with {k} seed{'s' if k != 1 else ''} of {reference} -- each of the two "
            f"groups needs two seeds for Welch's test, so it takes {AA_MIN_RUNS} or more."
        )
    parts = []
    for name, own in runs.items():
        rates = aa_rates(own, bootstrap, shuffles, metric)
        parts.append(f"{name}: Welch over seeds {_rate(rates['welch'])}, 95 % CI excluding 0 {_rate(rates['ci'])}, AR over seed pairs (test-set variance only) {_rate(rates['ar'])}")
    return (
        f"A/A check ({measure}, calibration): the {k} seeds of {reference} split every way into two groups of {k // 2} and {k - k // 2} "
        f"({len(aa_splits(k))} splits; approximate randomization with {min(shuffles, AA_SHUFFLES)} shuffles), each pair tested as if two systems; the share of splits found different at α = {SIGNIFICANCE_LEVEL} "
        f"(nominal 5 %; a test far above it is not calibrated): " + "; ".join(parts) + "."
    )


def _rate(hit: tuple[int, int]) -> str:
    return f"{hit[0]}/{hit[1]} ({100 * hit[0] / hit[1]:.0f} %)"


def inference_caption(spec: ExperimentSet, controls: dict[str, str]) -> str:
    """What the inference tables' columns are and the verdict rule."""
    control = (
        f" Δ / p vs own control: the same against the variant's random-structure control arm ({', '.join(f'{arm} for {variant}' for arm, variant in controls.items())}; "
        "data.structure_control, docs/syntax.md): a variant helps only if it beats both the baseline and its control."
        if controls
        else ""
    )
    return (
        f"Δ vs {spec.baseline}: mean BLEU over the system's seeds minus the baseline's, with the 95 % percentile interval of a two-level "
        f"bootstrap ({spec.bootstrap} draws; each draw resamples each system's seeds with replacement, then the sentences of each drawn run; "
        "corpus BLEU recomputed from sacreBLEU's sentence statistics), which samples training and test-set variance. "
        "p, seeds (Welch): Welch's t-test over the per-seed BLEU (the run is the unit). Verdict: better (worse) when p < 0.05 and the "
        "interval lies above (below) 0; otherwise none shown -- the interval bounds the effect that remains possible."
        + control
        + " "
        + statistics_caption(spec.baseline, spec.bootstrap, spec.shuffles)
        + f" p, sentence bootstrap (test-set variance only): paired bootstrap resampling ({spec.bootstrap} samples, two-sided) of the "
        "sentences of all seeds' outputs pooled; it resamples fixed outputs and does not measure training variance."
    )


def sentence_bootstrap_cell(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], bootstrap: int) -> str:
    """The sentence-level paired bootstrap (sacreBLEU's ``--paired-bs``) of the outputs of all seed
    pairs pooled -- every (sentence, seed) one item -- with the direction of a significant difference."""
    pairs = min(len(baseline), len(system))
    base_all, sys_all = np.concatenate(baseline[:pairs]), np.concatenate(system[:pairs])
    p = paired_bootstrap_p(base_all, sys_all, bootstrap)
    return f"{p:.3f}" + direction_mark(p, float(bleu_from_statistics(sys_all.sum(0)) - bleu_from_statistics(base_all.sum(0))))


def direction_mark(p: float, difference: float) -> str:
    """`` * (better)`` / `` * (worse)`` for a difference significant at p < 0.05, else nothing."""
    if p >= SIGNIFICANCE_LEVEL:
        return ""
    return " * (better)" if difference > 0 else " * (worse)"


def seed_cells(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], bootstrap: int, shuffles: int, *, is_baseline: bool = False, metric: Metric = bleu_from_statistics, digits: int = 2, randomization: bool = True) -> dict[str, str]:
    """The seed-aware cells of one system on one test set, from the sentence statistics of each
    seed's output (``baseline[k]`` and ``system[k]``: seed k of each, the same sentences):

    * ``delta``: mean difference over seeds with the 95 % two-level bootstrap interval
      (:func:`two_level_bootstrap`), e.g. ``+0.41 [-0.20, +1.05]``;
    * ``welch``: Welch's t-test over the per-seed scores (two seeds or more on each side);
    * ``verdict``: ``better`` / ``worse`` when Welch's p < 0.05 and the interval excludes 0, else ``none shown``;
    * ``spread``: ``s_sel / s_opt`` -- the test-set sd (bootstrap of the sentences, averaged over
      seeds) and the sd of the per-seed scores (Clark et al. 2011); ``–`` for s_opt with one seed;
    * ``p``: approximate randomization stratified over the seed pairs (the first min(n, m) seeds
      of each; ``shuffles`` shuffles) -- test-set variance only -- with the direction of a
      difference significant at p < 0.05;
    * ``aso``: ε_min of "the system almost stochastically dominates the baseline" and of the
      reverse (Dror et al. 2019), with three seeds or more on each side, marked ``(better)`` /
      ``(worse)`` below 0.2 (:func:`aso_verdict`); else ``–``.

    The baseline's own row has ``–`` everywhere but ``spread``; ``randomization=False`` leaves the
    approximate randomization out (``p`` is ``–``) where no column shows it.
    """
    own = seed_statistics(system, metric, bootstrap)
    spread = f"{own.s_sel:.{digits}f} / " + (f"{own.s_opt:.{digits}f}" if own.s_opt is not None else "–")
    if is_baseline:
        return {"spread": spread, "p": "–", "aso": "–", "delta": "–", "welch": "–", "verdict": "–"}
    base_scores = [float(metric(np.asarray(b).sum(0))) for b in baseline]
    difference = own.mean - statistics.mean(base_scores)
    pairs = min(len(baseline), len(system))
    cell = "–"
    if randomization:
        p = stratified_approximate_randomization(np.stack(baseline[:pairs]), np.stack(system[:pairs]), metric, n_shuffles=shuffles)
        cell = f"{p:.4f}" + direction_mark(p, difference)
    aso = "–"
    if len(own.scores) >= 3 and len(base_scores) >= 3:
        better, worse = aso_epsilon_min(own.scores, base_scores), aso_epsilon_min(base_scores, own.scores)
        mark = aso_verdict(better, worse)
        aso = f"{better:.2f} / {worse:.2f}" + (f" ({mark})" if mark else "")
    low, high = two_level_bootstrap(baseline, system, metric, n_samples=bootstrap)
    welch = welch_p(base_scores, own.scores)
    significant = welch is not None and welch < SIGNIFICANCE_LEVEL
    verdict = "better" if significant and low > 0 else "worse" if significant and high < 0 else "none shown"
    return {
        "spread": spread,
        "p": cell,
        "aso": aso,
        "delta": f"{difference:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]",
        "welch": "–" if welch is None else f"{welch:.4f}",
        "verdict": verdict,
    }


def seed_level_cell(cells: dict[str, str]) -> str:
    """The seed-level summary of :func:`seed_cells` in one cell: ``Δ [CI]; p <Welch>`` (``–`` for the baseline)."""
    if cells["delta"] == "–":
        return "–"
    return f"{cells['delta']}; p {cells['welch']}" + (f" ({cells['verdict']})" if cells["verdict"] in ("better", "worse") else "")


SEED_LEVEL_CAPTION = (
    " Δ [95 % CI]; p (seed level): the mean difference over seeds with the percentile interval of a two-level bootstrap (seeds, "
    "then the sentences of each drawn run) and Welch's t-test over the per-seed scores (– with fewer than two seeds a side); "
    "(better) / (worse) when p < 0.05 and the interval excludes 0."
)


def statistics_caption(baseline: str, bootstrap: int, shuffles: int, one_seed: bool = False, metric: str = "BLEU") -> str:
    """What the seed-aware columns of a table (:func:`seed_cells`) are, for its caption."""
    one = " With one seed it is the ordinary paired test of that seed's outputs." if one_seed else ""
    return (
        f"s_sel / s_opt (Clark et al. 2011): the test-set standard deviation (bootstrap, {bootstrap} resamples of the test "
        f"sentences, averaged over seeds) and the standard deviation over seeds. p vs {baseline}, AR (test-set variance only): approximate randomization "
        f"({shuffles} shuffles, two-sided) stratified over seed pairs -- sentence swaps only between seed k of the system and "
        f"seed k of {baseline}, the mean {metric} over seeds as statistic (MultEval's test); it holds every trained model fixed, so it "
        f"does not see seed noise; * = p < 0.05, with the direction.{one} "
        f"ASO ε_min (three seeds or more): Almost Stochastic Order of the per-seed {metric} (Dror et al. 2019; 1000 "
        f"bootstrap iterations, confidence 0.95), an upper bound on the share of quantiles where the first system falls behind, given both "
        f"ways: system ≻ {baseline} / {baseline} ≻ system. Below {ASO_THRESHOLD} (deepsig's threshold) that direction holds: (better) or "
        f"(worse); values near 1 both ways mean no evidence either way, not \"worse\" (two identical systems give 1.00 / 1.00 with three seeds)."
    )


def dev_bleu_cell(runs: dict[int, dict], seeds: list[int]) -> str:
    """Mean ± std over seeds of the best (greedy) dev BLEU of each run: the figure systems are
    chosen by (never the test sets)."""
    values = [runs[s]["best"] for s in seeds if isinstance(runs[s].get("best"), (int, float))]
    return mean_sd_cell(values) if values else "–"


def section_heading(title: str, description: str = "") -> list[str]:
    """The first lines of a results section: its ``###`` title and the set's description."""
    return [f"### {title}", ""] + ([description.strip(), ""] if description else [])


def markdown_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def write_section(path: Path, name: str, section: str) -> None:
    """Replace (or append) the section between ``<!-- results:NAME -->`` markers of a Markdown file."""
    begin, end = f"<!-- results:{name} -->", f"<!-- /results:{name} -->"
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Results\n"
    block = f"{begin}\n{section}{end}"
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        _, post = rest.split(end, 1)
        text = pre + block + post
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    atomic_write_text(path, text)
