"""``syntaxnmt demo``: the whole pipeline on the built-in synthetic corpus, on CPU in minutes.

Generates the synthetic language pair (see :mod:`syntaxnmt.data.synthetic`), prepares it, trains a
small Transformer within a time budget, translates the test split with beam search and prints
sacreBLEU. Re-running continues the previous training run in the same folder.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from syntaxnmt.config import Config, load_config
from syntaxnmt.data.prepare import prepare
from syntaxnmt.data.synthetic import write_corpus
from syntaxnmt.decoding.translate import load_model, translate_lines
from syntaxnmt.errors import UserError
from syntaxnmt.metrics import score
from syntaxnmt.runtime import describe_threads, resolve_device
from syntaxnmt.textio import holds_marker, read_lines, refuse_protected_folder, write_lines, write_marker
from syntaxnmt.training.train import train

DEMO_CONFIG = """\
name: demo
work_dir: {dir}/run
seed: 1
data:
  train_src: {dir}/corpus/train.src
  train_tgt: {dir}/corpus/train.tgt
  dev_src: {dir}/corpus/dev.src
  dev_tgt: {dir}/corpus/dev.tgt
  src_lang: en
  tgt_lang: syn
  vocab_size: 400
  joint_vocab: true
model:
  d_model: 128
  heads: 4
  ffn_dim: 256
  enc_layers: 2
  dec_layers: 2
  dropout: 0.1
  tie_embeddings: all
train:
  max_tokens: 2048
  lr: 2.0e-3
  warmup_steps: 300
  max_steps: 100000
  max_minutes: {minutes}
  log_every: 20
  valid_every: 200
  valid_max_sentences: 200
  patience: 5
decode:
  beam_size: 5
  batch_size: 100
"""


def demo_config(directory: Path, minutes: float, overrides: list[str] | None = None) -> Config:
    """Write the demo's YAML config into ``directory`` and load it (with command-line overrides)."""
    path = directory / "demo.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEMO_CONFIG.format(dir=directory.as_posix(), minutes=minutes), encoding="utf-8")
    return load_config(path, overrides or [])


MARKER, WRITTEN_BY = ".syntaxnmt-demo", "syntaxnmt demo"
DEMO_NAMES = {"demo.yaml", "corpus", "run", "test.hyp"}  # what the demo writes in its folder


def refuse_to_remove(directory: Path) -> None:
    """``--fresh`` removes only a folder the demo wrote: one holding its marker, or (written by a
    version without the marker) only the demo's own files; never the current directory or a parent."""
    refuse_protected_folder(directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: exists and is not a folder")
    if holds_marker(directory, MARKER, WRITTEN_BY):
        return
    others = sorted(p.name for p in directory.iterdir() if p.name not in DEMO_NAMES)
    if others:
        raise UserError(
            f"{directory}: not a folder written by `syntaxnmt demo` (it holds {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); "
            "--fresh removes only a demo folder: remove it yourself or give another --dir"
        )


def run_demo(directory: Path, minutes: float = 4.0, overrides: list[str] | None = None, fresh: bool = False, log=tqdm.write) -> float:
    """Run the demo; returns the test BLEU. Training stops at the time budget with a validation,
    so there is a ``best.pt`` to translate with however slow the machine (docs/robustness.md);
    ``log`` writes above the progress bars."""
    if fresh and (directory.exists() or directory.is_symlink()):
        refuse_to_remove(directory)
        shutil.rmtree(directory)
    if not directory.exists() or (directory.is_dir() and not any(directory.iterdir())):
        directory.mkdir(parents=True, exist_ok=True)
        write_marker(directory, MARKER, WRITTEN_BY)  # a folder the demo created: --fresh may remove it
    t0 = time.perf_counter()
    if not (directory / "corpus" / "test.tgt").exists():
        files = write_corpus(directory / "corpus", seed=1)
        sizes = ", ".join(f"{split}: {len(read_lines(paths['src']))}" for split, paths in files.items())
        log(f"synthetic corpus in {directory / 'corpus'} ({sizes} pairs; trees in *.conllu, gold alignments in *.align)")
    cfg = demo_config(directory, minutes, overrides)
    prepare(cfg, log=log)
    progress = train(cfg, resume=True, log=log)

    device = resolve_device(cfg.train.device)
    work = Path(cfg.work_dir)
    model, cfg, toks = load_model(work / "best.pt" if (work / "best.pt").is_file() else work / "last.pt", device)
    sources = read_lines(directory / "corpus" / "test.src")
    refs = read_lines(directory / "corpus" / "test.tgt")
    with torch.inference_mode():
        hyps = [nb[0][0] for nb in translate_lines(model, cfg, toks, sources, cfg.decode, device, progress=True)]
    write_lines(directory / "test.hyp", hyps)
    result = score(hyps, [refs], force=True)
    log(f"test ({len(sources)} sentences, beam {cfg.decode.beam_size}): {result.bleu_verbose}")
    log(f"  signature: {result.bleu_signature}")
    log(f"  chrF = {result.chrf:.2f}")
    for src, hyp, ref in list(zip(sources, hyps, refs))[:3]:
        log(f"  src: {src}\n  hyp: {hyp}\n  ref: {ref}")
    log(f"demo finished in {time.perf_counter() - t0:.0f} s; translations in {directory / 'test.hyp'}")
    if progress.stop_reason == "max_minutes":  # a slow or busy machine trains fewer updates in the budget
        log(
            f"training stopped at the time budget ({minutes:g} min: {progress.step} updates, {describe_threads()}); more training translates better: "
            f"`syntaxnmt demo --dir {directory} --minutes {2 * minutes:g}` continues this run for {minutes:g} more minutes"
        )
    return result.bleu
