"""The CPU fast paths of issue 48 item 3, each removable inside a benchmark process, with the
evidence that it ran and the code it is.

``benchmarks/fast_paths.py`` measures what each path saves on syntaxnmt's side of
``benchmarks/side_by_side.py``; this module defines the paths (:data:`VARIANTS`). A variant is
realised by patching ``syntaxnmt.cpu`` (and the one or two places of ``training``/``decoding`` that
call into it) in the measuring process only (:func:`removed`): the package keeps no switch. Each
removal leaves the rest of the execution as it is: what runs instead is what the package runs
wherever the path does not apply (the model's default attention kernel, PyTorch's dropout, ATen's
products, the plain loss, a thread per batch ...), never new code.

Evidence (:class:`Counters`): calls into each path are counted in every measured process, at the
names the package calls them by (the C kernels' functions on ``syntaxnmt.cpu._native``, a few
Python functions); a variant must bring its path's count to 0 and the measurement with all paths
must show it above 0 (else the path is not in that command on that machine).

The variants (``name``: what the process runs without the path):

- ``train_attention`` -- the C attention kernels of whole sequences (training forward and backward;
  also the encoder's pass in decoding). Without them ``CpuAttention`` declines them
  (``usable``/``rows_usable`` False): PyTorch's ``scaled_dot_product_attention``, the model's
  default kernel, on the three projections. The packed-through stacks need these kernels (they
  read the packed rows through row maps), so they go too.
- ``decode_step`` -- the single-query step of incremental decoding in the C kernels
  (``native_step``, its states). Without it ``Transformer.native_attention`` is False: the
  attention caches are plain tensors, the step is ``CpuAttention``'s explicit one-query products.
- ``packing`` -- row packing and the packed-through stacks (``PackedStacks``, ``packing.py``):
  without them ``PackedStacks.pack_granule`` is 0 and the calibration's candidates have packing
  off (as ``train.row_packing: off``): the layers run one by one on every row (the model's loop).
  The fused residual-norm chain (``pre_norm_chain``) runs only inside the packed stacks, so it
  goes too.
- ``fused_dropout`` -- the fused dropout/norm kernels (``syntaxnmt/cpu/dropout.py``: the Philox
  dropout, bias+ReLU+dropout, dropout+residual, dropout+residual+layer norm; and its PCG64
  fallback): without them ``install`` leaves ``nn.Dropout``, ``FeedForward`` and ``Residual`` as
  the model built them, and the packed stacks' residual-norm chain is ``x + F.dropout(y)`` then
  the norm.
- ``routing`` -- the products routed to oneDNN or OpenBLAS (``linear.py``, ``blas.py``): every
  candidate of the calibration becomes ATen with the same row packing (``candidates_for``), so
  every product is ``F.linear`` (MKL), and the row granule is ATen's (8).
- ``native_loss`` -- the label-smoothed cross-entropy in the C kernel: the chunked loss's torch
  branch (``log_softmax``, ``gather``, ``exp_``) of ``training/losses.py``.
- ``forked_processes`` -- the batches at once in forked processes (``decode.processes``). The
  side-by-side command does not use them (``decode.processes`` is false by default): this variant
  turns them on, and the saving is that of the command with them against the command as it is
  (threads). With one torch thread there is one batch at a time and nothing is forked.
- ``compile`` -- not a removal: ``fused_dropout``'s removal, plus ``torch.compile`` (inductor, mode
  default) of the model in the training command, as the maintained alternative to the hand-fused
  element-wise kernels; its compilation is timed apart (a prepass of one forward/backward on
  every batch of the measured updates, before the measurement). Inductor cannot lower the routed oneDNN product with
  trainable weights (``mkldnn._linear_pointwise`` wants frozen ones) nor numpy's OpenBLAS, so the
  products are ATen's on both sides: the compiled process runs without ``routing`` too, and the
  process it is compared with is ``routing``'s (fused kernels, ATen products).

The lines of each path (:func:`code_lines`) are counted from the source: top-level definitions
(``file:name``, ``file:Class.method``) by their AST extent, whole files, and C spans between two
markers of ``syntaxnmt/cpu/_native.c``.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
NATIVE_C = "syntaxnmt/cpu/_native.c"


# ------------------------------------------------------------------ the code of each path


@dataclass(frozen=True)
class Part:
    """Some code of a path: ``name`` a top-level definition (``f``, ``Class``, ``Class.method``) of
    the Python file ``file``, None for the whole file; in the C file, ``name`` and ``end`` are the
    text of the span's first line and of the line after its last."""

    file: str
    name: str | None = None
    end: str | None = None

    def label(self) -> str:
        if self.name is None:
            return self.file
        if self.end is not None:
            return f"{self.file}:[{self.name.strip()[:40]} .. {self.end.strip()[:40]})"
        return f"{self.file}:{self.name}"


def _python_span(path: Path, name: str) -> tuple[int, int]:
    """First and last line of the top-level definition ``name`` (``A.b``: method b of class A),
    decorators included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = tree.body
    node = None
    for part in name.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            raise LookupError(f"{path}: no definition {name!r}")
        body = node.body
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return start, node.end_lineno


def _marker_span(path: Path, start: str, end: str) -> tuple[int, int]:
    """The lines from the first one beginning with ``start`` to the one before the first line
    after it beginning with ``end``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith(start)), None)
    if first is None:
        raise LookupError(f"{path}: no line beginning {start!r}")
    last = next((i for i in range(first + 1, len(lines)) if lines[i].startswith(end)), None)
    if last is None:
        raise LookupError(f"{path}: no line beginning {end!r} after {start!r}")
    return first + 1, last


def part_lines(part: Part, root: Path = ROOT) -> tuple[int, int]:
    """(first, last) line of ``part`` (1-based, inclusive)."""
    path = root / part.file
    if part.name is None:
        return 1, len(path.read_text(encoding="utf-8").splitlines())
    if part.end is not None:
        return _marker_span(path, part.name, part.end)
    return _python_span(path, part.name)


def code_lines(parts: tuple[Part, ...], root: Path = ROOT) -> dict:
    """``{"python": n, "c": n, "parts": ["file:name lines a-b (n)", ...]}``: the lines of ``parts``."""
    out = {"python": 0, "c": 0, "parts": []}
    for part in parts:
        a, b = part_lines(part, root)
        out["c" if part.file.endswith(".c") else "python"] += b - a + 1
        out["parts"].append(f"{part.label()} lines {a}-{b} ({b - a + 1})")
    return out


# ------------------------------------------------------------------ evidence: calls into each path

COUNTED = {
    # name: (module, attribute); the calls counted are those made through that name
    "attention_forward": ("syntaxnmt.cpu._native", "attention_forward"),
    "attention_backward": ("syntaxnmt.cpu._native", "attention_backward"),
    "self_attention": ("syntaxnmt.cpu._native", "self_attention"),
    "cross_attention": ("syntaxnmt.cpu._native", "cross_attention"),
    "smoothed_xent": ("syntaxnmt.cpu._native", "smoothed_xent"),
    "dropout_forward": ("syntaxnmt.cpu._native", "dropout_forward"),
    "add_norm_forward": ("syntaxnmt.cpu._native", "add_norm_forward"),
    "uniform_like": ("syntaxnmt.cpu.dropout", "uniform_like"),
    "packed_stack": ("syntaxnmt.cpu.stack", "_run"),
    "onednn_product": ("syntaxnmt.cpu.linear", "_OP"),
    "openblas_product": ("syntaxnmt.cpu.blas", "mm"),
    "forked_pool": ("syntaxnmt.cpu.pools", "_forked_pool"),
}

OWN_MODULES = ("syntaxnmt", "speed", "run_syntaxnmt")


class Patches:
    """Attribute changes, undone in reverse order by :meth:`undo`."""

    def __init__(self):
        self._undo: list[Callable[[], None]] = []

    def set(self, obj: object, attr: str, value: object) -> object:
        """``obj.attr = value`` (a class or module attribute); returns the old value."""
        missing = object()
        old = obj.__dict__.get(attr, missing) if isinstance(obj, type) else getattr(obj, attr, missing)
        setattr(obj, attr, value)
        self._undo.append(lambda: delattr(obj, attr) if old is missing else setattr(obj, attr, old))
        return None if old is missing else old

    def rebind(self, module: str, attr: str, value: object) -> object:
        """``module.attr = value`` and the same in every loaded module of syntaxnmt (and the
        benchmark's ``speed``, ``run_syntaxnmt``) that bound the old object by any name
        (``from syntaxnmt.cpu import install as install_cpu``); returns the old object."""
        owner = importlib.import_module(module)
        old = getattr(owner, attr)
        for mod in list(sys.modules.values()):
            name = getattr(mod, "__name__", None) or ""
            if mod is owner or not name.split(".")[0] in OWN_MODULES:
                continue
            for key, v in list(vars(mod).items()):
                if v is old:
                    self.set(mod, key, value)
        self.set(owner, attr, value)
        return old

    def pop(self, mapping: dict, key: object) -> None:
        old = mapping.pop(key)
        self._undo.append(lambda: mapping.__setitem__(key, old))

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


class Counters:
    """Counts the calls made through each name of :data:`COUNTED` while :meth:`installed`."""

    def __init__(self):
        self.calls: Counter = Counter()

    @contextmanager
    def installed(self) -> Iterator["Counters"]:
        patches = Patches()
        try:
            for name, (module, attr) in COUNTED.items():
                try:
                    original = getattr(importlib.import_module(module), attr)
                except (ImportError, AttributeError):
                    continue  # not built (the C kernels) or not available (oneDNN's op): counted 0
                if original is None:
                    continue
                patches.rebind(module, attr, self._counting(name, original))
            yield self
        finally:
            patches.undo()

    def _counting(self, name: str, original: Callable) -> Callable:
        calls = self.calls

        def counted(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        counted.__wrapped__ = original
        return counted

    def of(self, names: tuple[str, ...]) -> int:
        return sum(self.calls[n] for n in names)


# ------------------------------------------------------------------ the removals


def _after_install(patches: Patches, post: Callable) -> None:
    """``syntaxnmt.cpu.install`` followed by ``post(model)``, wherever install is bound."""
    import syntaxnmt.cpu as cpu

    install = cpu.install

    def install_then(model):
        model = install(model)
        post(model)
        return model

    patches.rebind("syntaxnmt.cpu", "install", install_then)


def _transformers(model) -> list:
    from syntaxnmt.model.transformer import Transformer

    return [m for m in model.modules() if isinstance(m, Transformer)]


def _map_candidates(patches: Patches, change: Callable) -> None:
    """The calibration's candidates (``candidates_for``) each changed by ``change(choice)``,
    duplicates dropped (the order kept)."""
    from syntaxnmt.cpu import calibration

    original = calibration.candidates_for

    def candidates_for(mode, row_packing):
        return list(dict.fromkeys(change(c) for c in original(mode, row_packing)))

    patches.rebind("syntaxnmt.cpu.calibration", "candidates_for", candidates_for)


def without_train_attention(patches: Patches) -> None:
    never = lambda *args, **kwargs: False  # noqa: E731
    patches.rebind("syntaxnmt.cpu.attention", "usable", never)
    patches.rebind("syntaxnmt.cpu.attention", "rows_usable", never)


def without_decode_step(patches: Patches) -> None:
    def plain_caches(model) -> None:
        for m in _transformers(model):
            m.native_attention = False

    _after_install(patches, plain_caches)


def without_packing(patches: Patches) -> None:
    from syntaxnmt.cpu.calibration import Choice
    from syntaxnmt.cpu.stack import PackedStacks

    patches.set(PackedStacks, "pack_granule", 0)  # an installed runner packs nothing (the calibration's install keeps 0)
    _map_candidates(patches, lambda c: c if c.packing is None else Choice(c.kernels, False))


def separate_add_norm(residual, y, p: float, training: bool, norm):
    """``dropout_add_norm`` as the model's operators: ``x = residual + F.dropout(y)``, ``norm(x)``."""
    import torch.nn.functional as F

    x = residual + F.dropout(y, p, training)
    return x, norm(x)


def without_fused_dropout(patches: Patches) -> None:
    from torch import nn

    import syntaxnmt.cpu as cpu
    from syntaxnmt.model.transformer import FeedForward, Residual

    for cls in (nn.Dropout, FeedForward, Residual):
        patches.pop(cpu._REPLACED, cls)
    patches.rebind("syntaxnmt.cpu.stack", "dropout_add_norm", separate_add_norm)


def without_routing(patches: Patches) -> None:
    from syntaxnmt.cpu.calibration import Choice

    _map_candidates(patches, lambda c: Choice("aten", c.packing))


def without_native_loss(patches: Patches) -> None:
    import syntaxnmt.training.losses as losses

    patches.set(losses, "native_training_kernels", lambda: None)  # the loss's own test only


def with_forked_processes(patches: Patches) -> None:
    import syntaxnmt.decoding.translate as translate

    side_by_side = translate.batches_side_by_side

    def in_processes(work, batches, workers, device, store=None, processes=False):
        return side_by_side(work, batches, workers, device, store, True)

    patches.set(translate, "batches_side_by_side", in_processes)


COMPILE_INFO: dict = {}
"""What the compile variant's process did: seconds compiling, shapes, graphs (printed by :func:`child_main`)."""


def _dynamo_stats() -> dict:
    from torch._dynamo.utils import counters

    return {"unique_graphs": int(counters["stats"]["unique_graphs"]), "graph_breaks": int(sum(counters["graph_break"].values())), "frames": int(counters["frames"]["total"]) if "total" in counters["frames"] else 0}


def compiled_training(patches: Patches, measured_updates: int | None = None, warmup: int = 0) -> None:
    """``fused_dropout``'s and ``routing``'s removals (inductor lowers the products itself: it cannot
    take the routed oneDNN op with trainable weights, nor numpy's OpenBLAS), then the training
    task's model ``torch.compile``d (inductor): a forward/backward of every batch of the first
    ``measured_updates`` updates (warm-up included) runs first -- so that every shape, the packed
    rows' counts included, is compiled before the timing -- timed as the prepass, with the model's
    state restored after (:func:`~syntaxnmt.cpu.calibration.preserved`: no optimizer step, the
    generators as they were).
    The graphs compiled later are counted at the end of the prepass, at the start of the timed
    updates (after ``warmup`` ones) and at the end (:data:`COMPILE_INFO`)."""
    without_fused_dropout(patches)
    without_routing(patches)
    speed = sys.modules.get("speed")
    if speed is None or measured_updates is None:
        return
    import torch

    from syntaxnmt.cpu.calibration import preserved
    from syntaxnmt.training.step import forward_backward, objective_requests, training_batch

    training_task = speed.training_task

    def compiled_task(cfg, device, choose_kernels: bool = True):
        task, stream = training_task(cfg, device, choose_kernels)
        task.model = torch.compile(task.raw, backend="inductor")
        ahead = list(itertools.islice(stream, measured_updates * cfg.train.accum_steps))
        spec = objective_requests(task.raw, task.objectives)[0]
        context = getattr(task.raw, "document_context", None)
        batches = [training_batch(task.split, idx, spec, task.t, task.objectives, context) for _, _, idx in ahead]
        start = time.perf_counter()
        with preserved(task.raw):  # every batch once: each shape of the packed rows seen before the timing
            for batch in batches:
                forward_backward(task.model, batch.to(device), task.t, task.objectives, 0, 1.0)
        shapes = {(tuple(b.src.shape), tuple(b.tgt_in.shape)) for b in batches}
        COMPILE_INFO.update(prepass_s=time.perf_counter() - start, prepass_steps=len(batches), shapes=len(shapes), after_compile=_dynamo_stats())
        update, done = task.update, itertools.count()

        def counted_update(group, step):
            if next(done) == warmup:
                COMPILE_INFO["timed_start"] = _dynamo_stats()
            return update(group, step)

        task.update = counted_update
        return task, itertools.chain(ahead, stream)

    patches.set(speed, "training_task", compiled_task)


@dataclass(frozen=True)
class Variant:
    """A fast path and how a process runs without it (see the module docstring)."""

    name: str
    title: str
    commands: tuple[str, ...]
    """The commands the path runs in: ``train``, ``decode``."""
    counted: tuple[str, ...]
    """Names of :data:`COUNTED` whose calls are the path's: > 0 with it, 0 without."""
    parts: tuple[Part, ...]
    apply: Callable[[Patches], None]
    removes_also: tuple[str, ...] = ()
    """Other variants whose paths need this one and go with it."""
    side_effects: tuple[str, ...] = ()
    """Names of :data:`COUNTED` of other paths that run only inside this one and go with it."""
    adds: bool = False
    """The command as side_by_side.py runs it lacks the path: the variant turns it on."""
    baseline: str = "none"
    """The variant the process with the path runs (``none``: all paths)."""
    note: str = ""

    def gone(self) -> set[str]:
        """The names of :data:`COUNTED` whose calls stop without this path (its own, the side
        effects, and those of the paths that go with it)."""
        out = {*self.counted, *self.side_effects}
        for other in self.removes_also:
            out |= VARIANTS[other].gone()
        return out


A, S, L, D, P = "syntaxnmt/cpu/attention.py", "syntaxnmt/cpu/stack.py", "syntaxnmt/cpu/linear.py", "syntaxnmt/cpu/dropout.py", "syntaxnmt/cpu/pools.py"
_FUSED_PARTS = (Part(D), Part(S, "FusedFeedForward"), Part(S, "FusedResidual"), Part(NATIVE_C, "/* ---- Dropout of training", "static PyObject *vectorized"))

VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("train_attention", "C attention of whole sequences (training; decoding's encoder)", ("train", "decode"), ("attention_forward", "attention_backward"),
            (*(Part(A, n) for n in ("usable", "shapes_usable", "_view", "_heads_last", "_unit_stride", "_packed_view", "_require_native", "_forward", "_backward",
                                    "_views", "_PackedAttention", "_Attention", "attention", "packed_attention", "rows_usable", "rows_attention", "CpuAttention.attend")),
             Part(NATIVE_C, "/* ---- Attention of training and scoring", "/* ---- The label-smoothed")),
            without_train_attention, removes_also=("packing",)),
    Variant("decode_step", "single-query decode step (native_step)", ("decode",), ("self_attention", "cross_attention"),
            (Part(A, "_CrossState"), Part(A, "_SelfState"), Part(A, "native_step"), Part(NATIVE_C, "/* ---- Single-query attention", "/* ---- Attention of training")),
            without_decode_step),
    Variant("packing", "row packing and packed-through stacks", ("train",), ("packed_stack",),
            (Part("syntaxnmt/cpu/packing.py"), *(Part(S, n) for n in ("pre_norm_chain", "embedded_rows", "_run", "PackedStacks", "_states_like"))),
            without_packing, side_effects=("add_norm_forward",), note="the fused residual-norm chain (dropout_add_norm) runs only in the packed stacks"),
    Variant("fused_dropout", "fused dropout/norm kernels", ("train",), ("dropout_forward", "add_norm_forward", "uniform_like"),
            _FUSED_PARTS, without_fused_dropout),
    Variant("routing", "OpenBLAS/oneDNN product routing", ("train", "decode"), ("onednn_product", "openblas_product"),
            (*(Part(L, n) for n in ("configure", "enabled", "train_allowed", "set_kernels", "kernels", "row_granule", "onednn_in_training", "_dnn", "_weight_grad", "_KernelLinear", "linear", "add_weight_grad", "Linear")),
             Part("syntaxnmt/cpu/blas.py")),
            without_routing, note="calibration.py (whole-step timing of the kernels and the packing) is not counted"),
    Variant("native_loss", "native loss (label-smoothed cross-entropy)", ("train",), ("smoothed_xent",),
            (Part("syntaxnmt/cpu/loss.py"), Part(NATIVE_C, "/* ---- The label-smoothed", "/* ---- Dropout of training")), without_native_loss),
    Variant("forked_processes", "forked search processes (decode.processes)", ("decode",), ("forked_pool",),
            (*(Part(P, n) for n in ("_forked_call", "_forked_start", "_forked_pool", "_result")),), with_forked_processes, adds=True,
            note="off in the side-by-side command (decode.processes: false): measured by turning it on"),
    Variant("compile", "torch.compile (inductor) instead of the fused dropout/norm kernels", ("train",), ("dropout_forward", "add_norm_forward", "uniform_like"),
            _FUSED_PARTS, compiled_training, baseline="routing",
            note="both sides without the routing (ATen products: inductor cannot take the routed ones); the lines are those of the fused kernels compile would replace"),
)}


def fix_choice(patches: Patches, name: str) -> None:
    """The CPU kernels and packing of the process are ``name`` (``onednn, row packing``, ``aten``
    ...: :class:`~syntaxnmt.cpu.calibration.Choice`), the calibration's one candidate: no timing.
    A variant's own change of the candidates (``routing``, ``packing``) applies on top."""
    from syntaxnmt.cpu.calibration import Choice

    choice = Choice.parse(name)
    if choice is None:
        raise ValueError(f"not a CPU kernel choice: {name!r}")
    patches.rebind("syntaxnmt.cpu.calibration", "candidates_for", lambda mode, row_packing: [choice])


@contextmanager
def removed(name: str, choice: str | None = None, **options) -> Iterator[Patches]:
    """Inside, this process runs without the path of variant ``name`` (with it, for an ``adds``
    variant; ``none``: as it is), with the CPU kernel ``choice`` when given (:func:`fix_choice`;
    None: calibrated as the command does)."""
    patches = Patches()
    try:
        if choice is not None:
            fix_choice(patches, choice)
        if name != "none":
            variant = VARIANTS[name]
            variant.apply(patches, **options) if options else variant.apply(patches)
        yield patches
    finally:
        patches.undo()


# ------------------------------------------------------------------ the measuring process


def child_main(argv: list[str]) -> int:
    """``VARIANT [--choice CHOICE] WHAT ARGS...``: ``benchmarks/peers/run_syntaxnmt.py WHAT ARGS...``
    in this process, without the path of VARIANT (``none``: all paths), with the CPU kernel choice
    CHOICE (:func:`fix_choice`; default: calibrated), counting the calls into every path; prints
    ``PATHS {json}`` after run_syntaxnmt's ``RESULT`` line."""
    import argparse
    import json

    import run_syntaxnmt  # benchmarks/peers on sys.path (fast_path_run.py)

    name, rest = argv[0], argv[1:]
    choice = None
    if rest[:1] == ["--choice"]:
        choice, rest = rest[1], rest[2:]
    if name != "none" and name not in VARIANTS:
        raise SystemExit(f"unknown variant {name!r}; choose from none, {', '.join(VARIANTS)}")
    known = argparse.ArgumentParser(add_help=False)
    known.add_argument("--updates", type=int, default=90)
    known.add_argument("--warmup", type=int, default=10)
    args, _ = known.parse_known_args(rest)
    options = {"measured_updates": args.updates + args.warmup, "warmup": args.warmup} if name == "compile" and rest[:1] == ["train"] else {}
    counters = Counters()
    with removed(name, choice, **options), counters.installed():
        sys.argv = [run_syntaxnmt.__file__, *rest]
        rc = run_syntaxnmt.main()
    report = {"variant": name, "choice": choice, "calls": dict(counters.calls)}
    if name == "compile" and COMPILE_INFO:
        report["compile"] = {**COMPILE_INFO, "at_end": _dynamo_stats()}
    print("PATHS " + json.dumps(report), flush=True)
    return rc
