"""``syntaxnmt demo``: the whole pipeline on the built-in synthetic corpus, on CPU in minutes.

Generates the synthetic language pair (see :mod:`syntaxnmt.data.synthetic`), prepares it, trains a
small Transformer within a time budget, translates the test split with beam search and prints
sacreBLEU. Re-running continues the previous training run in the same folder while its time
budget (``--minutes``, the total training time) allows, and says so when that run is finished; a
run that ends before the learning-rate warm-up does gets a warning saying how to continue.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from syntaxnmt.checkpoint import load_checkpoint
from syntaxnmt.config import Config, load_config
from syntaxnmt.data.prepare import prepare
from syntaxnmt.data.synthetic import CORPUS_FILES, write_corpus
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.errors import UserError
from syntaxnmt.metrics import score
from syntaxnmt.runtime import resolve_device
from syntaxnmt.textio import atomic_write_text, check_removable, claim_folder, read_lines, write_lines
from syntaxnmt.training.loop import Progress
from syntaxnmt.training.train import RUN_FILES, train

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
    atomic_write_text(path, DEMO_CONFIG.format(dir=directory.as_posix(), minutes=minutes))  # a full disk: one error naming it
    return load_config(path, overrides or [])


MARKER, WRITTEN_BY = ".syntaxnmt-demo", "syntaxnmt demo"
DEMO_FILES = {"demo.yaml": None, "corpus": CORPUS_FILES, "run": RUN_FILES, "test.hyp": None}
"""What the demo writes in its folder, entry by entry (:data:`syntaxnmt.textio.Owned`): ``run/`` is its training run."""


def refuse_to_remove(directory: Path) -> None:
    """``--fresh`` removes only a folder the demo wrote: one holding its marker and nothing but
    :data:`DEMO_FILES` (a file a user added, e.g. ``NOTES.md`` or ``corpus/mine.src``, is listed
    in the refusal); never the current directory or a parent."""
    check_removable(directory, MARKER, WRITTEN_BY, DEMO_FILES, "--fresh removes only a demo folder holding nothing else: move your files out, or give another --dir")


def updates_needed(cfg: Config) -> int:
    """The updates below which the demo's test BLEU says little: the end of the learning-rate
    warm-up (``train.warmup_steps``, 300 in the demo's config).

    Why there: until then the inverse-square-root schedule (Vaswani et al. 2017, Eq. 3) has not
    reached its peak rate, so the model has had a small part of the training a default run gets
    (the 4-minute budget ends near update 600 on a quiet 2-core machine, docs/robustness.md) and
    its score is still climbing steeply from zero: a run on a busy machine stopped at update 23
    with BLEU 0.06 and one at update 95 with BLEU 4.29 (issues 25 and 26). It follows the config,
    so a ``--train.warmup_steps`` override moves it."""
    return max(1, cfg.train.warmup_steps)


def finished_training(progress: dict, cfg: Config) -> tuple[str, str] | None:
    """Why the saved ``progress`` of the demo's run (its ``last.pt``) leaves nothing to train with
    ``cfg``, as (``early stopping`` or ``max_minutes``, a description), or None."""
    t, step = cfg.train, progress.get("step", 0)
    if t.patience and progress.get("bad_validations", 0) >= t.patience:
        return "early stopping", f"early stopping at update {step} ({t.patience} validations without improvement)"
    if t.max_minutes and progress.get("train_seconds", 0.0) >= 60 * t.max_minutes:
        return "max_minutes", f"its {t.max_minutes:g}-minute training budget was spent at update {step}"
    return None


def warn_if_undertrained(directory: Path, cfg: Config, progress: Progress, bleu: float) -> None:
    """One line on stderr when the run ended below :func:`updates_needed`, saying how to go on."""
    needed = updates_needed(cfg)
    if progress.step >= needed:
        return
    seconds_per_update = progress.train_seconds / max(progress.step, 1)
    minutes = max(math.ceil(needed * seconds_per_update / 60), math.floor(cfg.train.max_minutes) + 1)
    tqdm.write(
        f"syntaxnmt: warning: the demo trained {progress.step} update{'s' if progress.step != 1 else ''}, fewer than the {needed} it needs for a meaningful score "
        f"(the end of its learning-rate warm-up), so BLEU {bleu:.2f} says little; continue the run with "
        f"`syntaxnmt demo --dir {directory} --minutes {minutes}` (--minutes is the total training time: about {needed} updates at this machine's speed), "
        "or start over with --fresh",
        file=sys.stderr,
    )


def run_demo(directory: Path, minutes: float = 4.0, overrides: list[str] | None = None, fresh: bool = False, log=tqdm.write, force: bool = False) -> float:
    """Run the demo; returns the test BLEU. Training stops at the time budget with a validation,
    so there is a ``best.pt`` to translate with however slow the machine (docs/robustness.md);
    ``log`` writes above the progress bars. A re-run continues the run in ``directory`` while its
    budget (``minutes``, the total training time) allows; one that finds its training finished
    says so, and a run that ends below :func:`updates_needed` ends with a warning. A folder holding
    files the demo did not write is refused unless ``force`` (:func:`~syntaxnmt.textio.claim_folder`)."""
    if not (math.isfinite(minutes) and minutes > 0):  # 0 would be train.max_minutes' "no limit"; checked before any file is written
        raise UserError(f"--minutes {minutes:g}: give the training time as a positive number of minutes")
    if fresh and (directory.exists() or directory.is_symlink()):
        refuse_to_remove(directory)
        shutil.rmtree(directory)
    claim_folder(directory, MARKER, WRITTEN_BY, force)  # a new folder is marked: --fresh may remove it; a user's only with --force
    t0 = time.perf_counter()
    if not (directory / "corpus" / "test.tgt").exists():
        files = write_corpus(directory / "corpus", seed=1)
        sizes = ", ".join(f"{split}: {len(read_lines(paths['src']))}" for split, paths in files.items())
        log(f"synthetic corpus in {directory / 'corpus'} ({sizes} pairs; trees in *.conllu, gold alignments in *.align)")
    cfg = demo_config(directory, minutes, overrides)
    prepare(cfg, log=log)
    last = Path(cfg.work_dir) / "last.pt"
    saved = load_checkpoint(last).get("progress") if last.is_file() else None
    done = finished_training(saved, cfg) if saved else None
    if done:
        further = "--fresh starts over" if done[0] == "early stopping" else f"--minutes M (above {minutes:g}: the total training time) trains it further, --fresh starts over"
        log(f"the demo's training in {cfg.work_dir} is finished ({done[1]}): translating with it again; {further}")
    if done and done[0] == "early stopping":  # resuming would train on past the early stop
        progress = Progress(**saved)
    else:  # with the budget spent this trains no further, but validates an update left unvalidated
        progress = train(cfg, resume=True, log=log)
    run_cfg = cfg

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
    warn_if_undertrained(directory, run_cfg, progress, result.bleu)
    return result.bleu
