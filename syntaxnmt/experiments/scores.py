"""What a finished run keeps so that its table can be re-scored without training.

Every run of ``syntaxnmt experiment`` writes ``<work_dir>/scores.json.gz``: its record (updates,
training time, tokens, best dev BLEU, parameters, the dev curve), and for every test set its
hypotheses and sacreBLEU's per-sentence sufficient statistics -- cased BLEU (13a), lowercased BLEU
(13a, ``lowercase=True``) and chrF2 -- from which every number of the table is recomputed
(:func:`syntaxnmt.metrics.bleu_from_statistics`, :func:`syntaxnmt.metrics.chrf_from_statistics`),
so ``--rescore`` needs neither the models nor the references. ``--collect`` copies these files to
``results/<set name>/<label>-seed<S>.json.gz``, the folder committed with a table. The files are
gzip with no timestamp and sorted JSON: the same run gives the same bytes.

A run scored on a contrastive test set may keep it too (``contrastive``: per context mode, the
per-item outcomes, draws and (phenomenon, distance) cells of ``syntaxnmt score -o``), so that its
accuracy is resampled by item and seed like a BLEU (:func:`contrastive_statistics`).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from syntaxnmt.errors import UserError
from syntaxnmt.metrics import ReferenceScorer
from syntaxnmt.textio import atomic_write, read_lines

SCORES_FILE = "scores.json.gz"
FORMAT = 1
RECORD_KEYS = ("steps", "train_seconds", "train_tokens", "best", "params")
CONTRASTIVE_KEYS = ("outcomes", "draws", "cells")


def label_slug(label: str) -> str:
    """A file-name form of a system label: ``"+ input features (random-tree control)"`` -> ``input-features-random-tree-control``."""
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower() or "system"


def results_file(results_dir: str | Path, label: str, seed: int) -> Path:
    """Where ``--collect`` puts a run's scores in the committed results folder."""
    return Path(results_dir) / f"{label_slug(label)}-seed{seed}.json.gz"


def test_statistics(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, np.ndarray]:
    """Per-sentence statistics of one output: cased BLEU, lowercased BLEU and chrF2."""
    cased, lower = ReferenceScorer([refs]), ReferenceScorer([refs], lowercase=True)
    return {"bleu": cased.bleu_statistics(hyps), "bleu_lc": lower.bleu_statistics(hyps), "chrf": cased.chrf_statistics(hyps)}


def _to_json(stats: np.ndarray) -> list[list[int]]:
    return [[int(x) for x in row] for row in np.asarray(stats).round().astype(np.int64)]


def encode(label: str, seed: int, record: dict, tests: dict[str, dict], dev_curve: Sequence[Sequence[float]] = (), contrastive: dict[str, dict] | None = None) -> bytes:
    """The bytes of a scores file (gzip without timestamp, sorted JSON); ``contrastive``: context
    mode -> a ``syntaxnmt score -o`` result (its ``outcomes``, ``draws`` and ``cells`` are kept)."""
    tree = {
        "format": FORMAT,
        "label": label,
        "seed": seed,
        "record": {k: record.get(k) for k in RECORD_KEYS},
        "dev_curve": [[int(s), float(b)] for s, b in dev_curve],
        "tests": {name: {"hyps": list(t["hyps"]), **{k: _to_json(t[k]) for k in ("bleu", "bleu_lc", "chrf")}} for name, t in sorted(tests.items())},
    }
    if contrastive:
        tree["contrastive"] = {mode: {k: r[k] for k in CONTRASTIVE_KEYS} for mode, r in contrastive.items()}
    text = json.dumps(tree, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return gzip.compress(text, compresslevel=9, mtime=0)


def write_run_scores(work_dir: str | Path, label: str, seed: int, record: dict, hyp_paths: dict[str, str], refs: dict[str, Sequence[str]], dev_curve: Sequence[Sequence[float]] = ()) -> Path:
    """Score a run's test outputs sentence by sentence and write ``<work_dir>/scores.json.gz``."""
    tests = {}
    for name, path in hyp_paths.items():
        hyps = read_lines(path)
        tests[name] = {"hyps": hyps, **test_statistics(hyps, refs[name])}
    target = Path(work_dir) / SCORES_FILE
    data = encode(label, seed, record, tests, dev_curve)
    atomic_write(target, lambda f: f.write(data))
    return target


def read_run_scores(path: str | Path) -> dict:
    """A scores file as a run record for the table: the record's fields plus ``tests`` (name ->
    ``bleu``/``bleu_lc``/``chrf`` arrays and ``hyps``) and ``dev_curve``."""
    try:
        tree = json.loads(gzip.decompress(Path(path).read_bytes()).decode("utf-8"))
    except (OSError, ValueError, EOFError) as e:
        raise UserError(f"{path}: not a readable scores file ({e})") from None
    if not isinstance(tree, dict) or tree.get("format") != FORMAT:
        raise UserError(f"{path}: scores file format {tree.get('format') if isinstance(tree, dict) else None!r}, expected {FORMAT}")
    absent = [key for key in ("record", "dev_curve", "tests") if not isinstance(tree.get(key), dict if key != "dev_curve" else list)]
    if absent:
        raise UserError(f"{path}: scores file without {', '.join(map(repr, absent))}: write it again (syntaxnmt experiment SET re-scores a finished run's hypotheses)")
    record = dict(tree["record"])
    record["dev_curve"] = tree["dev_curve"]
    record["tests"] = {name: _test_arrays(path, name, t) for name, t in tree["tests"].items()}
    record["contrastive"] = {mode: check_contrastive(path, mode, r) for mode, r in tree.get("contrastive", {}).items()}
    return record


def check_contrastive(path: str | Path, mode: str, result: object) -> dict:
    """One context mode's contrastive result (a scores file's, or a ``syntaxnmt score -o`` file's),
    checked: its outcomes, draws and cells, outcomes within 0..draws; the kept keys only."""
    if not isinstance(result, dict) or any(k not in result for k in CONTRASTIVE_KEYS):
        raise UserError(f"{path}: contrastive result '{mode}' lacks one of {', '.join(CONTRASTIVE_KEYS)}")
    outcomes, draws = result["outcomes"], result["draws"]
    if not isinstance(draws, int) or draws < 1 or not isinstance(outcomes, list) or not outcomes or not all(isinstance(o, int) and 0 <= o <= draws for o in outcomes):
        raise UserError(f"{path}: contrastive result '{mode}' needs a positive number of draws and, per item, the trials it passed (0 to draws)")
    return {k: result[k] for k in CONTRASTIVE_KEYS}


def contrastive_statistics(result: dict) -> np.ndarray:
    """A contrastive result's per-item statistics ``(items, 2)``: trials passed, trials -- summed
    and read by :func:`syntaxnmt.metrics.accuracy_from_statistics` like sentence statistics."""
    return np.array([[o, result["draws"]] for o in result["outcomes"]], dtype=np.float64)


def _test_arrays(path: str | Path, name: str, test: object) -> dict:
    """One test set of a scores file: its hypotheses and per-sentence statistics as arrays; a
    :class:`UserError` names what is missing or does not fit (one row of statistics per hypothesis)."""
    kinds = {"hyps": "hypotheses", "bleu": "BLEU statistics", "bleu_lc": "lowercased BLEU statistics", "chrf": "chrF statistics"}
    absent = [what for key, what in kinds.items() if not isinstance(test, dict) or not isinstance(test.get(key), list)]
    if absent:
        raise UserError(f"{path}: test set '{name}' has no {', '.join(absent)}: write it again (syntaxnmt experiment SET re-scores a finished run's hypotheses)")
    if not test["hyps"]:
        raise UserError(f"{path}: test set '{name}' has no sentences")
    arrays = {"hyps": test["hyps"]}
    for key in ("bleu", "bleu_lc", "chrf"):
        try:
            table = np.asarray(test[key], dtype=np.float64)
        except ValueError:
            table = None
        if table is None or table.ndim != 2 or len(table) != len(test["hyps"]):
            rows = len(test[key])
            raise UserError(f"{path}: test set '{name}' has {rows} rows of {kinds[key]} for {len(test['hyps'])} hypotheses")
        arrays[key] = table
    return arrays


def find_run_scores(work_dir: str | Path, results_dir: str | Path, label: str, seed: int) -> Path | None:
    """The run's own scores file, else the committed copy; None when neither exists."""
    for path in (Path(work_dir) / SCORES_FILE, results_file(results_dir, label, seed)):
        if path.is_file():
            return path
    return None
