"""CPU kernel choice for the linear layers: oneDNN or ATen, measured on the machine at hand.

:mod:`syntaxnmt.model.linear` can run a float32 CPU product through oneDNN's inner-product kernel
or through ATen (``F.linear``: MKL's or OpenBLAS's sgemm). Which is faster depends on the
instruction set, the thread count and the shape: oneDNN won 1.4x on the AVX-512 EPYC where the
fixed rule was measured, and the same rule gave half the speed on an AVX2 EPYC (issue 26). So the
mode (``train.cpu_kernels``, ``--cpu-kernels``) is one of

- ``auto`` (default): :func:`prepare` times both paths on the model's own weight shapes
  (``d_in x d_out`` of every :class:`~syntaxnmt.model.linear.Linear`) at a few row counts
  (:data:`ROWS`: a decoding step, a small and a large training batch), forward alone (inference)
  and forward with both gradients (training), and each product then takes the path that was
  faster for its shape and nearest row count; a shape it did not time (the time budget,
  :data:`BUDGET_S`, ran out) takes the path that won that row count summed over the shapes it
  timed. The times are cached per machine (CPU model, ISA flags, torch version, threads) and
  shape in ``cpu_kernels.json`` under :func:`cache_dir`, so only the first run pays; times taken
  while the load average exceeded the machine's cores are cached as provisional and timed again
  by the next run on a quieter machine;
- ``onednn``: oneDNN wherever :mod:`~syntaxnmt.model.linear` allows it (the rule before this
  module: without autograd, and in training on bucketed shapes);
- ``aten``: ATen everywhere.

``SYNTAXNMT_ONEDNN_LINEAR`` still says where oneDNN may run at all (``0``: nowhere), and
``SYNTAXNMT_CPU_KERNELS`` (one of the modes), when set, overrides the mode of every command and
config (the test suite sets ``onednn``, so that only the tests of ``auto`` time kernels). The
choice is logged once when a command starts and kept for :func:`syntaxnmt.runtime.machine_info`.

A training run records its plan (:meth:`Plan.to_record`) in its checkpoints, and a resumed run
reuses it without timing (``prepare(..., recorded=...)``): oneDNN and ATen round differently, so a
plan chosen again from a cache that has since grown could break the exact resume.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.errors import UserError
from syntaxnmt.model import linear as lin
from syntaxnmt.runtime import load_average, machine_info, record_cpu_kernels
from syntaxnmt.textio import atomic_write_text

MODES = ("auto", "onednn", "aten")
Kind = Literal["infer", "train"]
ROWS = (32, 256, 2048)
"""Row counts timed: a decoding step (batch x beam), a small and a large (packed) training batch."""
REPEATS = 3
"""Timed runs per path (after one warm-up run); the fastest counts (the least disturbed by other processes)."""
MAX_REPEATS, SMALL_MS = 10, 10.0
"""Up to this many runs per path while all runs together took less than this many milliseconds."""
BUDGET_S = 2.0
"""Seconds a calibration may spend measuring; products too costly for what is left are not timed."""
CACHE_FILE = "cpu_kernels.json"
CACHE_VERSION = 1
ENV = "SYNTAXNMT_CPU_KERNELS"
"""The environment variable whose mode, when set, overrides every other choice of the mode."""

_mode = "onednn"  # the default until auto wins end to end (docs/benchmarks.md)
logger = logging.getLogger(__name__)


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
        _install(Plan.fixed(mode == "onednn") if mode != "auto" else None)
    return _mode


def _install(plan: "Plan | None") -> None:
    """Hand ``plan`` to :mod:`syntaxnmt.model.linear`; oneDNN everywhere is no plan at all, so the
    default mode asks nothing per product on the hot path."""
    lin.set_plan(None if plan == Plan.fixed(True) else plan)


def cache_dir() -> Path:
    """``$SYNTAXNMT_CACHE_DIR``, else ``$XDG_CACHE_HOME/syntaxnmt``, else ``~/.cache/syntaxnmt``."""
    if os.environ.get("SYNTAXNMT_CACHE_DIR"):
        return Path(os.environ["SYNTAXNMT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "syntaxnmt"


def machine_key(threads: int | None = None) -> str:
    """What the times depend on besides the shape: CPU model, its ISA flags and any limit set on
    the libraries' instruction set (``--isa avx2``), torch, threads."""
    info = machine_info()
    isa = " ".join(f for f, present in info["isa"].items() if present)
    if info["isa_limits"]:  # an emulated AVX2 machine times its own kernels
        isa += " limited " + " ".join(f"{k}={v}" for k, v in info["isa_limits"].items())
    return f"{info['cpu']} | {isa} | torch {info['torch']} | {threads or torch.get_num_threads()} threads"


@lru_cache(maxsize=4096)
def row_class(rows: int) -> int:
    """The :data:`ROWS` entry nearest to ``rows`` (on a log scale)."""
    return min(ROWS, key=lambda r: abs(math.log(max(rows, 1) / r)))


def shape_key(d_in: int, d_out: int, rows: int) -> str:
    return f"{d_in}x{d_out}@{rows}"


_SHAPE_KEY = re.compile(r"[1-9]\d*x[1-9]\d*@[1-9]\d*")


@dataclass
class Plan:
    """Which path each product takes: ``choice[(d_in, d_out, row class, train)]`` is True for
    oneDNN; shapes not in it take ``fallback[(row class, train)]``, and without that ``default``."""

    choice: dict[tuple[int, int, int, bool], bool] = field(default_factory=dict)
    fallback: dict[tuple[int, bool], bool] = field(default_factory=dict)
    default: bool = True

    @classmethod
    def fixed(cls, onednn: bool) -> "Plan":
        return cls(default=onednn)

    def __call__(self, rows: int, d_in: int, d_out: int, train: bool) -> bool:
        if not self.choice and not self.fallback:
            return self.default
        r = row_class(rows)
        got = self.choice.get((d_in, d_out, r, train))
        return got if got is not None else self.fallback.get((r, train), self.default)

    @classmethod
    def from_times(cls, times: dict[str, dict[str, dict[str, float]]]) -> "Plan":
        """The plan of measured ``times[shape_key][kind][path]`` (ms): the faster path per shape
        and row class, and per row class the path faster summed over the shapes."""
        plan, totals = cls(), {}
        for key, kinds in times.items():
            d, r = key.split("@")
            d_in, d_out = (int(x) for x in d.split("x"))
            for kind, t in kinds.items():
                train = kind == "train"
                plan.choice[(d_in, d_out, int(r), train)] = t["onednn"] < t["aten"]
                sums = totals.setdefault((int(r), train), [0.0, 0.0])
                sums[0] += t["onednn"]
                sums[1] += t["aten"]
        plan.fallback = {k: s[0] < s[1] for k, s in totals.items()}
        return plan

    def to_record(self) -> dict[str, object]:
        """The plan in plain strings (what the safe checkpoint loader reads): ``{"choice":
        {"16x48@256 train": "aten", ...}, "fallback": {"256 train": "onednn", ...}, "default": "onednn"}``."""
        path = {True: "onednn", False: "aten"}
        kind = {True: "train", False: "infer"}
        return {
            "choice": {f"{shape_key(d_in, d_out, r)} {kind[t]}": path[v] for (d_in, d_out, r, t), v in sorted(self.choice.items())},
            "fallback": {f"{r} {kind[t]}": path[v] for (r, t), v in sorted(self.fallback.items())},
            "default": path[self.default],
        }

    @classmethod
    def from_record(cls, record: object) -> "Plan | None":
        """The plan of :meth:`to_record`'s output; None when ``record`` is not such a record."""
        paths, kinds = {"onednn": True, "aten": False}, {"train": True, "infer": False}
        try:
            plan = cls(default=paths[record["default"]])
            for key, v in record["choice"].items():
                shape, kind = key.split(" ")
                if not _SHAPE_KEY.fullmatch(shape):
                    return None
                d, r = shape.split("@")
                d_in, d_out = d.split("x")
                plan.choice[(int(d_in), int(d_out), int(r), kinds[kind])] = paths[v]
            for key, v in record["fallback"].items():
                r, kind = key.split(" ")
                plan.fallback[(int(r), kinds[kind])] = paths[v]
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return plan


def weight_shapes(model: nn.Module) -> list[tuple[int, int]]:
    """The distinct ``(d_in, d_out)`` of the model's :class:`~syntaxnmt.model.linear.Linear` layers,
    the most frequent first."""
    counts: dict[tuple[int, int], int] = {}
    for m in model.modules():
        if isinstance(m, lin.Linear):
            counts[(m.in_features, m.out_features)] = counts.get((m.in_features, m.out_features), 0) + 1
    return sorted(counts, key=lambda s: (-counts[s], s))


# ------------------------------------------------------------------ measuring


def _paths(kind: Kind, x: Tensor, w: Tensor, b: Tensor, g: Tensor) -> dict[str, Callable[[], object]]:
    """The two ways of computing one product: forward alone (``infer``), or forward and the
    gradients of input, weight and bias (``train``)."""
    if kind == "infer":
        return {"onednn": lambda: lin._dnn(x, w, b), "aten": lambda: F.linear(x, w, b)}
    return {
        "onednn": lambda: torch.autograd.grad(lin._OneDNNLinear.apply(x, w, b), (x, w, b), g),
        "aten": lambda: torch.autograd.grad(F.linear(x, w, b), (x, w, b), g),
    }


def measure(d_in: int, d_out: int, rows: int, kind: Kind, repeats: int = REPEATS) -> dict[str, float]:
    """Milliseconds of the fastest of ``repeats`` runs of each path (up to :data:`MAX_REPEATS` for a
    product that takes little time) after a warm-up run; the paths alternate, so a disturbance
    from another process falls on both."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, d_in, generator=gen, requires_grad=kind == "train")
    w = torch.randn(d_out, d_in, generator=gen).mul_(d_in**-0.5).requires_grad_(kind == "train")
    b = torch.zeros(d_out, requires_grad=kind == "train")
    g = torch.randn(rows, d_out, generator=gen)
    best = {"onednn": math.inf, "aten": math.inf}
    spent, rep = 0.0, 0
    with torch.set_grad_enabled(kind == "train"):
        paths = _paths(kind, x, w, b, g)
        while rep <= repeats or (rep <= MAX_REPEATS and spent < SMALL_MS):  # small products: more runs, cheaply
            for name, run in paths.items():
                start = time.perf_counter()
                run()
                took = (time.perf_counter() - start) * 1e3
                spent += took
                if rep:
                    best[name] = min(best[name], took)
            rep += 1
    return {k: round(v, 4) for k, v in best.items()}


def calibrate(
    shapes: Iterable[tuple[int, int]], kinds: Iterable[Kind], known: dict | None = None, budget_s: float = BUDGET_S,
    measure_fn: Callable[[int, int, int, Kind], dict[str, float]] | None = None,
) -> tuple[dict[str, dict[str, dict[str, float]]], int]:
    """``known`` (cached times) completed with the products of ``shapes`` x :data:`ROWS` x
    ``kinds`` it lacks (timed by ``measure_fn``, default :func:`measure`), cheapest first, while the estimated time of the next one fits in what is
    left of ``budget_s`` -- the shapes in their order (the most frequent first), each at every row
    count, the cheaper products first; returns the times and how many products were measured now."""
    measure_fn = measure_fn or measure
    times = {k: dict(v) for k, v in (known or {}).items()}
    todo = [(rank, rows * d_in * d_out * (3 if kind == "train" else 1), d_in, d_out, rows, kind) for rank, (d_in, d_out) in enumerate(shapes) for rows in ROWS for kind in kinds if kind not in times.get(shape_key(d_in, d_out, rows), {})]
    start, flops_per_ms, done = time.perf_counter(), 2e6, 0  # a first guess of 2 GFLOP/s, then the fastest rate measured
    for _, macs, d_in, d_out, rows, kind in sorted(todo):
        runs = 2 * (REPEATS + 1)
        if time.perf_counter() - start + runs * 2 * macs / flops_per_ms / 1e3 > budget_s:
            continue  # too costly for what is left; a cheaper one may still fit
        t = measure_fn(d_in, d_out, rows, kind)
        times.setdefault(shape_key(d_in, d_out, rows), {})[kind] = t
        flops_per_ms = max(flops_per_ms, 2 * macs / max(min(t.values()), 1e-3))
        done += 1
    return times, done


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


def _valid_entry(kinds: object) -> bool:
    return isinstance(kinds, dict) and all(
        k in ("infer", "train") and isinstance(t, dict) and set(t) == {"onednn", "aten"} and all(isinstance(v, (int, float)) and v >= 0 for v in t.values())
        for k, t in kinds.items()
    )


def read_cache(path: Path) -> dict:
    """The cache file's content (``{"version", "machines": {machine key: {shape key: times}},
    "provisional": {machine key: ["shape key kind", ...]}}``: times taken on a busy machine);
    an empty one when the file is missing, and, with a warning, when it is not such a file."""
    empty = {"version": CACHE_VERSION, "machines": {}, "provisional": {}}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return empty
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        _warn(f"{path}: not a readable CPU kernel cache ({type(e).__name__}: {e}); ignored, measuring again")
        return empty
    machines = doc.get("machines") if isinstance(doc, dict) and doc.get("version") == CACHE_VERSION else None
    if not isinstance(machines, dict) or not all(isinstance(m, dict) and all(isinstance(k, str) and _SHAPE_KEY.fullmatch(k) and _valid_entry(v) for k, v in m.items()) for m in machines.values()):
        _warn(f"{path}: not a CPU kernel cache of version {CACHE_VERSION}; ignored, measuring again")
        return empty
    provisional = doc.setdefault("provisional", {})
    if not isinstance(provisional, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in provisional.values()):
        _warn(f"{path}: its list of provisional times is damaged; all its times are taken as provisional")
        doc["provisional"] = {m: [f"{k} {kind}" for k, kinds in times.items() for kind in kinds] for m, times in machines.items()}
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


def _table(times: dict, shapes: list[tuple[int, int]], kinds: Iterable[Kind]) -> list[dict]:
    rows = []
    for kind in kinds:
        for d_in, d_out in shapes:
            for r in ROWS:
                t = times.get(shape_key(d_in, d_out, r), {}).get(kind)
                if t:
                    rows.append({"kind": kind, "shape": f"{d_in}x{d_out}", "rows": r, "onednn_ms": t["onednn"], "aten_ms": t["aten"], "choice": "onednn" if t["onednn"] < t["aten"] else "aten"})
    return rows


def describe(summary: dict) -> list[str]:
    """The log lines of a :func:`prepare` summary: the mode and where the times come from, then
    per weight shape and kind the chosen path at each row count with both times."""
    head = f"cpu kernels: {summary['mode']}"
    if summary.get("reason"):
        return [f"{head} ({summary['reason']})"]
    how = f"{summary['measured']} products timed now in {summary['seconds']:.1f} s" if summary["measured"] else "all times from the cache"
    if summary.get("busy"):
        how += f", {summary['busy']}"
    lines = [f"{head}, {summary['threads']} thread{'s' if summary['threads'] != 1 else ''} ({how}; {summary['cache']})"]
    by: dict[tuple[str, str], list[str]] = {}
    for row in summary["table"]:
        other = "aten" if row["choice"] == "onednn" else "onednn"
        by.setdefault((row["kind"], row["shape"]), []).append(f"{row['choice']} at {row['rows']} rows ({row[row['choice'] + '_ms']:.3g} ms vs {row[other + '_ms']:.3g} ms {other})")
    lines += [f"cpu kernels: {kind} {shape}: " + ", ".join(parts) for (kind, shape), parts in by.items()]
    if summary.get("untimed"):
        lines.append(f"cpu kernels: not timed yet (the {summary['budget_s']:g} s budget; the next run times more): {', '.join(summary['untimed'])}; they take the path that won their row count")
    return lines


def prepare(
    model: nn.Module, mode: str | None = None, kinds: Iterable[Kind] = ("infer",), log: Callable[[str], None] | None = None,
    budget_s: float = BUDGET_S, recorded: dict | None = None,
) -> dict:
    """Choose the CPU path of ``model``'s linear products for ``mode`` (None: the process's,
    :func:`configure`): for ``auto`` from the cached or newly measured times of its weight shapes
    (``kinds``: ``infer`` for decoding, ``train`` too for training on static shapes). ``recorded``:
    the ``record`` of an earlier summary (a resumed training run's, from its checkpoint), reused
    without timing when its mode is this one. Logs the choice with ``log``, records it for
    :func:`~syntaxnmt.runtime.machine_info` and returns it, with ``record``: ``{"mode", "plan"}``
    in plain strings (:meth:`Plan.to_record`)."""
    mode = configure(mode)
    kinds = [k for k in kinds if k == "infer" or lin.train_allowed()]
    summary: dict = {"mode": mode, "threads": torch.get_num_threads()}
    notes: list[str] = []
    reuse = None
    if recorded is not None:
        reuse = Plan.from_record(recorded.get("plan")) if isinstance(recorded, dict) else None
        if reuse is None:
            notes.append("cpu kernels: the plan recorded in the run is not readable: choosing again (the numbers may differ in the last bits from an uninterrupted run's)")
        elif recorded.get("mode") != mode:
            notes.append(f"cpu kernels: {mode} now, {recorded.get('mode')} in the run: choosing again (the numbers may differ in the last bits from an uninterrupted run's)")
            reuse = None
    if not lin.enabled():
        summary["reason"] = "oneDNN linears unavailable or off (SYNTAXNMT_ONEDNN_LINEAR=0): ATen everywhere"
        plan = Plan.fixed(False)
    elif reuse is not None:
        summary["reason"] = "the plan recorded in the run, reused without timing (exact resume)"
        plan = reuse
    elif mode != "auto":
        summary["reason"] = (f"{ENV}={mode}: " if os.environ.get(ENV) else "as configured: ") + ("oneDNN wherever it may run" if mode == "onednn" else "ATen everywhere")
        plan = Plan.fixed(mode == "onednn")
    else:
        shapes = weight_shapes(model)
        path = cache_dir() / CACHE_FILE
        key = machine_key()
        doc = read_cache(path)
        load = busy()
        provisional = set(doc["provisional"].get(key, []))
        cached = doc["machines"].get(key, {})
        known = {s: dict(v) for s, v in cached.items()}
        if load is None:  # a quiet machine: the times taken on a busy one are taken again
            for entry in provisional:
                shape, _, kind = entry.partition(" ")
                known.get(shape, {}).pop(kind, None)
        start = time.perf_counter()
        times, measured = calibrate(shapes, kinds, known, budget_s)
        timed_now = {f"{s} {k}" for s, v in times.items() for k in v if k not in known.get(s, {})}
        for entry in provisional:  # not timed again (the budget): the provisional time still serves
            shape, _, kind = entry.partition(" ")
            if kind in cached.get(shape, {}) and kind not in times.get(shape, {}):
                times.setdefault(shape, {})[kind] = cached[shape][kind]
        if measured:
            doc["machines"][key] = times  # the cached times, each provisional one too, and those timed now
            provisional = (provisional | timed_now) if load is not None else (provisional - timed_now)
            doc["provisional"][key] = sorted(provisional)
            if not provisional:
                del doc["provisional"][key]
            write_cache(path, doc)
        plan = Plan.from_times(times)
        wanted = [shape_key(d_in, d_out, r) for d_in, d_out in shapes for r in ROWS]
        untimed = [f"{s} {k}" for k in kinds for s in wanted if k not in times.get(s, {})]
        summary.update(machine=key, cache=str(path), budget_s=budget_s, measured=measured, seconds=round(time.perf_counter() - start, 3), table=_table(times, shapes, kinds), untimed=untimed)
        if measured and load is not None:
            summary["busy"] = f"load average {load[0]:g} above {load[1]} CPUs: cached as provisional, timed again on a quieter run"
    _install(plan)
    summary["record"] = {"mode": mode, "plan": plan.to_record()}
    record_cpu_kernels({k: v for k, v in summary.items() if k != "record"})
    for line in [*notes, *describe(summary)] if log else ():
        log(line)
    return summary
