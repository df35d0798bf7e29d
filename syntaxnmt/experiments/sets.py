"""``syntaxnmt experiment SET.yaml``: train a named set of configs with N seeds, evaluate, tabulate.

A set file lists labelled configs (one is the baseline), the seeds, overrides applied to every
run, and the test sets. Every (config, seed) run trains in ``<work_dir>[-<tag>]-seed<S>`` (resuming an
interrupted run, skipping a finished one), translates each test set with its best checkpoint and
scores it with sacreBLEU. The table -- BLEU mean ± sd over seeds, chrF, the test-set and
between-seed standard deviations (s_sel, s_opt), the p-value of approximate randomization
stratified over seed pairs against the baseline, the ASO ε_min of the per-seed scores (three seeds
or more), the sentence-level paired bootstrap, and the cost of an update relative to the baseline --
replaces the set's section of a Markdown file (``docs/results.md`` by default). The statistics are
those of :mod:`syntaxnmt.metrics` (Clark et al. 2011; Dror et al. 2019); :func:`seed_cells` makes
them for the decoding and alignment tables too.

With ``--jobs N`` the unfinished runs train and translate in N worker processes first
(:mod:`syntaxnmt.experiments.runner`); the records and the table are then made here, as after sequential runs.

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
from syntaxnmt.metrics import SIGNIFICANCE_LEVEL, Metric, ReferenceScorer, aso_epsilon_min, bleu_from_statistics, paired_bootstrap_p, seed_statistics, stratified_approximate_randomization
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import atomic_write_text, read_lines, write_lines
from syntaxnmt.training.train import train


class TestSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    src: str
    ref: str
    conllu: str = ""
    """Parses of ``src`` for models with tree features when the corpus was parsed from CoNLL-U."""


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


def run_config(label: str, cfg: Config, spec: ExperimentSet, log) -> dict:
    """Train (or resume, or skip when finished) and translate every test set; returns the run's record."""
    work = Path(cfg.work_dir)
    done = work / "done.json"
    if done.is_file():
        record = json.loads(done.read_text())
        log(f"[{label} seed {cfg.seed}] trained already ({record['steps']} updates)")
    else:
        log(f"[{label} seed {cfg.seed}] training in {work}")
        progress = train(cfg, resume=True, log=log)  # a signal raises Interrupted once last.pt is saved
        record = {"steps": progress.step, "train_seconds": progress.train_seconds, "train_tokens": progress.train_tokens, "best": progress.best, "params": _count_params(work / "best.pt")}
        atomic_write_text(done, json.dumps(record))
    device = resolve_device(cfg.train.device)
    model = None
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
            log(f"[{label} seed {cfg.seed}] translated {name} in {time.perf_counter() - t0:.0f} s")
        record["hyps"][name] = str(hyp_path)
    if "params" not in record:  # done.json of an older run
        record["params"] = _count_params(work / "best.pt")
    return record


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


def set_runs(path: str | Path, spec: ExperimentSet, labels: list[str], seeds: list[int]) -> list[Run]:
    """The (config, seed) runs of a set, in table order, each config loaded with the set's overrides,
    its seed and its per-seed ``work_dir``."""
    base_dir = Path(path).parent
    runs = []
    for label in labels:
        for seed in seeds:
            base_cfg = load_config(base_dir / spec.configs[label], spec.overrides)
            work_dir = f"{base_cfg.work_dir}-{spec.tag}" if spec.tag else base_cfg.work_dir
            # The value is JSON (a YAML string), so characters like '#' or ': ' in the path survive.
            cfg = load_config(base_dir / spec.configs[label], spec.overrides + [f"--seed={seed}", f"--work_dir={json.dumps(f'{work_dir}-seed{seed}')}"])
            runs.append(Run(label, seed, cfg))
    return runs


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


def make_table(spec: ExperimentSet, records: dict[str, dict[int, dict]], seeds: list[int], controls: dict[str, str] | None = None) -> str:
    """The set's Markdown section. ``controls`` (control arm -> variant, :func:`control_pairs`): with
    any pair among the systems, a column tests each variant against its control arm(s) over the
    seed pairs."""
    controls = {arm: variant for arm, variant in (controls or {}).items() if arm in records and variant in records}
    arms_of: dict[str, list[str]] = {}
    for arm, variant in controls.items():
        arms_of.setdefault(variant, []).append(arm)
    refs = {name: read_lines(t.ref) for name, t in spec.test_sets.items()}
    base = records[spec.baseline]
    base_step = statistics.mean(r["train_seconds"] / max(r["steps"], 1) for r in base.values())
    tests = list(spec.test_sets)
    scorers = {t: ReferenceScorer([refs[t]]) for t in tests}
    hyps = {label: {t: {s: read_lines(runs[s]["hyps"][t]) for s in seeds} for t in tests} for label, runs in records.items()}
    stats = {label: {t: [scorers[t].bleu_statistics(by_test[t][s]) for s in seeds] for t in tests} for label, by_test in hyps.items()}
    head = ["system", "params", "dev BLEU"] + [f"{t} BLEU" for t in tests] + [f"{t} chrF" for t in tests] + [f"{t} s_sel / s_opt" for t in tests]
    head += [f"p vs {spec.baseline} ({t})" for t in tests] + [f"ASO ε_min vs {spec.baseline} ({t})" for t in tests]
    head += [f"p vs own control ({t})" for t in tests] if controls else []
    head += [f"p, sentence bootstrap ({t})" for t in tests] + ["updates", "train tok/s", "time/update (rel.)"]
    rows = []
    for label, runs in records.items():
        cells = [label, f"{runs[seeds[0]]['params'] / 1e6:.2f}M", dev_bleu_cell(runs, seeds)]
        bleu_cells, chrf_cells, spread_cells, p_cells, aso_cells, control_cells, boot_cells = [], [], [], [], [], [], []
        for t in tests:
            bleus = [float(bleu_from_statistics(st.sum(0))) for st in stats[label][t]]  # = sacreBLEU's corpus BLEU
            std = f" ± {statistics.stdev(bleus):.2f}" if len(bleus) > 1 else ""
            bleu_cells.append(f"{statistics.mean(bleus):.2f}{std}")
            chrf_cells.append(f"{statistics.mean(scorers[t].chrf(hyps[label][t][s]) for s in seeds):.2f}")
            cmp = seed_cells(stats[spec.baseline][t], stats[label][t], spec.bootstrap, spec.shuffles, is_baseline=label == spec.baseline)
            spread_cells.append(cmp["spread"])
            p_cells.append(cmp["p"])
            aso_cells.append(cmp["aso"])
            boot_cells.append("–" if label == spec.baseline else sentence_bootstrap_cell(stats[spec.baseline][t], stats[label][t], spec.bootstrap))
            versus = [(arm, seed_cells(stats[arm][t], stats[label][t], spec.bootstrap, spec.shuffles)["p"]) for arm in arms_of.get(label, [])]
            control_cells.append("; ".join(p if len(versus) == 1 else f"{p} ({arm})" for arm, p in versus) or "–")
        step = statistics.mean(r["train_seconds"] / max(r["steps"], 1) for r in runs.values())
        updates = statistics.mean(r["steps"] for r in runs.values())
        known = [r["train_tokens"] / max(r["train_seconds"], 1e-9) for r in runs.values() if r.get("train_tokens")]
        tok_s = f"{statistics.mean(known):.0f}" if known else "–"
        rows.append(cells + bleu_cells + chrf_cells + spread_cells + p_cells + aso_cells + (control_cells if controls else []) + boot_cells + [f"{updates:.0f}", tok_s, f"{step / base_step:.2f}×"])
    lines = section_heading(spec.title or spec.name, spec.description)
    lines += [
        f"Seeds: {', '.join(map(str, seeds))}. BLEU: mean ± sd over seeds (sacreBLEU 13a, cased); chrF: mean over seeds. "
        + statistics_caption(spec.baseline, spec.bootstrap, spec.shuffles, one_seed=len(seeds) == 1)
        + (
            " p vs own control: the same test of a variant against its random-structure control arm "
            f"({', '.join(f'{arm} for {variant}' for arm, variant in controls.items())}; data.structure_control, "
            "docs/syntax.md): a variant helps only if it beats both the baseline and its control."
            if controls
            else ""
        )
        + f" p, sentence bootstrap: paired bootstrap resampling ({spec.bootstrap} samples, two-sided) of the sentences of all "
        f"seeds' outputs pooled; it resamples fixed outputs and does not measure training variance. dev BLEU: the best greedy dev BLEU of each run "
        f"(that checkpoint decodes the test sets), the figure to choose systems by. Overrides: `{' '.join(spec.overrides) or 'none'}`. tok/s and time/update are "
        f"wall-clock figures of the training runs, disturbed by any other load on the machine (controlled "
        f"step-time measurements: `benchmarks/syntax_overhead.py`, docs/benchmarks.md).",
        "",
        *markdown_table(head, rows),
    ]
    return "\n".join(lines) + "\n"


def sentence_bootstrap_cell(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], bootstrap: int) -> str:
    """The sentence-level paired bootstrap (sacreBLEU's ``--paired-bs``) of the outputs of all seed
    pairs pooled -- every (sentence, seed) one item -- with the direction of a significant difference."""
    base_all, sys_all = np.concatenate(baseline), np.concatenate(system)
    p = paired_bootstrap_p(base_all, sys_all, bootstrap)
    return f"{p:.3f}" + direction_mark(p, float(bleu_from_statistics(sys_all.sum(0)) - bleu_from_statistics(base_all.sum(0))))


def direction_mark(p: float, difference: float) -> str:
    """`` * (better)`` / `` * (worse)`` for a difference significant at p < 0.05, else nothing."""
    if p >= SIGNIFICANCE_LEVEL:
        return ""
    return " * (better)" if difference > 0 else " * (worse)"


def seed_cells(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], bootstrap: int, shuffles: int, *, is_baseline: bool = False, metric: Metric = bleu_from_statistics, digits: int = 2) -> dict[str, str]:
    """The seed-aware cells of one system on one test set, from the sentence statistics of each
    seed's output (``baseline[k]`` and ``system[k]``: seed k of each, the same sentences):

    * ``spread``: ``s_sel / s_opt`` -- the test-set sd (bootstrap of the sentences, averaged over
      seeds) and the sd of the per-seed scores (Clark et al. 2011); ``–`` for s_opt with one seed;
    * ``p``: approximate randomization stratified over the seed pairs (``shuffles`` shuffles), with
      the direction of a difference significant at p < 0.05; ``–`` for the baseline itself;
    * ``aso``: ε_min of "the system's per-seed scores almost stochastically dominate the
      baseline's" (Dror et al. 2019), with three seeds or more; else ``–``.
    """
    own = seed_statistics(system, metric, bootstrap)
    spread = f"{own.s_sel:.{digits}f} / " + (f"{own.s_opt:.{digits}f}" if own.s_opt is not None else "–")
    if is_baseline:
        return {"spread": spread, "p": "–", "aso": "–"}
    base_scores = [float(metric(np.asarray(b).sum(0))) for b in baseline]
    p = stratified_approximate_randomization(np.stack(baseline), np.stack(system), metric, n_shuffles=shuffles)
    cell = f"{p:.4f}" + direction_mark(p, own.mean - statistics.mean(base_scores))
    aso = f"{aso_epsilon_min(own.scores, base_scores):.2f}" if len(own.scores) >= 3 and len(base_scores) >= 3 else "–"
    return {"spread": spread, "p": cell, "aso": aso}


def statistics_caption(baseline: str, bootstrap: int, shuffles: int, one_seed: bool = False, metric: str = "BLEU") -> str:
    """What the seed-aware columns of a table (:func:`seed_cells`) are, for its caption."""
    one = " With one seed it is the ordinary paired test of that seed's outputs." if one_seed else ""
    return (
        f"s_sel / s_opt (Clark et al. 2011): the test-set standard deviation (bootstrap, {bootstrap} resamples of the test "
        f"sentences, averaged over seeds) and the standard deviation over seeds. p vs {baseline}: approximate randomization "
        f"({shuffles} shuffles, two-sided) stratified over seed pairs -- sentence swaps only between seed k of the system and "
        f"seed k of {baseline}, the mean {metric} over seeds as statistic (MultEval's test); * = p < 0.05, with the direction.{one} "
        f"ASO ε_min vs {baseline} (three seeds or more): Almost Stochastic Order of the per-seed {metric} (Dror et al. 2019; 1000 "
        f"bootstrap iterations, confidence 0.95) -- below 0.5 the system is almost stochastically better than {baseline}, 0 "
        f"better at every quantile, 1 worse."
    )


def dev_bleu_cell(runs: dict[int, dict], seeds: list[int]) -> str:
    """Mean ± std over seeds of the best (greedy) dev BLEU of each run: the figure systems are
    chosen by (never the test sets)."""
    values = [runs[s]["best"] for s in seeds if isinstance(runs[s].get("best"), (int, float))]
    if not values:
        return "–"
    return f"{statistics.mean(values):.2f}" + (f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else "")


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
