"""``syntaxnmt decode-experiment SET.yaml``: decode the trained runs of an experiment set in several
ways -- unknown-word replacement, length penalties, checkpoint averaging, ensembles -- and tabulate.

A decoding set names an experiment set (``systems``: :mod:`syntaxnmt.experiments.sets`, whose runs must
be trained: ``syntaxnmt experiment``) and rows. A row picks a system and its seeds (several seeds:
an ensemble, :mod:`syntaxnmt.decoding.ensemble`; with ``per_seed``, each seed decoded on its own),
the checkpoint (``best``, ``last``, or ``average: N``, the mean of the last N periodic checkpoints,
:mod:`syntaxnmt.decoding.averaging`) and ``decode`` keys. Lexical tables the rows name are built
first when missing (``lexicons``: path -> config, :mod:`syntaxnmt.alignment.lexicon`). Every row
reports BLEU and chrF on each test set (mean ± sd over the seeds of a ``per_seed`` row), the
seed-aware statistics of :func:`syntaxnmt.experiments.sets.seed_cells` against the first row (s_sel /
s_opt, approximate randomization stratified over seed pairs, ASO ε_min with three seeds or more),
the sentence-level paired bootstrap, and, with ``unk_replace``, how many ``<unk>`` were replaced
and how many of the replacements occur in the reference sentence (whitespace tokens of its Moses
tokenization) -- "correct" in that sense. When rows are decoded per seed, the power line and the A/A
check on the first row's seeds follow the table (:func:`syntaxnmt.experiments.sets.seed_notes`, as
under an experiment table). The table replaces the set's section of ``output``.

Pairs for the tests against the first row: two ``per_seed`` rows pair seed k with seed k (the
seeds they share); a single output (one seed, or an ensemble) against a ``per_seed`` row is paired
with each of its seeds; two single outputs make one pair.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, PositiveInt

from syntaxnmt.alignment.lexicon import build_lexicon
from syntaxnmt.config import config_from_dict, expand_env, load_config
from syntaxnmt.decoding.averaging import average_checkpoints, last_periodic
from syntaxnmt.decoding.ensemble import load_ensemble
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.sources import encode_source_lines, parser_words
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.decoding.unk import translations_with_replacement
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import SEED_LEVEL_CAPTION, load_set, markdown_table, mean_sd_cell, read_set_file, section_heading, seed_cells, seed_level_cell, seed_notes, sentence_bootstrap_cell, set_runs, statistics_caption, write_section
from syntaxnmt.inputs import UNK
from syntaxnmt.metrics import ReferenceScorer, bleu_from_statistics, score
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import atomic_write_text, read_lines, write_lines


class DecodeRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: str
    seeds: list[int] = [1]
    """One seed: that run; several: an ensemble of their runs (or, with ``per_seed``, each run alone)."""
    per_seed: bool = False
    """Decode each of ``seeds`` on its own: the row is then a system over those seeds (mean ± sd,
    seed-aware tests), not an ensemble."""
    checkpoint: str = "best"
    """``best`` or ``last`` (ignored with ``average``)."""
    average: int = 0
    """Average the last N periodic checkpoints of each run (0: off)."""
    decode: dict = {}


class DecodeSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    title: str = ""
    description: str = ""
    systems: str
    """The experiment set (relative to this file) whose runs are decoded."""
    lexicons: dict[str, str] = {}
    """Lexical table path -> config (relative to this file) whose training corpus builds it."""
    rows: dict[str, DecodeRow]
    command: str = ""
    output: str = "docs/decoding.md"
    bootstrap: PositiveInt = 1000
    """Resamples of the sentence-level paired bootstrap and of the test-set spread s_sel."""
    shuffles: PositiveInt = 10_000
    """Shuffles of the approximate randomization test over seed pairs."""


def _checkpoints(row: DecodeRow, work_dirs: list[Path]) -> list[Path]:
    """The checkpoint of every run of the row (averaged into ``averaged-last<N>.pt`` when asked)."""
    if not row.average:
        return [w / f"{row.checkpoint}.pt" for w in work_dirs]
    paths = []
    for w in work_dirs:
        out = w / f"averaged-last{row.average}.pt"
        if not out.is_file():
            average_checkpoints(last_periodic(w, row.average), out)
        paths.append(out)
    return paths


def _translate(paths: list[Path], decode_keys: dict, lines: list[str], refs: list[str], device) -> tuple[list[str], dict]:
    """Translations of ``lines`` by the model (or ensemble) of ``paths``, and unknown-word counts."""
    model, cfg, toks = load_ensemble(paths, device) if len(paths) > 1 else load_model(paths[0], device)
    decode = config_from_dict({"decode": {**cfg.decode.model_dump(), **decode_keys}}, source="decode-experiment row").decode
    with torch.inference_mode():
        sources, annotations = encode_source_lines(cfg, toks, lines, model.feature_spec)
        hyps = translate_ids(model, sources, decode, device, annotations=annotations)
        if decode.unk_replace == "none":
            out = [toks.tgt.decode(nb[0].tokens) for nb in hyps]
            return out, {"unk": sum(nb[0].tokens.count(UNK) for nb in hyps)}
        replaced: list[tuple[int, str, str]] = []
        out = [nb[0][0] for nb in translations_with_replacement(toks, lines, sources, hyps, decode, parser_words(cfg, lines), replaced)]
    ref_words = [set(toks.tgt.normalize(r).split()) for r in refs]
    correct = sum(new in ref_words[k] for k, _, new in replaced)
    return out, {"unk": len(replaced), "correct": correct}


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower()


def run_decode_set(path: str | Path, output: str | None = None, log=print) -> str:
    """Decode every row of the set at ``path``; returns the Markdown section written to the output file."""
    spec = read_set_file(path, DecodeSet)
    base = Path(path).parent
    systems_path = base / spec.systems
    systems = load_set(systems_path)
    for table, config in spec.lexicons.items():
        if not Path(expand_env(table)).is_file():
            build_lexicon(load_config(base / config), expand_env(table), log=log)
    device = resolve_device("cpu")
    tests = {name: (read_lines(t.src), read_lines(t.ref)) for name, t in systems.test_sets.items()}
    results: dict[str, dict] = {}
    for label, row in spec.rows.items():
        if row.system not in systems.configs:
            raise UserError(f"{path}: row '{label}' names an unknown system '{row.system}' (systems: {', '.join(systems.configs)})")
        if not row.seeds or len(set(row.seeds)) < len(row.seeds):
            raise UserError(f"{path}: row '{label}' needs distinct seeds, got {row.seeds}")
        work_dirs = [Path(r.cfg.work_dir) for r in set_runs(systems_path, systems, [row.system], row.seeds)]
        paths = _checkpoints(row, work_dirs)
        # What is decoded: each seed's run alone (per_seed), or one model (one seed, or an ensemble).
        outputs = {seed: ([p], w) for seed, p, w in zip(row.seeds, paths, work_dirs)} if row.per_seed else {None: (paths, work_dirs[0])}
        results[label] = {}
        for name, (src, ref) in tests.items():
            results[label][name] = {}
            for seed, (models, work) in outputs.items():
                hyp_path = work / f"{name}.{spec.name}.{_slug(label)}.hyp"
                record = hyp_path.with_suffix(".json")
                if hyp_path.is_file() and record.is_file():  # decoded already
                    r = {"hyps": read_lines(hyp_path), **json.loads(record.read_text())}
                else:
                    t0 = time.perf_counter()
                    hyps, counts = _translate(models, row.decode, src, ref, device)
                    counts["seconds"] = time.perf_counter() - t0
                    write_lines(hyp_path, hyps)
                    atomic_write_text(record, json.dumps(counts))
                    r = {"hyps": hyps, **counts}
                results[label][name][seed] = r
                which = f" seed {seed}" if seed is not None else ""
                log(f"[{label}{which}] {name}: BLEU {score(r['hyps'], [ref], force=True).bleu:.2f} ({r['seconds']:.0f} s)")
    section = _table(spec, results, tests, path)
    target = Path(output or spec.output)
    write_section(target, spec.name, section)
    log(section)
    return section


def _pairs(first: dict, other: dict) -> list[tuple]:
    """The (first row's output, other row's output) keys compared by the tests (module docstring)."""
    if None in first and None in other:
        return [(None, None)]
    if None in first:
        return [(None, k) for k in other]
    if None in other:
        return [(k, None) for k in first]
    return [(k, k) for k in other if k in first]


def _table(spec: DecodeSet, results: dict, tests: dict, path) -> str:
    first = next(iter(results))
    scorers = {t: ReferenceScorer([ref]) for t, (_, ref) in tests.items()}
    for by_test in results.values():
        for t, outputs in by_test.items():
            for r in outputs.values():
                r["stats"] = scorers[t].bleu_statistics(r["hyps"])
    head = ["row", "checkpoint(s)", "decoding"]
    for t in tests:
        head += [f"{t} BLEU", "chrF", "s_sel / s_opt", f"p vs '{first}', AR (test-set variance only)", f"ASO ε_min vs '{first}' (better / worse)", f"p, sentence bootstrap vs '{first}' (test-set variance only)", "<unk> in output", "replaced → in reference", "decode time", f"Δ vs '{first}' [95 % CI]; p (seed level)"]
    rows = []
    for label, by_test in results.items():
        row = spec.rows[label]
        ckpt = f"average of the last {row.average}" if row.average else row.checkpoint
        if row.per_seed:
            seeds = f"seeds {', '.join(map(str, row.seeds))} (each alone)"
        else:
            seeds = f"seeds {'+'.join(map(str, row.seeds))} (ensemble)" if len(row.seeds) > 1 else f"seed {row.seeds[0]}"
        cells = [label, f"{ckpt}, {seeds}", ", ".join(f"{k}={v}" for k, v in row.decode.items() if k != "unk_dictionary") or "–"]
        for t in tests:
            outputs = by_test[t]
            bleus = [float(bleu_from_statistics(r["stats"].sum(0))) for r in outputs.values()]  # = sacreBLEU's corpus BLEU
            bleu = mean_sd_cell(bleus)
            chrf = f"{statistics.mean(scorers[t].chrf(r['hyps']) for r in outputs.values()):.2f}"
            pairs = _pairs(results[first][t], outputs)
            base_stats = [results[first][t][a]["stats"] for a, _ in pairs]
            own_stats = [outputs[b]["stats"] for _, b in pairs]
            if label == first or not pairs:
                own = seed_cells([], [r["stats"] for r in outputs.values()], spec.bootstrap, spec.shuffles, is_baseline=True)
                boot = "–"
            else:
                own = seed_cells(base_stats, own_stats, spec.bootstrap, spec.shuffles)
                if not (row.per_seed and spec.rows[first].per_seed):
                    own["aso"] = "–"  # ASO compares per-seed score distributions: both rows need their seeds
                boot = sentence_bootstrap_cell(base_stats, own_stats, spec.bootstrap)
            unk = sum(r["unk"] for r in outputs.values())
            fixed = f"{sum(r['correct'] for r in outputs.values())} / {unk}" if all("correct" in r for r in outputs.values()) else "–"
            seconds = sum(r["seconds"] for r in outputs.values())
            cells += [bleu, chrf, own["spread"], own["p"], own["aso"], boot, str(unk), fixed, f"{seconds:.0f} s", seed_level_cell(own)]
        rows.append(cells)
    lines = section_heading(spec.title or spec.name, spec.description)
    lines += [
        f"Command: `{spec.command or 'syntaxnmt decode-experiment ' + str(path)}`. BLEU: sacreBLEU 13a on the detokenized, cased "
        f"output (rows decoded per seed: mean ± sd over the seeds). "
        + statistics_caption(f"'{first}'", spec.bootstrap, spec.shuffles)
        + SEED_LEVEL_CAPTION
        + " A single output (one seed or an ensemble) against a row decoded per seed is paired with each of its seeds; two single "
        f"outputs make one pair. p, sentence bootstrap: paired bootstrap resampling ({spec.bootstrap} samples, two-sided) of the "
        "sentences of the paired outputs pooled; it resamples fixed outputs and does not measure training variance. '<unk> in output': "
        "unknown words in the 1-best translations (before replacement); 'replaced → in reference': replacements that occur "
        "in the reference sentence / replacements (rows decoded per seed: summed over the seeds, as is the decode time). "
        "Decode time: wall clock on a shared, loaded 2-core CPU (one thread).",
        "",
        *markdown_table(head, rows),
    ]
    # Rows decoded per seed: what their seeds can detect against the first row, and the A/A check on its seeds.
    others = [len(spec.rows[label].seeds) for label in results if label != first and spec.rows[label].per_seed]
    for note in seed_notes(f"'{first}'", {t: [r["stats"] for r in results[first][t].values()] for t in tests}, others, spec.bootstrap, spec.shuffles, unit="row"):
        lines += ["", note]
    return "\n".join(lines) + "\n"
