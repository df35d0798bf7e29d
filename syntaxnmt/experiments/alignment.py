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
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict

from syntaxnmt.alignment.external import align_external, run_eflomal
from syntaxnmt.alignment.extract import model_alignments
from syntaxnmt.config import Config, config_from_dict, load_config
from syntaxnmt.data.corpus import read_parallel
from syntaxnmt.data.links import aer, read_alignments
from syntaxnmt.data.prepare import model_words
from syntaxnmt.data.synthetic import write_corpus
from syntaxnmt.decoding.translate import load_model, translate_lines
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.sets import markdown_table, read_set_file, section_heading, write_section
from syntaxnmt.metrics import score
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import atomic_write_text, read_lines, write_lines
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
    synthetic_corpus: str = ""
    synthetic_sizes: tuple[int, int, int] = (20000, 500, 500)
    eflomal_baseline: bool = True
    command: str = ""
    """The command that produces the table (printed under it)."""
    output: str = "docs/results.md"


def load_alignment_set(path: str | Path) -> AlignmentSet:
    spec = read_set_file(path, AlignmentSet)
    for label, variant in spec.decode_variants.items():
        if variant.system not in spec.configs:
            raise UserError(f"{path}: decode variant '{label}' names an unknown system '{variant.system}'")
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


def _bleu(checkpoint: Path, test: AlignmentTestSet, hyp_path: Path, decode: dict, device) -> float:
    if not hyp_path.is_file():
        model, cfg, toks = load_model(checkpoint, device)
        options = config_from_dict({"decode": {**cfg.decode.model_dump(), **decode}}, source=f"{checkpoint} decode options").decode
        with torch.inference_mode():
            out = translate_lines(model, cfg, toks, read_lines(test.src), options, device)
        write_lines(hyp_path, [nb[0][0] for nb in out])
    return score(read_lines(hyp_path), [read_lines(test.ref)], force=True).bleu


def _aer(gold, hyp) -> tuple[float, float, float]:
    r = aer([s for s, _ in gold], [p for _, p in gold], hyp)
    return 100 * r.aer, 100 * r.precision, 100 * r.recall


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
    head = ["system", "alignment read from", "updates", "train time", "test BLEU (beam)", "AER", "precision", "recall", "AER (all layers+heads averaged)"]
    rows, configs = [], {}
    for label, rel in spec.configs.items():
        cfg = load_config(base_dir / rel, spec.overrides)
        configs[label] = cfg
        record = _train(label, cfg, log)
        forward, reverse = _checkpoints(cfg, record["joint"])
        work = Path(cfg.work_dir)
        bleu = _bleu(forward, test, work / "test.hyp", {}, device)
        a = cfg.train.alignment
        where = "all layers+heads" if a.layer == "average" and a.head == "average" else f"layer {a.layer}, head {a.head}"
        own = _aer(gold, model_alignments(forward, src_lines, tgt_lines, device))
        avg = _aer(gold, model_alignments(forward, src_lines, tgt_lines, device, layer="average", head="average"))
        rows.append([label, where, str(record["steps"]), f"{record['train_seconds']:.0f} s", f"{bleu:.2f}", *(f"{x:.1f}" for x in own), f"{avg[0]:.1f}"])
        if reverse is not None:
            sym = _aer(gold, model_alignments(forward, src_lines, tgt_lines, device, reverse_checkpoint=reverse))
            avg_sym = _aer(gold, model_alignments(forward, src_lines, tgt_lines, device, reverse_checkpoint=reverse, layer="average", head="average"))
            rows.append([f"{label}, both directions (gdfa)", where, "", "", "", *(f"{x:.1f}" for x in sym), f"{avg_sym[0]:.1f}"])
    for label, variant in spec.decode_variants.items():
        cfg = configs[variant.system]
        slug = "-".join(f"{k}{v}" for k, v in sorted(variant.decode.items()))
        forward, _ = _checkpoints(cfg, cfg.train.alignment.symmetry_weight > 0)
        bleu = _bleu(forward, test, Path(cfg.work_dir) / f"test.{slug}.hyp", variant.decode, device)
        options = ", ".join(f"{k}={v}" for k, v in variant.decode.items())
        rows.append([label, f"(decoding: {options})", "", "", f"{bleu:.2f}", "", "", "", ""])
    if spec.eflomal_baseline:
        rows.append(_eflomal_row(configs[next(iter(configs))], src_lines, tgt_lines, gold, log))
    minutes, cpu_minutes = (time.perf_counter() - t0) / 60, (_cpu_seconds() - cpu0) / 60
    lines = section_heading(spec.title or spec.name, spec.description)
    lines += [
        f"Command: `{spec.command or 'syntaxnmt align-experiment ' + str(path)}` (data, eflomal, training and "
        f"evaluation: {cpu_minutes:.1f} min of CPU time, {minutes:.1f} min wall clock on a shared 2-core machine). "
        f"AER/precision/recall in % against the {len(gold)} gold test alignments (attention argmax: one link per target word, "
        f"read while force-decoding the reference); BLEU: sacreBLEU on the detokenized test output. One seed.",
        "",
        *markdown_table(head, rows),
    ]
    section = "\n".join(lines) + "\n"
    target = Path(output or spec.output)
    write_section(target, spec.name, section)
    log(section)
    log(f"results written to {target}")
    return section


def _eflomal_row(cfg: Config, src_lines: list[str], tgt_lines: list[str], gold, log) -> list[str]:
    """eflomal (gdfa) on the training corpus plus the test pairs; AER on the test pairs."""
    text = read_parallel(cfg.data.train_src, cfg.data.train_tgt)
    src_text, tgt_text = model_words(cfg, text, None)
    t0 = time.perf_counter()
    links = run_eflomal(src_text + src_lines, tgt_text + tgt_lines)[len(src_text) :]
    seconds = time.perf_counter() - t0
    log(f"eflomal on {len(src_text)} + {len(src_lines)} pairs in {seconds:.0f} s")
    return ["eflomal (gdfa), training corpus + test pairs", "IBM1+HMM+fertility", "", f"{seconds:.0f} s", "", *(f"{x:.1f}" for x in _aer(gold, links)), ""]
