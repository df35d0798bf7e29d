"""``syntaxnmt decode-experiment SET.yaml``: decode the trained runs of an experiment set in several
ways -- unknown-word replacement, length penalties, checkpoint averaging, ensembles -- and tabulate.

A decoding set names an experiment set (``systems``: :mod:`syntaxnmt.experiments.sets`, whose runs must
be trained: ``syntaxnmt experiment``) and rows. A row picks a system and its seeds (several seeds:
an ensemble, :mod:`syntaxnmt.decoding.ensemble`), the checkpoint (``best``, ``last``, or ``average: N``,
the mean of the last N periodic checkpoints, :mod:`syntaxnmt.decoding.averaging`) and ``decode`` keys. Lexical
tables the rows name are built first when missing (``lexicons``: path -> config,
:mod:`syntaxnmt.alignment.lexicon`). Every row reports BLEU and chrF on each test set, the paired-bootstrap
p-value against the first row, and, with ``unk_replace``, how many ``<unk>`` were replaced and
how many of the replacements occur in the reference sentence (whitespace tokens of its Moses
tokenization) -- "correct" in that sense. The table replaces the set's section of ``output``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict

from syntaxnmt.alignment.lexicon import build_lexicon
from syntaxnmt.config import config_from_dict, expand_env, load_config
from syntaxnmt.decoding.averaging import average_checkpoints, last_periodic
from syntaxnmt.decoding.ensemble import load_ensemble
from syntaxnmt.decoding.translate import encode_source_lines, load_model, parser_words, translate_ids
from syntaxnmt.decoding.unk import translations_with_replacement
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import load_set, markdown_table, read_set_file, section_heading, set_runs, write_section
from syntaxnmt.inputs import UNK
from syntaxnmt.metrics import paired_bootstrap, score
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import atomic_write_text, read_lines, write_lines


class DecodeRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: str
    seeds: list[int] = [1]
    """One seed: that run; several: an ensemble of their runs."""
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
    bootstrap: int = 1000


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
        work_dirs = [Path(r.cfg.work_dir) for r in set_runs(systems_path, systems, [row.system], row.seeds)]
        paths = _checkpoints(row, work_dirs)
        results[label] = {}
        for name, (src, ref) in tests.items():
            hyp_path = work_dirs[0] / f"{name}.{spec.name}.{_slug(label)}.hyp"
            record = hyp_path.with_suffix(".json")
            if hyp_path.is_file() and record.is_file():  # decoded already
                results[label][name] = {"hyps": read_lines(hyp_path), **json.loads(record.read_text())}
            else:
                t0 = time.perf_counter()
                hyps, counts = _translate(paths, row.decode, src, ref, device)
                counts["seconds"] = time.perf_counter() - t0
                write_lines(hyp_path, hyps)
                atomic_write_text(record, json.dumps(counts))
                results[label][name] = {"hyps": hyps, **counts}
            r = results[label][name]
            log(f"[{label}] {name}: BLEU {score(r['hyps'], [ref], force=True).bleu:.2f} ({r['seconds']:.0f} s)")
    section = _table(spec, results, tests, path)
    target = Path(output or spec.output)
    write_section(target, spec.name, section)
    log(section)
    return section


def _table(spec: DecodeSet, results: dict, tests: dict, path) -> str:
    first = next(iter(results))
    head = ["row", "checkpoint(s)", "decoding"]
    for t in tests:
        head += [f"{t} BLEU", "chrF", f"p vs '{first}'", "<unk> in output", "replaced → in reference", "decode time"]
    rows = []
    for label, by_test in results.items():
        row = spec.rows[label]
        ckpt = f"average of the last {row.average}" if row.average else row.checkpoint
        seeds = f"seeds {'+'.join(map(str, row.seeds))} (ensemble)" if len(row.seeds) > 1 else f"seed {row.seeds[0]}"
        cells = [label, f"{ckpt}, {seeds}", ", ".join(f"{k}={v}" for k, v in row.decode.items() if k != "unk_dictionary") or "–"]
        for t, (_, ref) in tests.items():
            r = by_test[t]
            sc = score(r["hyps"], [ref], force=True)
            if label == first:
                p = "–"
            else:
                cmp = paired_bootstrap(results[first][t]["hyps"], r["hyps"], [ref], n_samples=spec.bootstrap, force=True)
                p = f"{cmp.bleu_p_value:.3f}" + (" *" if cmp.bleu_significant else "")
            fixed = f"{r['correct']} / {r['unk']}" if "correct" in r else "–"
            cells += [f"{sc.bleu:.2f}", f"{sc.chrf:.2f}", p, str(r["unk"]), fixed, f"{r['seconds']:.0f} s"]
        rows.append(cells)
    lines = section_heading(spec.title or spec.name, spec.description)
    lines += [
        f"Command: `{spec.command or 'syntaxnmt decode-experiment ' + str(path)}`. BLEU: sacreBLEU 13a on the detokenized, cased "
        f"output; p: paired bootstrap ({spec.bootstrap} samples) against the first row, * = p < 0.05. '<unk> in output': "
        f"unknown words in the 1-best translations (before replacement); 'replaced → in reference': replacements that occur "
        f"in the reference sentence / replacements. Decode time: wall clock on a shared, loaded 2-core CPU (one thread).",
        "",
        *markdown_table(head, rows),
    ]
    return "\n".join(lines) + "\n"
