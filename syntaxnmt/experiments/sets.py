"""``syntaxnmt experiment SET.yaml``: train a named set of configs with N seeds, evaluate, tabulate.

A set file lists labelled configs (one is the baseline), the seeds, overrides applied to every
run, and the test sets. Every (config, seed) run trains in ``<work_dir>[-<tag>]-seed<S>`` (resuming an
interrupted run, skipping a finished one), translates each test set with its best checkpoint and
scores it with sacreBLEU. The table -- BLEU mean ± std over seeds, chrF, the paired-bootstrap
p-value against the baseline, and the cost of an update relative to the baseline -- replaces the
set's section of a Markdown file (``docs/results.md`` by default).

With ``--jobs N`` the unfinished runs train and translate in N worker processes first
(:mod:`syntaxnmt.experiments.runner`); the records and the table are then made here, as after sequential runs.

The p-value compares the seed-matched outputs of all seeds at once: the hypotheses of seeds
1..N are concatenated (and the references repeated), so every (sentence, seed) pair is one
item of the paired bootstrap resampling.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from syntaxnmt.checkpoint import load_model_checkpoint
from syntaxnmt.config import Config, expand_env, load_config, read_yaml_file
from syntaxnmt.decoding.translate import load_model, translate_lines
from syntaxnmt.errors import UserError
from syntaxnmt.metrics import paired_bootstrap, score
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
    seeds: Annotated[list[int], Field(min_length=1)] = [1]
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
    bootstrap: int = 1000


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


def is_finished(cfg: Config, spec: ExperimentSet) -> bool:
    """Whether a run has trained (``done.json``) and translated every test set."""
    work = Path(cfg.work_dir)
    return (work / "done.json").is_file() and all((work / f"{name}.hyp").is_file() for name in spec.test_sets)


def make_table(spec: ExperimentSet, records: dict[str, dict[int, dict]], seeds: list[int]) -> str:
    refs = {name: read_lines(t.ref) for name, t in spec.test_sets.items()}
    base = records[spec.baseline]
    base_step = statistics.mean(r["train_seconds"] / max(r["steps"], 1) for r in base.values())
    tests = list(spec.test_sets)
    head = ["system", "params", "dev BLEU"] + [f"{t} BLEU" for t in tests] + [f"{t} chrF" for t in tests] + [f"p vs {spec.baseline} ({t})" for t in tests] + ["updates", "train tok/s", "time/update (rel.)"]
    rows = []
    for label, runs in records.items():
        cells = [label, f"{runs[seeds[0]]['params'] / 1e6:.2f}M", dev_bleu_cell(runs, seeds)]
        bleu_cells, chrf_cells, p_cells = [], [], []
        for t in tests:
            hyps = {s: read_lines(runs[s]["hyps"][t]) for s in seeds}
            scores = [score(hyps[s], [refs[t]], force=True) for s in seeds]
            bleus = [sc.bleu for sc in scores]
            std = f" ± {statistics.stdev(bleus):.2f}" if len(bleus) > 1 else ""
            bleu_cells.append(f"{statistics.mean(bleus):.2f}{std}")
            chrf_cells.append(f"{statistics.mean(sc.chrf for sc in scores):.2f}")
            if label == spec.baseline:
                p_cells.append("–")
            else:
                sys_all = [h for s in seeds for h in hyps[s]]
                base_all = [h for s in seeds for h in read_lines(base[s]["hyps"][t])]
                cmp = paired_bootstrap(base_all, sys_all, [refs[t] * len(seeds)], n_samples=spec.bootstrap, force=True)
                direction = "" if not cmp.bleu_significant else " * (better)" if cmp.system_bleu.score > cmp.baseline_bleu.score else " * (worse)"
                p_cells.append(f"{cmp.bleu_p_value:.3f}{direction}")
        step = statistics.mean(r["train_seconds"] / max(r["steps"], 1) for r in runs.values())
        updates = statistics.mean(r["steps"] for r in runs.values())
        known = [r["train_tokens"] / max(r["train_seconds"], 1e-9) for r in runs.values() if r.get("train_tokens")]
        tok_s = f"{statistics.mean(known):.0f}" if known else "–"
        rows.append(cells + bleu_cells + chrf_cells + p_cells + [f"{updates:.0f}", tok_s, f"{step / base_step:.2f}×"])
    lines = section_heading(spec.title or spec.name, spec.description)
    lines += [
        f"Seeds: {', '.join(map(str, seeds))} (BLEU: mean ± std over seeds; sacreBLEU 13a, cased). "
        f"p: paired bootstrap resampling ({spec.bootstrap} samples) of all seeds' outputs against the "
        f"baseline's (two-sided), * = p < 0.05 with the direction of the difference. dev BLEU: the best greedy dev BLEU of each run "
        f"(that checkpoint decodes the test sets), the figure to choose systems by. Overrides: `{' '.join(spec.overrides) or 'none'}`. tok/s and time/update are "
        f"wall-clock figures of the training runs, disturbed by any other load on the machine (controlled "
        f"step-time measurements: `benchmarks/syntax_overhead.py`, docs/benchmarks.md).",
        "",
        *markdown_table(head, rows),
    ]
    return "\n".join(lines) + "\n"


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
