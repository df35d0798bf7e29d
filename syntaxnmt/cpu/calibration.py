"""CPU kernel and layout choice, by timing whole steps of the model on the machine at hand.

:mod:`syntaxnmt.cpu.linear` can run a float32 CPU product through oneDNN's inner-product kernel,
through ATen (``F.linear``: MKL's sgemm in the PyPI wheels) or through numpy's OpenBLAS
(:mod:`syntaxnmt.cpu.blas`), and CPU training can compute the
position-wise products on the non-padding rows only (row packing,
:attr:`~syntaxnmt.cpu.stack.PackedStacks.pack_granule`). Which is faster depends on the
instruction set, the thread count and the shapes: oneDNN won 1.4x on the AVX-512 EPYC where the
fixed rule was measured, and the same rule gave half the speed on an AVX2 EPYC (issue 26). Timed
product by product, the choice did not add up to the model's speed (docs/benchmarks.md, "CPU
kernel choice"), so ``auto`` times **whole steps** of the run's own model:

- ``auto``: :func:`prepare` runs a few steps of each candidate configuration -- in training
  (:func:`syntaxnmt.training.step.timing_step`: forward and backward of one real batch of the run's
  typical shape, no optimizer step) the kernels {oneDNN, ATen, OpenBLAS} x row packing {on, off}, in
  inference (:func:`syntaxnmt.decoding.translate.decoding_step`: a short forced beam-5 decode)
  the kernels -- one warm-up step each, a round of one timed step per candidate, then rounds of
  the candidates still close to the fastest (:data:`CONTENDERS`; the order rotating) while the
  next round fits in :data:`BUDGET_S`; the fastest step of each counts and the fastest candidate
  is chosen -- in training, unless another one of flatter memory is within :data:`TIE_MARGIN`
  (3 %) of it: the first of those in :data:`MEMORY_ORDER` (OpenBLAS or ATen before oneDNN,
  whose state per product shape raised a training's peak memory by ~40 % for a 2 % faster step;
  :func:`chosen`), and the log line says so. Inference stays on speed alone (its peak memory
  showed no such difference: 541 vs 550 MB). Nothing of the model or the run changes: the random
  generators, the gradients and the buffers are restored (:func:`preserved`), and no optimizer
  steps. The times
  are cached per machine (CPU model, ISA flags, torch version, threads) and signature (the model's
  sizes, the step's shape) in ``cpu_kernels.json`` under :func:`cache_dir`, so only the first run
  pays (the cache keeps times: a choice read from it follows the same rule); times taken while
  the load average exceeded the machine's cores are cached as provisional and timed again by the
  next run on a quieter machine;
- ``onednn``: oneDNN wherever :mod:`~syntaxnmt.cpu.linear` allows it (without autograd, and in
  training on bucketed shapes), row packing on: the fixed rule;
- ``aten``: ATen everywhere, row packing on;
- ``openblas``: numpy's OpenBLAS for every product of the linear layers (ATen where numpy has
  another BLAS), row packing on.

``train.row_packing`` (``on``/``off``), when set, fixes the packing (``auto`` calibrates it in
mode ``auto``, and is on otherwise); ``train.shape_bucket`` is never calibrated (it changes the
batches: a run keeps the one of its config). ``SYNTAXNMT_ONEDNN_LINEAR`` still says where oneDNN
may run at all (``0``: nowhere), and ``SYNTAXNMT_CPU_KERNELS`` (one of the modes), when set,
overrides the mode of every command and config (the test suite sets ``onednn``, so that only the
tests of ``auto`` time steps). The choice is logged once when a command starts and kept for
:func:`syntaxnmt.cpu.machine.machine_info`.

A training run records its choice (:meth:`Choice.record`) in its checkpoints, and a resumed run
reuses it without timing (``prepare(..., recorded=...)``): oneDNN and ATen round differently, so a
choice made again from a cache that has since changed could break the exact resume.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from syntaxnmt.config import DEFAULT_CPU_KERNELS
from syntaxnmt.cpu import linear as lin
from syntaxnmt.cpu.blas import openblas_available
from syntaxnmt.cpu.machine import machine_info, record_cpu_kernels
from syntaxnmt.cpu.threads import load_average
from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write_text

MODES = ("auto", "onednn", "aten", "openblas")
PACKING = ("auto", "on", "off")
BUDGET_S = 15.0
"""Seconds a calibration may spend on the contenders' rounds after its first two: the warm-up
round and one timed round always run (a warm-up step carries one-off costs -- first allocations,
oneDNN's primitives for new shapes -- that differ between candidates: on a 2-core AVX2 EPYC,
deciding on warm-up times chose ATen without row packing, 1.14x slower in training than ATen with
it, docs/benchmarks.md), then more timed rounds of the close candidates while the next one's
estimate fits in this budget. Counted from the end of the first timed round (it used to count
from the start: the side-by-side model's first two rounds took ~24 s, so its six candidates were
decided on one step each, and it chose row packing off, 1.08x slower in paired updates)."""
STEPS = 3
"""Timed steps per candidate at most (after one warm-up step); the fastest counts (the least
disturbed by other processes)."""
CONTENDERS = 1.10
"""After the first timed round, only candidates whose fastest step is within this factor of the
fastest one's are timed again (:func:`calibrate`): single steps of one candidate differ by up to
10-15 % on a busy or virtual machine, so a closer one may still win; a slower one spends no more
of the budget. With the six candidates of training (three kernels x row packing), a small model's
close candidates get their second and third steps; the side-by-side model's warm-up and first
round take ~24 s, and its close candidates then get their further steps within the budget."""
TIE_MARGIN = 0.03
"""In training, a candidate whose step is less than this fraction slower than the fastest one's
ties with it (the fastest saves under 3 % of its step), and :data:`MEMORY_ORDER` decides between
ties (:func:`chosen`): the project's rule that a fast path stays only if it saves >= 3 % of its
command. The whole-step times of the candidates that won differ by 1-2 %, within the timing's
noise (so the pick flipped between runs), while oneDNN keeps state per product shape and a
oneDNN training peaked ~40 % higher: 965 ms a step with oneDNN and row packing against 986 ms
with OpenBLAS and row packing, and 1,681 MB against 1,161 MB of peak RSS on the side-by-side
training command (2-core AMD EPYC, 2 threads; docs/benchmarks.md, issue 48, "The training
memory explained")."""
MEMORY_ORDER: tuple[tuple[str, ...], ...] = (("openblas", "aten"), ("onednn",))
"""The kernels by their training memory, flat first: OpenBLAS (1,161 MB of peak RSS on the
side-by-side training command) and ATen (MKL's sgemm: no state per shape either; not measured
apart), then oneDNN (state per product shape: 1,681 MB there, growing with every new row count;
docs/benchmarks.md, issue 48). Between ties (:data:`TIE_MARGIN`) the first rank wins, and within
a rank the faster (no measurement puts OpenBLAS's memory below ATen's, so they share one rank; row
packing on or off, by time too). A kernel not listed ranks last."""
CACHE_FILE = "cpu_kernels.json"
CACHE_VERSION = 2  # 1: per-product times (replaced by whole steps)
ENV = "SYNTAXNMT_CPU_KERNELS"
"""The environment variable whose mode, when set, overrides every other choice of the mode."""

_mode: str = DEFAULT_CPU_KERNELS  # auto: it won end to end (docs/benchmarks.md)
logger = logging.getLogger(__name__)
clock: Callable[[], float] = time.perf_counter
"""The calibration's clock (seconds); the tests replace it."""


@dataclass(frozen=True)
class Choice:
    """One candidate configuration: the linear layers' kernels and, in training, row packing (None:
    a choice for inference, where nothing is packed)."""

    kernels: str  # "onednn" | "aten" | "openblas"
    packing: bool | None = None

    @property
    def name(self) -> str:
        """``aten``, ``aten, row packing``, ``onednn, no packing``: the cache key and the log's words."""
        return self.kernels + ("" if self.packing is None else ", row packing" if self.packing else ", no packing")

    @classmethod
    def parse(cls, name: object) -> "Choice | None":
        """The choice :attr:`name` names; None for anything else."""
        if not isinstance(name, str):
            return None
        kernels, _, packing = name.partition(", ")
        if kernels not in lin.KERNELS or packing not in ("", "row packing", "no packing"):
            return None
        return cls(kernels, None if not packing else packing == "row packing")


def configure(mode: str | None) -> str:
    """Set the process's default mode (``--cpu-kernels``; None keeps it) and return it: ``aten``
    and ``onednn`` take effect at once, for every model; ``auto`` when :func:`prepare` has timed a model."""
    global _mode
    if os.environ.get(ENV):
        mode = os.environ[ENV]
        if mode not in MODES:
            raise UserError(f"{ENV}={mode!r}: expected one of {', '.join(MODES)}")
    if mode is not None:
        if mode not in MODES:
            raise UserError(f"cpu kernels {mode!r}: expected one of {', '.join(MODES)}")
        _mode = mode
        if mode != "auto":
            lin.set_kernels(mode)
    return _mode


def install(model: nn.Module, choice: Choice) -> None:
    """Make ``model`` (and the process's linear layers) compute with ``choice``: the kernels for
    every model of the process (:func:`syntaxnmt.cpu.linear.set_kernels`), the packing for what
    packs rows in ``model`` (:func:`packers`: their class's granule, or 0)."""
    lin.set_kernels(choice.kernels)
    if choice.packing is not None:
        for m in packers(model):
            m.pack_granule = type(m).pack_granule if choice.packing else 0


def packers(model: nn.Module) -> list[object]:
    """What packs rows in ``model``: its modules and their stack runners (``stacks``,
    :class:`syntaxnmt.cpu.stack.PackedStacks`) with a class ``pack_granule``."""
    found = [o for m in model.modules() for o in (m, getattr(m, "stacks", None)) if o is not None and hasattr(type(o), "pack_granule")]
    return list({id(o): o for o in found}.values())


def cache_dir() -> Path:
    """``$SYNTAXNMT_CACHE_DIR``, else ``$XDG_CACHE_HOME/syntaxnmt``, else ``~/.cache/syntaxnmt``."""
    if os.environ.get("SYNTAXNMT_CACHE_DIR"):
        return Path(os.environ["SYNTAXNMT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "syntaxnmt"


def machine_key(threads: int | None = None) -> str:
    """What the times depend on besides the model and shape: CPU model, its ISA flags and any limit
    set on the libraries' instruction set (``--isa avx2``), torch, threads."""
    info = machine_info()
    isa = " ".join(f for f, present in info["isa"].items() if present)
    if info["isa_limits"]:  # an emulated AVX2 machine times its own kernels
        isa += " limited " + " ".join(f"{k}={v}" for k, v in info["isa_limits"].items())
    return f"{info['cpu']} | {isa} | torch {info['torch']} | {threads or torch.get_num_threads()} threads"


def model_signature(model: nn.Module) -> str:
    """The model's sizes as the cache tells models apart: ``d256 ffn1024 layers 6+6 heads 8
    vocab 8000 #1a2b3c4d`` (the hash: of its whole model config, so syntax or context variants of
    one size differ; without a config, of its parameter shapes)."""
    cfg = getattr(model, "cfg", None)
    if hasattr(cfg, "model_dump"):
        digest = hashlib.sha256(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:8]
        out = getattr(model, "output", None)
        vocab = f" vocab {out.out_features}" if isinstance(out, nn.Linear) else ""
        return f"d{cfg.d_model} ffn{cfg.ffn_dim} layers {cfg.enc_layers}+{cfg.dec_layers} heads {cfg.heads}{vocab} #{digest}"
    shapes = ";".join(f"{n}:{tuple(p.shape)}" for n, p in model.named_parameters())
    return f"{sum(p.numel() for p in model.parameters())} parameters #{hashlib.sha256(shapes.encode()).hexdigest()[:8]}"


# ------------------------------------------------------------------ measuring


@contextmanager
def preserved(model: nn.Module) -> Iterator[None]:
    """Inside, steps of ``model`` may run: on leaving, the python, numpy and torch random
    generators, the parameters' gradients, the buffers and the train/eval mode are as they were
    (bitwise); parameters change only through an optimizer, which a timing step does not use."""
    rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    grads = [(p, p.grad) for p in model.parameters()]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    modes = [(m, m.training) for m in model.modules()]
    try:
        for p, _ in grads:
            p.grad = None
        yield
    finally:
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        for p, g in grads:
            p.grad = g
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        for m, training in modes:
            m.training = training


@dataclass
class Timing:
    """What :func:`calibrate` measured: per candidate (by name) its fastest step (ms) and how many
    timed steps it had (0: the budget left only its warm-up step, whose time then counts: an upper
    bound, as it includes the one-off costs of a first step), and the seconds spent."""

    ms: dict[str, float]
    steps: dict[str, int]
    seconds: float


def calibrate(candidates: Sequence[Choice], run: Callable[[Choice], None], budget_s: float = BUDGET_S, steps: int = STEPS) -> Timing:
    """Time ``run(choice)`` (one step computed with ``choice`` installed) for every candidate: a
    warm-up round (not counted) and one timed round whatever the budget; then, up to ``steps``
    timed rounds in all, rounds of the **contenders** only -- the candidates whose fastest step so
    far is within :data:`CONTENDERS` of the fastest one (successive halving: a candidate clearly
    slower after one step gets no more of the budget) -- while there are two or more of them and
    the estimate of the next round (the sum of their fastest steps) fits in what is left of
    ``budget_s``, counted from the end of the first timed round. The order rotates each round so that a disturbance from another process falls on all."""
    begun = clock()
    best: dict[Choice, float] = {}
    counts = dict.fromkeys(candidates, 0)

    def timed(c: Choice) -> None:
        t0 = clock()
        run(c)
        best[c] = min(best.get(c, math.inf), clock() - t0)
        counts[c] += 1

    for c in candidates:
        run(c)
    contenders, done, start = list(candidates), 0, math.inf
    left = lambda: budget_s - (clock() - start)  # noqa: E731  (counted from the end of the first timed round)
    while done < max(steps, 1) and (not done or (len(contenders) > 1 and sum(best[c] for c in contenders) <= left())):
        for c in contenders[done % len(contenders):] + contenders[: done % len(contenders)]:
            timed(c)
        done += 1
        start = clock() if done == 1 else start
        contenders = [c for c in contenders if best[c] <= CONTENDERS * min(best.values())]
    ms = {c.name: round(1e3 * best[c], 3) for c in candidates}
    return Timing(ms, {c.name: counts[c] for c in candidates}, round(clock() - begun, 3))


def fastest(ms: dict[str, float], candidates: Sequence[Choice]) -> Choice:
    """The candidate of the least time (the first listed of equal ones)."""
    return min(candidates, key=lambda c: ms[c.name])


def memory_rank(kernels: str) -> int:
    """The rank of ``kernels`` in :data:`MEMORY_ORDER` (0: flat memory; a kernel not listed: last)."""
    return next((i for i, rank in enumerate(MEMORY_ORDER) if kernels in rank), len(MEMORY_ORDER))


def chosen(ms: dict[str, float], candidates: Sequence[Choice], training: bool) -> Choice:
    """The candidate to take by the times ``ms``: in inference the :func:`fastest`; in training,
    of the candidates that tie with the fastest (their step less than :data:`TIE_MARGIN` slower),
    the first in :data:`MEMORY_ORDER`, and of one rank the fastest (the first listed of equal
    ones). So a oneDNN step 2 % faster than OpenBLAS's loses to it; 5 % faster, it wins."""
    best = fastest(ms, candidates)
    if not training:
        return best
    ties = [c for c in candidates if ms[c.name] <= ms[best.name] or (1 - TIE_MARGIN) * ms[c.name] < ms[best.name]]
    return min(ties, key=lambda c: (memory_rank(c.kernels), ms[c.name]))


# ------------------------------------------------------------------ the cache


def note(line: str) -> None:
    """The ``log`` of an inference command (translate, serve, the Python API): the line goes to
    this module's logger, and to stderr when stderr is a terminal (as translate's progress bar),
    so that piped output and its error messages stay as they were."""
    logger.info(line)
    if sys.stderr.isatty():
        print(f"syntaxnmt: {line}", file=sys.stderr, flush=True)


def _warn(message: str) -> None:
    print(f"syntaxnmt: warning: {message}", file=sys.stderr, flush=True)


def _valid_entry(entry: object) -> bool:
    times = entry.get("ms") if isinstance(entry, dict) else None
    return isinstance(times, dict) and bool(times) and all(Choice.parse(k) is not None and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for k, v in times.items())


def read_cache(path: Path) -> dict:
    """The cache file's content (``{"version", "machines": {machine key: {signature: {"ms":
    {candidate: fastest step}, "steps", "date"}}}, "provisional": {machine key: [signature, ...]}}``:
    times taken on a busy machine); an empty one when the file is missing, and, with a warning,
    when it is not such a file (an older version's too)."""
    empty = {"version": CACHE_VERSION, "machines": {}, "provisional": {}}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return empty
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        _warn(f"{path}: not a readable CPU kernel cache ({type(e).__name__}: {e}); ignored, measuring again")
        return empty
    machines = doc.get("machines") if isinstance(doc, dict) and doc.get("version") == CACHE_VERSION else None
    if not isinstance(machines, dict) or not all(isinstance(m, dict) and all(isinstance(k, str) and _valid_entry(v) for k, v in m.items()) for m in machines.values()):
        _warn(f"{path}: not a CPU kernel cache of version {CACHE_VERSION}; ignored, measuring again")
        return empty
    provisional = doc.setdefault("provisional", {})
    if not isinstance(provisional, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in provisional.values()):
        _warn(f"{path}: its list of provisional times is damaged; all its times are taken as provisional")
        doc["provisional"] = {m: sorted(entries) for m, entries in machines.items()}
    return doc


def busy() -> tuple[float, int] | None:
    """``(1-minute load average, logical CPUs)`` when the load exceeds the CPUs (times taken now
    are disturbed: :func:`prepare` caches them as provisional), else None."""
    avg, cpus = load_average(), os.cpu_count() or 1
    return (avg[0], cpus) if avg and avg[0] > cpus else None


def write_cache(path: Path, doc: dict) -> None:
    """Write the cache atomically; a folder that cannot be written is a warning, not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    except OSError as e:
        _warn(f"cannot write the CPU kernel cache {path} ({e.strerror or e}); the next run measures again")


# ------------------------------------------------------------------ deciding


def candidates_for(mode: str, row_packing: str | None) -> list[Choice]:
    """The configurations ``mode`` and ``row_packing`` leave open (``row_packing`` None: inference,
    nothing packed): a fixed mode or packing is one value; ``auto`` kernels are all three in
    training (oneDNN first: the default's) and oneDNN and ATen in inference (beam search's
    products go to MKL directly, and OpenBLAS lost its decoding steps: docs/benchmarks.md,
    "OpenBLAS products"); ``auto`` packing is both in mode ``auto`` and on otherwise (the rule).
    oneDNN is left out where its linears are off, OpenBLAS where numpy has another BLAS (ATen
    stands in for a fixed mode that is not available)."""
    kernels = list(lin.KERNELS if row_packing is not None else ("onednn", "aten")) if mode == "auto" else [mode]
    kernels = [k for k in kernels if (k != "onednn" or lin.enabled()) and (k != "openblas" or openblas_available())] or ["aten"]
    if row_packing is None:
        packing: list[bool | None] = [None]
    elif row_packing == "auto":
        packing = [True, False] if mode == "auto" else [True]
    else:
        packing = [row_packing == "on"]
    return [Choice(k, p) for k in kernels for p in packing]


def _from_record(recorded: object) -> Choice | None:
    """The choice of a :func:`prepare` record (``{"mode", "row_packing", "choice"}``), or of an
    older run's single-path plan (``{"mode", "plan": {"default": path, "choice": {}, ...}}``: row
    packing was on); None when it is neither (a per-product plan that mixed paths cannot be redone)."""
    if not isinstance(recorded, dict):
        return None
    if "choice" in recorded:
        return Choice.parse(recorded["choice"])
    plan = recorded.get("plan")
    if isinstance(plan, dict) and not plan.get("choice") and not plan.get("fallback") and plan.get("default") in ("onednn", "aten"):
        return Choice(plan["default"], True)
    return None


def describe(summary: dict) -> str:
    """The log line of a :func:`prepare` summary: ``cpu kernels: auto -> K, P (whole-step
    calibration: 4 candidates in S s, fastest of N steps each, T threads: K, P X ms; ...)``, the
    candidates fastest first, with ``(within 3 % of K, P X ms; lower memory)`` after the choice
    when it is not the fastest (a tie broken for memory, :func:`chosen`); or the mode, the choice
    and why (a fixed setting, a record)."""
    head = f"cpu kernels: {summary['mode']} -> {summary['choice']}"
    if "ms" not in summary:
        return f"{head} ({summary['reason']})"
    if summary.get("tie"):
        tie = summary["tie"]
        head += f" (within {100 * tie['margin']:g} % of {tie['fastest']} {tie['ms']:.4g} ms; lower memory)"
    times = "; ".join(f"{name} {ms:.4g} ms" for name, ms in sorted(summary["ms"].items(), key=lambda kv: kv[1]))
    n = min(summary["steps"].values(), default=0)
    steps = f"fastest of {n} step{'s' if n != 1 else ''} each" if len(set(summary["steps"].values())) == 1 else f"fastest of {n} or more steps each"
    if summary["timed"]:
        how = f"whole-step calibration: {len(summary['ms'])} candidates in {summary['seconds']:.1f} s, {steps}"
    else:
        how = f"whole-step times from the cache, {summary['cache']}; {steps}"
    threads = summary["threads"]
    busy_note = f"; {summary['busy']}" if summary.get("busy") else ""
    return f"{head} ({how}, {threads} thread{'s' if threads != 1 else ''}: {times}{busy_note})"


def prepare(
    model: nn.Module, mode: str | None = None, *, row_packing: str | None = None,
    timing: Callable[[], tuple[str, Callable[[], object]]] | None = None, log: Callable[[str], None] | None = None,
    budget_s: float = BUDGET_S, recorded: dict | None = None,
) -> dict:
    """Choose how ``model`` computes on CPU for ``mode`` (None: the process's, :func:`configure`)
    and ``row_packing`` (``train.row_packing``; None: inference, nothing to pack). In mode ``auto``
    with more than one candidate (:func:`candidates_for`), from the cached or newly measured whole
    steps (:func:`chosen`: with ``row_packing`` given -- training, an RNN's too -- a tie within
    :data:`TIE_MARGIN` of the fastest goes to the kernels of flatter memory): ``timing()`` gives
    the cache signature of the steps and a function running one step (called only when timing: a
    training step or a decoding step; the caller's model computes it). ``recorded``: the ``record`` of an earlier summary (a resumed training run's, from its
    checkpoint), reused without timing when its settings are these. Installs the choice
    (:func:`install`), logs it with ``log`` (one line), records it for
    :func:`~syntaxnmt.cpu.machine.machine_info` and returns the summary, with ``record``: ``{"mode",
    "row_packing", "choice"}`` (plain strings, what the checkpoint keeps)."""
    mode = configure(mode)
    training = row_packing is not None  # the tie rule weighs memory in training only (chosen)
    if row_packing is not None and not packers(model):
        row_packing = None  # nothing to pack (an RNN): the kernels alone
    candidates = candidates_for(mode, row_packing)
    summary: dict = {"mode": mode, "threads": torch.get_num_threads()}
    notes: list[str] = []
    reuse = None
    settings = {"mode": mode, "row_packing": row_packing}
    if recorded is not None:
        reuse = _from_record(recorded)
        if reuse is None:
            notes.append("cpu kernels: the choice recorded in the run is not readable: choosing again (the numbers may differ in the last bits from an uninterrupted run's)")
        elif {"mode": recorded.get("mode"), "row_packing": recorded.get("row_packing", "auto" if row_packing is not None else None)} != settings:
            was = f"{recorded.get('mode')}, row packing {recorded.get('row_packing', 'auto')}"
            notes.append(f"cpu kernels: {mode}, row packing {row_packing} now, {was} in the run: choosing again (the numbers may differ in the last bits from an uninterrupted run's)")
            reuse = None
    if reuse is not None:
        choice, summary["reason"] = reuse, "recorded in the run, reused without timing: exact resume"
    elif len(candidates) == 1 or timing is None:
        choice = candidates[0]
        if mode == "openblas" and choice.kernels != "openblas":
            why = "numpy's BLAS is not OpenBLAS: ATen everywhere"
        elif mode in ("auto", "onednn") and not lin.enabled() and choice.kernels == "aten":
            why = "oneDNN linears unavailable or off (SYNTAXNMT_ONEDNN_LINEAR=0): ATen everywhere"
        else:
            why = f"{ENV}={mode}" if os.environ.get(ENV) else "as configured"
            why += {"onednn": ": oneDNN wherever it may run", "aten": ": ATen everywhere", "openblas": ": OpenBLAS everywhere"}.get(mode, ": the one candidate left")
        summary["reason"] = why if len(candidates) == 1 else f"{why}; no step to time: the first candidate"
    else:
        with preserved(model):  # the batch is made and the steps run: the run's state stays as it was
            signature, run = timing()
            choice = _calibrated(model, candidates, signature, run, budget_s, summary, training)
    install(model, choice)
    summary["choice"] = choice.name
    summary["record"] = {**settings, "choice": choice.name}
    record_cpu_kernels({k: v for k, v in summary.items() if k != "record"})
    if log:
        for line in [*notes, describe(summary)]:
            log(line)
    return summary


def _calibrated(model: nn.Module, candidates: list[Choice], signature: str, run: Callable[[], object], budget_s: float, summary: dict, training: bool = False) -> Choice:
    """The candidate :func:`chosen` by the cached whole-step times of ``signature`` on this
    machine, or by timing ``run`` afresh (and caching the times): the fastest, or in ``training``
    a tie of it of lower memory; ``summary`` gets the details (``tie``: the fastest one's name and
    time and the margin, when a tie was broken for memory)."""
    path, key = cache_dir() / CACHE_FILE, machine_key()
    doc = read_cache(path)
    load = busy()
    entries = doc["machines"].setdefault(key, {})
    provisional = set(doc["provisional"].get(key, []))
    entry = entries.get(signature)
    names = [c.name for c in candidates]
    stale = signature in provisional and load is None  # timed on a busy machine, quiet now: timed again
    untimed = entry is not None and any((entry.get("steps") if isinstance(entry.get("steps"), dict) else {}).get(n, 0) < 1 for n in names)
    timed = entry is None or stale or untimed or any(n not in entry["ms"] for n in names)  # untimed: decided on warm-up steps (before 2026-11-29)
    if timed:

        def step(choice: Choice) -> None:
            install(model, choice)
            run()

        t = calibrate(candidates, step, budget_s)
        kept = entry if entry and not stale else {"ms": {}, "steps": {}}
        entry = {"ms": {**kept["ms"], **t.ms}, "steps": {**(kept.get("steps") if isinstance(kept.get("steps"), dict) else {}), **t.steps}, "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
        entries[signature] = entry
        provisional = (provisional | {signature}) if load is not None else (provisional - {signature})
        doc["provisional"][key] = sorted(provisional)
        if not provisional:
            del doc["provisional"][key]
        write_cache(path, doc)
        summary["seconds"] = t.seconds
        if load is not None:
            summary["busy"] = f"load average {load[0]:g} above {load[1]} CPUs: cached as provisional, timed again on a quieter run"
    ms = {n: entry["ms"][n] for n in names}
    steps = entry.get("steps") if isinstance(entry.get("steps"), dict) else {}
    summary.update(machine=key, signature=signature, cache=str(path), timed=timed, steps={n: steps.get(n, 0) for n in names}, ms=ms)
    choice, best = chosen(ms, candidates, training), fastest(ms, candidates)
    if choice != best:
        summary["tie"] = {"fastest": best.name, "ms": ms[best.name], "margin": TIE_MARGIN}
    return choice
