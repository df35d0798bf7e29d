"""``syntaxnmt align-experiment SET.yaml``: attention-as-alignment systems, AER and BLEU in one table.

A set file names labelled configs (trained with ``syntaxnmt train``, or ``train-joint`` when
``train.alignment.symmetry_weight`` is on), a test set with gold alignments, and optional extra
rows that decode a trained system differently (e.g. with a coverage penalty). For every system the
runner trains (resuming, or skipping a finished run), creates a missing ``data.train_align`` with
``align-external`` (eflomal), translates the test source with ``best.pt`` (BLEU), and reads word
alignments off the cross-attention while force-decoding the test reference (AER against gold):
with the layer/head the system was trained to align with (``train.alignment``), and with all
layers and heads averaged. A joint system also gets a row for its two directions symmetrized, and
eflomal run on the training corpus plus the test pairs is the external reference. The table
replaces the set's section of a Markdown file (:func:`syntaxnmt.experiments.sets.write_section`).
As ``experiment`` does, the runner holds the lock of a system's ``work_dir`` while it writes there
(:func:`syntaxnmt.textio.folder_lock`: its alignments, training, ``done.json`` and translations): a
second run on it is a one-line error naming the holder, before any work.

``readings`` add rows that read a trained system's attention another way, without training again:
Shift-Att's step (``shift``, Chen et al. 2020) and a fixed layer/head, or the best reading of
``align-sweep`` on the set's ``dev`` split with gold links (chosen on dev, scored on test).
``self_training`` makes a system's ``data.train_align`` from a trained teacher's own symmetrized
alignments (a target->source twin of the teacher is trained for it; Zenkel et al. 2020,
Shift-AET) instead of eflomal's: each direction read with the better by dev AER of its best
shifted and best unshifted reading (``reading: best``), or the best of one kind (``shifted``,
``unshifted``); the system's row names the readings.

With ``seeds``, every system trains once per seed (in ``<work_dir>-seed<S>``, as experiment sets do)
and its rows give BLEU and AER as mean ± sd over the seeds, with the seed-aware statistics of
:func:`syntaxnmt.experiments.sets.seed_cells` against the first system (s_sel / s_opt, approximate
randomization stratified over seed pairs, ASO ε_min with three seeds or more), for AER on its
sentence-level counts (:func:`syntaxnmt.data.links.aer_statistics`); under the table, the power
lines and the A/A checks of BLEU and AER on the first system's seeds
(:func:`syntaxnmt.experiments.sets.seed_notes`). Without ``seeds`` each config trains once in its
own ``work_dir`` with its own seed, as before.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, PositiveInt

from syntaxnmt.alignment.external import align_external, run_eflomal
from syntaxnmt.alignment.extract import AttentionReading, model_alignments
from syntaxnmt.alignment.sweep import align_sweep, reading_options, self_training_alignments
from syntaxnmt.config import Config, config_from_dict, load_config
from syntaxnmt.data.corpus import read_parallel
from syntaxnmt.data.links import aer, aer_from_statistics, aer_statistics, read_alignments
from syntaxnmt.data.prepare import model_words
from syntaxnmt.data.synthetic import write_corpus
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import SEED_LEVEL_CAPTION, markdown_table, mean_sd_cell, read_set_file, section_heading, seed_cells, seed_level_cell, seed_notes, statistics_caption, write_section
from syntaxnmt.metrics import bleu_from_statistics, bleu_statistics
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import atomic_write_text, folder_lock, read_lines, write_lines
from syntaxnmt.training.joint import train_joint
from syntaxnmt.training.train import train


class AlignmentTestSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    src: str
    ref: str
    align: str
    """Gold alignments of (src, ref), Pharaoh, 0-indexed unless ``one_indexed``."""
    one_indexed: bool = False


class DecodeVariant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: str
    """Label of a trained config."""
    decode: dict = {}
    """``decode`` keys overriding the system's (e.g. ``coverage_penalty: 0.2``)."""


class ReadingVariant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: str
    """Label of a trained config whose (forward) model is read."""
    shift: bool = False
    """Shift-Att: read every target word at the step where it is the decoder input."""
    layer: int | Literal["average"] | None = None
    head: int | Literal["average"] | None = None
    """Both given: that reading; neither: the best reading (with this ``shift``) of ``align-sweep`` on the set's ``dev`` split."""


class SelfTraining(BaseModel):
    model_config = ConfigDict(extra="forbid")
    teacher: str
    """Label of an earlier config: its model's alignments are the guidance."""
    reverse: str
    """Config (relative to the set file) of the teacher's target->source twin (sides swapped), trained for the labels only."""
    symmetrize: str = "grow-diag-final-and"
    reading: Literal["best", "shifted", "unshifted"] = "best"
    """Each direction's teacher reading, chosen on dev: the better of the best shifted and the best
    unshifted one (``best``), or the best of one kind (:func:`syntaxnmt.alignment.sweep.self_training_alignments`)."""


class AlignmentSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    title: str = ""
    description: str = ""
    configs: dict[str, str]
    """Label -> config path (relative to the set file)."""
    decode_variants: dict[str, DecodeVariant] = {}
    overrides: list[str] = []
    test: AlignmentTestSet
    dev: AlignmentTestSet | None = None
    """Pairs with gold links to choose readings on (``readings`` without layer/head, ``self_training``)."""
    readings: dict[str, ReadingVariant] = {}
    """Extra rows: a trained system's attention read another way (no training)."""
    self_training: dict[str, SelfTraining] = {}
    """System label -> its teacher: the system's ``data.train_align`` is written from the teacher's alignments."""
    synthetic_corpus: str = ""
    synthetic_sizes: tuple[int, int, int] = (20000, 500, 500)
    eflomal_baseline: bool = True
    command: str = ""
    """The command that produces the table (printed under it)."""
    output: str = "docs/results.md"
    seeds: list[int] = []
    """Train every system once per seed (``<work_dir>-seed<S>``); empty: once, in its ``work_dir`` with its ``seed``."""
    bootstrap: PositiveInt = 1000
    """Resamples of the test-set spread s_sel."""
    shuffles: PositiveInt = 10_000
    """Shuffles of the approximate randomization test over seed pairs."""


def load_alignment_set(path: str | Path) -> AlignmentSet:
    spec = read_set_file(path, AlignmentSet)
    if len(set(spec.seeds)) < len(spec.seeds):
        raise UserError(f"{path}: seeds {spec.seeds} name a seed twice")
    for label, variant in spec.decode_variants.items():
        if variant.system not in spec.configs:
            raise UserError(f"{path}: decode variant '{label}' names an unknown system '{variant.system}'")
    for label, reading in spec.readings.items():
        if reading.system not in spec.configs:
            raise UserError(f"{path}: reading '{label}' names an unknown system '{reading.system}'")
        if (reading.layer is None) != (reading.head is None):
            raise UserError(f"{path}: reading '{label}' gives only one of layer/head: give both, or neither to choose them on the dev split")
        if reading.layer is None and spec.dev is None:
            raise UserError(f"{path}: reading '{label}' chooses its layer/head on the dev split: give dev (src, ref, align)")
    labels = list(spec.configs)
    for label, st in spec.self_training.items():
        if label not in spec.configs:
            raise UserError(f"{path}: self_training names an unknown system '{label}'")
        if st.teacher not in spec.configs or labels.index(st.teacher) >= labels.index(label):
            raise UserError(f"{path}: self_training '{label}': the teacher '{st.teacher}' must be a system listed before it")
        if spec.dev is None:
            raise UserError(f"{path}: self_training '{label}' chooses the teacher's readings on the dev split: give dev (src, ref, align)")
    return spec


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (eflomal), user + system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _train(label: str, cfg: Config, log) -> dict:
    work = Path(cfg.work_dir)
    done = work / "done.json"
    if done.is_file():
        log(f"[{label}] trained already")
        return json.loads(done.read_text())
    if cfg.data.train_align and not Path(cfg.data.train_align).is_file():
        align_external(cfg, log=log)
    joint = cfg.train.alignment.symmetry_weight > 0
    log(f"[{label}] {'joint training' if joint else 'training'} in {work}")
    progress = (train_joint if joint else train)(cfg, resume=True, log=log)
    record = {"steps": progress.step, "train_seconds": progress.train_seconds, "joint": joint}
    atomic_write_text(done, json.dumps(record))
    return record


def _checkpoints(cfg: Config, joint: bool) -> tuple[Path, Path | None]:
    work = Path(cfg.work_dir)
    return (work / "forward" / "best.pt", work / "reverse" / "best.pt") if joint else (work / "best.pt", None)


def _bleu(checkpoint: Path, test: AlignmentTestSet, hyp_path: Path, decode: dict, device) -> np.ndarray:
    """The sentence statistics of BLEU (:func:`syntaxnmt.metrics.bleu_statistics`) of the test translation."""
    if not hyp_path.is_file():
        model, cfg, toks = load_model(checkpoint, device)
        options = config_from_dict({"decode": {**cfg.decode.model_dump(), **decode}}, source=f"{checkpoint} decode options").decode
        with torch.inference_mode():
            out = translate_lines(model, cfg, toks, read_lines(test.src), options, device)
        write_lines(hyp_path, [nb[0][0] for nb in out])
    return bleu_statistics(read_lines(hyp_path), [read_lines(test.ref)])


def _aer(gold, hyp) -> tuple[float, float, float]:
    r = aer([s for s, _ in gold], [p for _, p in gold], hyp)
    return 100 * r.aer, 100 * r.precision, 100 * r.recall


def _aer_run(gold, hyp) -> dict:
    """AER, precision and recall (%) of one run's links, with their sentence counts."""
    own = _aer(gold, hyp)
    return {"aer": own[0], "precision": own[1], "recall": own[2], "stats": aer_statistics([s for s, _ in gold], [p for _, p in gold], hyp)}


def _seed_configs(label: str, rel: str, spec: AlignmentSet, base_dir: Path) -> dict[int | None, Config]:
    """The runs of one system: one per seed of the set (``<work_dir>-seed<S>``), or its config as it is.
    A self-trained system's labels (and their prepared corpus) are per seed too (``-seed<S>``)."""
    if not spec.seeds:
        return {None: load_config(base_dir / rel, spec.overrides)}
    cfg = load_config(base_dir / rel, spec.overrides)

    def seeded(seed: int) -> list[str]:
        extra = [f"--seed={seed}", f"--work_dir={json.dumps(f'{cfg.work_dir}-seed{seed}')}"]
        if label in spec.self_training:
            extra += [f"--data.{key}={json.dumps(f'{getattr(cfg.data, key)}-seed{seed}')}" for key in ("train_align", "prepared_dir")]
        return extra

    return {seed: load_config(base_dir / rel, spec.overrides + seeded(seed)) for seed in spec.seeds}


def negative_aer(stats: np.ndarray) -> np.ndarray:
    """-AER: the seed-aware tests read higher as better."""
    return -aer_from_statistics(stats)


def run_alignment_set(path: str | Path, output: str | None = None, log=print) -> str:
    """Run the set at ``path``; returns the Markdown section written to the output file."""
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    spec = load_alignment_set(path)
    base_dir = Path(path).parent
    if spec.synthetic_corpus and not (Path(spec.synthetic_corpus) / "test.tgt").is_file():
        n_train, n_dev, n_test = spec.synthetic_sizes
        write_corpus(spec.synthetic_corpus, n_train=n_train, n_dev=n_dev, n_test=n_test, seed=1)
        log(f"generated the synthetic corpus in {spec.synthetic_corpus}")
    test = spec.test
    src_lines, tgt_lines = read_lines(test.src), read_lines(test.ref)
    gold = read_alignments(test.align, test.one_indexed, [len(x.split()) for x in src_lines], [len(x.split()) for x in tgt_lines])
    device = resolve_device("cpu")
    rows: list[dict] = []  # label, where, runs: [{steps, seconds, bleu: stats, aer: {...}, avg_aer}]
    configs, forwards, main_runs = {}, {}, {}
    for label, rel in spec.configs.items():
        runs = _seed_configs(label, rel, spec, base_dir)
        configs[label] = next(iter(runs.values()))
        main, sym, teacher_readings = [], [], []
        forwards[label] = []
        for k, (seed, cfg) in enumerate(runs.items()):
            name = label if seed is None else f"{label} seed {seed}"
            with folder_lock(cfg.work_dir, "work_dir", log):  # one writer per work_dir, as `experiment`: its labels, training, done.json, translations
                if label in spec.self_training:
                    teacher_readings.append(_self_labels(label, cfg, spec, base_dir, seed, forwards[spec.self_training[label].teacher][k], device, log))
                record = _train(name, cfg, log)
                forward, reverse = _checkpoints(cfg, record["joint"])
                forwards[label].append(forward)
                work = Path(cfg.work_dir)
                run = {"steps": record["steps"], "seconds": record["train_seconds"], "bleu": _bleu(forward, test, work / "test.hyp", {}, device)}
                run["aer"] = _aer_run(gold, model_alignments(forward, src_lines, tgt_lines, device))
                run["avg_aer"] = _aer(gold, model_alignments(forward, src_lines, tgt_lines, device, layer="average", head="average"))[0]
                main.append(run)
                if reverse is not None:
                    sym.append({
                        "aer": _aer_run(gold, model_alignments(forward, src_lines, tgt_lines, device, reverse_checkpoint=reverse)),
                        "avg_aer": _aer(gold, model_alignments(forward, src_lines, tgt_lines, device, reverse_checkpoint=reverse, layer="average", head="average"))[0],
                    })
        a = configs[label].train.alignment
        where = "all layers+heads" if a.layer == "average" and a.head == "average" else f"layer {a.layer}, head {a.head}"
        where += " (full-context pass)" if a.full_context else ""
        where += ", leaky (the leak read as null)" if a.leaky else ""
        if label in spec.self_training and all(teacher_readings):
            where += f"; labels from {spec.self_training[label].teacher}: " + "; ".join(dict.fromkeys(teacher_readings))
        main_runs[label] = main
        rows.append({"label": label, "where": where, "runs": main})
        if sym:
            rows.append({"label": f"{label}, both directions (gdfa)", "where": where, "runs": sym})
    for label, reading in spec.readings.items():
        rows.append(_reading_row(label, reading, spec.dev, forwards[reading.system], main_runs[reading.system], src_lines, tgt_lines, gold, device, log))
    for label, variant in spec.decode_variants.items():
        slug = "-".join(f"{k}{v}" for k, v in sorted(variant.decode.items()))
        runs = []
        for cfg in _seed_configs(variant.system, spec.configs[variant.system], spec, base_dir).values():
            forward, _ = _checkpoints(cfg, cfg.train.alignment.symmetry_weight > 0)
            with folder_lock(cfg.work_dir, "work_dir", log):  # its translation goes into the system's work_dir
                runs.append({"bleu": _bleu(forward, test, Path(cfg.work_dir) / f"test.{slug}.hyp", variant.decode, device)})
        options = ", ".join(f"{k}={v}" for k, v in variant.decode.items())
        rows.append({"label": label, "where": f"(decoding: {options})", "runs": runs})
    extra = [_eflomal_row(configs[next(iter(configs))], src_lines, tgt_lines, gold, log)] if spec.eflomal_baseline else []
    minutes, cpu_minutes = (time.perf_counter() - t0) / 60, (_cpu_seconds() - cpu0) / 60
    cost = f"data, eflomal, training and evaluation: {cpu_minutes:.1f} min of CPU time, {minutes:.1f} min wall clock on a shared 2-core machine"
    section = alignment_table(spec, rows, extra, len(gold), cost, path)
    target = Path(output or spec.output)
    write_section(target, spec.name, section)
    log(section)
    log(f"results written to {target}")
    return section


def alignment_table(spec: AlignmentSet, rows: list[dict], extra: list[list[str]], n_gold: int, cost: str, path) -> str:
    """The set's Markdown section: one row per system (``rows``: label, where, runs -- per seed,
    ``bleu`` sentence statistics and ``aer`` figures with their ``stats``), tested against the
    first; ``extra``: rows of cells as they are (eflomal). With several seeds, the power lines
    and A/A checks of BLEU and AER on the first system's seeds follow the table
    (:func:`syntaxnmt.experiments.sets.seed_notes`)."""
    first = rows[0]
    head = ["system", "alignment read from", "updates", "train time", "test BLEU (beam)", "BLEU s_sel / s_opt", f"BLEU p vs {first['label']}", f"BLEU ASO ε_min vs {first['label']}"]
    head += ["AER", "precision", "recall", "AER s_sel / s_opt", f"AER p vs {first['label']}", f"AER ASO ε_min vs {first['label']}", "AER (all layers+heads averaged)"]
    head += [f"BLEU Δ vs {first['label']} [95 % CI]; p (seed level)", f"−AER Δ vs {first['label']} [95 % CI]; p (seed level)"]
    table = [_row_cells(row, first, spec) for row in rows] + list(extra)
    seeds = f"Seeds: {', '.join(map(str, spec.seeds))} (AER, precision, recall and BLEU: mean ± sd over seeds). " if spec.seeds else "One run per system, with its config's seed. "
    lines = section_heading(spec.title or spec.name, spec.description)
    lines += [
        f"Command: `{spec.command or 'syntaxnmt align-experiment ' + str(path)}` ({cost}). "
        f"AER/precision/recall in % against the {n_gold} gold test alignments (attention argmax: one link per target word -- none where a leaky "
        f"head's leak outweighs every source word -- read while force-decoding the reference); BLEU: sacreBLEU on the detokenized test output. {seeds}"
        + statistics_caption(first["label"], spec.bootstrap, spec.shuffles, one_seed=len(spec.seeds) <= 1, metric="BLEU (AER)")
        + SEED_LEVEL_CAPTION
        + " For AER lower is better: 'better' and ε_min are read that way, and its Δ is of −AER (positive: fewer errors).",
        "",
        *markdown_table(head, table),
    ]
    for key, measure, metric, stats in (("bleu", "BLEU", bleu_from_statistics, lambda run: run["bleu"]), ("aer", "AER", negative_aer, lambda run: run["aer"]["stats"])):
        if key in first["runs"][0]:
            others = [len(row["runs"]) for row in rows[1:] if key in row["runs"][0]]
            for note in seed_notes(first["label"], {"test": [stats(run) for run in first["runs"]]}, others, spec.bootstrap, spec.shuffles, metric=metric, measure=measure):
                lines += ["", note]
    return "\n".join(lines) + "\n"


def _reading_row(label: str, variant: ReadingVariant, dev: AlignmentTestSet | None, forwards: list[Path], system_runs: list[dict], src_lines, tgt_lines, gold, device, log) -> dict:
    """A row that reads each (seed's) model of ``variant.system`` another way; its BLEU is the model's own."""
    runs, wheres = [], []
    for forward, system_run in zip(forwards, system_runs):
        if variant.layer is None:
            reading, result = align_sweep(forward, read_lines(dev.src), read_lines(dev.ref), dev.align, device, one_indexed_gold=dev.one_indexed).best(shift=variant.shift)
            log(f"[{label}] {forward}: best {'shifted' if variant.shift else 'unshifted'} reading on dev: {reading.label} ({result})")
            wheres.append(f"{reading.label} (best on dev)")
        else:
            reading = AttentionReading(*(None if x == "average" else x for x in (variant.layer, variant.head)), variant.shift)
            wheres.append(reading.label)
        links = model_alignments(forward, src_lines, tgt_lines, device, **reading_options(reading))
        runs.append({"bleu": system_run["bleu"], "aer": _aer_run(gold, links)})
    return {"label": label, "where": "; ".join(dict.fromkeys(wheres)), "runs": runs}


def _self_labels(label: str, cfg: Config, spec: AlignmentSet, base_dir: Path, seed: int | None, teacher: Path, device, log) -> str:
    """Write a self-trained system's ``data.train_align`` (unless it exists) from its teacher's
    checkpoint ``teacher`` and the teacher's target->source twin (trained here, once per seed).
    Returns the readings the labels were read with (recorded next to them, ``<train_align>.json``;
    empty for labels written without that record)."""
    if not cfg.data.train_align:
        raise UserError(f"{cfg.work_dir}: the self-trained system '{label}' needs data.train_align (where its teacher's alignments go)")
    output = Path(cfg.data.train_align)
    record = output.with_name(output.name + ".json")
    st = spec.self_training[label]
    if output.is_file():
        # Labels without the record were written before the choice existed: from the best shifted readings.
        chosen = json.loads(record.read_text()) if record.is_file() else {"choice": "shifted"}
        if chosen["choice"] != st.reading:
            how = "" if record.is_file() else f" (no {record.name}: written before the choice, from the best shifted readings)"
            raise UserError(f"{output}: written with the teacher reading '{chosen['choice']}'{how}, the set asks for '{st.reading}': remove it, its .json and {cfg.work_dir} to relabel and retrain")
        return _teacher_readings(chosen) if record.is_file() else ""
    reverse_cfg = _seed_configs(f"{st.teacher} (reverse)", st.reverse, spec, base_dir)[seed]
    _train(f"{st.teacher} (reverse)" + ("" if seed is None else f" seed {seed}"), reverse_cfg, log)
    dev = spec.dev
    output.parent.mkdir(parents=True, exist_ok=True)
    dev_pairs = (read_lines(dev.src), read_lines(dev.ref), dev.align, dev.one_indexed)
    chosen = self_training_alignments(cfg, teacher, Path(reverse_cfg.work_dir) / "best.pt", dev_pairs, output, device, symmetrize=st.symmetrize, reading=st.reading, log=log)
    chosen["choice"] = st.reading
    atomic_write_text(record, json.dumps(chosen, indent=1))
    return _teacher_readings(chosen)


def _teacher_readings(chosen: dict) -> str:
    """The table's note on a self-trained system's labels: each direction's reading and its dev AER."""
    how = "best on dev" if chosen.get("choice", "best") == "best" else f"best {chosen['choice']} on dev"
    return " + ".join(f"{name} {chosen[name]['reading']} (dev AER {100 * chosen[name]['dev_aer']:.1f})" for name in ("forward", "reverse")) + f", {how}"


def _row_cells(row: dict, first: dict, spec: AlignmentSet) -> list[str]:
    """One table row: the means over seeds and the seed-aware cells against the first system."""
    runs, base = row["runs"], first["runs"]
    is_first = row is first
    cells = [row["label"], row["where"]]
    cells += [mean_sd_cell([r["steps"] for r in runs], 0), f"{statistics.mean(r['seconds'] for r in runs):.0f} s"] if "steps" in runs[0] else ["", ""]
    if "bleu" in runs[0]:
        bleu = seed_cells([r["bleu"] for r in base], [r["bleu"] for r in runs], spec.bootstrap, spec.shuffles, is_baseline=is_first)
        cells += [mean_sd_cell([float(bleu_from_statistics(r["bleu"].sum(0))) for r in runs], 2), bleu["spread"], bleu["p"], bleu["aso"]]
        seed_level = [seed_level_cell(bleu)]
    else:
        cells += ["", "", "", ""]
        seed_level = [""]
    if "aer" in runs[0]:
        stats = [r["aer"]["stats"] for r in runs]
        cmp = seed_cells([r["aer"]["stats"] for r in base], stats, spec.bootstrap, spec.shuffles, is_baseline=is_first, metric=negative_aer, digits=1)
        cells += [mean_sd_cell([r["aer"][k] for r in runs], 1) for k in ("aer", "precision", "recall")]
        cells += [cmp["spread"], cmp["p"], cmp["aso"], mean_sd_cell([r["avg_aer"] for r in runs], 1) if "avg_aer" in runs[0] else ""]
        seed_level.append(seed_level_cell(cmp))
    else:
        cells += ["", "", "", "", "", "", ""]
        seed_level.append("")
    return cells + seed_level


def _eflomal_row(cfg: Config, src_lines: list[str], tgt_lines: list[str], gold, log) -> list[str]:
    """eflomal (gdfa) on the training corpus plus the test pairs; AER on the test pairs."""
    text = read_parallel(cfg.data.train_src, cfg.data.train_tgt)
    src_text, tgt_text = model_words(cfg, text, None)
    t0 = time.perf_counter()
    links = run_eflomal(src_text + src_lines, tgt_text + tgt_lines)[len(src_text) :]
    seconds = time.perf_counter() - t0
    log(f"eflomal on {len(src_text)} + {len(src_lines)} pairs in {seconds:.0f} s")
    return ["eflomal (gdfa), training corpus + test pairs", "IBM1+HMM+fertility", "", f"{seconds:.0f} s", "", "", "", "", *(f"{x:.1f}" for x in _aer(gold, links)), "", "", "", "", "", ""]
